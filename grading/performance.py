"""The performance step: the submission's conv2d timed against a ladder of staff kernels
(grading/ladder/*.toml) in the same run, and scored by where it lands on that ladder.

What is timed is what the student's code costs: each call of ocl_conv2d, host work and
transfers included, on inputs already in place, by the grader's own clock. The child
says "ready", the grader starts its clock and says "go", the child makes one call and
copies its output, says "done", and the grader stops its clock (grading.child explains
the protocol). Every run gets fresh random inputs, made here outside the timed span, and
every run's output is checked against torch: remembering an output, skipping work or
recording partial kernel events gains nothing, and a wrong output in any run fails the
step. Kernel times from profiling events are shown for information only.

Every program (the ladder's rungs and the submission) runs in a child of its own, all at
once, on the same inputs: the grader makes one call of each in turn, layer by layer and
run by run, so load from elsewhere falls on all of them alike; each layer keeps its
fastest run (load only ever adds time). The score is a monotone function of the
submission's geometric-mean time over the layers, `ladder_share`: log-linear between the
rungs' times, from 0 (the naive kernel's time or slower) to 1 (the reference's time or
faster). A rung that is not faster than every rung below it on this device is left out of
the scale, so the score never jumps.
"""
from __future__ import annotations

import math
import os
import secrets
import select
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from grading import cases as C
from grading import fixtures
from grading.build import Builder, Program
from grading.compare import read_result, tensor_bytes
from utils.testing import mismatch
from grading.report import Report
from grading.workspace import Workspace

WARMUP = 2  # untimed runs per layer (first calls build kernels), checked all the same


@dataclass
class Timing:
    """One program's runs: per layer the fastest call (ns) and the profiled kernel time of
    that call's layer (information only), or the problem that stopped it."""

    name: str
    ns: Dict[int, int] = field(default_factory=dict)
    kernel_ns: Dict[int, int] = field(default_factory=dict)
    problem: Optional[str] = None

    def geomean_ns(self) -> float:
        return math.exp(sum(math.log(v) for v in self.ns.values()) / len(self.ns))


def ladder_share(t: float, rungs: Sequence[Tuple[float, float]]) -> float:
    """The share of the performance points for time t, given the rungs' (time, share),
    shares ascending from 0 to 1. Rungs not faster than every rung below them are left
    out; between the others the share is interpolated on log(time)."""
    points: List[Tuple[float, float]] = []
    for time_, share in rungs:
        if not points or time_ < points[-1][0]:
            points.append((time_, share))
    if t >= points[0][0]:
        return 0.0
    if t <= points[-1][0]:
        return points[-1][1]
    for (t_hi, s_lo), (t_lo, s_hi) in zip(points, points[1:]):
        if t_lo <= t < t_hi:
            return s_lo + (s_hi - s_lo) * math.log(t_hi / t) / math.log(t_hi / t_lo)
    return 0.0


def make_inputs(runs: int, seed: int) -> List[Dict]:
    """Per layer {"runs": [case, ...]}: WARMUP + runs fresh cases each."""
    rng = torch.Generator().manual_seed(seed)
    layers = []
    for i in range(len(C.PERF_LAYERS)):
        seeds = torch.randint(0, 2**31 - 1, (WARMUP + runs,), generator=rng).tolist()
        layers.append({"runs": [C.perf_inputs(i, s) for s in seeds]})
    return layers


