"""Tunes CLBlast for the selected OpenCL device (OCL_DEVICE) and writes its parameter file,
opencl_functions/clblast_params/<device slug>.json, which opencl_functions applies before
its first product (OCLF_CLBLAST_PARAMS=0 turns that off):

    python -m bench.clblast_tune [--out FILE] [--scale S] [--tuned DIR] [--force]
    python -m bench.clblast_tune --compare [FILE]    # times: CLBlast's defaults vs FILE

1. CLBlast's tuner binaries (Debian/Ubuntu: apt-get install clblast-utils), at the lowest
   priority, for the kernels behind ocl_matmul: the GEMM kernels (Xgemm, and XgemmDirect
   for small products) and their copy/pad/transpose helpers, at sizes like GPT-2's
   products. Each explores a random share of its search space (1/divisor; --scale S
   explores S times more). The GEMV kernels of one-row products are left at CLBlast's
   defaults: parameters tuned at one size made CLBlast's GEMV fail at others
   (CL_INVALID_WORK_ITEM_SIZE for 1×3072·3072×768), for at most 1.2–1.5× on PoCL.
2. In this process, with the best parameters applied: the direct/indirect GEMM switch-over
   (GemmRoutine's XGEMM_MIN_INDIRECT_SIZE, direct when m·n·k < size³) that gives the least
   time over one GPT-2 forward's products. CLBlast's own clblast_tuner_routine_xgemm picks
   it from m=n=k cubes (64..2048) with the default kernels, which says little about ours.
3. Wall times of these products (resident weights) with CLBlast's defaults and with the new parameters,
   interleaved; the file is written only when the new ones take less time in total
   (--force writes it anyway). It records the measurements beside the parameters.

A run explores about 1400 configurations, each tuner stopped at a time limit (20 min in all,
--scale S times that); a stopped tuner keeps the results it has.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

import opencl_functions
from bench.shapes import GPT2

# How often each product runs in one GPT-2 (124M) forward: every layer's four, one LM head.
GPT2_LAYERS = 12


@dataclass(frozen=True)
class Tuner:
    binary: str
    sizes: Dict[str, int]
    divisor: int  # explores 1/divisor of the configurations (CLBlast's -fraction divides)
    limit_s: int  # stopped after this long; the results so far are read from its log
    families: Tuple[str, ...]  # the kernel family of each of its phases, in order


# Row-major products reach CLBlast as column-major ones with A and B swapped: the kernels'
# m is our n and their n is our m. Xgemm needs sizes that are multiples of 128. Some
# configurations take minutes to compile on PoCL, hence the time limits.
TUNERS = [
    Tuner("clblast_tuner_copy_fast", {"m": 1024, "n": 1024}, 2, 60, ("copy",)),
    Tuner("clblast_tuner_copy_pad", {"m": 1024, "n": 1024}, 2, 60, ("pad",)),
    Tuner("clblast_tuner_transpose_fast", {"m": 1024, "n": 1024}, 2, 60, ("transpose",)),
    Tuner("clblast_tuner_transpose_pad", {"m": 1024, "n": 1024}, 2, 60, ("padtranspose",)),
    Tuner("clblast_tuner_xgemm_direct", {"m": 768, "n": 64, "k": 768}, 16, 360, ("xgemm_direct",) * 2),
    Tuner("clblast_tuner_xgemm", {"m": 1024, "n": 128, "k": 768}, 256, 420, ("xgemm",) * 4),
]

# The tuners' kernel families (file clblast_<family>_32.json, less any _<variant> number)
# and the database kernel each tunes.
FAMILY_KERNEL = {
    "xgemm": "Xgemm",
    "xgemm_direct": "XgemmDirect",
    "copy": "Copy",
    "pad": "Pad",
    "transpose": "Transpose",
    "padtranspose": "Padtranspose",
}

MISSING = ("CLBlast's tuners are missing ({names}). Install them (Debian/Ubuntu: "
           "apt-get install clblast-utils) or put them on PATH.")


@dataclass(frozen=True)
class Product:
    name: str
    m: int
    k: int
    n: int
    b_transposed: bool = False  # b is weight.t() (nn.Linear) rather than a (K, N) weight (Conv1D)
    count: int = 1              # weight in the total time


def products() -> List[Product]:
    """The products timed: GPT-2's (8 and 64 tokens, and one token as in generation), ResNet-50's
    classifier on one image and on 20."""
    out = [Product(s.name, s.m, s.k, s.n, count=1 if s.name.startswith("lm_head") else GPT2_LAYERS) for s in GPT2]
    out += [Product("c_attn.t1", 1, 768, 2304, count=GPT2_LAYERS),
            Product("resnet50.fc.b1", 1, 2048, 1000, b_transposed=True),
            Product("resnet50.fc.b20", 20, 2048, 1000, b_transposed=True)]
    return out


def tuner_command(t: Tuner, platform: int, device: int, scale: float) -> List[str]:
    cmd = [t.binary, "-platform", str(platform), "-device", str(device), "-precision", "32"]
    for key, value in t.sizes.items():
        cmd += [f"-{key}", str(value)]
    return cmd + ["-fraction", f"{max(1.0, t.divisor / scale):g}"]


def run_tuners(workdir: str, platform: int, device: int, scale: float) -> None:
    """Runs every tuner at the lowest priority in workdir, where each writes its JSON files;
    a tuner stopped at its time limit leaves its last phase's results in its log."""
    missing = [t.binary for t in TUNERS if shutil.which(t.binary) is None]
    if missing:
        sys.exit(MISSING.format(names=", ".join(missing)))
    for i, t in enumerate(TUNERS, 1):
        cmd = tuner_command(t, platform, device, scale)
        log = os.path.join(workdir, t.binary + ".log")
        limit = t.limit_s * scale
        print(f"[{i}/{len(TUNERS)}] {' '.join(cmd)}  (at most {limit:.0f} s)", flush=True)
        start = time.monotonic()
        with open(log, "w") as f:
            try:
                done = subprocess.run(cmd, cwd=workdir, stdout=f, stderr=subprocess.STDOUT, timeout=limit,
                                      preexec_fn=lambda: os.nice(19))
            except subprocess.TimeoutExpired:
                done = None
        if done is None:
            kept = results_from_log(log, t, workdir)
            print(f"      stopped at the time limit; {kept} results of its last phase kept", flush=True)
            continue
        if done.returncode != 0:
            with open(log) as f:
                tail = f.read()[-2000:]
            sys.exit(f"{t.binary} failed (exit status {done.returncode}); the end of {log}:\n{tail}")
        print(f"      {time.monotonic() - start:.0f} s", flush=True)


