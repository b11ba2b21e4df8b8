"""Timing on the opencl device's queue, as torch.cuda.Event times on a CUDA stream:

    start, end = torch.opencl.Event(enable_timing=True), torch.opencl.Event(enable_timing=True)
    start.record(); y = model(x); end.record()
    end.synchronize()
    ms = start.elapsed_time(end)     # device time between the two markers, in milliseconds

An event is an OpenCL marker on a device's one in-order queue (csrc/runtime/guard.cpp):
it completes when everything queued before it has, and its CL_PROFILING_COMMAND_END is that
moment. Each device has one stream, its queue; current_stream() and default_stream() return
it as a torch.Stream, for code that passes a stream to Event.record() or Stream.record_event().
"""
from __future__ import annotations

import torch

from .devices import device_index

__all__ = ["Event", "current_stream", "default_stream"]


def _stream(device) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=device_index(device, optional=False),
                        device_type=torch._C._autograd.DeviceType.PrivateUse1.value)


def current_stream(device=None) -> torch.Stream:
    """A device's queue (the current device's by default; each has one stream)."""
    return _stream(device)


def default_stream(device=None) -> torch.Stream:
    """A device's queue (the current device's by default; each has one stream)."""
    return _stream(device)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """A torch.Event on the opencl device, made as torch.cuda.Event(...) is: record(),
    query(), synchronize(), wait() and, with enable_timing=True, elapsed_time(end) in
    milliseconds (both events recorded and complete). `blocking` is accepted; synchronize()
    always blocks the calling thread. A plain torch.Event rather than a subclass: torch's
    elapsed_time accepts exactly that type as its argument."""
    if interprocess:
        raise ValueError("opencl: Event(interprocess=True) is not supported (events live in one process)")
    return torch.Event(device="opencl", enable_timing=enable_timing, blocking=blocking)
