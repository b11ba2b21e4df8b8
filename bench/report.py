"""docs/PERFORMANCE.md's tables, drawn from the benchmarks' JSON records, and the one command
that measures them first:

    python -m bench.report [--suite micro|layers|models|models16|compile|llama|all ...] [--model NAME ...]
                           [--out DIR] [--from DIR ...] [--doc FILE | --no-doc] [--budget S] [--quick]
                           [--cuda-compile-modes MODES] [--cuda-timeout S]

Each --suite runs its benchmark in a process of its own, recording into DIR (default out/perf):

    micro     bench.micro: products and attention prefill            DIR/micro.json
    layers    bench.layers --stat median --replay                    DIR/layers/bench.json
    models    bench.models --mode device --mode replay, float32      DIR/models.json
    models16  the same in float16 (inference models and GPT-2)       DIR/models.json
    compile   bench.models --compile, float32                        DIR/models.json
    llama     bench.decode: Llama and GPT-2 decoding, float16        DIR/decode.json

Records keep each row as soon as it is measured, merged by key (bench.record), so runs of
subsets add up, one lease after another; --budget S stops a suite that would outlive S seconds
in all (its finished rows stay). Then every record in DIR and in each --from folder is
rendered: DIR/tables.md, and the blocks `perf-gpu` and `perf-cpu` of --doc (default
docs/PERFORMANCE.md), each only where a record of that kind of device is; `--suite` left out
renders alone. Every time is the median of its rounds (the fastest in parentheses where
recorded); a speed is the peer's time over ours (above 1: ours is faster); a share of the
peak is FLOPs (bench.peaks) over time against the device's peak for the row's dtype.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bench import peaks
from bench.doc_tables import write_section

ROOT = Path(__file__).resolve().parent.parent
SUITES = {
    "micro": ["bench.micro", "--json", "{out}/micro.json"],
    "layers": ["bench.layers", "--out", "{out}/layers", "--stat", "median", "--replay"],
    "models": ["bench.models", "--mode", "device", "--mode", "replay", "--rounds", "5", "--json", "{out}/models.json"],
    "models16": ["bench.models", "--mode", "device", "--mode", "replay", "--rounds", "5", "--dtype", "float16",
                 "--json", "{out}/models.json"],
    "compile": ["bench.models", "--compile", "--rounds", "5", "--json", "{out}/models.json"],
    "llama": ["bench.decode", "--json", "{out}/decode.json"],
}
MODEL_SUITES = ("models", "models16", "compile")
DTYPED_MODELS = ("resnet18", "resnet50", "resnet50_b16", "mobilenet_v2", "gpt2")  # bench.models' "dtyped"
DECODE_MODELS = ("llama", "gpt2")  # bench.decode's
KINDS = ("models", "micro", "decode")  # the records' kinds (bench.record) rendered here
MODE_TITLES = {"device": "Eager", "replay": "Replayed (ours: one recording; CUDA: one CUDA graph)",
               "compile": "torch.compile", "patched": "Patched layers (tensors on the host)"}
COMPILE_COLUMNS = (("torch_cuda_compile", "default"), ("torch_cuda_reduce_overhead", "reduce-overhead"),
                   ("torch_cuda_max_autotune", "max-autotune"))
DTYPES = ("float32", "float16", "bfloat16")  # the tables' order
MICRO_PEERS = {"torch": "torch", "flash": "flash", "cudnn": "cuDNN", "efficient": "mem-efficient"}


# Running the suites.

def suite_command(suite: str, out: Path, args: argparse.Namespace) -> List[str]:
    cmd = [sys.executable, "-m", *(part.format(out=out) for part in SUITES[suite])]
    if suite in MODEL_SUITES:
        models = args.model or (list(DTYPED_MODELS) if suite == "models16" else [])
        if suite == "models16":
            models = [m for m in models if m in DTYPED_MODELS]
        cmd += [arg for m in models for arg in ("--model", m)]
        cmd += ["--cuda-compile-modes", args.cuda_compile_modes, "--cuda-timeout", str(args.cuda_timeout)]
        if args.quick:
            cmd += ["--rounds", "1"]
    elif suite == "llama":
        models = [m for m in args.model or [] if m in DECODE_MODELS] or list(DECODE_MODELS)
        cmd += [arg for m in models for arg in ("--model", m)] + ["--cuda-timeout", str(args.cuda_timeout)]
    if args.quick and suite not in MODEL_SUITES:
        cmd.append("--quick")
    return cmd


def run_suites(suites: List[str], out: Path, args: argparse.Namespace) -> Dict[str, str]:
    """Runs each suite; returns {suite: how it ended}."""
    ended, start = {}, time.monotonic()
    for suite in suites:
        left = None if args.budget is None else args.budget - (time.monotonic() - start)
        if left is not None and left < 10:
            ended[suite] = "not started: --budget spent"
            continue
        cmd = suite_command(suite, out, args)
        print(f"== {suite}: {' '.join(cmd[1:])}", flush=True)
        try:
            rc = subprocess.run(cmd, cwd=ROOT, timeout=left).returncode
            ended[suite] = "done" if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            ended[suite] = "stopped at --budget (finished rows kept)"
    return ended


# Reading the records.

def load(folders: List[Path]) -> Dict[str, List[Dict]]:
    """Every record under the folders: {"models": rows, "micro": rows, "decode": rows, "layers":
    bench.json results}; a row measured again in a later folder replaces the earlier one."""
    rows: Dict[str, Dict[str, Dict]] = {kind: {} for kind in KINDS}
    layers: Dict[str, Dict] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.json")):
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get("kind") in rows:
                rows[data["kind"]].update(data["rows"])
            elif isinstance(data, dict) and "groups" in data and "geomean" in data:
                layers[data["device"]["device"]] = data
    return {**{kind: list(found.values()) for kind, found in rows.items()}, "layers": list(layers.values())}


def block_of(device_type: str) -> str:
    return "perf-cpu" if device_type == "CPU" else "perf-gpu"


def split(records: Dict[str, List[Dict]]) -> Dict[str, Dict[str, List[Dict]]]:
    """The records by block (perf-gpu, perf-cpu)."""
    blocks: Dict[str, Dict[str, List[Dict]]] = {}
    for kind in KINDS:
        for row in records.get(kind, []):
            blocks.setdefault(block_of(row["machine"]["device_type"]), {}).setdefault(kind, []).append(row)
    for result in records["layers"]:
        blocks.setdefault(block_of(result["device"]["type"]), {}).setdefault("layers", []).append(result)
    return blocks


# Rendering.

def num(value: float) -> str:
    """Three significant figures, no exponent: 172, 55.9, 2.04, 0.613."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def share(flops: Optional[float], seconds: Optional[float], device: str, dtype: str) -> str:
    return peaks.percent(peaks.fraction(flops, seconds, peaks.lookup(device), dtype))


