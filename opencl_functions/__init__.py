"""OpenCL operations on PyTorch tensors.

    ocl_matmul(a, b)                 CLBlast SGEMM: a (..., M, K) @ b (K, N)
    ocl_conv2d(x, weight, bias=None, stride=1, dilation=1, groups=1)
                                     conv2d.cl on an already padded x (B, C_in, H, W)
    ocl_conv2d_backward_input(grad_out, weight, input_shape, stride=1, dilation=1, groups=1)
    ocl_conv2d_backward_weight(x, grad_out, weight_shape, stride=1, dilation=1, groups=1)
    ocl_conv2d_backward_bias(grad_out)
                                     conv2d's gradients, by conv2d_backward.cl
    device_info(), list_devices()    the selected OpenCL device, and all of them
    load_clblast_params(), set_clblast_parameters(params), clblast_parameters(kernels)
                                     CLBlast's tuning parameters (see below)

Parameters (nn.Parameter weights and biases) stay on the device between calls, keyed by
the tensor and its version counter, and are freed with the tensor (resident_handle).

Inputs are float32 CPU tensors (any strides); anything else raises a TypeError or a
ValueError that names the argument. OpenCL failures raise OpenCLError, whose message
carries the CL_* status name; a kernel that fails to compile raises KernelBuildError
with the build log. The device is chosen by OCL_DEVICE ("P:D" or part of a name) on
first use; .cl files are read from this folder, or from OCL_KERNEL_DIR.

CLBlast's tuned parameters for the selected device, clblast_params/<device slug>.json
(written by `python -m grading.clblast_tune`), are applied before the first product;
OCLF_CLBLAST_PARAMS=0 keeps CLBlast's own, OCLF_CLBLAST_PARAMS=/path.json reads another file.
"""
from __future__ import annotations

import json
import math
import operator
import os
import re
import weakref
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _core
from ._core import KernelBuildError, OpenCLError, device_info, list_devices, memory_stats

__all__ = [
    "ocl_matmul",
    "ocl_conv2d",
    "ocl_conv2d_backward_input",
    "ocl_conv2d_backward_weight",
    "ocl_conv2d_backward_bias",
    "device_info",
    "list_devices",
    "memory_stats",
    "last_kernel_time_ns",
    "resident_bytes",
    "load_clblast_params",
    "apply_clblast_params",
    "clblast_params_file",
    "clblast_parameters",
    "set_clblast_parameters",
    "resident_handle",
    "release_resident",
    "OpenCLError",
    "KernelBuildError",
]

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_core.set_default_kernel_dir(KERNEL_DIR)

# Kernels index with 32-bit ints.
_MAX_ELEMENTS = 2**31 - 1

IntPair = Union[int, Sequence[int]]


# When True, ocl_matmul and ocl_conv2d outputs start as NaN, so elements a kernel never
# writes fail a comparison instead of passing on stale memory. tests.py and the grader
# turn it on; it costs one fill of the output per call.
fill_outputs_with_nan = False


