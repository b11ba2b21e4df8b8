"""torch CUDA beside the opencl device in bench.models, run as a performance-minded user runs
it: cuDNN's autotuner on (torch.backends.cudnn.benchmark, as our side tunes at first use),
float32 with TF32 off (the arithmetic our float32 kernels do), and for 16-bit convolutional
models both memory formats, NCHW and channels_last (cuDNN's tensor-core kernels are NHWC), the
faster of the two counted as the peer. Each workload is timed

    eager      the model as it is;
    graph      captured once in a CUDA graph and replayed (replay mode's peer): GPT-2's whole
               generation loop is one graph, its key/value cache growing the same way in every
               replay, in memory the graph's pool holds (a static cache in effect, and no
               launch per step);
    compiled   torch.compile in mode "default", "reduce-overhead" (CUDA graphs) and
               "max-autotune" (Triton templates autotuned, CUDA graphs), each in a process of
               its own (compile mode's peers; Inductor picks channels_last itself).

Eager and graph runs of one workload share a child process (`python -m bench.models
--cuda-only NAME ...`); a process that also held the opencl device trips an assertion of
torch's autograd engine on CUDA backward passes. A variant that fails or outlives its time
is reported with the reason, never dropped silently.
"""
from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional

import torch

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# Result keys: the eager peer, the graph peer, each compile mode.
EAGER, GRAPH = "torch_cuda", "torch_cuda_graph"
COMPILE_KEYS = {"default": "torch_cuda_compile", "reduce-overhead": "torch_cuda_reduce_overhead",
                "max-autotune": "torch_cuda_max_autotune"}


def layouts(conv: bool, dtype: str) -> List[str]:
    """The memory formats a workload is timed in: channels_last too for 16-bit convolutions."""
    return ["nchw", "channels_last"] if conv and dtype in ("float16", "bfloat16") else ["nchw"]


def tuned_like_a_user(device: str) -> None:
    """cuDNN's autotuner on, TF32 off (on CUDA; nothing to set elsewhere)."""
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


def synchronizer(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def median_seconds(run: Callable[[], object], sync: Callable[[], None], rounds: int) -> float:
    def once() -> float:
        start = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - start

    return statistics.median(once() for _ in range(rounds))


def cuda_graph(run: Callable[[], object]) -> Callable[[], None]:
    """`run` captured in a CUDA graph as torch's documentation does it (warm-up runs on a side
    stream, then one capture) and replayed: the fair peer of the device's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def _reason(err: BaseException) -> str:
    lines = str(err).strip().splitlines() or [type(err).__name__]
    return f"{type(err).__name__}: {lines[-1][:200]}"


def time_variants(make: Callable[[str], Callable[[], object]], device: str, rounds: int, variants: Iterable[str],
                  formats: Iterable[str], warmups: int = 1) -> Dict[str, object]:
    """In the child: median seconds of each variant ("eager", "graph") in each memory format,
    as {"eager:nchw": s, ...}, and {"errors": {"graph:nchw": reason}} for those that failed.
    make(format) builds the workload on `device` in that format (weights and input)."""
    tuned_like_a_user(device)
    sync = synchronizer(device)
    times: Dict[str, object] = {}
    errors: Dict[str, str] = {}
    for fmt in formats:
        try:
            run = make(fmt)
            for _ in range(warmups):  # cuDNN's autotuner, torch.compile's compilation and recording
                run()
            sync()
        except Exception as err:  # noqa: BLE001  (any failure is reported, with its reason)
            errors.update({f"{v}:{fmt}": _reason(err) for v in variants})
            continue
        for variant in variants:
            try:
                timed = cuda_graph(run) if variant == "graph" else run
                times[f"{variant}:{fmt}"] = median_seconds(timed, sync, rounds)
            except Exception as err:  # noqa: BLE001
                errors[f"{variant}:{fmt}"] = _reason(err)
            sync()
    return {**times, "errors": errors}


def _child(args: List[str], timeout: float, module: str = "bench.models") -> Dict[str, object]:
    """Runs `python -m MODULE ARGS` (bench.models --cuda-only ..., bench.decode --peer-only ...)
    and reads its last line's JSON."""
    try:
        proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s (--cuda-timeout)"}
    if proc.returncode:
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return {"failed": f"{how}: {tail[0][:200]}", "stderr": proc.stderr[-3000:]}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"failed": f"no result printed (stdout ends {proc.stdout[-200:]!r})"}


