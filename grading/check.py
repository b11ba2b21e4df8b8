"""The race and memory check: the kernels the student's host code launches, run again under
Oclgrind, an OpenCL device simulator that reports data races, out-of-bounds accesses and
reads of write-only buffers with the kernel, the source line and the work-items involved.

    python -m grading.check          (make check: the allowed-calls check, then this)

The host code runs on the real device, with the runtime's launch log capturing every
launch (program, options, NDRange, arguments, buffers before and after); then a driver of
the grader's (grading.replay) runs those same launches under Oclgrind and compares what
they write with what the device wrote. The host code never runs under Oclgrind, so it
cannot launch something else there. Two sets of launches are checked:
- every work-group, on a few small, awkward shapes (odd sizes, strides, dilation, groups,
  a batch, depthwise): races between work-groups show here;
- the first and last work-group of each configuration the host code chose for the graded
  layers (Oclgrind's --quick: every work-group of a ResNet layer would take minutes).
The grader runs the same check, on the calls it timed (grading.performance).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from grading import channel
from grading.library import geometry

ROOT = Path(__file__).resolve().parent.parent
MAX_ERRORS = 32
LOG_LIMIT = 1 << 20
# What Oclgrind reports that fails the check (its warnings about performance do not).
PROBLEM = re.compile(r"data race|invalid (read|write)|out of bounds|write-only|read-only|uninitiali[sz]ed|"
                     r"divergence|misaligned|invalid (memory|access)|OpenCL error", re.IGNORECASE)

# start(module, args, wrapper, extra_fds, timeout_s) -> a started child (grading.workspace.Child)
Starter = Callable[..., "object"]


def cases() -> List[Dict]:
    """The small shapes checked in full: (B, C_in, H, W) already padded, weight, stride,
    dilation, groups."""
    from grading.cases import _conv_case

    gen = torch.Generator().manual_seed(160)
    specs = [  # name, batch, c_in, h, w, c_out, k_h, k_w, stride, dilation, groups, bias
        ("strided and dilated", 1, 5, 9, 9, 3, 3, 3, (2, 2), (2, 2), 1, True),
        ("grouped, batch 2, uneven stride", 2, 6, 8, 7, 4, 3, 2, (1, 2), (1, 1), 2, False),
        ("1x1 over 17 channels", 1, 17, 5, 6, 19, 1, 1, (1, 1), (1, 1), 1, True),
        ("depthwise", 1, 4, 7, 7, 4, 3, 3, (1, 1), (1, 1), 4, True),
    ]
    return [_conv_case(spec[0], gen, *spec[1:10], groups=spec[10], bias=spec[11]) for spec in specs]


def graded_layers(seed: int = 0) -> List[Dict]:
    """The layers the grader times (grading.cases.PERF_LAYERS), one case each."""
    from grading.cases import PERF_LAYERS, perf_inputs

    return [perf_inputs(i, seed + i) for i in range(len(PERF_LAYERS))]


def oclgrind_argv(log: str, quick: bool = False) -> List[str]:
    return ["oclgrind", "--data-races", "--check-api", "--max-errors", str(MAX_ERRORS), "--log", str(log),
            *(["--quick"] if quick else [])]


@dataclass(frozen=True)
class Finding:
    """One problem Oclgrind reported: what, in which kernel, and where: per work-item
    involved, its ids, the source line number and the line itself."""

    what: str
    kernel: str
    places: tuple  # ((entity, "line N", source text), ...)

    def __str__(self) -> str:
        text = f"{self.what} in kernel {self.kernel or '?'}"
        for entity, line, source in self.places:
            text += f"\n    {line}" + (f" by work-item {entity}" if entity else "")
            text += f": `{source}`" if source else ""
        return text


def parse(log: str) -> List[Finding]:
    """The problems in Oclgrind's log, one per (what, kernel, source lines)."""
    lines = log.splitlines()
    found: Dict[tuple, Finding] = {}
    for i, line in enumerate(lines):
        if not line.strip() or line[0].isspace() or not PROBLEM.search(line):
            continue
        kernel, places, entity = "", [], ""
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j][0].isspace()):
            text = lines[j].strip()
            if text.startswith("Kernel:"):
                kernel = text.split(":", 1)[1].strip()
            elif "ntity:" in text:  # "Entity:", "First entity:", "Second entity:"
                entity = " ".join(text.split(":", 1)[1].split()[1:])  # Local(..) Group(..)
            elif text.startswith("At line"):
                number = text.split("(")[0].replace("At ", "").strip()
                source = lines[j + 1].strip() if j + 1 < len(lines) else ""
                places.append((entity, number, source))
            j += 1
        what = re.sub(r"at (\w+) memory address 0x[0-9a-fA-F]+", r"in \1 memory", line.strip())
        key = (what, kernel, tuple(sorted(p[1] for p in places)))
        found.setdefault(key, Finding(what, kernel, tuple(places)))
    return list(found.values())


