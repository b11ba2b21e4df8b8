"""The process's opencl devices, as torch.cuda's device functions are for CUDA:

    torch.opencl.device_count()           every OpenCL device of the selected platform
    torch.opencl.current_device()         the calling thread's current one (its index)
    torch.opencl.set_device(1)            ... changed
    with torch.opencl.device(1): ...      ... for a block
    torch.opencl.get_device_name(1)       'platform / device (type)'

The devices are those of the platform OCLF_DEVICE picks (its default device is the
current one at start), narrowed and ordered by OCLF_VISIBLE_DEVICES ("1,0"); PoCL shows two
CPU devices with POCL_DEVICES="pthread pthread". The library (ocl_conv2d, ocl_matmul on
host tensors) runs on the current device too: both share one runtime per device.
"""
from __future__ import annotations

from typing import Union

import torch

__all__ = ["device_count", "current_device", "set_device", "device", "get_device_name", "device_index"]

_ops = torch.ops.oclf
DeviceLike = Union[None, int, str, torch.device]


def device_index(device: DeviceLike = None, optional: bool = True) -> int:
    """The index a device argument names: an int, "opencl:1", torch.device("opencl", 1); None
    or "opencl" (no index) mean the current device (-1 when `optional`, else its index)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "opencl":
            raise ValueError(f"expected an opencl device, got {device}")
        device = device.index
    if device is None:
        return -1 if optional else current_device()
    if not isinstance(device, int) or isinstance(device, bool):
        raise TypeError(f"a device is an int, a str or a torch.device, got {type(device).__name__}")
    count = device_count()
    if not 0 <= device < count:
        raise ValueError(f"opencl: there is no device {device}; the process has {count}"
                         + (f" (opencl:0 to opencl:{count - 1})" if count else ""))
    return device


def device_count() -> int:
    """How many OpenCL devices the process has (0 when no OpenCL device can be found)."""
    return int(_ops.device_count())


def current_device() -> int:
    """The calling thread's current device index."""
    return int(_ops.current_device())


def set_device(device: DeviceLike) -> None:
    """Makes `device` the calling thread's current device. None changes nothing."""
    index = device_index(device)
    if index >= 0:
        _ops.set_device(index)


class device:
    """`with torch.opencl.device(1): ...` runs the block with device 1 current (None: the
    current one stays); the previous device comes back after, as torch.cuda.device does."""

    def __init__(self, device: DeviceLike):
        self.index = device_index(device)
        self.previous = -1

    def __enter__(self):
        if self.index >= 0:
            self.previous = current_device()
            _ops.set_device(self.index)
        return self

    def __exit__(self, *exc) -> bool:
        if self.previous >= 0:
            _ops.set_device(self.previous)
        return False


def get_device_name(device: DeviceLike = None) -> str:
    """'platform / device (type)' of an OpenCL device behind `opencl` (the current one by default)."""
    return str(_ops.device_name(device_index(device)))