_ROW = re.compile(r"^\|\s*\d+ \|\s*\d+ \|([\d ]+)\|.*\|\s*([\d.]+) ms \|.*results match")


def results_from_log(log: str, t: Tuner, workdir: str) -> int:
    """Writes the results of the phase a stopped tuner was in, read from its log's table, as
    a JSON file like the tuner's own; returns how many."""
    with open(log, errors="replace") as f:
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())
    phases = text.split("* Parameters explored: ")[1:]
    if not phases:
        return 0
    names, _, table = phases[-1].partition("\n")
    names = names.split()
    results = []
    for line in table.splitlines():
        match = _ROW.match(line)
        if match and len(match.group(1).split()) == len(names):
            values = [int(v) for v in match.group(1).split()]
            results.append({"time": float(match.group(2)), "parameters": dict(zip(names, values))})
    family = t.families[min(len(phases), len(t.families)) - 1]
    with open(os.path.join(workdir, f"clblast_{family}_stopped_32.json"), "w") as f:
        json.dump({"kernel_family": family, "results": results}, f)
    return len(results)


def best_parameters(workdir: str) -> Tuple[Dict[str, Dict[str, int]], Dict[str, float]]:
    """The fastest configuration per database kernel over the tuners' JSON files in workdir:
    ({kernel: {parameter: value}}, {kernel: its time in ms at the tuner's size})."""
    params: Dict[str, Dict[str, int]] = {}
    times: Dict[str, float] = {}
    for path in sorted(glob.glob(os.path.join(workdir, "clblast_*_32.json"))):
        with open(path) as f:
            data = json.load(f)
        family = re.sub(r"_\d+$", "", data.get("kernel_family", ""))  # xgemm_11 -> xgemm
        kernel = FAMILY_KERNEL.get(family)
        if kernel is None:
            continue
        for result in data.get("results", []):
            if result["time"] > 0 and result["time"] < times.get(kernel, math.inf):
                times[kernel] = result["time"]
                params[kernel] = {k: int(v) for k, v in result["parameters"].items() if k != "PRECISION"}
    return params, times


