"""Timing on the opencl device's queue, as torch.cuda.Event times on a CUDA stream:

    start, end = torch.opencl.Event(enable_timing=True), torch.opencl.Event(enable_timing=True)
    start.record(); y = model(x); end.record()
    end.synchronize()
    ms = start.elapsed_time(end)     # device time between the two markers, in milliseconds

An event is an OpenCL marker on a device's one in-order queue (csrc/runtime/guard.cpp):
it completes when everything queued before it has, and its CL_PROFILING_COMMAND_END is that
moment. Each device has one stream, its queue; current_stream() and default_stream() return
it as a torch.Stream, for code that passes a stream to Event.record() or Stream.record_event().
Code written for several streams (FSDP2's all-gather and reduce-scatter streams) runs as it
is: Stream() gives the device's queue again and `with torch.opencl.stream(s):` makes the
stream's device current for the block, so its work runs in order with the rest, which is
what the waits between such streams ask for.
"""
from __future__ import annotations

import torch

from .devices import current_device, device_index, set_device

__all__ = ["Event", "Stream", "stream", "current_stream", "default_stream"]


def _stream(device) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=device_index(device, optional=False),
                        device_type=torch._C._autograd.DeviceType.PrivateUse1.value)


def current_stream(device=None) -> torch.Stream:
    """A device's queue (the current device's by default; each has one stream)."""
    return _stream(device)


def default_stream(device=None) -> torch.Stream:
    """A device's queue (the current device's by default; each has one stream)."""
    return _stream(device)


def Stream(device=None, priority: int = 0) -> torch.Stream:
    """A stream of a device (the current one by default), as torch.cuda.Stream(priority=...)
    makes one: the device's one in-order queue, whatever the priority."""
    return _stream(device)


class stream:
    """`with torch.opencl.stream(s):` runs the block on `s` (None: the current stream stays),
    as torch.cuda.stream does: the stream's device is current inside the block."""

    def __init__(self, stream):
        if stream is not None and stream.device.type != "opencl":
            raise ValueError(f"opencl: stream() takes a stream of an opencl device, got one of {stream.device}")
        self.stream = stream
        self.previous = -1

    def __enter__(self):
        if self.stream is not None:
            self.previous = current_device()
            set_device(self.stream.device_index)
        return self.stream

    def __exit__(self, *exc) -> bool:
        if self.previous >= 0:
            set_device(self.previous)
        return False


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """A torch.Event on the opencl device, made as torch.cuda.Event(...) is: record(),
    query(), synchronize(), wait() and, with enable_timing=True, elapsed_time(end) in
    milliseconds (both events recorded and complete). `blocking` is accepted; synchronize()
    always blocks the calling thread. A plain torch.Event rather than a subclass: torch's
    elapsed_time accepts exactly that type as its argument."""
    if interprocess:
        raise ValueError("opencl: Event(interprocess=True) is not supported (events live in one process)")
    return torch.Event(device="opencl", enable_timing=enable_timing, blocking=blocking)
