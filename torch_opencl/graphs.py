"""Recorded steps: run a forward pass or a training step once while recording, then replay
it with no Python, dispatcher, allocation or argument setting (as torch.cuda.CUDAGraph).

    static_x = torch.randn(16, 3, 224, 224, device="opencl")
    model(static_x)                                    # once before: first-use work, tuning
    with torch_opencl.graph() as g:
        static_y = model(static_x)                     # runs, and is recorded
    static_x.copy_(next_batch)                         # new inputs go into the same tensor
    g.replay()                                         # static_y now holds the new result

What a recorded step may do: launch kernels, copy between device tensors, call CLBlast,
write constants from the host (the bytes written while recording are written again on
each replay). What it may not: wait for the device (`.item()`, `.cpu()`, printing, a
boolean mask or anything else whose size depends on values): that raises while recording,
and nothing is kept. A replay reads and writes the same memory the recording did: the
inputs must be in the tensors the recording read (copy new values into them), the
results appear in the tensors it made, and every tensor it read must stay alive. Memory
the step allocated belongs to the graph until the graph is released (`g.reset()` or
garbage collection), so later work never gets buffers the graph writes to. Python-side
values are frozen at recording (a learning rate given as a number, an optimizer's
first-step branch): run a training step a few times before recording it, and give a
learning rate that changes as a device tensor.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, Optional

import torch

_ops = torch.ops.oclf

__all__ = ["Graph", "graph"]


class Graph:
    """A recorded step of the opencl device (see the module's text); made by `graph()`."""

    def __init__(self) -> None:
        self._id: Optional[int] = None
        self._recording = False

    def replay(self) -> None:
        """Queues every recorded command again, in order (it does not wait for them)."""
        if self._id is None or self._recording:
            raise RuntimeError("opencl: this graph has no finished recording to replay")
        _ops.graph_replay(self._id)

    @staticmethod
    def command_buffers_available() -> bool:
        """Whether recordings become cl_khr_command_buffer command buffers on this device."""
        return bool(_ops.graph_command_buffers_available())

    def counts(self) -> Dict[str, int]:
        """What was recorded: kernel launches, copies, host writes, CLBlast calls, the
        command buffers they became (cl_khr_command_buffer) and the bytes of the memory
        the graph holds."""
        if self._id is None:
            return {}
        keys = ("launches", "copies", "writes", "calls", "command_buffers", "pool_bytes")
        return dict(zip(keys, (int(v) for v in _ops.graph_counts(self._id))))

    def _rebind(self, moves: Dict[int, int]) -> bool:
        """Points the recorded commands at other buffers ({old handle: new handle}, as
        torch.ops.oclf.storage_locations gives them): for an input found in a new storage laid
        out as the old one. False, changing nothing, where the recording holds a library call."""
        if self._id is None or self._recording:
            raise RuntimeError("opencl: this graph has no finished recording to rebind")
        olds = list(moves)
        return bool(_ops.graph_rebind(self._id, olds, [moves[m] for m in olds]))

    def reset(self) -> None:
        """Forgets the recording and hands its memory back to the device's cache."""
        if self._id is not None:
            _ops.graph_release(self._id)
            self._id = None
            self._recording = False

    def _begin(self) -> None:
        self.reset()
        self._id = int(_ops.graph_record())
        self._recording = True

    def _end(self) -> None:
        _ops.graph_end(self._id)
        self._recording = False

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:  # interpreter shutdown: the device may be gone already
            pass

    def __repr__(self) -> str:
        state = "recording" if self._recording else ("empty" if self._id is None else str(self.counts()))
        return f"torch_opencl.Graph({state})"


@contextlib.contextmanager
def graph(g: Optional[Graph] = None) -> Iterator[Graph]:
    """Records what runs on the device inside the block into `g` (a new Graph when not
    given). An exception inside the block ends the recording and forgets it."""
    g = g if g is not None else Graph()
    g._begin()
    try:
        yield g
    except BaseException:
        g.reset()
        raise
    g._end()
