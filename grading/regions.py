"""Solution regions in the reference files, and the views of a file they define.

Markers are comment lines in the file's language (// in C, C++ and OpenCL, # in Python,
shell and Makefiles, <!-- ... --> in Markdown), alone on their line:

    // BEGIN SOLUTION        what students write
    ...
    // END SOLUTION
    // BEGIN PROMPT          optional, right after a solution region (blank lines between
    ...                      are allowed): what students get instead, live code in the
    // END PROMPT            reference that must compile there too
    // BEGIN STAFF           staff-only code (the fast kernels): it vanishes from every
    ...                      student view and leaves nothing behind; it may stand alone or
    // END STAFF             inside a solution region

Views:
- "handout": what students start from; a solution region becomes its prompt, or one TODO
  line when it has none; staff regions vanish.
- "solution": the honest answer to the assignment (the reference without its staff-only
  code): solution regions kept, prompts and staff regions dropped. The grader's ladder
  and fixtures are built from it.
- "reference": the file as it is, markers included.

Unmatched, nested (other than STAFF in SOLUTION) or stray markers raise MarkerError naming
file:line.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

COMMENT_PREFIX = {
    ".cpp": "//", ".hpp": "//", ".cc": "//", ".h": "//", ".c": "//", ".cl": "//",
    ".md": "<!--", ".py": "#", ".sh": "#", ".txt": "#", ".ini": "#", ".cfg": "#", ".toml": "#", ".yml": "#",
    ".yaml": "#",
}
COMMENT_BY_NAME = {"Makefile": "#", "Dockerfile": "#", "run_autograder": "#"}

# A marker line: optional indentation, a comment opener, the marker, then anything.
MARKER = re.compile(r"^\s*(?P<prefix>//|#|<!--)\s*(?P<kind>BEGIN|END)\s+(?P<region>SOLUTION|PROMPT|STAFF)\b")
# A marker after code on the same line: an error, never silently kept.
INLINE_MARKER = re.compile(r"\S.*(//|#|<!--)\s*(BEGIN|END)\s+(SOLUTION|PROMPT|STAFF)\b")
TODO = "TODO: write this part."
VIEWS = ("handout", "solution", "reference")


class MarkerError(ValueError):
    """A marker is unmatched, nested or out of place; the message names file:line."""


def comment_prefix(path: Path) -> Optional[str]:
    """The line-comment opener of the file's language, or None for files without regions."""
    return COMMENT_BY_NAME.get(path.name) or COMMENT_PREFIX.get(path.suffix)


class _Parser:
    """Walks one file's lines once and writes the chosen view."""

    def __init__(self, text: str, where: str, prefix: str, view: str) -> None:
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
        self.lines = text.splitlines(keepends=True)
        self.where, self.prefix, self.view = where, prefix, view
        self.out: List[str] = []

    def marker(self, i: int):
        m = MARKER.match(self.lines[i])
        if m and m["prefix"] != self.prefix:
            raise MarkerError(f"{self.where}:{i + 1}: marker uses {m['prefix']!r}, "
                              f"this file's comments use {self.prefix!r}")
        if not m and INLINE_MARKER.search(self.lines[i]):
            raise MarkerError(f"{self.where}:{i + 1}: a marker must stand alone on its comment line")
        return m

    def run(self) -> str:
        i = 0
        while i < len(self.lines):
            m = self.marker(i)
            if not m:
                self.out.append(self.lines[i])
                i += 1
            elif (m["kind"], m["region"]) == ("BEGIN", "STAFF"):
                i = self.staff(i)
            elif (m["kind"], m["region"]) == ("BEGIN", "SOLUTION"):
                i = self.solution(i)
            else:
                raise MarkerError(f"{self.where}:{i + 1}: {m['kind']} {m['region']} without an open "
                                  f"BEGIN {'SOLUTION' if m['region'] == 'PROMPT' else m['region']} before it")
        return "".join(self.out)

    def find_end(self, begin: int, region: str, allow_staff: bool = False) -> int:
        """Index of the END line closing `region` opened at `begin`; only STAFF may nest,
        and only where allowed."""
        k = begin + 1
        while k < len(self.lines):
            m = self.marker(k)
            if m and (m["kind"], m["region"]) == ("END", region):
                return k
            if m and allow_staff and (m["kind"], m["region"]) == ("BEGIN", "STAFF"):
                k = self.find_end(k, "STAFF") + 1
                continue
            if m:
                raise MarkerError(f"{self.where}:{k + 1}: {m['kind']} {m['region']} inside the {region} region "
                                  f"opened at {self.where}:{begin + 1}")
            k += 1
        raise MarkerError(f"{self.where}:{begin + 1}: BEGIN {region} is never closed by END {region}")

    def staff(self, begin: int) -> int:
        end = self.find_end(begin, "STAFF")
        if self.view == "reference":
            self.out.extend(self.lines[begin : end + 1])
            return end + 1
        # Vanish without a trace: no run of blank lines where the region was.
        end += 1
        if not self.out or not self.out[-1].strip():
            while end < len(self.lines) and not self.lines[end].strip():
                end += 1
        return end

    def solution(self, begin: int) -> int:
        end = self.find_end(begin, "SOLUTION", allow_staff=True)
        j = end + 1  # a prompt may follow, after blank lines only
        while j < len(self.lines) and not self.lines[j].strip():
            j += 1
        nxt = self.marker(j) if j < len(self.lines) else None
        has_prompt = nxt is not None and (nxt["kind"], nxt["region"]) == ("BEGIN", "PROMPT")
        prompt = (j, self.find_end(j, "PROMPT")) if has_prompt else None
        if self.view == "reference":
            self.out.extend(self.lines[begin : (prompt[1] if prompt else end) + 1])
        elif self.view == "solution":
            self.out.extend(_Parser("".join(self.lines[begin + 1 : end]), self.where, self.prefix, "solution").run())
        elif prompt:
            self.out.extend(self.lines[prompt[0] + 1 : prompt[1]])
        else:
            indent = self.lines[begin][: len(self.lines[begin]) - len(self.lines[begin].lstrip())]
            self.out.append(f"{indent}{self.prefix} {TODO}\n")
        return (prompt[1] if prompt else end) + 1


def view(text: str, where: str, prefix: str, which: str) -> str:
    """One file's text in view `which` ("handout", "solution" or "reference"). `where`
    names the file in errors. Line numbers in errors are those of the whole file, except
    for regions nested in a solution region in the "solution" view."""
    out = _Parser(text, where, prefix, which).run()
    # A dropped region at the end of the file leaves no trailing blank lines.
    return out.rstrip("\n") + "\n" if which != "reference" and out.endswith("\n\n") else out


def strip_regions(text: str, where: str, prefix: str) -> str:
    """The handout view of one file's text."""
    return view(text, where, prefix, "handout")


def check_no_markers(text: str, where: str) -> None:
    """Raises MarkerError if any marker line is left in a student-facing file."""
    for n, line in enumerate(text.splitlines(), 1):
        if MARKER.match(line):
            raise MarkerError(f"{where}:{n}: marker left in the handout")
