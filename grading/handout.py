"""The student handout, made from the reference tree:

    python -m grading.handout --out build/handout      (make handout)

Copies the project's files (tracked and untracked-but-not-ignored, as git lists them),
leaving out the staff-only ones (STAFF_ONLY), and rewrites each solution region:

    // BEGIN SOLUTION        lines students write; dropped from the handout
    ...
    // END SOLUTION
    // BEGIN PROMPT          optional, right after a solution region: live code in the
    ...                      reference (it must compile there too); in the handout these
    // END PROMPT            lines replace the solution
A region without a prompt becomes one TODO comment. Marker lines are comments in the
file's language (// in C, C++ and OpenCL files, # in Python, shell and Makefiles) and
never reach the handout. Unmatched, nested or stray markers raise MarkerError naming
file:line.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List, Optional

ROOT = Path(__file__).resolve().parent.parent

# Paths (files, or folders ending in /) that stay with the staff.
STAFF_ONLY = (
    "grading/",
    "tests/test_grading.py",
    "tests/test_handout.py",
)
# Exceptions to STAFF_ONLY: parts of grading/ that students may use.
# The benchmark ships without the first tiled kernel (conv2d_v1.cl), which is a solution.
PUBLIC_IN_STAFF = (
    "grading/__init__.py",
    "grading/bench.py",
    "grading/clblast_tune.py",
    "grading/baselines.py",
    "grading/shapes.py",
    "grading/kernels/conv2d_naive.cl",
)

COMMENT_PREFIX = {
    ".cpp": "//", ".hpp": "//", ".cc": "//", ".h": "//", ".c": "//", ".cl": "//",
    ".py": "#", ".sh": "#", ".txt": "#", ".ini": "#", ".cfg": "#", ".toml": "#", ".yml": "#", ".yaml": "#",
}
COMMENT_BY_NAME = {"Makefile": "#", "Dockerfile": "#", "run_autograder": "#"}

# A marker line: optional indentation, a comment opener, the marker, then anything.
MARKER = re.compile(r"^\s*(?P<prefix>//|#)\s*(?P<kind>BEGIN|END)\s+(?P<region>SOLUTION|PROMPT)\b")
# A marker after code on the same line: an error, never silently kept.
INLINE_MARKER = re.compile(r"\S.*(//|#)\s*(BEGIN|END)\s+(SOLUTION|PROMPT)\b")


class MarkerError(ValueError):
    """A solution/prompt marker is unmatched, nested or out of place; the message names file:line."""


def comment_prefix(path: Path) -> Optional[str]:
    """The line-comment opener of the file's language, or None for files without regions."""
    return COMMENT_BY_NAME.get(path.name) or COMMENT_PREFIX.get(path.suffix)


def strip_regions(text: str, where: str, prefix: str) -> str:
    """The handout version of one file's text. `where` names the file in errors."""
    lines = text.splitlines(keepends=True)
    out: List[str] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            if INLINE_MARKER.search(lines[i]):
                raise MarkerError(f"{where}:{i + 1}: a marker must stand alone on its comment line")
            out.append(lines[i])
            i += 1
            continue
        if m["prefix"] != prefix:
            raise MarkerError(f"{where}:{i + 1}: marker uses {m['prefix']!r}, this file's comments use {prefix!r}")
        if (m["kind"], m["region"]) != ("BEGIN", "SOLUTION"):
            raise MarkerError(f"{where}:{i + 1}: {m['kind']} {m['region']} without an open BEGIN SOLUTION before it")
        begin = i
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        end = _find_end(lines, begin, "SOLUTION", where)
        # A prompt region may follow, after blank lines only.
        j = end + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        nxt = MARKER.match(lines[j]) if j < len(lines) else None
        if nxt and (nxt["kind"], nxt["region"]) == ("BEGIN", "PROMPT"):
            prompt_end = _find_end(lines, j, "PROMPT", where)
            out.extend(lines[j + 1 : prompt_end])
            i = prompt_end + 1
        else:
            out.append(f"{indent}{prefix} TODO: write this part.\n")
            i = end + 1
    return "".join(out)


def _find_end(lines: List[str], begin: int, region: str, where: str) -> int:
    """Index of the END line closing the region opened at `begin`; nothing may nest."""
    for k in range(begin + 1, len(lines)):
        m = MARKER.match(lines[k])
        if not m:
            continue
        if (m["kind"], m["region"]) == ("END", region):
            return k
        raise MarkerError(
            f"{where}:{k + 1}: {m['kind']} {m['region']} inside the {region} region opened at {where}:{begin + 1}"
        )
    raise MarkerError(f"{where}:{begin + 1}: BEGIN {region} is never closed by END {region}")


def check_no_markers(text: str, where: str) -> None:
    """Raises MarkerError if any marker line is left in a handout file."""
    for n, line in enumerate(text.splitlines(), 1):
        if MARKER.match(line):
            raise MarkerError(f"{where}:{n}: marker left in the handout")


def project_files(root: Path = ROOT) -> List[str]:
    """Tracked files plus untracked ones git does not ignore, relative to root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root, check=True, capture_output=True,
    ).stdout.decode()
    return sorted(p for p in set(listed.split("\0")) if p and (root / p).is_file())


def is_staff_only(rel: str) -> bool:
    if rel in PUBLIC_IN_STAFF:
        return False
    return any(rel == s or (s.endswith("/") and rel.startswith(s)) for s in STAFF_ONLY)


def make_handout(out: Path, root: Path = ROOT, files: Optional[Iterable[str]] = None) -> List[str]:
    """Writes the handout tree to `out` (replaced if it exists); returns the files written."""
    files = [f for f in (project_files(root) if files is None else files) if not is_staff_only(f)]
    # Transform everything first, so a bad marker leaves no half-written tree.
    contents = {}
    for rel in files:
        src = root / rel
        data = src.read_bytes()
        try:
            text = data.decode()
        except UnicodeDecodeError:
            contents[rel] = data
            continue
        prefix = comment_prefix(src)
        if prefix:
            text = strip_regions(text, rel, prefix)
        check_no_markers(text, rel)
        contents[rel] = text.encode()
    if out.exists():
        shutil.rmtree(out)
    for rel, data in contents.items():
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        shutil.copymode(root / rel, dst)
    return sorted(contents)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "handout", help="output folder (replaced)")
    args = parser.parse_args(argv)
    try:
        written = make_handout(args.out)
    except MarkerError as err:
        print(f"handout: {err}", file=sys.stderr)
        return 1
    print(f"handout: {len(written)} files in {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
