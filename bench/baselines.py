"""Baseline conv2d implementations that our kernel is compared with, all run on the
selected OpenCL device through the same queue and timed with OpenCL profiling events:

    naive_conv2d(x, weight, bias, stride, dilation, groups) -> (out, kernel_ns)
        one output per work-item (grading/kernels/conv2d_naive.cl)
    clblast_convgemm(x, weight, stride, dilation) -> (out, kernel_ns)
        CLBlast's Convgemm, groups=1, no bias

x is (B, C_in, H, W) and already padded, as for opencl_functions.ocl_conv2d.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch

import opencl_functions
from opencl_functions import _core, checks

# The naive kernel is the grader's lowest rung too (grading/ladder/naive.toml).
KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grading", "kernels")


def _prepare(x, weight, bias, stride, dilation, groups):
    """Checked (opencl_functions.checks, as ocl_conv2d checks them), contiguous float32
    inputs and the output tensor to fill."""
    geometry = checks.conv2d_args(x, weight, bias, stride, dilation, groups)
    out = torch.empty(geometry.output_shape)
    x = x.detach().contiguous()
    weight = weight.detach().contiguous()
    bias_np = bias.detach().contiguous().numpy() if bias is not None else None
    return x, weight, bias_np, out, geometry.stride, geometry.dilation


def _from_file(name, x, weight, bias, stride, dilation, groups):
    x, weight, bias_np, out, stride, dilation = _prepare(x, weight, bias, stride, dilation, groups)
    _core.conv2d_from_file(os.path.join(KERNELS, name + ".cl"), name, "", x.numpy(), weight.numpy(), bias_np,
                           out.numpy(), *stride, *dilation, groups)
    return out, opencl_functions.last_kernel_time_ns()


def naive_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride=(1, 1),
    dilation=(1, 1),
    groups: int = 1,
) -> Tuple[torch.Tensor, int]:
    """conv2d by the naive one-output-per-work-item kernel: (out, kernel time in ns)."""
    return _from_file("conv2d_naive", x, weight, bias, stride, dilation, groups)


def clblast_convgemm(x: torch.Tensor, weight: torch.Tensor, stride=(1, 1), dilation=(1, 1)) -> Tuple[torch.Tensor, int]:
    """conv2d by CLBlast's Convgemm (groups=1, no bias): (out, kernel time in ns)."""
    x, weight, _, out, stride, dilation = _prepare(x, weight, None, stride, dilation, 1)
    opencl_functions.load_clblast_params()
    _core.convgemm(x.numpy(), weight.numpy(), out.numpy(), *stride, *dilation)
    return out, opencl_functions.last_kernel_time_ns()