def operands(p: Product) -> Tuple[torch.Tensor, torch.Tensor]:
    """a (M, K) and b (K, N) for product p, b a resident weight as in a patched model."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(p.m, p.k, generator=gen)
    if p.b_transposed:
        return a, torch.nn.Parameter(torch.randn(p.n, p.k, generator=gen), requires_grad=False).t()
    return a, torch.nn.Parameter(torch.randn(p.k, p.n, generator=gen), requires_grad=False)


def time_ns(name: str, a: torch.Tensor, b: torch.Tensor, reps: int) -> float:
    """The least wall time of `reps` ocl_matmul(a, b) calls, after one untimed call that is
    checked against torch. Wall time, not kernel time: CLBlast's event for an indirect GEMM
    covers only its last kernel (the copy of C), not the pads, copies and Xgemm before it."""
    out, ref = opencl_functions.ocl_matmul(a, b), a @ b
    err = float((out - ref).abs().max() / (1 + ref.abs().max()))
    if not err < 1e-4:
        raise RuntimeError(f"{name}: ocl_matmul is wrong with these CLBlast parameters (error {err:.2e})")
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter_ns()
        opencl_functions.ocl_matmul(a, b)
        best = min(best, time.perf_counter_ns() - start)
    return best


def gemm_products(ps: List[Product]) -> List[Product]:
    return [p for p in ps if p.m > 1]  # one-row products are GEMVs


def switch_over(ps: List[Product], reps: int) -> int:
    """The XGEMM_MIN_INDIRECT_SIZE that gives the least weighted time over the GEMM products,
    from each product's time with the direct and with the indirect kernel."""
    times = {}
    for mode, size in (("indirect", 0), ("direct", 1 << 20)):
        opencl_functions.set_clblast_parameters({"GemmRoutine": {"XGEMM_MIN_INDIRECT_SIZE": size}})
        for p in ps:
            times[p.name, mode] = time_ns(p.name, *operands(p), reps)
            print(f"      {p.name:<16} {mode:<8} {times[p.name, mode] / 1e6:9.3f} ms", flush=True)
    # Direct when m·n·k < size³: candidates just above each product's volume, and 0.
    candidates = [0] + sorted(math.ceil(round((p.m * p.n * p.k) ** (1 / 3), 6)) + 1 for p in ps)

    def total(size: int) -> float:
        return sum(p.count * times[p.name, "direct" if p.m * p.n * p.k < size**3 else "indirect"] for p in ps)

    return min(candidates, key=total)


def compare(tuned: Dict[str, Dict[str, int]], defaults: Dict[str, Dict[str, int]], reps: int) -> Dict[str, Dict]:
    """Times of every product with CLBlast's defaults and with `tuned`, interleaved."""
    rows = {}
    print(f"      {'product':<16} {'defaults ms':>12} {'tuned ms':>10} {'speedup':>8}")
    for p in products():
        a, b = operands(p)
        best = {"defaults": math.inf, "tuned": math.inf}
        for _ in range(reps):
            for label, params in (("defaults", defaults), ("tuned", tuned)):
                opencl_functions.set_clblast_parameters(params)
                best[label] = min(best[label], time_ns(p.name, a, b, 1))
        rows[p.name] = {"m": p.m, "k": p.k, "n": p.n, "count": p.count,
                        "defaults_ns": int(best["defaults"]), "tuned_ns": int(best["tuned"])}
        print(f"      {p.name:<16} {best['defaults'] / 1e6:12.3f} {best['tuned'] / 1e6:10.3f} "
              f"{best['defaults'] / best['tuned']:7.2f}x", flush=True)
    return rows