def provenance(blocks: Dict[str, List[Dict]]) -> str:
    """One line per machine the block's rows come from."""
    seen = []
    for row in [r for kind in KINDS for r in blocks.get(kind, [])]:
        m = row["machine"]
        seen.append(f"{m['date']} on {m['host_cpu']}, OpenCL device {m['device']} ({m['platform']}), "
                    f"torch {m['torch']}" + (f", CUDA {m['cuda']}" if m.get("cuda") else ""))
    for result in blocks.get("layers", []):
        seen.append(f"{result.get('date', 'undated')} on {result['host_cpu']}, OpenCL device "
                    f"{result['device']['device']} ({result['device']['platform']}), {result['torch']}")
    unique = list(dict.fromkeys(seen))
    return "Recorded " + "; ".join(unique) + ". Rendered by `python -m bench.report` from the records."


def peaks_line(devices: List[str]) -> str:
    parts = []
    for device in dict.fromkeys(devices):
        p = peaks.lookup(device)
        if p is None:
            parts.append(f"{device}: no peak known (OCLF_PEAKS sets one), shares n/a")
        else:
            values = ", ".join(f"{f} {getattr(p, f):g}" for f in peaks.FIELDS[:4] if getattr(p, f))
            parts.append(f"{device} as {p.name}: {values} TFLOP/s" + (f", {p.bw:g} TB/s" if p.bw else ""))
    return "Peaks (bench/peaks.py): " + "; ".join(parts) + "."


