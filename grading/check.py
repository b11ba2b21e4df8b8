"""The race and memory check: the student's conv2d (host code and kernel) runs on a few
small, awkward shapes under Oclgrind, an OpenCL device simulator that reports data races,
out-of-bounds accesses and reads of write-only buffers with the kernel, the source line
and the work-items involved.

    python -m grading.check          (make check: the allowed-calls check, then this)

The grader runs the same check as a visible test, in its sandbox. Oclgrind simulates
every work-item, so the shapes are small: odd sizes, strides, dilation, groups, a batch.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

ROOT = Path(__file__).resolve().parent.parent
LOG_NAME = "oclgrind.log"
MAX_ERRORS = 32
# What Oclgrind reports that fails the check (its warnings about performance do not).
PROBLEM = re.compile(r"data race|invalid (read|write)|out of bounds|write-only|read-only|uninitiali[sz]ed|"
                     r"divergence|misaligned|invalid (memory|access)|OpenCL error", re.IGNORECASE)


def cases() -> List[Dict]:
    """The shapes checked: (B, C_in, H, W) already padded, weight, stride, dilation, groups."""
    from grading.cases import _conv_case

    gen = torch.Generator().manual_seed(160)
    specs = [  # name, batch, c_in, h, w, c_out, k_h, k_w, stride, dilation, groups, bias
        ("strided and dilated", 1, 5, 9, 9, 3, 3, 3, (2, 2), (2, 2), 1, True),
        ("grouped, batch 2, uneven stride", 2, 6, 8, 7, 4, 3, 2, (1, 2), (1, 1), 2, False),
        ("1x1 over 17 channels", 1, 17, 5, 6, 19, 1, 1, (1, 1), (1, 1), 1, True),
        ("depthwise", 1, 4, 7, 7, 4, 3, 3, (1, 1), (1, 1), 4, True),
    ]
    return [_conv_case(spec[0], gen, *spec[1:10], groups=spec[10], bias=spec[11]) for spec in specs]


def oclgrind_argv(log: Path) -> List[str]:
    return ["oclgrind", "--data-races", "--check-api", "--max-errors", str(MAX_ERRORS), "--log", str(log)]


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


def _check_here() -> int:
    """make check: runs the cases of this tree's build under Oclgrind, here, unsandboxed."""
    from grading.compare import read_result
    from utils.testing import mismatch
    from grading.cases import HIDDEN_TOL, reference

    if not shutil.which("oclgrind"):
        print("check: oclgrind is not installed (apt-get install oclgrind, or make setup as root)", file=sys.stderr)
        return 2
    todo = cases()
    with tempfile.TemporaryDirectory(prefix="oclf-check-") as tmp:
        inputs, out, log = Path(tmp) / "inputs.pt", Path(tmp) / "out", Path(tmp) / LOG_NAME
        out.mkdir()
        torch.save({"cases": todo}, inputs)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        print(f"check: {len(todo)} small conv2d cases under Oclgrind (data races, out-of-bounds accesses)...",
              flush=True)
        proc = subprocess.run(oclgrind_argv(log) + [sys.executable, "-m", "grading.child", "cases", str(inputs),
                                                    str(out)], cwd=ROOT, env=env, timeout=600)
        findings = parse(log.read_text(errors="replace") if log.exists() else "")
        wrong = []
        for i, case in enumerate(todo):
            got = read_result(out / f"{i:03d}.pt", 1 << 26)
            problem = got.get("error") or mismatch(got.get("y"), reference(case), *HIDDEN_TOL)
            if problem:
                wrong.append(f"- case {i} ({case['name']}): {problem}")
    if findings:
        print("check: Oclgrind found problems in your kernel or host code:\n" + describe(findings))
    if wrong:
        print("check: wrong results under Oclgrind:\n" + "\n".join(wrong))
    if proc.returncode and not (findings or wrong):
        print(f"check: the run under Oclgrind exited with status {proc.returncode}")
    ok = not findings and not wrong and proc.returncode == 0
    print("check: no data races, no out-of-bounds accesses, results match torch" if ok else "check: FAILED")
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    return _check_here()


if __name__ == "__main__":
    sys.exit(main())