def summary(rows: Dict[str, Dict]) -> Dict[str, float]:
    """Geometric mean of the speedups, and the ratio of weighted total times (defaults / tuned)."""
    logs = [math.log(r["defaults_ns"] / r["tuned_ns"]) for r in rows.values()]
    total = {k: sum(r["count"] * r[k] for r in rows.values()) for k in ("defaults_ns", "tuned_ns")}
    return {"geomean_speedup": round(math.exp(sum(logs) / len(logs)), 3),
            "weighted_total_speedup": round(total["defaults_ns"] / total["tuned_ns"], 3)}


def default_path() -> str:
    name = opencl_functions.device_info()["device"]
    return os.path.join(opencl_functions.CLBLAST_PARAMS_DIR, opencl_functions.device_slug(name) + ".json")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="parameter file to write (default: the device's file in "
                                      "opencl_functions/clblast_params/)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="explore this many times more configurations (time grows alike)")
    parser.add_argument("--tuned", metavar="DIR",
                        help="read the tuners' JSON files from DIR (a kept run) instead of running them")
    parser.add_argument("--keep", metavar="DIR", help="run the tuners in DIR and keep their JSON files and logs")
    parser.add_argument("--force", action="store_true", help="write the file even if it does not help")
    parser.add_argument("--compare", nargs="?", const="", metavar="FILE",
                        help="only time CLBlast's defaults against FILE (default: the device's file)")
    parser.add_argument("--reps", type=int, default=5, help="timed calls per product and setting")
    args = parser.parse_args(argv)

    os.nice(19)  # tuning is background work: the lowest priority, tuners included
    os.environ["OCLF_CLBLAST_PARAMS"] = "0"  # parameters are applied here explicitly
    info = opencl_functions.device_info()
    platform, device = (int(i) for i in info["index"].split(":"))
    print(f"Device {info['index']}: {info['device']} ({info['platform']})", flush=True)
    kernels = list(FAMILY_KERNEL.values()) + ["GemmRoutine"]
    defaults = opencl_functions.clblast_parameters(kernels)

    if args.compare is not None:
        path = args.compare or default_path()
        tuned = dict(defaults, **opencl_functions.read_clblast_params(path))
        print(f"Wall times, CLBlast's defaults vs {path}:")
        print(json.dumps(summary(compare(tuned, defaults, args.reps))))
        return

    workdir = args.tuned or args.keep or tempfile.mkdtemp(prefix="clblast_tune_")
    if not args.tuned:
        os.makedirs(workdir, exist_ok=True)
        run_tuners(workdir, platform, device, args.scale)
    params, tuner_ms = best_parameters(workdir)
    if not params:
        sys.exit(f"no tuner results (clblast_*_32.json) in {workdir}")
    print(f"Best parameters from {workdir}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in tuner_ms.items()))
    tuned = dict(defaults, **params)

    print("Direct/indirect GEMM switch-over with these parameters:", flush=True)
    opencl_functions.set_clblast_parameters(tuned)
    size = switch_over(gemm_products(products()), args.reps)
    tuned["GemmRoutine"] = {"XGEMM_MIN_INDIRECT_SIZE": size}
    print(f"      XGEMM_MIN_INDIRECT_SIZE = {size} (CLBlast's: {defaults['GemmRoutine']})")

    print("Wall times, CLBlast's defaults vs tuned:", flush=True)
    rows = compare(tuned, defaults, args.reps)
    result = summary(rows)
    print(json.dumps(result))
    out = args.out or default_path()
    if result["weighted_total_speedup"] <= 1.0 and not args.force:
        print(f"The tuned parameters do not help on this device; {out} not written (--force writes it).")
        return
    record = {
        "device": info["device"],
        "platform": info["platform"],
        "driver_version": info["driver_version"],
        "written": datetime.date.today().isoformat(),
        "command": "python -m bench.clblast_tune " + " ".join(argv if argv is not None else sys.argv[1:]),
        "tuners": {t.binary: " ".join(tuner_command(t, platform, device, args.scale)[1:]) for t in TUNERS},
        "tuner_best_ms": tuner_ms,
        "summary": result,
        "wall_ns": rows,
        "kernels": dict(params, GemmRoutine=tuned["GemmRoutine"]),
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"Wrote {out}")


if __name__ == "__main__":
    main()