class _Child:
    """One program's perf child as the grader drives it: its pipes, its clock, its times."""

    def __init__(self, ws: Workspace, name: str, tree: Path, home: Path, trusted: bool, layers: List[Dict],
                 kernel_cache: Optional[Path]) -> None:
        self.timing = Timing(name)
        self.times: Dict[int, List[int]] = {}
        self.go_r, self.go_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        try:
            self.running, self.out_dir = ws.start_child(
                "perf", {"layers": layers}, tree, home, trusted=trusted, kernel_cache=kernel_cache,
                extra_args=[str(self.go_r), str(self.done_w)], pass_fds=(self.go_r, self.done_w))
        finally:
            os.close(self.go_r)
            os.close(self.done_w)

    @property
    def alive(self) -> bool:
        return self.timing.problem is None

    def _read1(self) -> bytes:
        ready, _, _ = select.select([self.done_r], [], [], self.running.remaining_s())
        return os.read(self.done_r, 1) if ready else b""

    def call(self, layer: int, run: int) -> None:
        """One timed call: wait until the child is ready, start the clock, say go, stop the
        clock on its answer. A child that fails stops here, its problem noted."""
        if self._read1() != b"r":
            return self.stop(f"{C.PERF_LAYERS[layer][0]}: the child stopped before run {run + 1}")
        start = time.perf_counter_ns()
        os.write(self.go_w, b"g")
        answer = self._read1()
        elapsed = time.perf_counter_ns() - start
        if answer == b"e":
            return self.stop("")  # the error itself is in the child's result file
        if answer != b"d":
            return self.stop(f"{C.PERF_LAYERS[layer][0]}: no answer from the child on run {run + 1}")
        if run >= WARMUP:
            self.times.setdefault(layer, []).append(elapsed)

    def stop(self, reason: str) -> None:
        self.timing.problem = reason
        self.running.kill()

    def finish(self, layers: List[Dict], refs: List[List[torch.Tensor]]) -> Timing:
        """Waits for the child, then checks every output it saved against torch's."""
        for fd in (self.go_w, self.done_r):
            os.close(fd)
        result = self.running.finish()
        timing = self.timing
        for i, layer in enumerate(layers):
            got = read_result(self.out_dir / f"{i:03d}.pt", 2 * tensor_bytes(refs[i]) + (1 << 16))
            if "error" in got:
                timing.problem = timing.problem or f"{C.PERF_LAYERS[i][0]}: {str(got['error'])[:2000]}"
                break
            outputs = got.get("y")
            if not isinstance(outputs, list) or len(outputs) != len(refs[i]):
                timing.problem = timing.problem or f"{C.PERF_LAYERS[i][0]}: wrong number of outputs"
                break
            for r, (out, ref) in enumerate(zip(outputs, refs[i])):
                problem = mismatch(out, ref, *C.HIDDEN_TOL)
                if problem:
                    timing.problem = timing.problem or f"{C.PERF_LAYERS[i][0]}, run {r + 1}: wrong output: {problem}"
                    break
            if i in self.times:
                timing.ns[i] = min(self.times[i])
                kernel = got.get("kernel_ns")
                timing.kernel_ns[i] = min(int(k) for k in kernel[WARMUP:]) if isinstance(kernel, list) else 0
        if not timing.problem and len(timing.ns) != len(layers):
            timing.problem = f"the child {result.describe()}"
        if timing.problem is not None and not result.ok:
            timing.problem += f" (the child {result.describe()}; its output: {result.output_tail(1500)})"
        return timing


def time_programs(ws: Workspace, programs: List[Tuple[str, Path, Path, bool, Optional[Path]]],
                  layers: List[Dict]) -> Dict[str, Timing]:
    """Times every program (name, tree, home, trusted, kernel cache) on the same inputs, call
    by call in turn: all children start and wait, then for each layer and run each program
    makes its call (the order rotates from run to run), so load from elsewhere falls on all
    alike. Never raises for what a program does."""
    children = []
    for name, tree, home, trusted, cache in programs:
        children.append(_Child(ws, name, tree, home, trusted, layers, cache))
    for i, layer in enumerate(layers):
        for r in range(len(layer["runs"])):
            for k in range(len(children)):
                child = children[(k + r) % len(children)]
                if child.alive:
                    child.call(i, r)
    refs = [[C.reference(case) for case in layer["runs"]] for layer in layers]
    timings = {}
    for child in children:
        timing = child.finish(layers, refs)
        if timing.problem == "":
            timing.problem = "failed (see above)"
        timings[timing.name] = timing
    return timings


