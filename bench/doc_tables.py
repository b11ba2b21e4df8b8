"""Measured tables kept in the documents (docs/VALIDATION.md, docs/PERFORMANCE.md),
written by the scripts that measure them:

    write_section(Path("docs/VALIDATION.md"), "cpu-patched", markdown)

replaces what lies between `<!-- BEGIN TABLE cpu-patched -->` and
`<!-- END TABLE cpu-patched -->` with the table and a line naming the machine, the OpenCL
device and the date (or the line given as `where`, for tables drawn from a recorded run:
bench.report); a file without those markers gets them appended at its end.
"""
from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Optional


def provenance(device: str = "") -> str:
    """One line: where and when a table was measured."""
    from opencl_functions.info import host_cpu

    where = host_cpu() + (f", OpenCL device {device}" if device else "")
    return f"Measured {datetime.date.today().isoformat()} on {where}."


def write_section(path: Path, name: str, markdown: str, device: str = "", where: Optional[str] = None) -> None:
    begin, end = f"<!-- BEGIN TABLE {name} -->", f"<!-- END TABLE {name} -->"
    block = f"{begin}\n{provenance(device) if where is None else where}\n\n{markdown.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + ("\n\n" if text else "") + block + "\n"
    path.write_text(text)
