"""One recording of a compiled graph per signature of its arguments (replay.py's Replayed
keeps them), and what is read of the arguments before every call: their signature, where
each tensor's elements start, their version counters, and the buffers they lie in.

Also what compiled graphs did in this process (counters, unrecordable_reasons) and the
recording a thread's graph code runs under (in_progress.replayed: runtime.seeds() draws
through it).
"""
from __future__ import annotations

import collections
import threading
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .. import _C
from ..graphs import Graph

_ops = torch.ops.oclf
# The recording whose graph code this thread runs (warming up or recording): in_progress.replayed.
in_progress = threading.local()
# What compiled graphs did in this process: "plain" runs as written (first calls, graphs
# that cannot be recorded, replays off), "recorded", "replayed", "unrecordable" graphs,
# "relocated" outputs moved off a recording's memory, "rebound" recordings pointed at inputs
# in new storages, "moved" graphs recorded again for inputs found elsewhere, kernels "built".
counters: collections.Counter = collections.Counter()
# Why graphs were not recorded (the recording's exception, first line), newest last: a graph
# that waits for the device (a CPU fallback, .item()) runs as written on every call.
unrecordable_reasons: collections.deque = collections.deque(maxlen=16)


def survey(args: list, cpu_scalars: bool = False) -> tuple[Any, list[int | None], list[int | None]] | None:
    """The arguments' signature (shapes, strides, dtypes and devices of the tensors, values of
    the rest), where each tensor's elements start and each one's version counter, in one pass
    (it runs before every replay: _C.survey, with this module's Python as the fallback for
    arguments it does not know); None when a tensor is on another device than opencl, but for
    0-dim CPU tensors where `cpu_scalars` (their place is then None: they are copied in)."""
    if type(args) is list:
        found = _C.survey(args, cpu_scalars)
        if found is not NotImplemented:
            return found
    return _survey_in_python(args, cpu_scalars)


def _survey_in_python(args: list, cpu_scalars: bool) -> tuple[tuple, list[int | None], list[int | None]] | None:
    key, ptrs = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            device = a.device
            if device.type != "opencl":
                if not (cpu_scalars and device.type == "cpu" and a.dim() == 0):
                    return None
                key.append(((), (), a.dtype, "cpu"))
                ptrs.append(None)
                continue
            key.append((a.shape, a.stride(), a.dtype, device.index))
            ptrs.append(a.data_ptr())
        else:
            key.append((type(a), a))
            ptrs.append(None)
    return tuple(key), ptrs, [version(a) for a in args]


class Recording:
    """The recording of one signature: its state, the inputs it copies, its outputs."""

    def __init__(self) -> None:
        self.first_ptrs: list[int | None] | None = None
        self.first_versions: list[int | None] = []     # version counters at the first call
        self.versions: list[int | None] = []           # and when recorded
        # inputs read in place whose version had not moved by the recording: one that moves
        # after it (a parameter loaded anew) makes the graph record again
        self.watched: list[int] = []
        self.graph: Graph | None = None
        self.failed = False
        self.private: dict[int, torch.Tensor] = {}     # input index -> the recording's copy
        self.input_ptrs: list[int | None] = []         # addresses the recording read
        # input index -> locations() of the inputs read in place: what Replayed._follow checks
        # a moved one against
        self.locations: dict[int, tuple[int, int, int, bool]] = {}
        self.replays = 0                               # since it was recorded
        self.times_recorded = 0
        self.outputs: list[Any] = []                   # the recorded outputs (owning memory)
        self.output_kind: list[tuple] = []             # ("memory",) | ("input", j) | ("value",)
        self.seed_tensors: list[tuple[torch.Tensor, int, int]] = []
        self.seed_counts: list[tuple[int, int, int]] = []
        self.handed_out: list[StorageWeakRef] = []
        self.seed_cursor = 0

    # seeds(): called by the wrapper's code while this recording warms up or records
    def take_seeds(self, out: torch.Tensor, low: int, high: int) -> None:
        if self.graph is None:  # warming up: note what the graph draws
            self.seed_counts.append((out.numel(), low, high))
            out.copy_(torch.randint(low, high, tuple(out.shape), dtype=out.dtype))
            return
        tensor, _, _ = self.seed_tensors[self.seed_cursor]
        self.seed_cursor += 1
        out.copy_(tensor.view(out.shape))

    def refill_seeds(self) -> None:
        for tensor, low, high in self.seed_tensors:
            tensor.copy_(torch.randint(low, high, tuple(tensor.shape), dtype=torch.int64))



def extent(t: torch.Tensor) -> int:
    """Elements from a view's first to its last (all of them for an expanded view)."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0


def span(t: torch.Tensor) -> torch.Tensor:
    """The memory a view covers, as one row: what a private copy of an input holds."""
    return t.as_strided((extent(t),), (1,), t.storage_offset())


def ptr(a: Any) -> int | None:
    """Where an input's elements start: the same address means the same memory (None for
    other arguments and CPU tensors)."""
    return a.data_ptr() if isinstance(a, torch.Tensor) and a.device.type == "opencl" else None


def locations(tensors: list) -> list[tuple[int, int, int, bool]]:
    """(buffer, byte offset of the first element, storage bytes, buffers derived from the
    storage kept) of each opencl tensor: what a recording that reads it in place checks a
    moved one against (Replayed._follow)."""
    found = _ops.storage_locations(tensors) if tensors else []
    return [(found[3 * n], found[3 * n + 1], t.untyped_storage().nbytes(), bool(found[3 * n + 2]))
            for n, t in enumerate(tensors)]


def on_cpu(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.device.type == "cpu"


def version(a: Any) -> int | None:
    """A tensor's version counter (None for other arguments and inference tensors)."""
    if not isinstance(a, torch.Tensor) or a.is_inference():
        return None
    return a._version


def storage(a: torch.Tensor) -> int:
    return a.untyped_storage().data_ptr()

