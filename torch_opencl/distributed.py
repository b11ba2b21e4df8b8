"""torch.distributed for `opencl` tensors: the process-group backend "oclf".

    import torch.distributed as dist
    import torch_opencl                 # registers "oclf" for the opencl device
    dist.init_process_group("cpu:gloo,opencl:oclf")  # or init_process_group(): the same default
    dist.init_process_group(device_id=torch.device("opencl", rank))  # "oclf", bound to one device
    model = torch.nn.parallel.DistributedDataParallel(model.to("opencl"))

OpenCL has no standard way for two devices (or two processes) to exchange buffers, so each
collective stages through the host: the device tensors are copied to host memory, gloo runs
the collective between the processes (over TCP, on one machine or several), and the results
are copied back. The copies cost one read and one write of each tensor per collective; for
DistributedDataParallel that is the gradient buckets once per step.

Every collective finishes before it returns (its Work is complete): the device's queue is
in order, so the copy back is queued before anything that reads the result.
"""
from __future__ import annotations

from datetime import timedelta
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, PrefixStore, ProcessGroup, ProcessGroupGloo, Work

NAME = "oclf"
DEVICE = "opencl"


def _done(result) -> Work:
    """A finished Work whose future holds `result` (what the caller's tensors now hold)."""
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


def _to_host(value):
    """`value` with every tensor in it (nested in lists) replaced by a host copy."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, (list, tuple)):
        return [_to_host(v) for v in value]
    return value


def _copy_back(device, host) -> None:
    """Writes the host copies' values into the tensors they were made from."""
    if isinstance(device, torch.Tensor):
        if device.device.type != "cpu":
            with torch.no_grad():
                device.copy_(host)
    else:
        for d, h in zip(device, host):
            _copy_back(d, h)


# The collectives of torch's Backend interface (their names in torch.distributed's C++
# Backend) and which of their arguments receive results: those are copied back.
_WRITTEN = {
    "allreduce": 0, "allreduce_coalesced": 0, "broadcast": 0, "reduce": 0,
    "allgather": 0, "allgather_coalesced": 0, "_allgather_base": 0, "all_gather_single": 0,
    "all_gather_single_coalesced": 0, "allgather_into_tensor_coalesced": 0,
    "gather": 0, "gather_single": 0, "gather_into_tensor": 0, "scatter": 0,
    "reduce_scatter": 0, "_reduce_scatter_base": 0, "reduce_scatter_single": 0,
    "reduce_scatter_single_coalesced": 0, "reduce_scatter_tensor_coalesced": 0,
    "alltoall": 0, "alltoall_base": 0, "all_to_all_single": 0,
    "send": None, "recv": 0, "recv_anysource": 0,
}
# Collectives between one output and one input tensor that NCCL reads as flat buffers of
# world × n and n elements, where gloo splits the output along its first dimension: passed
# to gloo flat.
_FLAT = {"_allgather_base", "all_gather_single", "_reduce_scatter_base", "reduce_scatter_single"}


class _Staging:
    """Collectives on opencl tensors, run by gloo on host copies (see the module's text).
    Host tensors pass through to gloo as they are."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._gloo = ProcessGroupGloo(PrefixStore(f"{NAME}/", store), rank, size, timeout)

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return NAME

    def _get_backend_name(self) -> str:
        return NAME

    def _staged(self, name: str, written, args):
        hosts = [_to_host(a) for a in args]
        if name in _FLAT:
            hosts[:2] = [t.contiguous() for t in hosts[:2]]
            getattr(self._gloo, name)(*(t.view(-1) for t in hosts[:2]), *hosts[2:]).wait()
        else:
            getattr(self._gloo, name)(*hosts).wait()
        if written is None:
            return _done([])
        _copy_back(args[written], hosts[written])
        result = args[written]
        return _done(list(result) if isinstance(result, (list, tuple)) else [result])

    def barrier(self, opts):
        torch.opencl.synchronize()
        self._gloo.barrier(opts).wait()
        return _done([])

    # What the backend supports. torch's Backend reads these from a Python subclass's class
    # (its C++ side looks them up there); one left to torch's own property calls back into
    # that lookup without end (init_process_group(device_id=...) asked supports_splitting and
    # ended in a RecursionError).
    supports_splitting = property(lambda self: False, doc="new groups are made anew, not split from this one")
    supports_coalescing = property(lambda self: False, doc="no coalesced collectives")
    supports_time_estimate = property(lambda self: False, doc="no time estimates")
    supports_shrinking = property(lambda self: False, doc="groups are not shrunk")
    supports_reconfigure = property(lambda self: False, doc="groups are not reconfigured")
    supports_window = property(lambda self: False, doc="no one-sided windows")

    @property
    def options(self):
        """The options of the gloo group underneath (its timeout)."""
        return self._gloo.options


def _base() -> type:
    """torch's Backend where Python may derive from it (recent torch); else ProcessGroup,
    whose Python subclasses serve every device of the group (older torch)."""
    class Probe(Backend):
        pass

    try:
        Probe(0, 1)
        return Backend
    except TypeError:  # "No constructor defined"
        return ProcessGroup


OpenCLBackend = type("OpenCLBackend", (_Staging, _base()), {"__doc__": _Staging.__doc__})


def _staging(name: str, written):
    def collective(self, *args):
        return self._staged(name, written, args)
    collective.__name__ = name
    collective.__doc__ = f"gloo's {name} on host copies of the tensors"
    return collective


for _name, _written in _WRITTEN.items():
    setattr(OpenCLBackend, _name, _staging(_name, _written))


def _create(store, rank: int, size: int, timeout: timedelta) -> OpenCLBackend:
    return OpenCLBackend(store, rank, size, timeout)


def register() -> None:
    """Registers the "oclf" backend for the opencl device (once; import of the device does it)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    # For opencl tensors, and host tensors too (gloo's), so that a group made with the
    # backend alone (init_process_group(device_id=torch.device("opencl", rank)) chooses "oclf")
    # runs collectives and object collectives on CPU tensors; gloo stays the CPU's default.
    dist.Backend.register_backend(NAME, _create, devices=[DEVICE, "cpu"])
