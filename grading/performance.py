"""The performance step: the submission's conv2d timed against a ladder of staff kernels
(grading/ladder/*.toml) in the same run, and scored by where it lands on that ladder.

What is timed is what the student's code costs: each call of ocl_conv2d, host work and
transfers included, on inputs already in place, by the grader's own clock. The grader
sends a call's inputs over the child's pipe (untimed; they exist nowhere before), the
child says "ready", the grader starts its clock and says "go", the child makes one call
and sends "done" and its output's bytes, and the grader stops its clock when the last
byte has come: an early "done" gains nothing (grading.child explains the protocol). Every
run gets fresh random inputs from a seed the grader never passes on, and every run's
output is checked against torch: remembering an output, skipping work or recording
partial kernel events gains nothing, and a wrong output in any run fails the step. Kernel
times from profiling events are shown for information only.

Every program (the ladder's rungs and the submission) runs in a child of its own, all at
once, on the same inputs: the grader makes one call of each in turn, layer by layer and
run by run, so load from elsewhere falls on all of them alike; each layer keeps its
fastest run (load only ever adds time). Outside its own turn every program is stopped
(SIGSTOP, all its processes), so nothing of one runs while another is timed. The score is
a monotone function of the submission's geometric-mean time over the layers,
`ladder_share`: log-linear between the rungs' times, from 0 (the naive kernel's time or
slower) to 1 (the reference's time or faster). A rung that is not faster than every rung
below it on this device is left out of the scale, so the score never jumps.

One more run per layer, at a place among the timed ones that the grader draws, is not
timed: in it the submission's launches are captured, and afterwards run again under
Oclgrind (grading.check: the first and last work-group of each configuration). Every
launch of the timed runs must be one the captured run made too, so the kernels timed are
the kernels checked.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from grading import cases as C
from grading import channel, check, correctness, fixtures
from grading.build import Builder, Program
from grading.compare import tensor_bytes
from grading.oracle import mismatch
from grading.report import Report
from grading.scale import geomean, ladder_share  # noqa: F401  (performance.ladder_share, as before)
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
        return geomean(self.ns.values())


@dataclass
class Plan:
    """The calls of the performance step: per layer, WARMUP untimed runs, then `runs` timed
    ones with one untimed captured run among them (at `captured[layer]`), each with inputs of
    its own."""

    layers: List[List[Dict]]
    captured: List[int]

    def timed(self, layer: int, run: int) -> bool:
        return run >= WARMUP and run != self.captured[layer]


def make_plan(runs: int, seed: int) -> Plan:
    rng = torch.Generator().manual_seed(seed)
    layers, captured = [], []
    for i in range(len(C.PERF_LAYERS)):
        seeds = torch.randint(0, 2**31 - 1, (WARMUP + runs + 1,), generator=rng).tolist()
        layers.append([C.perf_inputs(i, s) for s in seeds])
        captured.append(WARMUP + int(torch.randint(0, runs + 1, (1,), generator=rng)))
    return Plan(layers, captured)


class _Program:
    """One program's perf child as the grader drives it: its pipes, its clock, its times,
    and (the submission's) the launches of its runs."""

    def __init__(self, ws: Workspace, name: str, tree: Path, trusted: bool, cache: Path, timeout_s: float) -> None:
        self.timing = Timing(name)
        self.times: Dict[int, List[int]] = {}
        self.kernels: Dict[int, List[int]] = {}
        self.launched: Dict[int, List[Dict]] = {}  # per layer, the launches of its timed runs
        self.captured: Dict[int, List[Dict]] = {}  # per layer, the launches of its captured run
        self.child = ws.start_child("grading.child", ["perf"], tree, trusted, cache, timeout_s=timeout_s)
        self.call_timeout_s = ws.opt.timeout_s  # one call, its inputs and its output included

    @property
    def alive(self) -> bool:
        return self.timing.problem is None

    def call(self, plan: Plan, layer: int, run: int, ref: torch.Tensor) -> None:
        """One call: inputs sent, then timed from "go" to the output's last byte; the output
        checked. A program that fails stops here, its problem noted."""
        name = C.PERF_LAYERS[layer][0]
        child, reader = self.child, self.child.reader
        deadline = min(child.deadline(), time.monotonic() + self.call_timeout_s)
        child.running.resume()
        try:
            capture = run == plan.captured[layer]
            child.send({"case": plan.layers[layer][run], "capture": capture})
            if reader.signal(deadline) != b"r":
                return self.stop(f"{name}: the child broke the protocol before run {run + 1}")
            start = time.perf_counter_ns()
            child.signal(b"g")
            answer = reader.signal(deadline)
            if answer == b"d":
                data = reader.raw(tensor_bytes(ref), deadline)
                elapsed = time.perf_counter_ns() - start
            elif answer == b"e":
                error = reader.message(1 << 16, deadline).get("error", "")
                return self.stop(f"{name}: {str(error)[:2000]}")
            else:
                return self.stop(f"{name}: the child broke the protocol on run {run + 1}")
            # Checked before the trailer: a wrong output ends the program now, not after
            # waiting for a child that may never send the rest.
            if len(data) != tensor_bytes(ref):
                return self.stop(f"{name}, run {run + 1}: {len(data)} bytes of output, not {tensor_bytes(ref)}")
            problem = mismatch(torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(ref.shape), ref,
                               *C.HIDDEN_TOL)
            if problem:
                return self.stop(f"{name}, run {run + 1}: wrong output: {problem}")
            trailer = reader.message(1 << 28, deadline)
        except channel.ChannelError as err:
            return self.stop(f"{name}, run {run + 1}: {err}")
        finally:
            child.running.pause()
        launches = trailer.get("launches") if isinstance(trailer.get("launches"), list) else []
        if capture:
            self.captured[layer] = launches
        elif plan.timed(layer, run):
            self.times.setdefault(layer, []).append(elapsed)
            self.kernels.setdefault(layer, []).append(int(trailer.get("kernel_ns", 0)))
            self.launched.setdefault(layer, []).extend(launches)

    def stop(self, reason: str) -> None:
        self.timing.problem = reason
        self.child.running.kill()

    def finish(self) -> Timing:
        result = self.child.finish()
        timing = self.timing
        for layer, times in self.times.items():
            best = min(range(len(times)), key=times.__getitem__)
            timing.ns[layer] = times[best]
            timing.kernel_ns[layer] = min(self.kernels[layer])
        if not timing.problem and len(timing.ns) != len(C.PERF_LAYERS):
            timing.problem = f"the child {result.describe()}"
        if timing.problem is not None and not result.ok:
            timing.problem += f" (the child {result.describe()}; its output: {result.output_tail(1500)})"
        return timing


def time_programs(ws: Workspace, programs: List[Tuple[str, Path, bool, Path]], plan: Plan
                  ) -> Tuple[Dict[str, Timing], Dict[str, _Program]]:
    """Times every program (name, tree, trusted, kernel cache) on the same inputs, call by
    call in turn: all children start, then for each layer and run each program makes its
    call (the order rotates from run to run), the others stopped meanwhile. Never raises
    for what a program does."""
    # The programs take turns: each child lives through all of them, stopped outside its
    # own calls, so its time limit is the step's per program (a loaded machine slows all).
    timeout_s = ws.opt.timeout_s * len(programs)
    children = [_Program(ws, name, tree, trusted, cache, timeout_s) for name, tree, trusted, cache in programs]
    for layer, runs in enumerate(plan.layers):
        refs = [C.reference(case) for case in runs]
        for r in range(len(runs)):
            for k in range(len(children)):
                child = children[(k + r) % len(children)]
                if child.alive:
                    child.call(plan, layer, r, refs[r])
    timings = {child.timing.name: child.finish() for child in children}
    return timings, {child.timing.name: child for child in children}


def time_ladder_and(ws: Workspace, builder: Builder, reference: Path, submission: Optional[Program],
                    runs: int, seed: int) -> Tuple[List[fixtures.Fixture], Dict[str, Timing], Optional[_Program]]:
    """Times the ladder's rungs and the submission (if any) side by side, call by call."""
    rungs = fixtures.ladder()
    cache = builder.kernel_cache(reference)
    programs = [(r.name, builder.ladder_tree(reference, r.name), True, cache) for r in rungs]
    if submission is not None:
        programs.append(("submission", submission.tree, False, builder.submission_cache(reference)))
    ws.log(f"performance: {len(programs)} programs side by side, {runs} timed runs per layer")
    timings, children = time_programs(ws, programs, make_plan(runs, seed))
    for rung in rungs:
        if timings[rung.name].problem:
            raise RuntimeError(f"ladder rung {rung.name} failed: {timings[rung.name].problem}")
    return rungs, timings, children.get("submission")


def unchecked_launches(child: _Program) -> List[str]:
    """Launches of the submission's timed runs that its captured run of the same layer did
    not make (what was timed must be what the race check runs)."""
    problems = []
    for layer, launches in child.launched.items():
        checked = {check.signature(launch) for launch in child.captured.get(layer, [])}
        for launch in launches:
            if check.signature(launch) not in checked:
                problems.append(f"{C.PERF_LAYERS[layer][0]}: a timed call launched {launch['kernel'] or 'a kernel'} "
                                f"(options {launch['options']!r}, global {launch['global']}, local {launch['local']}) "
                                f"with other arguments or sizes than the call the race check recorded")
                break
    return problems


def race_check_timed(ws: Workspace, report: Report, program: Program, cache: Path, child: _Program) -> bool:
    """The timed layers' launches, captured during the performance step, under Oclgrind
    (first and last work-group of each configuration); problems fail the race test too.
    True when all is well."""
    problems = unchecked_launches(child)
    launches = [(f"{C.PERF_LAYERS[layer][0]}, launch {j + 1} ({launch['kernel']})", launch,
                 check.conv_work(C.perf_inputs(layer, 0)))
                for layer in sorted(child.captured) for j, launch in enumerate(child.captured[layer])]
    configurations = check.distinct_configurations(launches)
    ws.log(f"race check of the timed layers: {len(configurations)} configurations under Oclgrind (--quick)")
    more, findings = check.replay(ws.starter(program.tree, cache), configurations, quick=True,
                                  timeout_s=max(ws.opt.timeout_s, 240))
    lines = correctness.race_report(findings, problems + more)
    if not lines:
        return True
    races = report.find("Races")[0]
    races.score, races.status = 0.0, "failed"
    races.output += "\n\nThe timed layers' kernels (first and last work-group of each configuration):\n\n" + \
        "\n\n".join(lines)
    return False


def run(ws: Workspace, report: Report, builder: Builder, reference: Path, submission: Program) -> None:
    """The performance test, added to `report`."""
    test = report.add("Performance: conv2d on ResNet layers (whole call, grader's clock)", "perf")
    needed = report.find("tests.py: ") + report.find("conv2d on") + report.find("ResNet") + report.find("Races")
    needed = [t for t in needed if "matmul" not in t.name]
    if not all(t.status == "passed" for t in needed):
        test.output = ("Not run: performance counts only when every conv2d test, the ResNet and the race and "
                       "memory check pass.")
        return
    rungs, timings, child = time_ladder_and(ws, builder, reference, submission, ws.opt.perf_runs,
                                            secrets.randbits(30))
    mine = timings["submission"]
    if mine.problem:
        test.output = f"Performance step failed: {mine.problem}"
        return
    if not race_check_timed(ws, report, submission, builder.submission_cache(reference), child):
        test.output = ("Not scored: the race and memory check of the kernels your timed calls launched failed "
                       "(see that test).")
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
