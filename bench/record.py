"""The benchmarks' JSON records, which bench.report turns into docs/PERFORMANCE.md's tables.

A record is one file of rows keyed by what was measured ("device:resnet50:float32"); each row
carries the machine it was measured on (`machine()`), so that several runs (one lease per
subset, on a machine whose runs are limited in time) merge into one file: `save` writes a
row as soon as it is measured, over an older row of the same key, and keeps the others.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Dict, Optional


def machine() -> Dict[str, Optional[str]]:
    """Where and when: the OpenCL device, the host CPU, torch's version, the CUDA GPU (if
    any) and today's date."""
    import torch

    import opencl_functions
    from opencl_functions.info import host_cpu

    info = opencl_functions.device_info()
    return {
        "device": info["device"],
        "device_type": info["type"],
        "platform": info["platform"],
        "host_cpu": host_cpu(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "date": datetime.date.today().isoformat(),
    }


def load(path: Path) -> Dict[str, Dict]:
    """The rows of a record, {} where the file does not exist yet."""
    path = Path(path)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise ValueError(f"{path}: not a benchmark record (a JSON object with a 'rows' object)")
    return data["rows"]


def save(path: Path, kind: str, key: str, row: Dict) -> None:
    """Writes `row` under `key` into the record at `path` (a file of benchmark `kind`:
    models, micro), keeping its other rows; written whole to a temporary file first, so that
    a run killed midway leaves the last complete record."""
    path = Path(path)
    rows = load(path)
    rows[key] = row
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"kind": kind, "rows": rows}, indent=1))
    os.replace(tmp, path)
