"""Comparing a child's results with torch's: the tolerance rule, reading result files
safely (no links, a size limit, weights-only), and inputs changed in place. Used by the
grader and by make check.
"""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Dict, Optional

import torch


def compare(out: object, ref: torch.Tensor, atol: float, rtol: float) -> Optional[str]:
    """None when out matches ref within atol + rtol·|ref|, else what is wrong, in words."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.dtype != torch.float32 or tuple(out.shape) != tuple(ref.shape):
        return f"returned {out.dtype} {tuple(out.shape)}, expected float32 {tuple(ref.shape)}"
    bad = ~((out - ref).abs() <= atol + rtol * ref.abs())  # NaN counts as bad
    if not bad.any():
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    unwritten = int(out.isnan().sum())
    text = (f"{int(bad.sum())} of {ref.numel()} values differ from torch (atol={atol:.1e}, rtol={rtol:.1e}); "
            f"first at {first}: got {out[first].item():.6g}, expected {ref[first].item():.6g}")
    if unwritten:
        text += f"; {unwritten} outputs were never written (still NaN)"
    return text


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
        if isinstance(original, torch.Tensor) and not (isinstance(value, torch.Tensor) and torch.equal(value, original)):
            return f"changed its input {key} in place (inputs are read-only)"
    return None
