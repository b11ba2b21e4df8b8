"""The torch-facing operations: tensors in, tensors out, each computed by the C++ module
_core on the OpenCL device after opencl_functions.checks has validated its arguments.
Tensors on the opencl torch device (torch_opencl) are computed in place there,
by the device's operators on the same runtime (its kernels and programs), without a copy to
the host; host tensors go through _core as the course's host code has them.

    ocl_matmul(a, b)                           CLBlast SGEMM (or GEMV for one row)
    ocl_conv2d(x, weight, bias, stride, dilation, groups)
    ocl_conv2d_backward_input / _weight / _bias
    last_kernel_time_ns()                      the last operation's kernel time
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from . import _core
from .checks import IntPair, backward_checks, check_output_size, check_same_device, check_tensor, conv2d_args
from .clblast_params import load_clblast_params
from .resident import resident_handle


def _new_output(*shape: int) -> torch.Tensor:
    """An output tensor: NaN-filled when opencl_functions.fill_outputs_with_nan is set (tests
    and the grader set it), so elements a kernel never writes fail instead of passing on
    stale memory."""
    import opencl_functions

    return torch.full(shape, float("nan")) if opencl_functions.fill_outputs_with_nan else torch.empty(shape)


def last_kernel_time_ns() -> int:
    """Kernel time of the last ocl_matmul or ocl_conv2d call, from OpenCL profiling events."""
    return _core.last_kernel_time_ns()


def _gemm_operand(t: torch.Tensor) -> Tuple[torch.Tensor, int, bool]:
    """A 2-D tensor as (1-D span of its storage, leading dimension, transposed).

    Row-major and transposed (column-major) strides are passed to CLBlast as they are;
    any other layout is copied once."""
    rows, cols = t.shape
    s_row, s_col = t.stride()
    if (cols == 1 or s_col == 1) and (rows == 1 or s_row >= cols):
        stored_rows, stored_cols, ld, trans = rows, cols, (s_row if rows > 1 else cols), False
    elif (rows == 1 or s_row == 1) and (cols == 1 or s_col >= rows):
        stored_rows, stored_cols, ld, trans = cols, rows, (s_col if cols > 1 else rows), True
    else:
        t = t.contiguous()
        stored_rows, stored_cols, ld, trans = rows, cols, cols, False
    span = (stored_rows - 1) * ld + stored_cols
    flat = torch.as_strided(t, (span,), (1,), t.storage_offset())
    return flat, ld, trans


def ocl_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (..., M, K) @ b (K, N) -> (..., M, N), by CLBlast SGEMM on the OpenCL device.

    Leading dimensions of a are folded into M. Transposed inputs (b = w.t(), say) are
    passed to CLBlast as transpose flags, not copied."""
    check_tensor(a, "a", min_ndim=2)
    check_tensor(b, "b", ndim=2)
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"a (..., M, K) and b (K, N) disagree on K: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if check_same_device(a=a, b=b).type == "opencl":
        with torch.no_grad():
            return torch.matmul(a.detach(), b.detach())
    b_param = b  # before detach(), to find the parameter it views
    a, b = a.detach(), b.detach()
    k, n = b.shape
    out_shape = (*a.shape[:-1], n)
    check_output_size(out_shape)
    m = math.prod(a.shape[:-1])  # leading dimensions folded into M
    a2 = a.reshape(m, k)
    if m == 0 or n == 0:
        return torch.empty(out_shape)
    load_clblast_params()
    if k == 0:
        return torch.zeros(out_shape)
    a_flat, lda, a_trans = _gemm_operand(a2)
    b_flat, ldb, b_trans = _gemm_operand(b)
    b_handle = resident_handle(_parameter_behind(b_param, b_flat))
    out = _new_output(m, n)
    _core.matmul(a_flat.numpy(), b_flat.numpy(), out.numpy(), m, n, k, lda, ldb, a_trans, b_trans, b_handle)
    return out.reshape(out_shape)


def _parameter_behind(t: torch.Tensor, flat: torch.Tensor) -> Optional[torch.nn.Parameter]:
    """The nn.Parameter whose whole storage span is `flat` (t itself, or t viewing it as
    weight.t() does), so its resident copy can stand for `flat`; else None."""
    base = t if isinstance(t, torch.nn.Parameter) else t._base
    if (isinstance(base, torch.nn.Parameter) and base.is_contiguous() and base.data_ptr() == flat.data_ptr()
            and base.numel() == flat.numel()):
        return base
    return None


