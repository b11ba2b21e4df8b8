"""Differentiable linear and conv2d on OpenCL, as the patched layers call them.

Both take what their torch.nn.functional twins take. The forward pass runs on OpenCL
(ocl_matmul, ocl_conv2d). Inputs OpenCL cannot take (not float32, or not on the CPU)
run through torch instead, with one warning per reason, never silently wrong.

Backward runs on OpenCL too: linear's gradients are CLBlast matmuls (the bias gradient
as ones (1, rows) @ grad_out), conv2d's grad_input, grad_weight and grad_bias come from the kernels of
opencl_functions/conv2d_backward.cl.
"""
from __future__ import annotations

import warnings
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from opencl_functions import (
    ocl_conv2d,
    ocl_conv2d_backward_bias,
    ocl_conv2d_backward_input,
    ocl_conv2d_backward_weight,
    ocl_matmul,
)


class OpenCLFallbackWarning(UserWarning):
    """An input the OpenCL path cannot take ran through torch instead."""


_warned: set = set()


def fallback_reason(*tensors: Optional[torch.Tensor]) -> Optional[str]:
    """Why these tensors cannot go through OpenCL, or None when they can."""
    for t in tensors:
        if t is None:
            continue
        if t.dtype != torch.float32:
            return f"dtype {t.dtype} (OpenCL path takes float32)"
        if t.device.type != "cpu":
            return f"device {t.device.type} (OpenCL path takes CPU tensors)"
    return None


def _warn_once(op: str, reason: str) -> None:
    key = (op, reason)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"{op}: {reason}; running torch's {op} instead", OpenCLFallbackWarning, stacklevel=3)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias):
        ctx.save_for_backward(input, weight)
        ctx.has_bias = bias is not None
        out = ocl_matmul(input, weight.t())  # (..., in) @ (in, out)
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx, grad_out):
        input, weight = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = ocl_matmul(grad_out, weight)  # (..., out) @ (out, in)
        if ctx.needs_input_grad[1]:
            g2 = grad_out.reshape(-1, grad_out.shape[-1])
            x2 = input.reshape(-1, input.shape[-1])
            grad_weight = ocl_matmul(g2.t(), x2)  # (out, rows) @ (rows, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            g2 = grad_out.reshape(-1, grad_out.shape[-1])
            grad_bias = ocl_matmul(torch.ones(1, g2.shape[0]), g2).reshape(-1)  # (1, rows) @ (rows, out)
        return grad_input, grad_weight, grad_bias


class _Conv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, stride, dilation, groups):
        ctx.save_for_backward(input, weight)
        ctx.conf = (stride, dilation, groups, bias is not None)
        return ocl_conv2d(input, weight, bias, stride, dilation, groups)

    @staticmethod
    def backward(ctx, grad_out):
        input, weight = ctx.saved_tensors
        stride, dilation, groups, has_bias = ctx.conf
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = ocl_conv2d_backward_input(grad_out, weight, tuple(input.shape), stride, dilation, groups)
        if ctx.needs_input_grad[1]:
            grad_weight = ocl_conv2d_backward_weight(input, grad_out, tuple(weight.shape), stride, dilation, groups)
        if has_bias and ctx.needs_input_grad[2]:
            grad_bias = ocl_conv2d_backward_bias(grad_out)
        return grad_input, grad_weight, grad_bias, None, None, None


def linear(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """torch.nn.functional.linear on OpenCL: input (..., in), weight (out, in), bias (out,)."""
    reason = fallback_reason(input, weight, bias)
    if reason:
        _warn_once("linear", reason)
        return F.linear(input, weight, bias)
    if input.dim() == 1:  # an unbatched (in,) input, as F.linear allows
        return _Linear.apply(input.unsqueeze(0), weight, bias).squeeze(0)
    return _Linear.apply(input, weight, bias)


def conv2d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: Union[int, Tuple[int, int]] = (1, 1),
    dilation: Union[int, Tuple[int, int]] = (1, 1),
    groups: int = 1,
) -> torch.Tensor:
    """torch.nn.functional.conv2d on OpenCL for an already padded input (B, C_in, H, W)."""
    reason = fallback_reason(input, weight, bias)
    if reason:
        _warn_once("conv2d", reason)
        return F.conv2d(input, weight, bias, stride, 0, dilation, groups)
    return _Conv2d.apply(input, weight, bias, _pair(stride), _pair(dilation), groups)
