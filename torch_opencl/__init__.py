"""PyTorch's `opencl` device, on the OpenCL devices of the platform OCLF_DEVICE (or
OCL_DEVICE) selects: opencl:0 ... opencl:N-1 (devices.py).

    import torch_opencl          # registers the device (once per process)
    x = torch.randn(8, 3).to("opencl")       # or torch.empty(..., device="opencl:1")
    model = model.to("opencl")               # tensors stay there: ops run as OpenCL kernels
    y = model(x).cpu()                       # .cpu(), printing and .item() wait for the queue

Torch's PrivateUse1 backend, renamed "opencl", with `torch.opencl.is_available()`,
`device_count()`, `current_device()`, `set_device()`, `with torch.opencl.device(i)`,
`synchronize()`, memory statistics per device (`memory_allocated()`,
`max_memory_allocated()`, `memory_summary()`, `reset_peak_memory_stats()`, ...),
`empty_cache()`, `Event(enable_timing=True)` and `Stream()` as for other backends (stats.py,
events.py). Operators without an OpenCL kernel run on the CPU (copied to the host and
back) with one UserWarning per operator; OCLF_FALLBACK=error (or
OCL_FALLBACK) turns that into a NotImplementedError, OCLF_FALLBACK=silent drops the
warnings; `fallback_report()` and `with fallback_scope() as report:` say which operators
fell back, how often, for how long and how many bytes they moved. Which operators
run natively: docs/device/operators.md (this folder's README links every document). Random
numbers for device tensors (randn, dropout, init) come from each device's generator (rng.py),
which `torch.manual_seed` seeds.
`graph()` records a step to replay (graphs.py), `fuse(model)` fuses an eval model's
convolutions with their batch norm, residual addition and activation (fusion.py),
`torch.autocast("opencl")` and `torch.amp.GradScaler("opencl")` train in mixed precision
(amp.py), `torch.compile(model)` (or backend="opencl") generates fused OpenCL kernels per
graph (compile/), and importing the device registers its torch.distributed backend
(distributed.py). Installed as a package, the device is imported with torch (its
`torch.backends` entry point; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off).
"""
from __future__ import annotations

import atexit
import sys
import types

import torch

# From the modules, not the package: torch's autoload (torch_opencl_autoload.py) may import
# the device while the package itself is still importing torch.
from opencl_functions.clblast_params import load_clblast_params
from opencl_functions.devices import OpenCLError
try:
    from . import _C  # noqa: F401  (registers the device's allocator, guard, hooks and operators)
except ImportError as err:
    # Built against another torch release (its C++ ABI differs), or not built at all.
    raise ImportError(f"torch_opencl cannot load its native module ({err}); it must be built "
                      f"against the torch it runs with ({torch.__version__}): make device in a source tree, "
                      f"or pip install --no-build-isolation . (torch_opencl/README.md: Install)") from err
# Commands a program never waited for run to the end at its exit, before the interpreter frees
# their tensors and the driver is torn down (both crashed such exits now and then, on PoCL and
# under Oclgrind).
atexit.register(_C.finish_at_exit)
from . import amp, devices, events, profiling, rng, stats
from .amp import get_amp_supported_dtype, is_bf16_supported
from .devices import (DeviceProperties, current_device, device, device_count, get_device_capability,
                      get_device_name, get_device_properties, is_available, mem_get_info, set_device)
from .events import Event, Stream, current_stream, default_stream, stream
from .fusion import fuse
from .graphs import Graph, graph
from .profiling import KernelLaunch, KernelProfile, kernel_profile
from .rng import (get_rng_state, get_rng_state_all, initial_seed, manual_seed, manual_seed_all, seed, seed_all,
                  set_rng_state, set_rng_state_all)
from .stats import (FallbackReport, FallbackStat, empty_cache, fallback_ops, fallback_report, fallback_scope,
                    fallback_stats, max_memory_allocated, max_memory_reserved, memory_allocated, memory_reserved,
                    memory_stats, memory_summary, reset_accumulated_memory_stats, reset_fallback_ops,
                    reset_peak_memory_stats)

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "synchronize", "get_device_name",
    "get_device_properties", "get_device_capability", "mem_get_info", "DeviceProperties",
    *stats.__all__, *events.__all__, *profiling.__all__, *rng.__all__, *amp.__all__, "graph", "Graph", "fuse",
]

NAME = "opencl"
_ops = torch.ops.oclf


def is_initialized() -> bool:
    return is_available()


def synchronize(device=None) -> None:
    """Waits for every queued kernel and copy of a device (the current one by default)."""
    _ops.synchronize(devices.device_index(device))


def _is_in_bad_fork() -> bool:
    """Whether this process was forked after it opened a device: such a child cannot use it."""
    return bool(_ops.in_bad_fork())


def _tensor_str(self, *, tensor_contents=None):
    """torch's printing, with the numbers of an opencl tensor formatted from a host copy
    (torch's formatter runs many small ops, some on float64). Tensors without values (the fake
    ones torch.compile traces with, which its debug logs print) print as torch prints them."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    has_values = not (fake is not None and fake.is_fake(self)) and not self.is_meta
    if self.device.type == NAME and tensor_contents is None and self.layout == torch.strided and self.numel() \
            and has_values:
        plain = type(self) in (torch.Tensor, torch.nn.Parameter)
        indent = len("tensor(") if plain else len(f"{type(self).__name__}(")
        with torch.no_grad():
            host = self.detach().cpu()
        tensor_contents = torch._tensor_str._tensor_str(host, indent)
    return _torch_str(self, tensor_contents=tensor_contents)


_torch_str = torch._tensor_str._str


_lazy_done = False


def _lazy_init() -> None:
    """What waits for the device's first use (torch calls this before it makes the first
    opencl tensor, as it calls torch.cuda's): CLBlast's tuned parameters for the device
    (clblast_params/), as the library applies them before its first product. The import opens
    no device, so a program may still choose one (OCLF_DEVICE) after `import torch`, which
    imports this package where it is installed."""
    global _lazy_done
    if _lazy_done:
        return
    _lazy_done = True
    try:
        load_clblast_params()
    except OpenCLError:
        pass  # no OpenCL device: is_available() says so


class _DeviceModule(types.ModuleType):
    """torch.opencl: the functions of __all__, and _initialized as torch.cuda has it."""

    @property
    def _initialized(self) -> bool:
        """torch.utils.checkpoint saves and restores a device's random state around a
        checkpointed region (so the recomputed forward draws the forward's dropout masks) only
        where this is true, as torch.cuda's is once CUDA is in use. It is read when opencl
        tensors are in the region, so the device is in use: reading it opens the device."""
        return is_available()


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        module = _DeviceModule(f"torch.{NAME}", __doc__.split("\n\n")[0])
        for name in [*__all__, "is_initialized", "_is_in_bad_fork", "_lazy_init"]:
            setattr(module, name, globals()[name])
        torch._register_device_module(NAME, module)
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
        sys.modules[f"torch.{NAME}"] = module
        torch._tensor_str._str = _tensor_str
    # Backward passes through the device run on autograd worker threads; the engine sizes
    # its device queues once, so a process that ran a CPU backward pass before this import
    # needs the queues of the opencl devices added.
    _ops.ensure_autograd_threads()
    # torch.distributed's "oclf" backend for opencl tensors (distributed.py).
    from . import distributed
    distributed.register()
    # torch.compile: Inductor and Dynamo find the device's code generator lazily (compile/).
    from .compile import install
    install(sys.modules[f"torch.{NAME}"])


_register()