def time_ladder_and(ws: Workspace, builder: Builder, reference: Path, submission: Optional[Program],
                    runs: int, seed: int) -> Tuple[List[fixtures.Fixture], Dict[str, Timing]]:
    """Times the ladder's rungs and the submission (if any) side by side, call by call."""
    rungs = fixtures.ladder()
    cache = builder.kernel_cache(reference)
    programs = [(r.name, builder.ladder_tree(reference, r.name), builder.home("ladder"), True, cache) for r in rungs]
    if submission is not None:
        programs.append(("submission", submission.tree, builder.home("student"), False, None))
    ws.log(f"performance: {len(programs)} programs side by side, {runs} timed runs per layer")
    timings = time_programs(ws, programs, make_inputs(runs, seed))
    for rung in rungs:
        if timings[rung.name].problem:
            raise RuntimeError(f"ladder rung {rung.name} failed: {timings[rung.name].problem}")
    return rungs, timings


def run(ws: Workspace, report: Report, builder: Builder, reference: Path, submission: Program) -> None:
    """The performance test, added to `report`."""
    test = report.add("Performance: conv2d on ResNet layers (whole call, grader's clock)", "perf")
    needed = report.find("tests.py: ") + report.find("conv2d on") + report.find("ResNet") + report.find("Races")
    needed = [t for t in needed if "matmul" not in t.name]
    if not all(t.status == "passed" for t in needed):
        test.output = ("Not run: performance counts only when every conv2d test, the ResNet and the race and "
                       "memory check pass.")
        return
    rungs, timings = time_ladder_and(ws, builder, reference, submission, ws.opt.perf_runs, secrets.randbits(30))
    mine = timings["submission"]
    if mine.problem:
        test.output = f"Performance step failed: {mine.problem}"
        return
    anchors = [(timings[r.name].geomean_ns(), r.share) for r in rungs]
    share = ladder_share(mine.geomean_ns(), anchors)
    test.score = round(test.max_score * share, 2)
    test.status = "passed" if share >= 1.0 else "failed"
    test.output = table(rungs, timings, share, ws.opt.perf_runs)
    ref = timings["reference"].geomean_ns()
    report.leaderboard = [
        {"name": "Speed vs reference (×)", "value": round(ref / mine.geomean_ns(), 3), "order": "desc"},
        {"name": "Speedup vs naive (×)", "value": round(timings[rungs[0].name].geomean_ns() / mine.geomean_ns(), 2),
         "order": "desc"},
        {"name": "conv2d time (ms, geo-mean)", "value": round(mine.geomean_ns() / 1e6, 3), "order": "asc"},
    ]
    ws.log(f"performance: {ref / mine.geomean_ns():.2f}× the reference's speed → {share:.0%}")


def table(rungs: List[fixtures.Fixture], timings: Dict[str, Timing], share: float, runs: int) -> str:
    """The report: per layer the time of each program, then the ladder and the share."""
    names = ["submission"] + [r.name for r in rungs]
    head = "| Layer | yours | " + " | ".join(r.name for r in rungs) + " | your kernel time |"
    rows = [head, "|" + "---|" * (len(names) + 2)]
    for i, layer in enumerate(C.PERF_LAYERS):
        cells = [f"{timings[n].ns[i] / 1e6:.3f}" for n in names]
        kernel_ms = timings["submission"].kernel_ns.get(i, 0) / 1e6
        rows.append(f"| {layer[0]} | " + " | ".join(cells) + f" | {kernel_ms:.3f} |")
    rows.append("| geometric mean | " + " | ".join(f"**{timings[n].geomean_ns() / 1e6:.3f}**" for n in names) + " | |")
    scale = "; ".join(f"{r.name} → {r.share:.0%}" for r in rungs)
    return (f"Each call of ocl_conv2d timed by the grader's clock (ms; host work and transfers included), the "
            f"fastest of {runs} runs per layer on fresh inputs, every output checked. The ladder of staff kernels "
            f"ran side by side with yours, one call of each in turn.\n\n" + "\n".join(rows) +
            f"\n\nLadder: {scale}; between two rungs the share grows with log(time). Your geometric-mean time "
            f"gives **{share:.0%} of the performance points**. Kernel time (OpenCL profiling) is for your "
            f"information only.")