def _best(result: Dict, key: str, found: Dict[str, float]) -> None:
    """result[key] = the fastest of found (format -> seconds), each also as key_format."""
    for fmt, seconds in found.items():
        result[f"{key}_{fmt}"] = seconds
    if found:
        fmt = min(found, key=found.get)
        result[key], result[f"{key}_format"] = found[fmt], fmt


def measure(name: str, mode: str, rounds: int, dtype: str, conv: bool, compile_modes: Iterable[str] = COMPILE_MODES,
            timeout: float = 600, device: str = "cuda") -> Dict[str, object]:
    """torch's times of workload `name` for a row of bench.models in `mode`: result keys
    (EAGER, GRAPH and COMPILE_KEYS' values, each best format also per format), "peer" (the key
    of this row's fair peer: eager, graph, or the fastest compile mode) and "cuda_errors"."""
    base = ["--cuda-only", name, "--rounds", str(rounds), "--dtype", dtype, "--peer-device", device]
    result: Dict[str, object] = {}
    errors: Dict[str, str] = {}
    if mode == "compile":
        for compile_mode in compile_modes:
            got = _child([*base, "--cuda-compile", compile_mode], timeout)
            key = COMPILE_KEYS[compile_mode]
            if "eager:nchw" in got:
                result[key] = got["eager:nchw"]
            else:
                errors[key] = got.get("failed") or got["errors"].get("eager:nchw", "no time")
        timed = [k for k in COMPILE_KEYS.values() if k in result]
        result["peer"] = min(timed, key=result.get) if timed else None
    else:
        variants = ["eager", "graph"] if mode == "replay" else ["eager"]
        formats = layouts(conv, dtype)
        got = _child([*base, "--cuda-variants", ",".join(variants), "--cuda-formats", ",".join(formats)], timeout)
        for variant, key in (("eager", EAGER), ("graph", GRAPH)):
            if variant not in variants:
                continue
            _best(result, key, {fmt: got[f"{variant}:{fmt}"] for fmt in formats if f"{variant}:{fmt}" in got})
            for fmt in formats:
                reason = got.get("failed") or got.get("errors", {}).get(f"{variant}:{fmt}")
                if reason:
                    errors[f"{key}_{fmt}"] = reason
        peer = GRAPH if mode == "replay" else EAGER
        result["peer"] = peer if peer in result else None
    result["cuda_errors"] = errors
    return result


def describe(result: Dict[str, object], ours: float) -> str:
    """The CUDA part of bench.models' line: each time, its format where two were timed, the
    failures with their reasons, and our speed over the peer's."""
    parts = []
    names = {EAGER: "eager", GRAPH: "CUDA graph", **{k: f"torch.compile {m}" for m, k in COMPILE_KEYS.items()}}
    for key, label in names.items():
        if key in result:
            fmt = f" {result[f'{key}_format']}" if f"{key}_channels_last" in result else ""
            parts.append(f"{label}{fmt} {result[key] * 1e3:.1f} ms")
    parts += [f"{key} failed ({reason})" for key, reason in result.get("cuda_errors", {}).items()]
    peer: Optional[str] = result.get("peer")
    if peer:
        parts.append(f"OpenCL speed {result[peer] / ours:.2f}x of the peer's ({names[peer]})")
    return "torch CUDA " + ", ".join(parts)


def keep_other_modes(old: Dict[str, object], new: Dict[str, object], timed: Iterable[str]) -> Dict[str, object]:
    """A compile row measured again with some of torch's compile modes (`timed`): the new row,
    with the older row's times and failures of the modes not timed now, and the peer again
    the fastest of them all (so that modes split over several runs make one row)."""
    merged = dict(new)
    errors = dict(new.get("cuda_errors", {}))
    for mode, key in COMPILE_KEYS.items():
        if mode in timed:
            continue
        if key in old:
            merged[key] = old[key]
        if key in old.get("cuda_errors", {}):
            errors[key] = old["cuda_errors"][key]
    merged["cuda_errors"] = errors
    found = [key for key in COMPILE_KEYS.values() if key in merged]
    merged["peer"] = min(found, key=merged.get) if found else None
    return merged
