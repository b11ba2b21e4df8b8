"""torch's device-generic suites on the opencl device (tests/torch_suites): runs them, counts the
verdicts per family and check, and writes the table into docs/TORCH_SUITES.md.

    python -m extras.validation.torch_suites                  the pinned fast subset (make test's)
    python -m extras.validation.torch_suites --scope full     every entry of op_db, module_db, optim_db
    python -m extras.validation.torch_suites --scope full --files test_optim.py,test_modules.py
    python -m extras.validation.torch_suites --table LOG,LOG  count logs already written (a test's last
                                                              verdict counts); no run

The tests run under pytest-xdist (--jobs workers: a crash takes one worker, xdist starts
another); each writes its verdict to a JSON-lines log (tests/torch_suites/conftest.py). A test
xdist reports failed that wrote none crashed its worker. The verdicts:

    passed, wrong answer (must be 0), missing (an operator, dtype or feature the device lacks:
    it raised where the CPU gave a result), not applicable, skipped (torch's own skips on the
    database entry), crashed, error (a fault of the driver: never expected)
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "tests" / "torch_suites"
DOC = ROOT / "docs" / "TORCH_SUITES.md"
VERDICTS = ("passed", "wrong answer", "missing", "not applicable", "skipped", "crashed", "error")
FAMILIES = {  # test class (without the device suffix) -> the family's name in the table
    "TestCommon": "TestCommon (op_db)",
    "TestModule": "TestModule (module_db)",
    "TestOptim": "TestOptim (optim_db)",
    "TestInductorOpInfo": "compiled op_db samples (Inductor's OpInfo checks)",
}


def check_of(test: str) -> str:
    """test_reference_inputs_add_opencl_float32 -> test_reference_inputs (the check's name)."""
    known = ("test_reference_inputs", "test_out", "test_noncontiguous_samples", "test_variant_consistency_eager",
             "test_errors", "test_dtypes", "test_forward", "test_cpu_gpu_parity", "test_non_contiguous_tensors",
             "test_memory_format", "test_pickle", "test_factory_kwargs", "test_forloop_matches_cpu",
             "test_foreach_matches_cpu", "test_comprehensive")
    return next((k for k in sorted(known, key=len, reverse=True) if test.startswith(k + "_")), test)


def family_of(cls: str) -> str:
    base = re.sub(r"(PRIVATEUSE1|OPENCL)$", "", cls)
    return FAMILIES.get(base, base)


def read(log: Path, junit: Optional[Path] = None) -> List[dict]:
    """The log's verdicts, plus a "crashed" row for each test junit reports failed that wrote none."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    if junit is not None and junit.exists():
        seen = {r["test"] for r in rows}
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            name = case.get("name", "")
            failed = case.find("failure") is not None or case.find("error") is not None
            if failed and name not in seen:
                message = next((e.get("message", "") for e in case if e.tag in ("failure", "error")), "")
                rows.append({"test": name, "cls": case.get("classname", "").rsplit(".", 1)[-1], "verdict": "crashed",
                             "detail": message[:300], "fallback": [], "seconds": 0})
    return rows


def counts(rows: List[dict]) -> Dict[str, Dict[str, collections.Counter]]:
    """family -> check -> Counter of verdicts."""
    table: Dict[str, Dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    for r in rows:
        table[family_of(r["cls"])][check_of(r["test"])][r["verdict"]] += 1
    return table


def render(rows: List[dict], scope: str, seconds: float) -> str:
    table = counts(rows)
    head = "| family / check | " + " | ".join(VERDICTS) + " |"
    lines = [f"Scope: {scope}; {len(rows)} tests in {seconds / 60:.0f} min.", "", head,
             "|" + " --- |" * (len(VERDICTS) + 1)]
    for family, checks in table.items():
        total = sum(checks.values(), collections.Counter())
        lines.append(f"| **{family}** | " + " | ".join(f"**{total[v]}**" for v in VERDICTS) + " |")
        for name, c in sorted(checks.items()):
            lines.append(f"| &nbsp;&nbsp;{name} | " + " | ".join(str(c[v]) for v in VERDICTS) + " |")
    wrong = [r for r in rows if r["verdict"] in ("wrong answer", "crashed", "error")]
    lines += ["", f"Wrong answers, crashes and driver errors ({len(wrong)}):", ""]
    lines += [f"- `{r['test']}` ({r['verdict']}): {r['detail'][:300]}" for r in sorted(wrong, key=lambda r: r["test"])]
    missing = collections.Counter(_reason(r["detail"]) for r in rows if r["verdict"] == "missing")
    lines += ["", f"Missing operators and features, by the device's message ({sum(missing.values())} tests):", "",
              "| tests | message |", "| --- | --- |"]
    lines += [f"| {n} | `{why}` |" for why, n in missing.most_common(40)]
    fell = collections.Counter(op for r in rows for op in r.get("fallback", []))
    lines += ["", f"Operators that ran through the CPU fallback ({len(fell)}), with the tests that reached them: " +
              ", ".join(f"`{op}` {n}" for op, n in fell.most_common())]
    return "\n".join(lines)


def _reason(detail: str) -> str:
    """A refusal's message without the sample that raised it and its sizes."""
    text = detail.split("first: ", 1)[-1].split(" | ")[0]
    text = re.sub(r"^(sample \d+( \w+)?|[\w ]+ \{.*?\}|\w[\w &-]*): ", "", text)
    return re.sub(r"\d+", "N", text)[:160]


def run(scope: str, jobs: int, files: List[str], log: Path, junit: Path, select: str = "") -> float:
    for path in (log, junit):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    env = dict(os.environ, OCLF_TORCH_SUITES=scope, OCLF_TORCH_SUITES_LOG=str(log))
    targets = [str(SUITES / f) for f in files] if files else [str(SUITES)]
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider", "--tb=no", "-rN",
               f"--junitxml={junit}", "-o", "addopts=", "--timeout=1800"]
    if select:
        command += ["-k", select]
    if jobs > 1:
        command += ["-n", str(jobs)]
    start = time.monotonic()
    subprocess.run(command, cwd=ROOT, env=env)
    return time.monotonic() - start


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extras.validation.torch_suites",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--scope", choices=("fast", "full"), default="fast")
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--files", default="", help="comma-separated files of tests/torch_suites (default: all)")
    parser.add_argument("-k", dest="select", default="", help="pytest's -k: the tests whose names match")
    parser.add_argument("--out", default=str(ROOT / "out" / "torch_suites"), help="folder of the log and junit")
    parser.add_argument("--table", help="count these logs (comma-separated; junit.xml beside each); no run")
    parser.add_argument("--doc", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)

    if args.table:
        # Several logs (runs of parts): a test's last verdict counts.
        latest: Dict[str, dict] = {}
        for name in args.table.split(","):
            log = Path(name)
            for r in read(log, log.with_name("junit.xml")):
                latest[r["test"]] = r
        rows = list(latest.values())
        seconds = sum(r["seconds"] for r in rows)
    else:
        log, junit = Path(args.out) / f"{args.scope}.jsonl", Path(args.out) / "junit.xml"
        seconds = run(args.scope, args.jobs, [f for f in args.files.split(",") if f], log, junit, args.select)
        rows = read(log, junit)
    files = f" ({args.files})" if args.files else ""
    files += f" (-k {args.select})" if args.select else ""
    scope = ("the pinned fast subset (make test)" if args.scope == "fast" else "the whole databases") + files
    text = render(rows, scope, seconds)
    print(text)
    if args.doc:
        from bench.doc_tables import write_section
        import torch
        import torch_opencl  # noqa: F401

        write_section(DOC, f"torch-suites-{args.scope}", text, device=torch.opencl.get_device_name())
    return 1 if any(r["verdict"] in ("wrong answer", "crashed", "error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
