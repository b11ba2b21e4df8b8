"""`make grade`: an estimate of the performance points before you submit.

    python -m bench.estimate [--runs N]          (make grade)
    python -m bench.estimate --json               the measured speed-ups alone

It times your whole ocl_conv2d call (host code, buffers, copies, kernel) on the five layers
the grader times (grading.cases.PERF_LAYERS, fresh random inputs every run, every output
checked), beside a naive one-output-per-work-item kernel (grading/kernels/conv2d_naive.cl,
launched by the library) and torch, one call of each in turn, the fastest run per layer.
Each program's first call of every layer runs untimed before (kernel builds, tuning at first
use; one line says what it took) and tuning is paused while the runs are timed.
Your speed-up over the naive kernel (geometric mean over the layers) is placed on the
grader's ladder, whose rungs are stored as speed-ups over the same naive kernel, measured
on the grading machine by the course staff (bench/tiers.json: numbers only).

It is an estimate: your machine is not the grading machine (another CPU or GPU, other
caches, another number of cores), and a speed-up over the naive kernel carries over only
roughly from one device to another. The grader times your code against its ladder on its
own machine, in the same run; that is the score that counts.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from grading import cases as C
from grading.oracle import HIDDEN_TOL, mismatch
from grading.scale import geomean, ladder_share

TIERS = Path(__file__).resolve().parent / "tiers.json"
POINTS = 30
WARMUP = 2


def measure(runs: int, seed: int = 0, say: Callable[[str], None] = print) -> Dict[str, List[float]]:
    """Per program ("naive", "yours", "torch"), the fastest whole call per layer (s). Each program's
    first call of every layer runs untimed before (kernel builds, tuning at first use; say() gets
    the line that tells what it took), and tuning is paused while the runs are timed."""
    import opencl_functions as ocl
    from opencl_functions import tuning
    from bench.baselines import naive_conv2d

    def call(name: str) -> Callable[[Dict], torch.Tensor]:
        if name == "naive":
            return lambda c: naive_conv2d(c["x"], c["weight"], c["bias"], tuple(c["stride"]), tuple(c["dilation"]),
                                          c["groups"])[0]
        if name == "yours":
            return lambda c: ocl.ocl_conv2d(c["x"], c["weight"], c["bias"], stride=tuple(c["stride"]),
                                            dilation=tuple(c["dilation"]), groups=c["groups"])
        return lambda c: F.conv2d(c["x"], c["weight"], c["bias"], tuple(c["stride"]), 0, tuple(c["dilation"]),
                                  c["groups"])

    programs = {name: call(name) for name in ("naive", "yours", "torch")}

    def first_calls() -> None:
        for layer in range(len(C.PERF_LAYERS)):
            case = C.perf_inputs(layer, seed + 1000 * layer)
            for program in programs.values():
                program(case)

    _, first = tuning.warm_up(first_calls, "the graded layers")
    say(first.note())
    with tuning.paused():
        return timed_runs(programs, runs, seed)


def timed_runs(programs: Dict[str, Callable[[Dict], torch.Tensor]], runs: int, seed: int) -> Dict[str, List[float]]:
    """The fastest of `runs` whole calls of each program per layer (s), after WARMUP more, each output checked."""
    best: Dict[str, List[float]] = {name: [] for name in programs}
    for layer in range(len(C.PERF_LAYERS)):
        times = {name: math.inf for name in programs}
        for run in range(WARMUP + runs):
            case = C.perf_inputs(layer, seed + 1000 * layer + run)
            reference = C.reference(case)
            for k in range(len(programs)):
                name = list(programs)[(k + run) % len(programs)]  # the order rotates run by run
                start = time.perf_counter()
                y = programs[name](case)
                elapsed = time.perf_counter() - start
                problem = mismatch(y, reference, *HIDDEN_TOL)
                if problem:
                    who = "your conv2d" if name == "yours" else f"the {name} conv2d"
                    raise SystemExit(f"{C.PERF_LAYERS[layer][0]}: {who} gives a wrong output ({problem}); make run "
                                     f"shows which cases fail")
                if run >= WARMUP:
                    times[name] = min(times[name], elapsed)
        for name in programs:
            best[name].append(times[name])
    return best


def speedups(best: Dict[str, List[float]]) -> Dict[str, float]:
    """Geometric-mean speed-ups over the naive kernel."""
    naive = geomean(best["naive"])
    return {name: naive / geomean(times) for name, times in best.items()}


def estimate_share(speedup: float, tiers: Dict) -> float:
    """The share of the points at `speedup` over the naive kernel, on the ladder of tiers
    (rung name -> {"share", "speedup"}), as the grader interpolates it."""
    rungs = sorted(((1.0 / t["speedup"], t["share"]) for t in tiers["rungs"].values()), key=lambda r: r[1])
    return ladder_share(1.0 / speedup, rungs)


def report(best: Dict[str, List[float]], tiers: Optional[Dict]) -> str:
    up = speedups(best)
    lines = ["Whole calls, the fastest run per layer (ms), on this machine:", "",
             f"{'layer':<20}{'naive':>10}{'yours':>10}{'torch*':>10}{'yours vs naive':>16}"]
    for i, layer in enumerate(C.PERF_LAYERS):
        row = [best[n][i] * 1e3 for n in ("naive", "yours", "torch")]
        lines.append(f"{layer[0]:<20}" + "".join(f"{v:10.3f}" for v in row) + f"{row[0] / row[1]:15.1f}×")
    lines.append(f"{'geometric mean':<20}" + "".join(f"{geomean(best[n]) * 1e3:10.3f}"
                                                     for n in ("naive", "yours", "torch")) + f"{up['yours']:15.1f}×")
    lines.append("(* torch on one thread, as in the timing loop: for comparison only)")
    if tiers is None:
        lines += ["", f"No {TIERS.name} here: the staff's tiers are not in this tree, so no estimate."]
        return "\n".join(lines)
    share = estimate_share(up["yours"], tiers)
    ladder = ", ".join(f"{name} {t['speedup']:.1f}× → {t['share']:.0%}" for name, t in tiers["rungs"].items())
    lines += ["",
              f"The grader's ladder as speed-ups over the naive kernel, measured on {tiers['device']} "
              f"({tiers['measured']}): {ladder}.",
              f"Your speed-up of {up['yours']:.1f}× places you at about **{share:.0%}**, "
              f"{share * POINTS:.1f} of the {POINTS} performance points.",
              "",
              "This is an estimate: your device is not the grading machine, and a speed-up over the naive kernel "
              "carries over only roughly from one device to another (other cores, caches and vector widths favour "
              "other tiles). The grader times your code beside its ladder on its own machine; its score counts."]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per layer (the fastest counts)")
    parser.add_argument("--json", action="store_true", help="print the speed-ups over the naive kernel as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # torch's idle workers would take cores from the OpenCL device's
    best = measure(args.runs, say=lambda text: print(text, file=sys.stderr if args.json else sys.stdout))
    if args.json:
        print(json.dumps({"speedups": speedups(best), "seconds": best}))
        return 0
    tiers = json.loads(TIERS.read_text()) if TIERS.is_file() else None
    print(report(best, tiers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