def _peer_of(row: Dict) -> Tuple[Optional[str], str]:
    """The key of a models row's peer and its name: torch CUDA's fair peer, else torch on the CPU."""
    if row.get("peer"):
        return row["peer"], {"torch_cuda": "CUDA eager", "torch_cuda_graph": "CUDA graph"}.get(
            row["peer"], dict(COMPILE_COLUMNS).get(row["peer"], row["peer"]))
    if row["machine"].get("cuda"):
        return None, "torch CUDA"
    return "torch", "torch CPU"


def variant_name(key: str) -> str:
    """A torch CUDA result key in words: torch_cuda_graph_nchw -> "CUDA graph, NCHW"."""
    compiled = {k: f"torch.compile {m}" for k, m in COMPILE_COLUMNS}
    if key in compiled:
        return compiled[key]
    for prefix, name in (("torch_cuda_graph", "CUDA graph"), ("torch_cuda", "CUDA eager")):
        if key.startswith(prefix):
            fmt = key[len(prefix):].lstrip("_")
            return name + {"nchw": ", NCHW", "channels_last": ", channels_last"}.get(fmt, "")
    return key


def _formats(row: Dict, key: str) -> str:
    """Where both memory formats were timed: the faster one's name and the other's time."""
    if f"{key}_channels_last" not in row or f"{key}_nchw" not in row:
        return ""
    names = {"nchw": "NCHW", "channels_last": "channels_last"}
    won = row[f"{key}_format"]
    other = "nchw" if won == "channels_last" else "channels_last"
    return f" {names[won]} ({names[other]} {num(row[f'{key}_{other}'] * 1e3)})"


