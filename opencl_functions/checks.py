"""Argument checks of every operation, in one place and with one set of messages (the
tests assert them): tensors, ints and pairs, and the shapes of one convolution, whose
checked geometry (geometry.Conv2dGeometry) they return. The C++ binding relies on them and
only guards memory safety.
"""
from __future__ import annotations

import math
import operator
from typing import Optional, Sequence, Tuple

import torch

from .geometry import Conv2dGeometry, IntPair, conv2d_geometry, span

# Kernels index with 32-bit ints.
MAX_ELEMENTS = 2**31 - 1

VARIANTS = ("auto", "direct", "tiled")


# Where the operations take tensors: host memory, or the opencl device (computed there in
# place by the device's own operators, on the same runtime).
DEVICE_TYPES = ("cpu", "opencl")


def check_tensor(t, name: str, ndim: Optional[int] = None, min_ndim: Optional[int] = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout {t.layout}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {t.dtype}")
    if t.device.type not in DEVICE_TYPES:
        raise ValueError(f"{name} must be on the CPU or an opencl device, got device {t.device}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {tuple(t.shape)}")
    if t.numel() > MAX_ELEMENTS:
        raise ValueError(f"{name} has {t.numel()} elements; at most {MAX_ELEMENTS} are supported")


def check_same_device(**tensors: Optional[torch.Tensor]) -> torch.device:
    """The one device of the given tensors (None ones left out); a ValueError naming them when
    they lie on two."""
    given = {name: t.device for name, t in tensors.items() if t is not None}
    devices = set(given.values())
    if len(devices) > 1:
        where = ", ".join(f"{name} on {device}" for name, device in given.items())
        raise ValueError(f"the tensors must be on one device, got {where}")
    return devices.pop()


def check_output_size(shape: Tuple[int, ...]) -> None:
    if math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"the output {tuple(shape)} would have {math.prod(shape)} elements; "
                         f"at most {MAX_ELEMENTS} are supported")


def as_int(value, name: str, expected: str, given) -> int:
    """value as an int (a Python or NumPy integer, not a bool), else a TypeError naming `name`."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name} must be {expected}, got {given!r}")


def pair(value: IntPair, name: str) -> Tuple[int, int]:
    items = list(value) if isinstance(value, (tuple, list, torch.Size)) else [value, value]
    if len(items) != 2:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    pair = tuple(as_int(v, name, "an int or a pair of ints", value) for v in items)
    if min(pair) < 1:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


def conv_geometry(
    input_shape: Tuple[int, ...],
    weight_shape: Tuple[int, ...],
    stride: IntPair,
    dilation: IntPair,
    groups: int,
    input_name: str,
    weight_name: str,
) -> Conv2dGeometry:
    """Checks that an input (B, C_in, H, W), already padded, and a weight
    (C_out, C_in/groups, K_h, K_w) make one convolution; returns its geometry (stride,
    dilation and groups checked, the output shape (B, C_out, H_out, W_out) computed)."""
    stride = pair(stride, "stride")
    dilation = pair(dilation, "dilation")
    groups = as_int(groups, "groups", "an int", groups)
    if groups < 1:
        raise ValueError(f"groups must be positive, got {groups}")
    _, c_in, h, w = input_shape
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
    extent_h, extent_w = span(k_h, dilation[0]), span(k_w, dilation[1])
    if extent_h > h or extent_w > w:
        raise ValueError(
            f"kernel {k_h}x{k_w} with dilation {dilation} spans {extent_h}x{extent_w}, "
            f"larger than the padded input {h}x{w}"
        )
    return conv2d_geometry(input_shape, weight_shape, stride, dilation, groups)


def backward_checks(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    grad_out: torch.Tensor,
    stride: IntPair,
    dilation: IntPair,
    groups: int,
    variant: str,
    input_name: str,
    weight_name: str,
) -> Conv2dGeometry:
    """Validates one convolution's shapes for a backward call; returns its geometry."""
    check_tensor(grad_out, "grad_out", ndim=4)
    for shape, name in ((input_shape, input_name), (weight_shape, weight_name)):
        if len(shape) != 4 or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise TypeError(f"{name} must be 4 ints, got {tuple(shape)!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    geometry = conv_geometry(input_shape, weight_shape, stride, dilation, groups, input_name, weight_name)
    if tuple(grad_out.shape) != geometry.output_shape:
        raise ValueError(f"grad_out must be {geometry.output_shape} (B, C_out, H_out, W_out), "
                         f"got {tuple(grad_out.shape)}")
    return geometry


def conv2d_args(x, weight, bias, stride, dilation, groups) -> Conv2dGeometry:
    """Checks an ocl_conv2d call: x (B, C_in, H, W) already padded, weight
    (C_out, C_in/groups, K_h, K_w), bias (C_out,) or None. Returns its geometry."""
    check_tensor(x, "x", ndim=4)
    check_tensor(weight, "weight", ndim=4)
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
    geometry = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, dilation, groups, "x", "weight")
    if bias is not None and bias.shape[0] != geometry.c_out:
        raise ValueError(f"bias must have C_out={geometry.c_out} elements, got shape {tuple(bias.shape)}")
    check_output_size(geometry.output_shape)
    return geometry
