"""Measured tables kept in the documents (docs/VALIDATION.md, docs/PERFORMANCE.md),
written by the scripts that measure them:

    write_section(Path("docs/VALIDATION.md"), "cpu-patched", markdown)

replaces what lies between `<!-- BEGIN TABLE cpu-patched -->` and
`<!-- END TABLE cpu-patched -->` with the table and a line naming the machine, the OpenCL
device and the date; a file without those markers gets them appended at its end.
"""
from __future__ import annotations

import datetime
import platform
import re
from pathlib import Path


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model numbers (the figures
    of one x86 model say little about another)."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    flags = fields.get("flags", "").split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    name = fields.get("model name", platform.machine())
    return f"{name} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')}{', ' + isa if isa else ''})"


def provenance(device: str = "") -> str:
    """One line: where and when a table was measured."""
    import os

    where = f"{os.cpu_count()}-core {cpu_model()}"
    return f"Measured {datetime.date.today().isoformat()} on {where}" + (f", OpenCL device {device}" if device else "") + "."


def write_section(path: Path, name: str, markdown: str, device: str = "") -> None:
    begin, end = f"<!-- BEGIN TABLE {name} -->", f"<!-- END TABLE {name} -->"
    block = f"{begin}\n{provenance(device)}\n\n{markdown.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + ("\n\n" if text else "") + block + "\n"
    path.write_text(text)
