"""The device's tables of registrations (docs/device/registrations.md) from a recorded op_db
run (docs/opdb.json, written by `python -m extras.validation.opdb --all --record`; `--tables`
rewrites the tables alone): the native operators (from the device's registrations too), and
the refused runs by reason (REASONS names why each exception is raised).
"""
from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Dict, List, Optional

# Apart from extras.validation.opdb, which imports this module to write the tables (no circle):
# a record's counts carry the verdicts in opdb.VERDICTS's order.
ROOT = Path(__file__).resolve().parents[2]

TABLES_DOC = ROOT / "docs" / "device" / "registrations.md"
RECORD = ROOT / "docs" / "opdb.json"
TABLE = "native-ops"
REFUSALS = "opdb-refusals"

# Why the device refuses what it refuses: (a pattern searched in "op: exception", the
# reason); the first pattern that matches names a refused run's reason, and a run no
# pattern matches is listed under its exception's own words.
REASONS: List[tuple] = [
    (r"'Sparse\w*opencl' backend", "sparse layouts (COO, CSR): the device holds dense tensors only"),
    (r"holds dense \(strided\) tensors only", "sparse layouts (COO, CSR): the device holds dense tensors only"),
    (r"^tensor_split: .*expected tensor_indices_or_sections to be on cpu",
     "torch's own rule: the split points as a tensor must be on the CPU (CUDA refuses them too)"),
    (r"^native_group_norm: .*view size is not compatible",
     "torch's composite group norm (the forward of every backend without its own kernel) views a "
     "non-contiguous input"),
]


def registrations() -> Dict[str, List[str]]:
    """The device's aten registrations grouped by operator: add -> [add.Tensor, add_.Tensor, add.out]."""
    import torch
    import torch_opencl  # noqa: F401

    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        if not name.startswith("aten::"):
            continue
        full = name[len("aten::"):]
        base = full.split(".", 1)[0]
        if not base.startswith("__"):
            base = base.rstrip("_") or base  # add_ (in-place) beside add
        groups[base].append(full)
    return {k: sorted(v) for k, v in sorted(groups.items(), key=lambda kv: kv[0].lstrip("_"))}


def render(groups: Dict[str, List[str]], record: dict) -> str:
    """The table of registrations: every registered operator, its forms, and how the recorded op_db
    run's samples that dispatched it fared."""
    c, natives = record["counts"], record["native"]
    ok = c["right"] + c["unchecked"]
    lines = [
        f"torch's OpInfo database (`python -m extras.validation.opdb --all`, {record['scope']}): {record['ops']} ops, "
        f"{sum(c.values())} float32 runs (function, in-place and `out=` forms): " + ", ".join(f"{v} {n}" for v, n in c.items())
        + f". {natives} of the {ok} right and unchecked runs ({100.0 * natives / max(ok, 1):.0f}%) ran natively, the others "
        f"partly through the CPU fallback; {record['served'][0]} ops were right in every run, {record['served'][1]} "
        "of them natively throughout. \"refused\": the device raised a clear Python exception where the CPU did "
        "not; \"unchecked\": OpInfo says the output cannot be compared (random), and its shapes and dtypes match. "
        "The last column: runs whose device call dispatched the operator, and how many of them were right or "
        "unchecked.",
        "",
        "| operator | registered forms | op_db runs reaching it (right / all) |",
        "| --- | --- | --- |",
    ]
    for base, forms in groups.items():
        reached = [record["aten"][f] for f in forms if f in record["aten"]]
        runs = f"{sum(r[0] for r in reached)} / {sum(r[1] for r in reached)}" if reached else "—"
        lines.append(f"| `{base}` | " + ", ".join(f"`{f}`" for f in forms) + f" | {runs} |")
    return "\n".join(lines)


def reason(op: str, detail: str) -> str:
    """Why a run of `op` that raised `detail` was refused (REASONS), else the exception."""
    text = f"{op}: {detail}"
    for pattern, why in REASONS:
        if re.search(pattern, text):
            return why
    return f"`{detail}`"


def render_refusals(record: dict) -> str:
    """The refused runs of the recorded op_db run, grouped by reason, most runs first."""
    groups: Dict[str, Dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
    for op, details in record.get("refusals", {}).items():
        for detail, runs in details.items():
            groups[reason(op, detail)][op] += runs
    total = sum(sum(ops.values()) for ops in groups.values())
    lines = [
        f"{total} runs of the recorded op_db run were refused (a clear Python exception where the CPU "
        "gives a result), by reason:",
        "",
        "| why | runs | ops (runs) |",
        "| --- | --- | --- |",
    ]
    for why, ops in sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        listed = ", ".join(f"`{op}` ({n})" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"| {why} | {sum(ops.values())} | {listed} |")
    return "\n".join(lines)


def table_block(name: str = TABLE) -> Optional[str]:
    """A table as TABLES_DOC holds it now, without its provenance line."""
    text = TABLES_DOC.read_text()
    found = re.search(rf"<!-- BEGIN TABLE {name} -->\n[^\n]*\n\n(.*?)\n<!-- END TABLE {name} -->", text, re.S)
    return found.group(1) if found else None


def write_tables(record: dict) -> None:
    from bench.doc_tables import write_section
    import torch
    import torch_opencl  # noqa: F401

    device = torch.opencl.get_device_name()
    write_section(TABLES_DOC, TABLE, render(registrations(), record), device=device)
    write_section(TABLES_DOC, REFUSALS, render_refusals(record), device=device)