def _new_output(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan")) if fill_outputs_with_nan else torch.empty(shape)


def last_kernel_time_ns() -> int:
    """Kernel time of the last ocl_matmul or ocl_conv2d call, from OpenCL profiling events."""
    return _core.last_kernel_time_ns()


def _check_tensor(t, name: str, ndim: Optional[int] = None, min_ndim: Optional[int] = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout {t.layout}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {t.dtype}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU, got device {t.device}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {tuple(t.shape)}")
    if t.numel() > _MAX_ELEMENTS:
        raise ValueError(f"{name} has {t.numel()} elements; at most {_MAX_ELEMENTS} are supported")


def _check_output_size(shape: Tuple[int, ...]) -> None:
    if math.prod(shape) > _MAX_ELEMENTS:
        raise ValueError(f"the output {tuple(shape)} would have {math.prod(shape)} elements; "
                         f"at most {_MAX_ELEMENTS} are supported")


def _int(value, name: str, expected: str, given) -> int:
    """value as an int (a Python or NumPy integer, not a bool), else a TypeError naming `name`."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name} must be {expected}, got {given!r}")


def _pair(value: IntPair, name: str) -> Tuple[int, int]:
    items = list(value) if isinstance(value, (tuple, list, torch.Size)) else [value, value]
    if len(items) != 2:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    pair = tuple(_int(v, name, "an int or a pair of ints", value) for v in items)
    if min(pair) < 1:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


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
    _check_tensor(a, "a", min_ndim=2)
    _check_tensor(b, "b", ndim=2)
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"a (..., M, K) and b (K, N) disagree on K: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    b_param = b  # before detach(), to find the parameter it views
    a, b = a.detach(), b.detach()
    k, n = b.shape
    out_shape = (*a.shape[:-1], n)
    _check_output_size(out_shape)
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


def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length of a convolution along one axis of an already padded input."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _conv_geometry(
    input_shape: Tuple[int, ...],
    weight_shape: Tuple[int, ...],
    stride: IntPair,
    dilation: IntPair,
    groups: int,
    input_name: str,
    weight_name: str,
) -> Tuple[Tuple[int, int], Tuple[int, int], int, Tuple[int, int, int, int]]:
    """Checks that an input (B, C_in, H, W), already padded, and a weight
    (C_out, C_in/groups, K_h, K_w) make one convolution; returns the checked
    (stride, dilation, groups) and the output shape (B, C_out, H_out, W_out)."""
    stride = _pair(stride, "stride")
    dilation = _pair(dilation, "dilation")
    groups = _int(groups, "groups", "an int", groups)
    if groups < 1:
        raise ValueError(f"groups must be positive, got {groups}")
    batch, c_in, h, w = input_shape
    c_out, cin_per_group, k_h, k_w = weight_shape
    if c_in != cin_per_group * groups:
        raise ValueError(
            f"{input_name} has {c_in} channels but {weight_name} {weight_shape} with groups={groups} expects "
            f"{cin_per_group * groups} (C_in/groups={cin_per_group} per group)"
        )
    if c_out % groups:
        raise ValueError(f"{weight_name} has {c_out} output channels, not divisible by groups={groups}")
    if k_h < 1 or k_w < 1:
        raise ValueError(f"{weight_name} must have a kernel of at least 1x1, got shape {weight_shape}")
    extent_h, extent_w = dilation[0] * (k_h - 1) + 1, dilation[1] * (k_w - 1) + 1
    if extent_h > h or extent_w > w:
        raise ValueError(
            f"kernel {k_h}x{k_w} with dilation {dilation} spans {extent_h}x{extent_w}, "
            f"larger than the padded input {h}x{w}"
        )
    out_shape = (batch, c_out, conv2d_output_size(h, k_h, stride[0], dilation[0]),
                 conv2d_output_size(w, k_w, stride[1], dilation[1]))
    return stride, dilation, groups, out_shape


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
    _check_tensor(x, "x", ndim=4)
    _check_tensor(weight, "weight", ndim=4)
    if bias is not None:
        _check_tensor(bias, "bias", ndim=1)
    stride, dilation, groups, (batch, c_out, h_out, w_out) = _conv_geometry(
        tuple(x.shape), tuple(weight.shape), stride, dilation, groups, "x", "weight"
    )
    c_in = x.shape[1]
    if bias is not None and bias.shape[0] != c_out:
        raise ValueError(f"bias must have C_out={c_out} elements, got shape {tuple(bias.shape)}")
    _check_output_size((batch, c_out, h_out, w_out))

    if batch == 0 or c_out == 0:
        return torch.empty(batch, c_out, h_out, w_out)
    if c_in == 0:  # no inputs to sum: the output is the bias
        out = torch.zeros(batch, c_out, h_out, w_out)
        return out + bias.detach().view(1, -1, 1, 1) if bias is not None else out

    weight_handle, bias_handle = resident_handle(weight), resident_handle(bias)
    x = x.detach().contiguous()
    weight = weight.detach().contiguous()
    bias_np = bias.detach().contiguous().numpy() if bias is not None else None
    out = _new_output(batch, c_out, h_out, w_out)
    if weight_handle or bias_handle:
        _core.conv2d_resident(x.numpy(), weight.numpy(), bias_np, out.numpy(), *stride, *dilation, groups,
                              weight_handle, bias_handle)
    else:
        _core.conv2d(x.numpy(), weight.numpy(), bias_np, out.numpy(), *stride, *dilation, groups)
    return out


_VARIANTS = ("auto", "direct", "tiled")


def _conv2d_backward_checks(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    grad_out: torch.Tensor,
    stride: IntPair,
    dilation: IntPair,
    groups: int,
    variant: str,
    input_name: str,
    weight_name: str,
) -> Tuple[Tuple[int, int], Tuple[int, int], int]:
    """Validates one convolution's shapes for a backward call; returns (stride, dilation, groups)."""
    _check_tensor(grad_out, "grad_out", ndim=4)
    for shape, name in ((input_shape, input_name), (weight_shape, weight_name)):
        if len(shape) != 4 or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise TypeError(f"{name} must be 4 ints, got {tuple(shape)!r}")
    if variant not in _VARIANTS:
        raise ValueError(f"variant must be one of {_VARIANTS}, got {variant!r}")
    stride, dilation, groups, expected = _conv_geometry(
        input_shape, weight_shape, stride, dilation, groups, input_name, weight_name
    )
    if tuple(grad_out.shape) != expected:
        raise ValueError(f"grad_out must be {expected} (B, C_out, H_out, W_out), got {tuple(grad_out.shape)}")
    return stride, dilation, groups


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
    _check_tensor(weight, "weight", ndim=4)
    input_shape = tuple(input_shape)
    stride, dilation, groups = _conv2d_backward_checks(
        input_shape, tuple(weight.shape), grad_out, stride, dilation, groups, variant, "input_shape", "weight"
    )
    grad_input = torch.zeros(input_shape)
    if grad_out.numel() == 0 or weight.numel() == 0:
        return grad_input
    grad_out = grad_out.detach().contiguous()
    weight = weight.detach().contiguous()
    _core.conv2d_backward_input(grad_out.numpy(), weight.numpy(), grad_input.numpy(), *stride, *dilation, groups,
                                variant)
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
    _check_tensor(x, "x", ndim=4)
    weight_shape = tuple(weight_shape)
    stride, dilation, groups = _conv2d_backward_checks(
        tuple(x.shape), weight_shape, grad_out, stride, dilation, groups, variant, "x", "weight_shape"
    )
    grad_weight = torch.zeros(weight_shape)
    if grad_out.numel() == 0 or x.numel() == 0 or grad_weight.numel() == 0:
        return grad_weight
    x = x.detach().contiguous()
    grad_out = grad_out.detach().contiguous()
    _core.conv2d_backward_weight(x.numpy(), grad_out.numpy(), grad_weight.numpy(), *stride, *dilation, groups,
                                 variant)
    return grad_weight


def ocl_conv2d_backward_bias(grad_out: torch.Tensor) -> torch.Tensor:
    """Gradient of ocl_conv2d with respect to its bias: grad_out (B, C_out, H_out, W_out)
    summed over B, H_out and W_out, by a reduction kernel. Returns (C_out,)."""
    _check_tensor(grad_out, "grad_out", ndim=4)
    grad_bias = torch.zeros(grad_out.shape[1])
    if grad_out.numel() == 0:
        return grad_bias
    _core.conv2d_backward_bias(grad_out.detach().contiguous().numpy(), grad_bias.numpy())
    return grad_bias


class _Resident:
    """The device copy of one parameter: its handle and what it was copied from."""

    __slots__ = ("handle", "version", "data_ptr", "shape", "stride", "__weakref__")

    def __init__(self):
        self.handle = 0


# id(tensor) -> its device copy; a finalizer on the tensor removes the entry (tensors
# compare elementwise, so a WeakKeyDictionary cannot hold them).
_residents: Dict[int, _Resident] = {}


def _release(entry: _Resident) -> None:
    if entry.handle:
        _core.resident_release(entry.handle)
        entry.handle = 0


def _forget(key: int, entry: _Resident) -> None:
    _release(entry)
    if _residents.get(key) is entry:
        del _residents[key]


def resident_handle(t: Optional[torch.Tensor]) -> int:
    """The handle of a device copy of parameter t that stays between calls (0: none).

    Only nn.Parameter tensors are kept, contiguous ones. The copy is keyed by the tensor,
    its data pointer and its version counter: an in-place change (an optimizer step)
    bumps the version and the next call uploads again. The copy is freed when the
    tensor is garbage collected. Changes that bypass the version counter (writing
    through .data or a NumPy view) are not seen: call release_resident(t) after them."""
    if not isinstance(t, torch.nn.Parameter) or not t.is_contiguous() or t.numel() == 0:
        return 0
    entry = _residents.get(id(t))
    key = (t._version, t.data_ptr(), tuple(t.shape))
    if entry is not None and entry.handle and (entry.version, entry.data_ptr, entry.shape) == key:
        return entry.handle
    if entry is None:
        entry = _Resident()
        _residents[id(t)] = entry
        weakref.finalize(t, _forget, id(t), entry).atexit = False
    _release(entry)
    entry.handle = _core.resident_upload(t.detach().reshape(-1).numpy())
    entry.version, entry.data_ptr, entry.shape = key
    return entry.handle


def release_resident(t: torch.Tensor) -> None:
    """Frees t's device copy now (the next call uploads it again)."""
    entry = _residents.get(id(t))
    if entry is not None:
        _release(entry)


def resident_bytes() -> int:
    """Device bytes held by resident parameters (and their packed forms)."""
    return _core.resident_bytes()


# CLBlast's tuning parameters: {kernel: {parameter: value}}, kernel names as CLBlast's
# database spells them ("Xgemm", "XgemmDirect", "GemmRoutine", "Xgemv", "Copy", ...).
KernelParams = Dict[str, Dict[str, int]]

CLBLAST_PARAMS_DIR = os.path.join(KERNEL_DIR, "clblast_params")


def device_slug(name: str) -> str:
    """A file name for a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def clblast_params_file() -> Optional[str]:
    """The CLBlast parameter file for the selected device: OCLF_CLBLAST_PARAMS if set
    (None when it is "0"), else clblast_params/<device slug>.json where it exists."""
    env = os.environ.get("OCLF_CLBLAST_PARAMS", "")
    if env:
        return None if env == "0" else env
    path = os.path.join(CLBLAST_PARAMS_DIR, device_slug(device_info()["device"]) + ".json")
    return path if os.path.exists(path) else None


def read_clblast_params(path: str) -> KernelParams:
    """The "kernels" table of a parameter file: {kernel: {parameter: value}}."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the CLBlast parameter file {path}: {err}") from None
    kernels = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(kernels, dict):
        raise ValueError(f"{path}: expected a JSON object with a 'kernels' object")
    for kernel, params in kernels.items():
        if not isinstance(params, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in params.values()
        ):
            raise ValueError(f"{path}: kernel '{kernel}' must map parameter names to non-negative ints, "
                             f"got {params!r}")
    return kernels


def clblast_parameters(kernels: Iterable[str]) -> KernelParams:
    """CLBlast's current parameters of the named kernels (its database's, or the last override)."""
    return {kernel: _core.clblast_parameters(kernel) for kernel in kernels}


def set_clblast_parameters(params: Mapping[str, Mapping[str, int]]) -> KernelParams:
    """Applies {kernel: {parameter: value}}, each entry complete, for the selected device;
    returns the parameters it replaced (pass them back to restore). A bad entry raises
    ValueError naming the kernel and changes nothing."""
    previous = clblast_parameters(params)
    _core.clblast_override({kernel: dict(values) for kernel, values in params.items()})
    return previous


def apply_clblast_params(path: str) -> KernelParams:
    """Applies a parameter file; returns the parameters it replaced. A bad file raises
    ValueError naming the file and the kernel, and changes nothing."""
    kernels = read_clblast_params(path)
    try:
        return set_clblast_parameters(kernels)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


_clblast_params_loaded = False
_clblast_params_path: Optional[str] = None


def load_clblast_params() -> Optional[str]:
    """Applies clblast_params_file() once per process (ocl_matmul calls this before its
    first product); returns the file applied, or None."""
    global _clblast_params_loaded, _clblast_params_path
    if not _clblast_params_loaded:
        path = clblast_params_file()
        if path is not None:
            apply_clblast_params(path)
        _clblast_params_loaded, _clblast_params_path = True, path
    return _clblast_params_path
