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
from opencl_functions import _core

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")


def _prepare(x, weight, bias, stride, dilation, groups):
    """Checked, contiguous float32 inputs and the output tensor to fill."""
    stride = opencl_functions._pair(stride, "stride")
    dilation = opencl_functions._pair(dilation, "dilation")
    for name, t in (("x", x), ("weight", weight)):
        opencl_functions._check_tensor(t, name, ndim=4)
    if bias is not None:
        opencl_functions._check_tensor(bias, "bias", ndim=1)
    batch, _, h, w = x.shape
    c_out, _, k_h, k_w = weight.shape
    h_out = opencl_functions.conv2d_output_size(h, k_h, stride[0], dilation[0])
    w_out = opencl_functions.conv2d_output_size(w, k_w, stride[1], dilation[1])
    if h_out < 1 or w_out < 1:
        raise ValueError(f"weight {tuple(weight.shape)} is larger than the padded input {h}x{w}")
    out = torch.empty(batch, c_out, h_out, w_out)
    x = x.detach().contiguous()
    weight = weight.detach().contiguous()
    bias_np = bias.detach().contiguous().numpy() if bias is not None else None
    return x, weight, bias_np, out, stride, dilation


def _from_file(name, local, x, weight, bias, stride, dilation, groups):
    x, weight, bias_np, out, stride, dilation = _prepare(x, weight, bias, stride, dilation, groups)
    options = f"-DTILE={local}" if local else ""
    _core.conv2d_from_file(
        os.path.join(KERNELS, name + ".cl"), name, options, local, local,
        x.numpy(), weight.numpy(), bias_np, out.numpy(), *stride, *dilation, groups,
    )
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
    return _from_file("conv2d_naive", 0, x, weight, bias, stride, dilation, groups)


def clblast_convgemm(x: torch.Tensor, weight: torch.Tensor, stride=(1, 1), dilation=(1, 1)) -> Tuple[torch.Tensor, int]:
    """conv2d by CLBlast's Convgemm (groups=1, no bias): (out, kernel time in ns)."""
    x, weight, _, out, stride, dilation = _prepare(x, weight, None, stride, dilation, 1)
    opencl_functions.load_clblast_params()
    _core.convgemm(x.numpy(), weight.numpy(), out.numpy(), *stride, *dilation)
    return out, opencl_functions.last_kernel_time_ns()
