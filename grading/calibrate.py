"""Times the ladder of staff kernels on this machine and prints the performance scale it
implies, as the grader would measure it (each call by the grader's clock, fresh inputs, the
programs side by side one call each in turn, the fastest run per layer):

    python -m grading.calibrate [--ref-cache DIR] [--perf-runs N]      (make calibrate)

Read it as: a submission as fast as a rung gets that rung's share of the performance
points; between two rungs the share grows with log(time). A rung that is not faster than
every rung below it on this device is left out of the scale (the output says so): the
step it stands for earns nothing more here, and staff may want to look at it.
"""
from __future__ import annotations

import argparse
import math
import secrets
import shutil
import sys
from typing import List, Optional

from grading import cases as C
from grading import performance
from grading.build import Builder
from grading.grade import warm_kernel_cache
from grading.workspace import Options, Workspace


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    opt = Options()
    parser.add_argument("--ref-cache", type=type(opt.ref_cache), default=opt.ref_cache)
    parser.add_argument("--perf-runs", type=int, default=opt.perf_runs, help="timed runs per layer")
    args = parser.parse_args(argv)
    ws = Workspace(Options(ref_cache=args.ref_cache, perf_runs=args.perf_runs))
    try:
        builder = Builder(ws, warm=warm_kernel_cache(ws))
        reference = builder.reference()
        rungs, timings, _ = performance.time_ladder_and(ws, builder, reference, None, args.perf_runs,
                                                     secrets.randbits(30))
    finally:
        shutil.rmtree(ws.work, ignore_errors=True)
    import opencl_functions

    info = opencl_functions.device_info()
    print(f"\nLadder on {info['device']} ({info['platform']}): {args.perf_runs} timed runs per layer, the programs "
          f"side by side; the fastest whole call per layer, in ms:\n")
    names = [r.name for r in rungs]
    print(f"{'layer':<20}" + "".join(f"{n:>12}" for n in names))
    for i, layer in enumerate(C.PERF_LAYERS):
        print(f"{layer[0]:<20}" + "".join(f"{timings[n].ns[i] / 1e6:12.3f}" for n in names))
    print(f"{'geometric mean':<20}" + "".join(f"{timings[n].geomean_ns() / 1e6:12.3f}" for n in names))
    naive = timings[names[0]].geomean_ns()
    print("\nScale (share of the performance points at each rung's speed):")
    fastest_below = math.inf
    for rung in rungs:
        t = timings[rung.name].geomean_ns()
        note = ""
        if t >= fastest_below:
            note = "  <- not faster than a rung below it: left out of the scale on this device"
        fastest_below = min(fastest_below, t)
        print(f"  {rung.name:<10} {t / 1e6:9.3f} ms  {naive / t:7.1f}× naive  → {rung.share:.0%}{note}")
    print("\nA submission between two rungs gets a share interpolated on log(time) between theirs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
