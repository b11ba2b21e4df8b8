"""OpenCL operations on PyTorch tensors.

    ocl_matmul(a, b)                 CLBlast SGEMM: a (..., M, K) @ b (K, N)
    ocl_conv2d(x, weight, bias=None, stride=1, dilation=1, groups=1)
                                     conv2d.cl on an already padded x (B, C_in, H, W)
    ocl_conv2d_backward_input(grad_out, weight, input_shape, stride=1, dilation=1, groups=1)
    ocl_conv2d_backward_weight(x, grad_out, weight_shape, stride=1, dilation=1, groups=1)
    ocl_conv2d_backward_bias(grad_out)
                                     conv2d's gradients, by conv2d_backward.cl
    device_info(index=-1), list_devices()
                                     an OpenCL device of the process (the current one by
                                     default), and every device of every platform
    device_count(), current_device(), set_current_device(index)
                                     the process's devices: every device of the platform
                                     OCLF_DEVICE picks (OCLF_VISIBLE_DEVICES narrows them);
                                     the operations run on the calling thread's current one
    last_kernel_time_ns(), last_choice()
                                     the last operation's kernel time, and the configuration
                                     it used with where that came from (tuning, below)
    load_clblast_params(), set_clblast_parameters(params), clblast_parameters(kernels)
                                     CLBlast's tuning parameters (see below)
    conv2d_geometry(input_shape, weight_shape, stride=1, dilation=1, groups=1)
                                     a convolution's Conv2dGeometry: its output shape and size

Parameters (nn.Parameter weights and biases) stay on the device between calls, keyed by
the tensor and its version counter, and are freed with the tensor (resident_handle).

The package, by concern: devices (the process's devices, their buffer memory and the launch
log: the one way into them, which the opencl device takes too), checks (argument
validation), geometry (a convolution's output size, the one formula), ops (the operations),
resident (parameters kept on the device), clblast_params (CLBlast's tuning files), settings
(every setting), tuning (when tuning happens: the untimed first call before a timed run),
info (`python -m opencl_functions.info`: the devices, the selected one and the host CPU),
and the C++ module _core (bindings.cpp over runtime/ and the host code).

Inputs are float32 CPU tensors (any strides), or tensors of the opencl torch device
(torch_opencl), which that device's operators compute in place on the same
runtime; anything else raises a TypeError or a ValueError that names the argument. OpenCL failures raise OpenCLError, whose message
carries the CL_* status name; a kernel that fails to compile raises KernelBuildError
with the build log. The device is chosen by OCLF_DEVICE (or OCL_DEVICE: "P:D" or part of
a name) on first use; .cl files are read from this folder, or from OCLF_KERNEL_DIR
(OCL_KERNEL_DIR). settings.py lists every setting.

CLBlast's tuned parameters for the selected device, clblast_params/<device slug>.json
(written by `python -m bench.clblast_tune`), are applied before the first product;
OCLF_CLBLAST_PARAMS=0 keeps CLBlast's own, OCLF_CLBLAST_PARAMS=/path.json reads another file.

Host code may tune at first use (runtime/tuning.hpp): the first time a shape runs, a short
measurement picks among a few configurations and the winner is cached per device under
~/.cache/opencl_functions (OCLF_TUNE=0 turns it off, OCLF_TUNE=cache only reads the cache).
Whatever times a workload runs it once untimed first (tuning.warm_up), so that its timings
leave that out.
"""
from __future__ import annotations

import atexit
import os

# torch before the OpenCL libraries _core loads: on a machine with torch 2.11 and PoCL 5
# (the lent H100), importing torch after them crashed the interpreter.
import torch  # noqa: F401

try:
    from . import _core
except ImportError as err:
    # The system libraries _core links: name the package that brings each, not the loader's text.
    for library, packages in (("libOpenCL", "an OpenCL ICD loader and driver (Debian: apt-get install "
                                            "ocl-icd-libopencl1 pocl-opencl-icd)"),
                              ("libclblast", "CLBlast (Debian: apt-get install libclblast1)")):
        if library in str(err):
            raise ImportError(f"opencl_functions needs {packages}: {err}") from err
    raise
from ._core import KernelBuildError, OpenCLError, last_choice
from .devices import current_device, device_count, device_info, list_devices, memory_stats, set_current_device
from .geometry import Conv2dGeometry, conv2d_geometry, conv2d_output_size
from .clblast_params import (
    CLBLAST_PARAMS_DIR,
    apply_clblast_params,
    clblast_parameters,
    clblast_params_file,
    device_slug,
    load_clblast_params,
    read_clblast_params,
    set_clblast_parameters,
)
from .ops import (
    last_kernel_time_ns,
    ocl_conv2d,
    ocl_conv2d_backward_bias,
    ocl_conv2d_backward_input,
    ocl_conv2d_backward_weight,
    ocl_matmul,
)
from .resident import release_resident, resident_bytes, resident_handle

__all__ = [
    "ocl_matmul",
    "ocl_conv2d",
    "ocl_conv2d_backward_input",
    "ocl_conv2d_backward_weight",
    "ocl_conv2d_backward_bias",
    "conv2d_output_size",
    "conv2d_geometry",
    "Conv2dGeometry",
    "device_info",
    "list_devices",
    "device_count",
    "current_device",
    "set_current_device",
    "memory_stats",
    "last_kernel_time_ns",
    "last_choice",
    "resident_bytes",
    "load_clblast_params",
    "apply_clblast_params",
    "read_clblast_params",
    "clblast_params_file",
    "clblast_parameters",
    "set_clblast_parameters",
    "device_slug",
    "CLBLAST_PARAMS_DIR",
    "resident_handle",
    "release_resident",
    "OpenCLError",
    "KernelBuildError",
]

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_core.set_default_kernel_dir(KERNEL_DIR)
# CLBlast keeps its compiled programs in a static cache; released by its destructor at exit,
# after drivers (Oclgrind) tore down their own state, they corrupt the heap. Released here,
# before static destructors run, they do not.
atexit.register(_core.clblast_clear_cache)

# When True, ocl_matmul and ocl_conv2d outputs start as NaN, so elements a kernel never
# writes fail a comparison instead of passing on stale memory. tests.py and the grader
# turn it on; it costs one fill of the output per call.
fill_outputs_with_nan = False
