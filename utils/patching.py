"""Reversible patching: run nn.Linear, transformers' Conv1D and nn.Conv2d on OpenCL.

    with opencl_layers():                 # or opencl_layers(linear=False)
        logits = model(tokens)

REGISTRY below is the one list of what is replaced. Entering the context swaps each
class's forward for its OpenCL twin; leaving it (also through an exception) puts the
originals back. Contexts nest: a layer kind stays patched while any open context asks
for it. Inputs the OpenCL path cannot take (float64, CUDA tensors) run through torch
with a one-time OpenCLFallbackWarning (see utils.functional).

On a CPU OpenCL device (PoCL) the OpenCL kernels and torch's own ops (batch norm, ReLU,
attention) share the cores. torch's idle OpenMP workers spin for a while after each op and
take the cores from the OpenCL threads, so inside the block torch runs its ops on
`torch_threads` threads (default 1), and the setting is restored on exit.
torch_threads=None leaves it alone; with other devices it is never changed.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional

import torch
from torch import nn

from utils import functional
from utils.conv2d_forward import conv2d_forward


def linear_forward(self: nn.Linear, input: torch.Tensor) -> torch.Tensor:
    """nn.Linear.forward on OpenCL: input (..., in_features) @ weight.t() + bias."""
    return functional.linear(input, self.weight, self.bias)


def gpt2_conv1d_forward(self, x: torch.Tensor) -> torch.Tensor:
    """transformers' Conv1D.forward on OpenCL. Its weight is (nx, nf), stored transposed
    relative to nn.Linear, so it is passed as weight.t() (a flag, not a copy)."""
    return functional.linear(x, self.weight.t(), self.bias)


@dataclass(frozen=True)
class Patch:
    kind: str  # "linear" or "conv2d": the opencl_layers() argument that enables it
    module: str  # where the class lives
    cls_name: str
    forward: Callable


REGISTRY: List[Patch] = [
    Patch("linear", "torch.nn", "Linear", linear_forward),
    Patch("linear", "transformers.pytorch_utils", "Conv1D", gpt2_conv1d_forward),
    Patch("conv2d", "torch.nn", "Conv2d", conv2d_forward),
]

_lock = threading.RLock()
_active: List[dict] = []  # one entry per open opencl_layers() context
_originals: Dict[type, Callable] = {}  # class -> its own forward, while patched
_saved_threads: Optional[int] = None  # torch's thread count before a context changed it


def _resolve(patch: Patch):
    """The class a patch targets, or None when its package is not installed."""
    try:
        return getattr(importlib.import_module(patch.module), patch.cls_name)
    except ImportError:
        return None


def _cpu_device() -> bool:
    """Whether the OpenCL device is a CPU (False when there is none to open)."""
    try:
        import opencl_functions

        return opencl_functions.device_info()["type"] == "CPU"
    except Exception:  # no driver or no device: the first OpenCL call will say why
        return False


def _apply() -> None:
    global _saved_threads
    wanted_threads = [c["torch_threads"] for c in _active if c["torch_threads"] is not None]
    if wanted_threads and _saved_threads is None and _cpu_device():
        _saved_threads = torch.get_num_threads()
    if _saved_threads is not None:
        torch.set_num_threads(min(wanted_threads) if wanted_threads else _saved_threads)
        if not wanted_threads:
            _saved_threads = None
    for patch in REGISTRY:
        wanted = any(ctx[patch.kind] for ctx in _active)
        cls = _resolve(patch) if wanted or _originals else None
        if cls is None:
            continue
        if wanted and cls not in _originals:
            _originals[cls] = cls.__dict__["forward"]
            cls.forward = patch.forward
        elif not wanted and cls in _originals:
            cls.forward = _originals.pop(cls)


def patched_classes() -> List[str]:
    """Qualified names of the classes whose forward runs on OpenCL right now."""
    with _lock:
        return sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in _originals)


@contextlib.contextmanager
def opencl_layers(linear: bool = True, conv2d: bool = True, torch_threads: Optional[int] = 1) -> Iterator[None]:
    """Route nn.Linear and transformers' Conv1D (linear=True) and nn.Conv2d (conv2d=True)
    forwards through OpenCL inside the block; restore them on exit, even on error. On a
    CPU OpenCL device torch's own ops use torch_threads threads inside the block (None:
    unchanged); see the module's notes."""
    if torch_threads is not None and (isinstance(torch_threads, bool) or not isinstance(torch_threads, int)
                                      or torch_threads < 1):
        raise ValueError(f"torch_threads must be a positive int or None, got {torch_threads!r}")
    ctx = {"linear": linear, "conv2d": conv2d, "torch_threads": torch_threads}
    with _lock:
        _active.append(ctx)
        try:
            _apply()
        except BaseException:
            _active.remove(ctx)
            _apply()
            raise
    try:
        yield
    finally:
        with _lock:
            # Remove this very context (identity), not an equal one opened elsewhere.
            del _active[next(i for i, c in enumerate(_active) if c is ctx)]
            _apply()