def describe(findings: Sequence[Finding], limit: int = 8) -> str:
    lines = [f"- {f}" for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"- … and {len(findings) - limit} more")
    return "\n".join(lines)


def signature(launch: Dict) -> tuple:
    """What decides what a launch computes and how: its program, kernel, NDRange and every
    argument but the buffers' contents (their sizes count)."""
    args = tuple((a["kind"], a["size"] if a["kind"] == "local" else channel.as_bytes(a["value"]))
                 for a in launch["args"])
    sizes = tuple(b["bytes"] for b in launch["buffers"])
    return (launch["path"], launch["source_hash"], launch["options"], launch["kernel"], tuple(launch["global"]),
            tuple(launch["local"]), args, sizes)


def configuration(launch: Dict) -> tuple:
    """A launch's program, kernel and work-group: launches of one configuration on several
    layers share their code path, so the quick check runs one of them."""
    return (launch["path"], launch["source_hash"], launch["options"], launch["kernel"], tuple(launch["local"]))


def work_groups(launch: Dict) -> int:
    groups = 1
    for i, size in enumerate(launch["global"]):
        groups *= -(-size // (launch["local"][i] if launch["local"] else 1))
    return groups


def distinct_configurations(launches: Sequence[Tuple[str, Dict, float]]) -> List[Tuple[str, Dict]]:
    """One (label, launch) per configuration, from (label, launch, work) triples: the launch
    whose work-groups do the least work (work / work-groups; the quick check runs two)."""
    best: Dict[tuple, Tuple[float, str, Dict]] = {}
    for label, launch, work in launches:
        key, cost = configuration(launch), work / work_groups(launch)
        if key not in best or cost < best[key][0]:
            best[key] = (cost, label, launch)
    return [(label, launch) for _, label, launch in best.values()]


def conv_work(case: Dict) -> float:
    """A conv2d case's multiply-adds: outputs × the length of each output's sum."""
    conv = geometry.conv2d_geometry(case["x"].shape, case["weight"].shape, case["stride"], case["dilation"],
                                    case["groups"])
    return float(conv.macs)


class _Drain(threading.Thread):
    """Reads a pipe (Oclgrind's log) to its end, keeping the first LOG_LIMIT bytes."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.data = fd, bytearray()
        self.start()

    def run(self) -> None:
        while chunk := os.read(self.fd, 1 << 16):
            self.data.extend(chunk[: max(0, LOG_LIMIT - len(self.data))])

    def text(self) -> str:
        self.join(timeout=10)
        return self.data.decode(errors="replace")


def capture(start: Starter, todo: Sequence[Dict], timeout_s: float) -> Tuple[List[Dict], Optional[str]]:
    """Runs cases in a capture child: per case {"y": ..., "launches": [...]} or {"error": ...};
    and a note when the child did not end well."""
    child = start("grading.child", ["capture"], timeout_s=timeout_s)
    results: List[Dict] = []
    problem = None
    try:
        for case in todo:
            child.send({"case": case})
            limit = 64 * (sum(t.numel() * 4 for t in case.values() if isinstance(t, torch.Tensor)) + (1 << 20))
            results.append(child.reader.message(limit, child.deadline()))
    except channel.ChannelError as err:
        problem = str(err)
    result = child.finish()
    results += [{"error": f"no result ({problem})"}] * (len(todo) - len(results))
    note = None if result.ok and problem is None else f"The child {result.describe()}: {result.output_tail(2000)}"
    return results, note


def replay(start: Starter, launches: Sequence[Tuple[str, Dict]], quick: bool, timeout_s: float
           ) -> Tuple[List[str], List[Finding]]:
    """Runs (label, launch) pairs under Oclgrind with the grader's driver: what the driver
    found wrong (one line each) and what Oclgrind reported."""
    if not launches:
        return [], []
    log_r, log_w = os.pipe()
    # Oclgrind opens its log by name (/proc/self/fd/N) as the step's user: the pipe is the
    # grader's, so others may write to it (nobody but the grader reads it).
    os.fchmod(log_w, 0o622)
    drain = _Drain(log_r)
    problems: List[str] = []
    try:
        child = start("grading.replay", [], wrapper=oclgrind_argv(f"/proc/self/fd/{log_w}", quick),
                      extra_fds=(log_w,), timeout_s=timeout_s)
    finally:
        os.close(log_w)
    try:
        for label, launch in launches:
            child.send({"launch": launch, "label": label, "quick": quick})
            answer = child.reader.message(1 << 22, child.deadline())
            problems += [f"{label}: {p}" for p in answer.get("problems", [])]
    except channel.ChannelError as err:
        problems.append(f"the check under Oclgrind stopped: {err}")
    result = child.finish()
    log = drain.text()
    os.close(log_r)
    if not result.ok and not problems:
        problems.append(f"the check under Oclgrind {result.describe()}: {result.output_tail(2000)}")
    return problems, parse(log)


def labelled(results: Sequence[Dict], names: Sequence[str]) -> List[Tuple[str, Dict]]:
    """(label, launch) for every captured launch of every case."""
    out = []
    for name, result in zip(names, results):
        for j, launch in enumerate(result.get("launches", [])):
            out.append((f"{name}, launch {j + 1} ({launch['kernel']})", launch))
    return out


def local_starter(tree: Path) -> Starter:
    """Children of this tree run here as the current user (make check)."""
    from grading import process

    def start(module: str, args: List[str], wrapper: Sequence[str] = (), extra_fds: Sequence[int] = (),
              timeout_s: float = 600):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]))
        return channel.spawn(lambda argv, fds: process.start(argv, tree, env, process.Limits(timeout_s=timeout_s),
                                                             pass_fds=fds),
                             [*wrapper, sys.executable, "-m", module, *args], extra_fds)
    return start


def _check_here() -> int:
    """make check: this tree's build, captured here and checked under Oclgrind."""
    from grading.cases import HIDDEN_TOL, reference
    from grading.oracle import mismatch

    if not shutil.which("oclgrind"):
        print("check: oclgrind is not installed (apt-get install oclgrind, or make setup as root)", file=sys.stderr)
        return 2
    start = local_starter(ROOT)
    small, layers = cases(), graded_layers()
    print(f"check: running your conv2d on {len(small)} small shapes and the {len(layers)} graded layers, "
          f"then its kernels under Oclgrind (data races, out-of-bounds accesses)...", flush=True)
    results, note = capture(start, small + layers, timeout_s=600)
    wrong = []
    for case, got in zip(small + layers, results):
        problem = got.get("error") or mismatch(got.get("y"), reference(case), *HIDDEN_TOL)
        if problem:
            wrong.append(f"- {case['name']}: {problem}")
    full = labelled(results[: len(small)], [c["name"] for c in small])
    quick = distinct_configurations([(label, launch, conv_work(case)) for case, result in zip(layers, results[len(small):])
                                     for label, launch in labelled([result], [case["name"]])])
    problems, findings = replay(start, full, quick=False, timeout_s=600)
    more, found = replay(start, quick, quick=True, timeout_s=900)
    problems, findings = problems + more, findings + found
    print(f"check: {len(full)} launches checked in full, {len(quick)} configurations of the graded layers "
          f"on their first and last work-groups")
    if findings:
        print("check: Oclgrind found problems in your kernel:\n" + describe(findings))
    if problems:
        print("check: the kernels could not be checked as they ran:\n" + "\n".join(f"- {p}" for p in problems))
    if wrong:
        print("check: wrong results:\n" + "\n".join(wrong) + (f"\n{note}" if note else ""))
    ok = not findings and not wrong and not problems
    print("check: no data races, no out-of-bounds accesses, results match torch" if ok else "check: FAILED")
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    return _check_here()


if __name__ == "__main__":
    sys.exit(main())
