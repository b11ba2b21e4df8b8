"""The Gradescope autograder package:

    python -m grading.autograder --out build/autograder.zip      (make autograder)

The zip holds the reference tree (the project's files, less tests and the hostile
submissions) with grading/autograder/setup.sh and run_autograder copied to its root,
where Gradescope looks for them. Gradescope unzips it into /autograder/source.
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path
from typing import List, Optional

from grading.handout import ROOT, project_files

LEFT_OUT = ("grading/hostile/", "tests/", ".ci/")
AT_ROOT = ("grading/autograder/setup.sh", "grading/autograder/run_autograder")


def package_files(root: Path = ROOT) -> List[str]:
    return [f for f in project_files(root) if not f.startswith(LEFT_OUT)]


def make_zip(out: Path, root: Path = ROOT) -> List[str]:
    """Writes the zip; returns the names inside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    entries = [(rel, rel) for rel in package_files(root)] + [(rel, Path(rel).name) for rel in AT_ROOT]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, name in entries:
            src = root / rel
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (src.stat().st_mode & 0o777 | 0o100000) << 16
            zf.writestr(info, src.read_bytes())
    return [name for _, name in entries]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "autograder.zip")
    args = parser.parse_args(argv)
    names = make_zip(args.out)
    print(f"autograder: {len(names)} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
