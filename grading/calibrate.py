"""Times the ladder of staff kernels on this machine and prints the performance scale it
implies, as the grader would measure it (each call by the grader's clock, fresh inputs, the
programs side by side one call each in turn, the fastest run per layer):

    python -m grading.calibrate [--ref-cache DIR] [--perf-runs N]      (make calibrate)
    python -m grading.calibrate --tiers bench/tiers.json              also `make grade`'s tiers

With --tiers it then runs `make grade`'s measurement (bench.estimate) in each rung's tree
and writes each rung's speed-up over the naive kernel there: the numbers `make grade`
places a student's speed-up on (the handout ships that file, never the rungs).

Read it as: a submission as fast as a rung gets that rung's share of the performance
points; between two rungs the share grows with log(time). A rung that is not faster than
every rung below it on this device is left out of the scale (the output says so): the
step it stands for earns nothing more here, and staff may want to look at it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import secrets
import shutil
import sys
from pathlib import Path
from typing import List, Optional

from grading import cases as C
from grading import performance, sandbox
from grading.build import Builder
from grading.grade import warm_kernel_cache
from grading.workspace import Options, Workspace


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    opt = Options()
    parser.add_argument("--ref-cache", type=type(opt.ref_cache), default=opt.ref_cache)
    parser.add_argument("--perf-runs", type=int, default=opt.perf_runs, help="timed runs per layer")
    parser.add_argument("--tiers", type=Path, help="write make grade's tiers (speed-ups over naive) to this file")
    args = parser.parse_args(argv)
    ws = Workspace(Options(ref_cache=args.ref_cache, perf_runs=args.perf_runs))
    try:
        builder = Builder(ws, warm=warm_kernel_cache(ws))
        reference = builder.reference()
        rungs, timings, _ = performance.time_ladder_and(ws, builder, reference, None, args.perf_runs,
                                                     secrets.randbits(30))
        if args.tiers:
            write_tiers(ws, builder, reference, rungs, args.tiers)
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


def write_tiers(ws: Workspace, builder: Builder, reference: Path, rungs, path: Path) -> None:
    """Each rung's speed-up over the naive kernel as `make grade` measures it (bench.estimate
    run in the rung's tree, as the grader's own user), written to `path`."""
    import opencl_functions

    found = {}
    for rung in rungs:
        tree = builder.ladder_tree(reference, rung.name)
        env = ws.env(tree, ws.trusted_home(), builder.kernel_cache(reference))
        result = sandbox.run([ws.python, "-m", "bench.estimate", "--json"], tree, env,
                             ws.limits(ws.opt.build_timeout_s), ws.user, as_sandbox=False)
        if not result.ok:
            raise RuntimeError(f"make grade's measurement failed in the {rung.name} rung: {result.output_tail(2000)}")
        measured = json.loads(next(line for line in reversed(result.output.splitlines()) if line.startswith("{")))
        found[rung.name] = {"share": rung.share, "speedup": round(measured["speedups"]["yours"], 3)}
        ws.log(f"tiers: {rung.name} {found[rung.name]['speedup']:.2f}× the naive kernel")
    info = opencl_functions.device_info()
    path.write_text(json.dumps({"device": f"{info['device']} ({info['platform']})",
                                "measured": datetime.date.today().isoformat(), "rungs": found}, indent=2) + "\n")
    print(f"\nmake grade's tiers written to {path}")


if __name__ == "__main__":
    sys.exit(main())
