"""Submissions made from the reference by small, checked edits: the ladder's honest
rungs (grading/ladder/*.toml) and the hostile submissions the grader is tested on
(grading/hostile/*.toml). A fixture states only what it changes:

    description = "What this submission does, in a sentence."
    base = "solution"        # the student files it starts from: a view of the reference
                             # (grading.regions): "reference", "solution" (the honest
                             # tiled answer) or "handout" (the untouched starting point)
    share = 0.4              # ladder rungs: the share of the performance points at its speed
    step = "cases"           # the grader step the submission is aimed at
                             # ("build", "cases", "race" or "perf"); make test runs each
                             # through that step alone (tests/test_exploits.py)

    [expected]               # hostile fixtures: the outcome the grader must give
    ...

    [[edit]]                 # exact text replaced in one student file; the text must occur
    file = "opencl-functions.cpp"          # exactly once in the base, else FixtureError
    find = '''...'''
    replace = '''...'''

    [[edit]]                 # or a whole student file taken from a project file
    file = "conv2d.cl"
    source = "grading/kernels/conv2d_naive.cl"

A fixture whose text no longer matches the reference fails loudly (FixtureError names
the fixture, the file and the first line of the missing text) instead of testing old code.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from grading.regions import view

ROOT = Path(__file__).resolve().parent.parent
STUDENT_FILES = {"opencl-functions.cpp": "opencl_functions/opencl-functions.cpp",
                 "conv2d.cl": "opencl_functions/conv2d.cl"}
BASES = ("reference", "solution", "handout")
STEPS = ("build", "cases", "race", "perf")
HOSTILE_DIR = ROOT / "grading" / "hostile"
LADDER_DIR = ROOT / "grading" / "ladder"


class FixtureError(ValueError):
    """A fixture is malformed or no longer applies to the reference."""


def base_files(base: str, root: Path = ROOT) -> Dict[str, str]:
    """The student files of the reference tree in view `base`."""
    if base not in BASES:
        raise FixtureError(f"base must be one of {BASES}, got {base!r}")
    return {name: view((root / rel).read_text(), rel, "//", base) for name, rel in STUDENT_FILES.items()}


@dataclass
class Fixture:
    name: str
    description: str
    base: str
    edits: List[Dict[str, str]]
    expected: Dict[str, object] = field(default_factory=dict)
    share: Optional[float] = None
    step: Optional[str] = None

    def files(self, root: Path = ROOT) -> Dict[str, str]:
        """The submission's two student files, as text."""
        files = base_files(self.base, root)
        for i, edit in enumerate(self.edits, 1):
            where = f"fixture {self.name}, edit {i}"
            target = edit.get("file")
            if target not in files:
                raise FixtureError(f"{where}: file must be one of {sorted(files)}, got {target!r}")
            if "source" in edit:
                files[target] = (root / edit["source"]).read_text()
                continue
            find, replace = edit.get("find"), edit.get("replace")
            if not isinstance(find, str) or not isinstance(replace, str) or not find:
                raise FixtureError(f"{where}: needs `find` and `replace` (or `source`)")
            count = files[target].count(find)
            if count != 1:
                first = find.strip().splitlines()[0]
                raise FixtureError(
                    f"{where}: the text to replace occurs {count} times in the {self.base} view of {target} "
                    f"(it must occur once; has the reference moved on?). It starts: {first!r}")
            files[target] = files[target].replace(find, replace)
        return files

    def write(self, folder: Path, root: Path = ROOT) -> Path:
        """Writes the submission folder (the two student files) and returns it."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.files(root).items():
            (folder / name).write_text(text)
        return folder


def load(path: Path) -> Fixture:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise FixtureError(f"{path}: {err}") from None
    unknown = set(data) - {"description", "base", "edit", "expected", "share", "step"}
    if unknown or "description" not in data or "base" not in data:
        raise FixtureError(f"{path}: needs `description` and `base`; unknown keys {sorted(unknown)}")
    if data.get("step") not in (None, *STEPS):
        raise FixtureError(f"{path}: step must be one of {STEPS}, got {data['step']!r}")
    return Fixture(name=path.stem, description=data["description"], base=data["base"], edits=data.get("edit", []),
                   expected=data.get("expected", {}), share=data.get("share"), step=data.get("step"))


def load_all(folder: Path) -> Dict[str, Fixture]:
    """Every fixture of a folder, by name."""
    return {p.stem: load(p) for p in sorted(folder.glob("*.toml"))}


def base_share(fixture: Fixture) -> float:
    """The share of the honest rung a hostile fixture is built on (its "at_most_base" bound)."""
    rung = {"solution": "tiled", "reference": "reference"}[fixture.base]
    return next(r.share for r in ladder() if r.name == rung)


def hostile() -> Dict[str, Fixture]:
    return load_all(HOSTILE_DIR)


def ladder() -> List[Fixture]:
    """The ladder's rungs, slowest (share 0) first."""
    rungs = list(load_all(LADDER_DIR).values())
    for rung in rungs:
        if rung.share is None or not 0.0 <= rung.share <= 1.0:
            raise FixtureError(f"ladder rung {rung.name}: needs a share between 0 and 1")
    rungs.sort(key=lambda r: r.share)
    if not rungs or rungs[0].share != 0.0 or rungs[-1].share != 1.0:
        raise FixtureError("the ladder must run from a rung of share 0 to one of share 1")
    return rungs
