"""What a grading reports: its tests (Gradescope's format), notes, the leaderboard, the
results.json it writes in every case, and the summary printed at the end.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List

# Points (100): correctness 70 (tests.py cases 10, hidden random conv2d 20 and matmul 15,
# models 20, the race and memory check 5), performance 30.
POINTS = {"public": 10, "hidden_conv2d": 20, "hidden_matmul": 15, "resnet": 10, "gpt2": 10, "races": 5, "perf": 30}


@dataclass
class Test:
    name: str
    max_score: float
    score: float = 0.0
    status: str = "failed"
    output: str = ""
    visibility: str = "visible"

    def set(self, passed: int, total: int, output: str) -> None:
        self.score = round(self.max_score * passed / total, 2) if total else 0.0
        self.status = "passed" if total and passed == total else "failed"
        self.output = output


@dataclass
class Report:
    tests: List[Test] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    leaderboard: List[Dict] = field(default_factory=list)

    def add(self, name: str, key_or_max) -> Test:
        test = Test(name, POINTS[key_or_max] if isinstance(key_or_max, str) else key_or_max)
        self.tests.append(test)
        return test

    def find(self, prefix: str) -> List[Test]:
        return [t for t in self.tests if t.name.startswith(prefix)]

    def results(self, execution_time: float) -> Dict:
        score = round(sum(t.score for t in self.tests), 2)
        total = sum(t.max_score for t in self.tests)
        rows = "\n".join(f"| {t.name} | {t.score:g} / {t.max_score:g} | {t.status} |" for t in self.tests)
        notes = "".join(f"\n- {n}" for n in self.notes)
        output = (f"**Score: {score:g} / {total:g}**\n\n| Test | Points | Status |\n|---|---|---|\n{rows}\n"
                  f"{notes}\n")
        return {
            "score": score,
            "execution_time": round(execution_time, 1),
            "output": output,
            "output_format": "md",
            "test_output_format": "md",
            "visibility": "visible",
            "tests": [asdict(t) for t in self.tests],
            "leaderboard": self.leaderboard,
        }

    def write(self, path: Path, execution_time: float) -> Dict:
        """Writes results.json atomically; returns what it wrote."""
        results = self.results(execution_time)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(results, indent=2))
        os.replace(tmp, path)
        return results

    def summary(self, results: Dict, path: Path) -> str:
        """The lines printed at the end of a grading."""
        width = max(len(t.name) for t in self.tests)
        lines = [""]
        for t in self.tests:
            mark = "PASS" if t.status == "passed" else "FAIL"
            lines.append(f"  {mark}  {t.name:<{width}}  {t.score:6.2f} / {t.max_score:g}")
        total = sum(t.max_score for t in self.tests)
        lines += ["", f"  score {results['score']:g} / {total:g} in {results['execution_time']:.0f} s",
                  f"  results: {path}"]
        return "\n".join(lines)
