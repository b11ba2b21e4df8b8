"""What a compiled graph's module calls at run time (the wrapper's text imports it as
oclf_runtime): generated kernels, their random seeds, and the recording that runs the whole
graph as one replay.

GeneratedKernel(name, source)
    writes the kernel's OpenCL C to <Inductor's cache folder>/opencl/<hash>.cl (the hash
    of the text: one file per distinct kernel) and builds it through the device's program
    cache, once per device; run() launches it (torch.ops.oclf.generated_launch).

seeds(out, low, high, size)
    the graph's random seeds: drawn from torch's generator, or from the tensors a replay
    refills.

Replayed(call)
    wraps the module's `call`: run as written, recorded, then replayed per signature of its
    arguments (replay.py; each recording's state and the survey of the arguments:
    recording.py). counters and unrecordable_reasons say what compiled graphs did in this
    process; release_recordings() gives back what their recordings hold.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

import torch

from .. import devices
from .recording import counters, in_progress, unrecordable_reasons
from .replay import Replayed, release_recordings

__all__ = ["GeneratedKernel", "Replayed", "counters", "release_recordings", "seeds", "unrecordable_reasons"]

_ops = torch.ops.oclf
build_seconds = [0.0]  # wall time spent building generated kernels


def source_folder() -> str:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    folder = os.path.join(cache_dir(), "opencl")
    os.makedirs(folder, exist_ok=True)
    return folder


def write_source(source: str) -> str:
    """The path of a file holding `source`, named by its hash (written once)."""
    path = os.path.join(source_folder(), hashlib.sha256(source.encode()).hexdigest()[:32] + ".cl")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(temporary, "w") as f:
            f.write(source)
        os.replace(temporary, path)
    return path


class GeneratedKernel:
    """One generated kernel of a compiled graph (see the module's text)."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.path = write_source(source)
        self._handles: dict[int, int] = {}
        start = time.perf_counter()
        self.handle(devices.current_device())  # built now: a build error surfaces while compiling
        counters["built"] += 1
        build_seconds[0] += time.perf_counter() - start

    def handle(self, device: int) -> int:
        found = self._handles.get(device)
        if found is None:
            with torch.opencl.device(device):
                found = self._handles[device] = int(_ops.generated_kernel(self.path, self.name))
        return found

    def run(self, tensors: list, scalars: list, global_size: list, local_size: list, written: tuple = ()) -> None:
        """Launches the kernel; `written` indexes the tensors it writes, whose version
        counters then move on as an in-place torch operation's would, and whose storages
        count a write (the device keeps buffers derived from a tensor, such as a
        convolution's packed weights, per version and storage write: a buffer Inductor
        reuses for new values, under a tensor whose counter starts again, must not find the
        old ones)."""
        device = next((t.device for t in tensors if t.device.type == "opencl"), None)
        if any(t.device.type != "opencl" for t in tensors):
            # A 0-dim CPU tensor beside device ones (an optimizer's step count): its value
            # is copied over. Graphs with CPU inputs replay them as device copies refilled
            # before each replay, or are not replayed (Replayed): either way it is
            # read anew on every call.
            tensors = [t if t.device.type == "opencl" else t.to(device) for t in tensors]
        device = device.index if device is not None else devices.current_device()
        _ops.generated_launch(self.handle(device), tensors, [int(s) for s in scalars],
                              [int(g) for g in global_size], [int(g) for g in local_size], list(written))
        if written:
            torch.autograd.graph.increment_version([tensors[i] for i in written])


def seeds(out: torch.Tensor, low: int, high: int, size: Any) -> None:
    """The wrapper's random seeds (Inductor's RandomSeeds) into `out`: drawn from torch's
    generator, or, inside a recording, copied from a seed tensor the replay refills."""
    state = getattr(in_progress, "replayed", None)
    if state is not None:
        state.take_seeds(out, low, high)
    else:
        out.copy_(torch.randint(low, high, tuple(out.shape), dtype=out.dtype))

