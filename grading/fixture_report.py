"""Grades every hostile submission (grading/hostile/*.toml) and the ladder's honest rungs,
and prints what each scored against what its fixture expects, as a Markdown table:

    python -m grading.fixture_report [--only NAME ...] [--ref-cache DIR]

For staff after a change to the grader: the tests check the same outcomes one by one; this
shows them side by side with their times (each grading runs as Gradescope runs it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from grading import fixtures
from grading.workspace import ROOT, Options

# How far an honest rung's share may land from its nominal one (the bound).
RUNG_SLACK = 0.05


def grade(fixture: fixtures.Fixture, ref_cache: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"fixture-{fixture.name}-") as tmp:
        submission = fixture.write(Path(tmp) / "submission")
        results = Path(tmp) / "results.json"
        start = time.monotonic()
        # The reference's fast paths live in staff-only files: it is graded with them.
        staff = ["--staff-files"] if fixture.base == "reference" else []
        subprocess.run([sys.executable, "-m", "grading.grade", "--submission", str(submission), "--results",
                        str(results), "--ref-cache", str(ref_cache), "--quiet", *staff], cwd=ROOT, check=True,
                       timeout=1800)
        data = json.loads(results.read_text())
        data["wall_s"] = time.monotonic() - start
        return data


def row(fixture: fixtures.Fixture, results: dict) -> str:
    perf = next(t for t in results["tests"] if t["name"].startswith("Performance"))
    correctness = results["score"] - perf["score"]
    expected = fixture.expected
    want = f"{expected['score']:g} + perf {expected['perf']}" if expected else f"perf share {fixture.share:.0%}"
    mark = "✓" if as_expected(fixture, correctness, perf["score"] / perf["max_score"]) else "✗"
    return (f"| {fixture.name} | {correctness:g} | {perf['score']:g} ({perf['score'] / perf['max_score']:.0%}) | "
            f"{want} | {mark} | {results['wall_s']:.0f} s |")


def as_expected(fixture: fixtures.Fixture, correctness: float, share: float) -> bool:
    """A rung within RUNG_SLACK of its share; a hostile submission with its correctness
    score and its performance rule (no more than its base's rung, with the same slack)."""
    if not fixture.expected:
        return correctness == 70 and abs(share - fixture.share) <= RUNG_SLACK
    rule = fixture.expected["perf"]
    if abs(correctness - fixture.expected["score"]) > 0.01:
        return False
    if rule == "none":
        return share == 0
    if rule == "some":
        return share > 0
    return share <= fixtures.base_share(fixture) + RUNG_SLACK


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="fixture names (default: every rung and hostile submission)")
    parser.add_argument("--ref-cache", type=Path, default=Options().ref_cache)
    args = parser.parse_args(argv)
    every = {r.name: r for r in fixtures.ladder()} | fixtures.hostile()
    names = args.only or list(every)
    print("| submission | correctness /70 | performance /30 | expected | as expected | grading time |\n"
          "|---|---|---|---|---|---|")
    for name in names:
        print(row(every[name], grade(every[name], args.ref_cache)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
