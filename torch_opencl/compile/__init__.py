"""torch.compile on the opencl device: Inductor's graph lowering and fusion, with each
fusion group rendered as one OpenCL kernel and the compiled graph run as one recording.

    model = model.to("opencl")
    compiled = torch.compile(model)                     # Inductor, as for any device
    compiled = torch.compile(model, backend="opencl")  # the same, named explicitly

How a graph becomes kernels: Dynamo captures the graph (guards on shapes, dtypes and
devices: a new shape compiles again, as torch does); AOTAutograd splits training into
forward and backward graphs; Inductor lowers each to its loop IR, decides fusion and
plans memory for the whole graph. Its scheduler hands each fusion group to
OpenCLScheduling (wrapper.py), whose OpenCLKernel (kernel.py) writes the group's OpenCL C:
pointwise chains, and the reductions that end them (norms, softmax, losses, optimizer
arithmetic), in one kernel. Convolutions and matrix products stay extern kernels: the
device's own aten operators with their tuned OpenCL kernels. The host wrapper (Inductor's
Python wrapper) builds each kernel once and launches it with torch.ops.oclf.
generated_launch (csrc/aten/generated.cpp); Replayed (replay.py) records the graph's second
run and replays it after (graphs.py: no host work per kernel). The device's graph pass
(passes.py) folds activations and residuals into convolutions and products, and its fusion
heuristics (choices.py) fuse small pointwise groups Inductor would leave apart.

Importing the device installs what finds this package lazily (importing Inductor costs
seconds): Inductor asks the device module torch.opencl for its Scheduling and wrapper
classes when it first registers backends, and the names "opencl" (torch.compile's
backend) and the Dynamo device interface are added when torch._dynamo loads.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from typing import Any, Callable

_lock = threading.Lock()
_registered = False
BACKEND = "opencl"


def register() -> None:
    """Registers the device with Inductor (scheduling, wrapper, device op overrides) and
    Dynamo (device interface, the "opencl" backend). Imports Inductor; idempotent."""
    global _registered
    with _lock:
        if _registered:
            return
        from torch._dynamo.device_interface import register_interface_for_device
        from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

        from .interface import OpenCLInterface
        from .wrapper import OpenCLDeviceOpOverrides, OpenCLScheduling, OpenCLWrapperCodegen

        try:  # the device's graph pass (and Inductor's cache key): torch releases that take one
            from .passes import OpenCLGraphPass

            register_backend_for_device(BACKEND, OpenCLScheduling, OpenCLWrapperCodegen,
                                        device_custom_pass=OpenCLGraphPass())
        except (ImportError, TypeError):
            register_backend_for_device(BACKEND, OpenCLScheduling, OpenCLWrapperCodegen)
        register_device_op_overrides(BACKEND, OpenCLDeviceOpOverrides())
        try:
            from .passes import keep_convolutions_nchw

            keep_convolutions_nchw()
        except ImportError:
            pass
        register_interface_for_device(BACKEND, OpenCLInterface)
        from torch._inductor import config

        if config.inductor_choices_class is None:  # a program's own heuristics stay
            from .choices import choices

            config.inductor_choices_class = choices
        _registered = True


def opencl_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
    """torch.compile(model, backend="opencl"): Inductor with this package's code generator."""
    register()
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)


def _device_module_attribute(name: str) -> Any:
    """torch.opencl.<name> for Inductor's lookup of a renamed PrivateUse1 backend."""
    if name == "Scheduling":
        register()
        from .wrapper import OpenCLScheduling

        return OpenCLScheduling
    if name == "PythonWrapperCodegen":
        register()
        from .wrapper import OpenCLWrapperCodegen

        return OpenCLWrapperCodegen
    # No CppWrapperCodegen (cpp_wrapper=True is not offered): Inductor then leaves the
    # registration register() made, with the device's graph pass, as it is.
    raise AttributeError(f"module 'torch.opencl' has no attribute {name!r}")


def _on_dynamo_registry(registry: Any) -> None:
    registry.register_backend(compiler_fn=opencl_backend, name=BACKEND)


def _on_device_interface(module: Any) -> None:
    from .interface import OpenCLInterface

    module.register_interface_for_device(BACKEND, OpenCLInterface)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls then(module) once `name` has been imported (by whoever imports it first)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            run(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _when_imported(name: str, then: Callable[[Any], None]) -> None:
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def install(device_module: Any) -> None:
    """Called by torch_opencl on import: nothing of Inductor or Dynamo is
    imported here."""
    device_module.__getattr__ = _device_module_attribute
    _when_imported("torch._dynamo.backends.registry", _on_dynamo_registry)
    _when_imported("torch._dynamo.device_interface", _on_device_interface)
    if "torch._inductor.codegen.common" in sys.modules:
        register()
