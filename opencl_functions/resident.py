"""Resident parameters: device copies of nn.Parameter tensors (weights, biases) kept
between calls, keyed by the tensor, its data pointer, its version counter and the device
(the current one when the copy was made), and freed with the tensor.
"""
from __future__ import annotations

import weakref
from typing import Dict, Optional

import torch

from . import _core


class _Resident:
    """The device copy of one parameter: its handle and what it was copied from."""

    __slots__ = ("handle", "device", "version", "data_ptr", "shape", "__weakref__")

    def __init__(self):
        self.handle = 0
        self.device = -1


# id(tensor) -> its device copy; a finalizer on the tensor removes the entry (tensors
# compare elementwise, so a WeakKeyDictionary cannot hold them).
_residents: Dict[int, _Resident] = {}


def _release(entry: _Resident) -> None:
    if entry.handle:
        _core.resident_release(entry.handle, entry.device)
        entry.handle = 0


def _forget(key: int, entry: _Resident) -> None:
    _release(entry)
    if _residents.get(key) is entry:
        del _residents[key]


def resident_handle(t: Optional[torch.Tensor]) -> int:
    """The handle of a device copy of parameter t that stays between calls (0: none).

    Only nn.Parameter tensors are kept, contiguous ones. The copy is keyed by the tensor,
    its data pointer and its version counter: an in-place change (an optimizer step)
    bumps the version and the next call uploads again. The copy is freed when the
    tensor is garbage collected. Changes that bypass the version counter (writing
    through .data or a NumPy view) are not seen: call release_resident(t) after them."""
    if not isinstance(t, torch.nn.Parameter) or not t.is_contiguous() or t.numel() == 0:
        return 0
    entry = _residents.get(id(t))
    device = _core.current_device()
    key = (device, t._version, t.data_ptr(), tuple(t.shape))
    if entry is not None and entry.handle and (entry.device, entry.version, entry.data_ptr, entry.shape) == key:
        return entry.handle
    if entry is None:
        entry = _Resident()
        _residents[id(t)] = entry
        weakref.finalize(t, _forget, id(t), entry).atexit = False
    _release(entry)
    entry.handle = _core.resident_upload(t.detach().reshape(-1).numpy())
    entry.device, entry.version, entry.data_ptr, entry.shape = key
    return entry.handle


def release_resident(t: torch.Tensor) -> None:
    """Frees t's device copy now (the next call uploads it again)."""
    entry = _residents.get(id(t))
    if entry is not None:
        _release(entry)


def resident_bytes() -> int:
    """Device bytes held by resident parameters (and their packed forms)."""
    return _core.resident_bytes()
