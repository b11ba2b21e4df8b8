"""The opencl device as Dynamo and Inductor query a device (torch._dynamo.device_interface):
its index, guard, queue, synchronization and properties. One in-order queue per device
stands for its stream; a kernel needs no raw stream handle (get_raw_stream is 0)."""
from __future__ import annotations

import collections
import contextlib
from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface

from .. import devices, events

_Properties = collections.namedtuple(
    "OpenCLProperties", ["name", "type", "multi_processor_count", "total_memory", "max_work_group_size"])


def _properties(device: Any = None) -> _Properties:
    p = devices.get_device_properties(device)
    return _Properties(name=p.name, type=p.type, multi_processor_count=p.multi_processor_count,
                       total_memory=p.total_memory, max_work_group_size=p.max_work_group_size)


class OpenCLInterface(DeviceInterface):
    device = devices.device  # type: ignore[assignment]
    Event = torch.Event  # type: ignore[assignment]
    Stream = torch.Stream  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            devices.set_device(device)

        @staticmethod
        def current_device() -> int:
            return devices.current_device()

        @staticmethod
        def get_device_properties(device: Any = None) -> _Properties:
            return _properties(device)

    @staticmethod
    def current_device() -> int:
        return devices.current_device()

    @staticmethod
    def set_device(device: Any) -> None:
        devices.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = devices.current_device()
        if device >= 0 and device != previous:
            devices.set_device(device)
        return previous

    @staticmethod
    def exchange_device(device: int) -> int:
        return OpenCLInterface.maybe_exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return devices.device_count()

    @staticmethod
    def is_available() -> bool:
        return devices.is_available()

    @staticmethod
    def stream(stream: torch.Stream) -> Any:
        return contextlib.nullcontext()

    @staticmethod
    def current_stream() -> torch.Stream:
        return events.current_stream()

    @staticmethod
    def set_stream(stream: torch.Stream) -> None:
        return None

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        return None

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def synchronize(device: Any = None) -> None:
        torch.ops.oclf.synchronize(devices.device_index(device))

    @classmethod
    def get_device_properties(cls, device: Any = None) -> _Properties:
        return _properties(device)

    @staticmethod
    def get_compute_capability(device: Any = None) -> str:
        # What generated code depends on: the device (kernels are shaped for CPUs or GPUs).
        p = _properties(device)
        return f"opencl-{p.type}-{p.name}"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        from .. import stats

        return stats.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device: Any = None) -> bool:
        return False
