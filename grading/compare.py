"""Reading a child's results safely (no links, a size limit, weights-only), and checking
that it left its inputs alone. Used by the grader and by make check; the comparison with
torch itself is grading.oracle.mismatch.
"""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Dict, Optional

import torch


def read_result(path: Path, max_bytes: int) -> Dict:
    """A child's result file, read without following links, within max_bytes, weights-only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {"error": "no result (the step ended before this case finished)"}
    except OSError as err:
        return {"error": f"unreadable result ({err.strerror})"}
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return {"error": "result is not a plain file"}
        if info.st_size > max_bytes:
            return {"error": f"result is {info.st_size} bytes, more than the {max_bytes} allowed"}
        data = f.read(max_bytes + 1)
    try:
        result = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:
        return {"error": f"unreadable result ({type(err).__name__})"}
    return result if isinstance(result, dict) else {"error": "result is not a dict"}


def tensor_bytes(obj: object) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def changed_inputs(case: Dict, after: object) -> Optional[str]:
    """What the child saw of its inputs after the call: changing them is a failure of its
    own (the reference was computed from the grader's untouched copy either way)."""
    for key, value in (after.items() if isinstance(after, dict) else ()):
        original = case.get(key)
        unchanged = isinstance(value, torch.Tensor) and torch.equal(value, original)
        if isinstance(original, torch.Tensor) and not unchanged:
            return f"changed its input {key} in place (inputs are read-only)"
    return None