def ocl_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: IntPair = (1, 1),
    dilation: IntPair = (1, 1),
    groups: int = 1,
) -> torch.Tensor:
    """conv2d of an already padded x (B, C_in, H, W) with weight (C_out, C_in/groups, K_h, K_w)
    and optional bias (C_out,), by the kernel in conv2d.cl. Returns (B, C_out, H_out, W_out)."""
    geometry = conv2d_args(x, weight, bias, stride, dilation, groups)
    shape = geometry.output_shape
    if check_same_device(x=x, weight=weight, bias=bias).type == "opencl":
        with torch.no_grad():
            return torch.nn.functional.conv2d(x.detach(), weight.detach(), None if bias is None else bias.detach(),
                                              geometry.stride, 0, geometry.dilation, geometry.groups)

    if geometry.batch == 0 or geometry.c_out == 0:
        return torch.empty(shape)
    if geometry.c_in == 0:  # no inputs to sum: the output is the bias
        out = torch.zeros(shape)
        return out + bias.detach().view(1, -1, 1, 1) if bias is not None else out

    weight_handle, bias_handle = resident_handle(weight), resident_handle(bias)
    x = x.detach().contiguous()
    weight = weight.detach().contiguous()
    bias_np = bias.detach().contiguous().numpy() if bias is not None else None
    out = _new_output(*shape)
    arguments = (*geometry.stride, *geometry.dilation, geometry.groups)
    if weight_handle or bias_handle:
        _core.conv2d_resident(x.numpy(), weight.numpy(), bias_np, out.numpy(), *arguments, weight_handle, bias_handle)
    else:
        _core.conv2d(x.numpy(), weight.numpy(), bias_np, out.numpy(), *arguments)
    return out


def ocl_conv2d_backward_input(
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    input_shape: Sequence[int],
    stride: IntPair = (1, 1),
    dilation: IntPair = (1, 1),
    groups: int = 1,
    variant: str = "auto",
) -> torch.Tensor:
    """Gradient of ocl_conv2d with respect to its (padded) input x of shape input_shape
    (B, C_in, H, W), from grad_out (B, C_out, H_out, W_out) and weight
    (C_out, C_in/groups, K_h, K_w). variant picks the kernel version ('direct', 'tiled')
    or lets the channel counts decide ('auto')."""
    check_tensor(weight, "weight", ndim=4)
    input_shape = tuple(input_shape)
    geometry = backward_checks(
        input_shape, tuple(weight.shape), grad_out, stride, dilation, groups, variant, "input_shape", "weight"
    )
    if check_same_device(grad_out=grad_out, weight=weight).type == "opencl":  # the device picks its kernels
        with torch.no_grad():
            return torch.nn.grad.conv2d_input(input_shape, weight.detach(), grad_out.detach(), geometry.stride, 0,
                                              geometry.dilation, geometry.groups)
    grad_input = torch.zeros(input_shape)
    if grad_out.numel() == 0 or weight.numel() == 0:
        return grad_input
    grad_out = grad_out.detach().contiguous()
    weight = weight.detach().contiguous()
    _core.conv2d_backward_input(grad_out.numpy(), weight.numpy(), grad_input.numpy(), *geometry.stride,
                                *geometry.dilation, geometry.groups, variant)
    return grad_input


def ocl_conv2d_backward_weight(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    weight_shape: Sequence[int],
    stride: IntPair = (1, 1),
    dilation: IntPair = (1, 1),
    groups: int = 1,
    variant: str = "auto",
) -> torch.Tensor:
    """Gradient of ocl_conv2d with respect to its weight of shape weight_shape
    (C_out, C_in/groups, K_h, K_w), from the padded x (B, C_in, H, W) and grad_out
    (B, C_out, H_out, W_out). variant as in ocl_conv2d_backward_input."""
    check_tensor(x, "x", ndim=4)
    weight_shape = tuple(weight_shape)
    geometry = backward_checks(
        tuple(x.shape), weight_shape, grad_out, stride, dilation, groups, variant, "x", "weight_shape"
    )
    if check_same_device(x=x, grad_out=grad_out).type == "opencl":  # the device picks its kernels
        with torch.no_grad():
            return torch.nn.grad.conv2d_weight(x.detach(), weight_shape, grad_out.detach(), geometry.stride, 0,
                                               geometry.dilation, geometry.groups)
    grad_weight = torch.zeros(weight_shape)
    if grad_out.numel() == 0 or x.numel() == 0 or grad_weight.numel() == 0:
        return grad_weight
    x = x.detach().contiguous()
    grad_out = grad_out.detach().contiguous()
    _core.conv2d_backward_weight(x.numpy(), grad_out.numpy(), grad_weight.numpy(), *geometry.stride,
                                 *geometry.dilation, geometry.groups, variant)
    return grad_weight


def ocl_conv2d_backward_bias(grad_out: torch.Tensor) -> torch.Tensor:
    """Gradient of ocl_conv2d with respect to its bias: grad_out (B, C_out, H_out, W_out)
    summed over B, H_out and W_out, by a reduction kernel. Returns (C_out,)."""
    check_tensor(grad_out, "grad_out", ndim=4)
    if grad_out.device.type == "opencl":
        with torch.no_grad():
            return grad_out.detach().sum((0, 2, 3))
    grad_bias = torch.zeros(grad_out.shape[1])
    if grad_out.numel() == 0:
        return grad_bias
    _core.conv2d_backward_bias(grad_out.detach().contiguous().numpy(), grad_bias.numpy())
    return grad_bias
