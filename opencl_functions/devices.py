"""The process's OpenCL devices, the runtime's buffer memory on them and the launch log: the
one Python way into the runtime (runtime/, through _core). The package re-exports these names,
and the opencl torch device (torch_opencl) writes torch.opencl's device functions
over them, since both share one runtime per device.

    device_count()                  the devices of the platform OCLF_DEVICE picks, narrowed and
                                    ordered by OCLF_VISIBLE_DEVICES: opencl:0 ... opencl:N-1
    current_device(), set_current_device(index)
                                    the calling thread's current device, where operations run
    is_available()                  whether the current device opens (never raises)
    device_info(index=-1)           a device's description (-1: the current one)
    list_devices()                  every device of every platform, "P:D" and names
    memory_stats()                  the current device's buffers: bytes in use, bytes pooled
    launch_log_start(capture=False), launch_log_capture(capture), launch_log_take(),
    launch_log_stop()               what host code, the library and the device launched (the
                                    grader, make check and tests read it)
"""
from __future__ import annotations

from typing import List

from . import _core
from ._core import (OpenCLError, current_device, device_count, device_info, list_devices, memory_stats,
                    set_current_device)

__all__ = ["device_count", "current_device", "set_current_device", "is_available", "device_info", "list_devices",
           "memory_stats", "launch_log_start", "launch_log_capture", "launch_log_take", "launch_log_stop"]


def is_available() -> bool:
    """Whether the calling thread's current OpenCL device can be opened (never raises)."""
    try:
        device_info()
    except OpenCLError:
        return False
    return True


def launch_log_start(capture: bool = False) -> None:
    """Starts the launch log, forgetting what it held: from now on every launch (host code's,
    the library's, the opencl device's) with its program, kernel, NDRange and arguments;
    `capture` keeps the contents of its buffers before and after it too."""
    _core._launch_log_start(capture)


def launch_log_capture(capture: bool) -> None:
    """Turns the launch log's buffer capture on or off, keeping what it recorded."""
    _core._launch_log_capture(capture)


def launch_log_take() -> List[dict]:
    """What the launch log recorded since it started or was last taken, one dict per launch:
    path, source_hash, options, kernel, global, local, args, buffers and captured."""
    return _core._launch_log_take()


def launch_log_stop() -> None:
    """Stops the launch log and forgets what it recorded."""
    _core._launch_log_stop()
