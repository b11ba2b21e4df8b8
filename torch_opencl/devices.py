"""The process's opencl devices, as torch.cuda's device functions are for CUDA:

    torch.opencl.device_count()           every OpenCL device of the selected platform
    torch.opencl.current_device()         the calling thread's current one (its index)
    torch.opencl.set_device(1)            ... changed
    with torch.opencl.device(1): ...      ... for a block
    torch.opencl.get_device_name(1)       'platform / device (type)'
    torch.opencl.get_device_properties(1) name, total_memory, multi_processor_count, ...
    torch.opencl.get_device_capability() the device's OpenCL version, (major, minor)
    torch.opencl.mem_get_info()           (free, total) bytes, as torch.cuda.mem_get_info

The devices are those of the platform OCLF_DEVICE picks (its default device is the
current one at start), narrowed and ordered by OCLF_VISIBLE_DEVICES ("1,0"); PoCL shows two
CPU devices with POCL_DEVICES="pthread pthread". These functions are torch's names for the
library's (opencl_functions.devices): the library (ocl_conv2d, ocl_matmul on host tensors)
runs on the current device too, and both share one runtime per device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Tuple, Union

import torch

from opencl_functions import devices as runtime

__all__ = ["is_available", "device_count", "current_device", "set_device", "device", "get_device_name",
           "device_index", "DeviceProperties", "get_device_properties", "get_device_capability", "mem_get_info"]

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


def is_available() -> bool:
    """Whether an OpenCL device can be opened (never raises)."""
    return runtime.is_available()


def device_count() -> int:
    """How many OpenCL devices the process has (0 when no OpenCL device can be found)."""
    try:
        return runtime.device_count()
    except runtime.OpenCLError:
        return 0


def current_device() -> int:
    """The calling thread's current device index."""
    return runtime.current_device()


def set_device(device: DeviceLike) -> None:
    """Makes `device` the calling thread's current device. None changes nothing."""
    index = device_index(device)
    if index >= 0:
        runtime.set_current_device(index)


class device:
    """`with torch.opencl.device(1): ...` runs the block with device 1 current (None: the
    current one stays); the previous device comes back after, as torch.cuda.device does."""

    def __init__(self, device: DeviceLike):
        self.index = device_index(device)
        self.previous = -1

    def __enter__(self):
        if self.index >= 0:
            self.previous = current_device()
            runtime.set_current_device(self.index)
        return self

    def __exit__(self, *exc) -> bool:
        if self.previous >= 0:
            runtime.set_current_device(self.previous)
        return False


def get_device_name(device: DeviceLike = None) -> str:
    """'platform / device (type)' of an OpenCL device behind `opencl` (the current one by default)."""
    info = runtime.device_info(device_index(device))
    return f"{info['platform']} / {info['device']} ({info['type']})"


@dataclass(frozen=True)
class DeviceProperties:
    """What torch.opencl.get_device_properties() gives, named as torch.cuda's properties where
    OpenCL has the same thing: name, total_memory (CL_DEVICE_GLOBAL_MEM_SIZE), and
    multi_processor_count (compute units); then OpenCL's own."""
    name: str
    platform: str
    type: str                    # "GPU", "CPU", "ACCELERATOR", ...
    total_memory: int
    multi_processor_count: int
    max_work_group_size: int
    local_memory: int            # bytes of local (shared) memory per work-group
    has_fp64: bool               # cl_khr_fp64: float64 computes on the device
    preferred_vector_width_float: int
    opencl_version: str          # "OpenCL 3.0 PoCL ...", the device's CL_DEVICE_VERSION
    opencl_c_version: str
    driver_version: str
    major: int                   # the OpenCL version's numbers (get_device_capability)
    minor: int


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """The OpenCL device behind `opencl` (the current one by default), as DeviceProperties."""
    info = runtime.device_info(device_index(device))
    found = re.match(r"OpenCL (\d+)\.(\d+)", info["version"])
    major, minor = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    return DeviceProperties(info["device"], info["platform"], info["type"], info["global_mem_size"],
                            info["compute_units"], info["max_work_group_size"], info["local_mem_size"],
                            info["has_fp64"], info["preferred_vector_width_float"], info["version"],
                            info["opencl_c_version"], info["driver_version"], major, minor)


def get_device_capability(device: DeviceLike = None) -> Tuple[int, int]:
    """(major, minor) of the device's OpenCL version, as torch.cuda.get_device_capability gives
    the compute capability. (torch.accelerator.get_device_capability() gives the dtypes a
    device tensor can have.)"""
    properties = get_device_properties(device)
    return properties.major, properties.minor


def mem_get_info(device: DeviceLike = None) -> Tuple[int, int]:
    """(free, total) bytes of a device, as torch.cuda.mem_get_info: OpenCL cannot be asked for
    the memory free on a device, so free is the total less what this process's allocator holds
    (memory_reserved(): tensors and cached buffers). torch.accelerator.get_memory_info() is the same."""
    index = device_index(device, optional=False)
    total = get_device_properties(index).total_memory
    reserved = int(torch.ops.oclf.memory_stats(index)[1])
    return max(total - reserved, 0), total