def models_tables(rows: List[Dict]) -> str:
    parts, notes = [], []
    for mode in ("device", "replay", "compile", "patched"):
        chosen = sorted((r for r in rows if r["mode"] == mode), key=lambda r: (DTYPES.index(r["dtype"]), r["label"]))
        if not chosen:
            continue
        body = []
        extra = [label for key, label in COMPILE_COLUMNS if any(key in r or key in r.get("cuda_errors", {})
                                                                 for r in chosen)] if mode == "compile" else []
        for r in chosen:
            device, dtype = r["machine"]["device"], r["dtype"]
            key, name = _peer_of(r)
            theirs = r.get(key) if key else None
            cells = [r["label"], f"{r['flops'] / 1e9:.2f}", f"{num(r['opencl'] * 1e3)} ({num(r['opencl_min'] * 1e3)})",
                     share(r["flops"], r["opencl"], device, dtype)]
            for ckey, label in COMPILE_COLUMNS:
                if label in extra:
                    cells.append(num(r[ckey] * 1e3) if ckey in r else "failed" if ckey in r.get("cuda_errors", {})
                                 else "-")
            peer_cell = f"{num(theirs * 1e3)}{_formats(r, key)}" if theirs else "failed"
            cells += [] if extra else [peer_cell]
            cells += [name if theirs else "-", share(r["flops"], theirs, device, dtype),
                      f"**{theirs / r['opencl']:.2f}×**" if theirs else "-"]
            body.append(cells)
            notes += [f"{r['label']} ({mode}), {variant_name(k)}: {why}" for k, why in r.get("cuda_errors", {}).items()]
        header = ["workload", "GFLOP a run", "ours, ms", "ours, % peak"]
        header += extra if extra else ["peer, ms"]
        header += ["peer", "peer, % peak", "speed over the peer"]
        rounds = sorted({r["rounds"] for r in chosen})
        parts.append(f"**Whole models: {MODE_TITLES[mode]}** ({'/'.join(map(str, rounds))} rounds)\n\n"
                     + table(header, body))
    if notes:
        parts.append("Not timed:\n\n" + "\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts)


def decode_tables(rows: List[Dict]) -> str:
    """bench.decode's rows: per token, each of our modes and torch's variants, and the
    commands each token costs."""
    from bench.decode import MODES, PEER_VARIANTS, fastest

    if not rows:
        return ""
    rows = sorted(rows, key=lambda r: (r["model"] != "llama", r["quick"], DTYPES.index(r["dtype"])))
    ours = (("eager", "eager"), ("replay", "replayed"), ("compile", "compiled"))
    theirs = (("eager", "eager"), ("graph", "graph"), ("reduce-overhead", "reduce-overhead"))
    theirs = tuple(t for t in theirs if any(t[0] in r["torch"] or t[0] in r["torch_errors"] for r in rows))
    peer = {"cuda": "torch CUDA", "cpu": "torch CPU"}.get(next((r["peer_device"] for r in rows if r["peer_device"]),
                                                              None), "torch")
    body, counts, notes = [], [], []
    for r in rows:
        bw = peaks.lookup(r["machine"]["device"])

        def cell(results: Dict, errors: Dict, key: str) -> str:
            if key not in results:
                return "failed" if key in errors else "-"
            per = results[key]["seconds"] / r["new_tokens"]
            part = f", {peaks.percent(r['bytes_per_run'] / results[key]['seconds'] / bw.bytes_per_s())}" \
                if bw and bw.bw else ""
            return f"{num(per * 1e3)} ({1 / per:.0f}/s{part})"

        def speed(a: Optional[str], b: Optional[str]) -> str:
            if a not in r["ours"] or b not in r["torch"]:
                return "-"
            return f"**{r['torch'][b]['seconds'] / r['ours'][a]['seconds']:.2f}×** ({a} / {b})"

        def launches(result: Optional[Dict]) -> str:
            n = (result or {}).get("launches_per_token")
            if not n:
                return "-"
            wall, host = result["seconds"] / r["new_tokens"] / n, result.get("host_per_token")
            return f"{n} ({num(wall * 1e6)} µs" + (f", host {num(host / n * 1e6)} µs)" if host else ")")

        best = fastest(r["ours"], MODES), fastest(r["torch"], PEER_VARIANTS)
        body.append([r["label"]] + [cell(r["ours"], r["ours_errors"], k) for k, _ in ours]
                    + [cell(r["torch"], r["torch_errors"], k) for k, _ in theirs]
                    + [speed("eager", "eager"), speed(*best)])
        counts.append([r["label"]] + [launches(r["ours"].get(k)) for k, _ in ours]
                      + [launches(r["torch"].get("eager"))])
        notes += [f"{r['label']}, ours {k}: {why}" for k, why in r["ours_errors"].items()]
        notes += [f"{r['label']}, {peer} {k}: {why}" for k, why in r["torch_errors"].items()]
        notes += [f"{r['label']}, ours {k}: {v['tokens_agree']} of {r['new_tokens']} tokens the CPU's greedy choice"
                  for k, v in r["ours"].items() if v["tokens_agree"] != r["new_tokens"]]
    header = ["workload"] + [f"ours {name}" for _, name in ours] + [f"{peer} {name}" for _, name in theirs]
    header += ["eager speed over torch's", "fastest over torch's fastest"]
    rounds = "/".join(map(str, sorted({r["rounds"] for r in rows})))
    parts = [f"**LLM decoding** (`bench.decode`, batch 1, greedy; ms per token (tokens/s, % of the memory bandwidth: "
             f"weights and cached keys and values read per token); {rounds} rounds)\n\n" + table(header, body),
             "**Commands per generated token** (µs each: ms/token over commands; host: the host's time per "
             "token, steps handed to the device without waiting, over commands)\n\n"
             + table(["workload"] + [f"ours {name}" for _, name in ours] + [f"{peer} eager (kernels)"], counts)]
    if notes:
        parts.append("Decoding, noted:\n\n" + "\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts)


def _micro_cell(row: Dict, column: str) -> str:
    t = row["times_ns"].get(column)
    if not t:
        return "n/a"
    return f"{num(t / 1e3)} ({share(row['flops'], t * 1e-9, row['machine']['device'], row['dtype'])})"


def _bandwidth(row: Dict, column: str) -> str:
    p, t = peaks.lookup(row["machine"]["device"]), row["times_ns"].get(column)
    if not p or not p.bw or not t or "bytes" not in row:
        return "n/a"
    return peaks.percent(row["bytes"] / (t * 1e-9) / p.bytes_per_s())


def micro_tables(rows: List[Dict]) -> str:
    from bench.micro import peer

    parts = []
    order = lambda r: (r["flops"], DTYPES.index(r["dtype"]))  # noqa: E731
    gemms = sorted((r for r in rows if r["kind"] == "gemm"), key=order)
    if gemms:
        tf32 = any("torch_tf32" in r["times_ns"] for r in gemms)
        bandwidth = any((peaks.lookup(r["machine"]["device"]) or peaks.Peaks("")).bw for r in gemms)
        body = []
        for r in gemms:
            best = peer(r)
            t_ours, t_peer = r["times_ns"]["ours"], r["times_ns"].get(best) if best else None
            cells = [f"{r['name'].replace('x', '×')} ({r['what']})", r["dtype"], _micro_cell(r, "ours")]
            cells += [_bandwidth(r, "ours")] if bandwidth else []
            cells += [_micro_cell(r, best) if best else "n/a"] + ([_bandwidth(r, best) if best else "n/a"]
                                                                  if bandwidth else [])
            cells.append(f"**{t_peer / t_ours:.2f}×**" if t_peer else "-")
            if tf32:
                t = r["times_ns"].get("torch_tf32")
                cells.append(f"{num(t / 1e3)} ({share(r['flops'], t * 1e-9, r['machine']['device'], 'tf32')})"
                             if t else "-")
            errors = r["max_rel_error"]
            cells.append(f"{errors['ours']:.1e} / {errors[best]:.1e}" if best else f"{errors['ours']:.1e}")
            body.append(cells)
        header = ["product M×K×N", "dtype", "ours, µs (% peak)"] + (["ours, % bandwidth"] if bandwidth else [])
        header += ["torch, µs (% peak)"] + (["torch, % bandwidth"] if bandwidth else []) + ["speed over torch"]
        header += ["cuBLAS TF32, µs (% TF32 peak)"] if tf32 else []
        parts.append("**Matrix products** (`F.linear(x, W)`, x M×K, W N×K; torch: cuBLAS on CUDA, TF32 off; "
                     "% bandwidth: x, W and the output moved once)\n\n"
                     + table(header + ["error ours / torch"], body))
    attention = sorted((r for r in rows if r["kind"] == "attention"), key=order)
    if attention:
        columns = [c for c in MICRO_PEERS if any(c in r["times_ns"] or c in r.get("refused", {}) for r in attention)]
        body = []
        for r in attention:
            best = peer(r)
            t_ours, t_peer = r["times_ns"]["ours"], r["times_ns"].get(best) if best else None
            body.append([r["name"], r["dtype"], _micro_cell(r, "ours")] + [_micro_cell(r, c) for c in columns]
                        + [f"**{t_peer / t_ours:.2f}×** ({MICRO_PEERS[best]})" if t_peer else "-",
                           f"{r['max_rel_error']['ours']:.1e}"])
        header = ["attention (prefill)", "dtype", "ours, µs (% peak)"]
        header += [f"{MICRO_PEERS[c]}, µs (% peak)" for c in columns] + ["speed over the fastest", "error ours"]
        parts.append("**Attention prefill** (`F.scaled_dot_product_attention`; on CUDA torch's default "
                     "dispatch and each backend alone)\n\n" + table(header, body))
    return "\n\n".join(parts)


def layers_tables(results: List[Dict]) -> str:
    parts = []
    for result in results:
        device = result["device"]["device"]
        body = []
        for group, rows in result["groups"].items():
            means = result["geomean"][group]
            cells = [group, str(len(rows))]
            for ratio in ("torch/ours", "torch/ours_wall", "torch/replayed"):
                cells.append(f"{means[ratio]:.2f}×" if means.get(ratio) else "-")
            for method in ("ours", "torch"):
                timed = [r for r in rows if r["times_ns"].get(method)]
                total = sum(r["times_ns"][method] for r in timed) * 1e-9
                cells.append(share(sum(r["flops"] for r in timed), total, device, "float32") if timed else "-")
            body.append(cells)
        header = ["layers (batch 1, float32)", "shapes", "speed over torch: kernel", "with transfers", "replayed",
                  "ours, % peak (all shapes)", "torch, % peak"]
        parts.append(f"**Library layers** (`bench.layers`, {result['stat']} of each shape's runs; torch: "
                     f"{result['torch']}; speeds are geometric means)\n\n" + table(header, body))
    return "\n\n".join(parts)


def render(block: Dict[str, List[Dict]]) -> str:
    devices = [r["machine"]["device"] for kind in KINDS for r in block.get(kind, [])]
    devices += [r["device"]["device"] for r in block.get("layers", [])]
    parts = [peaks_line(devices), models_tables(block.get("models", [])), decode_tables(block.get("decode", [])),
             micro_tables(block.get("micro", [])), layers_tables(block.get("layers", []))]
    return "\n\n".join(p for p in parts if p)


def write(records: Dict[str, List[Dict]], out: Path, doc: Optional[Path]) -> Dict[str, str]:
    """Renders every block: out/tables.md, and each block into doc. Returns {block: markdown}."""
    blocks = {name: render(block) for name, block in sorted(split(records).items())}
    lines = {name: provenance(block) for name, block in split(records).items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text("\n\n".join(f"## {name}\n\n{lines[name]}\n\n{text}" for name, text in blocks.items())
                                   + "\n")
    for name, text in blocks.items():
        if doc is not None:
            write_section(doc, name, text, where=lines[name])
    return blocks


def main(argv: Optional[List[str]] = None) -> Dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", choices=[*SUITES, "all"], help="run these first (repeatable)")
    parser.add_argument("--model", action="append", help="the models suites' models (repeatable; default all)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "perf", help="the records' folder (out/perf)")
    parser.add_argument("--from", dest="sources", type=Path, action="append", default=[],
                        help="more folders of records to render (repeatable)")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "PERFORMANCE.md", help="the document to update")
    parser.add_argument("--no-doc", action="store_true", help="write DIR/tables.md only")
    parser.add_argument("--budget", type=float, help="seconds all the suites may take")
    parser.add_argument("--quick", action="store_true", help="the suites' quick forms (for tests)")
    parser.add_argument("--cuda-compile-modes", default="default,reduce-overhead,max-autotune",
                        help="torch CUDA's compile modes in the compile suite")
    parser.add_argument("--cuda-timeout", type=float, default=600.0, help="seconds per torch CUDA process")
    args = parser.parse_args(argv)
    suites = list(SUITES) if args.suite and "all" in args.suite else args.suite or []
    if suites:
        for suite, how in run_suites(suites, args.out, args).items():
            print(f"{suite}: {how}")
    records = load([*args.sources, args.out])
    if not any(records.values()):
        parser.error(f"no benchmark record under {[str(f) for f in [*args.sources, args.out]]}")
    blocks = write(records, args.out, None if args.no_doc else args.doc)
    print(f"rendered {', '.join(blocks)} into {args.out / 'tables.md'}" + ("" if args.no_doc else f" and {args.doc}"))
    return blocks


if __name__ == "__main__":
    main()
