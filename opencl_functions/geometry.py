"""The geometry of one 2-D convolution, the Python side of launch/geometry.hpp's
Conv2dGeometry: the sizes, stride, dilation and groups, and the output size from one formula.
Every Python path that needs a convolution's output size asks conv2d_geometry(): the
argument checks (checks.py, after validating the shapes), the grader and the benchmarks.

    g = conv2d_geometry((B, C_in, H, W), (C_out, C_in / groups, K_h, K_w), stride, dilation, groups)
    g.output_shape      (B, C_out, H_out, W_out)
    g.macs              multiply-adds: outputs × the length of each output's sum

This module imports nothing, torch included: the course tools load it by path
(grading/library.py) where the package and its compiled module cannot be imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple, Union

IntPair = Union[int, Sequence[int]]


def span(kernel: int, dilation: int) -> int:
    """How many input positions along one axis a kernel of `kernel` taps covers:
    dilation · (kernel - 1) + 1."""
    return dilation * (kernel - 1) + 1


def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length along one axis of an already padded input of length `size`."""
    return (size - span(kernel, dilation)) // stride + 1


@dataclass(frozen=True)
class Conv2dGeometry:
    """x (batch, c_in, h, w), already padded; weight (c_out, c_in / groups, k_h, k_w);
    y (batch, c_out, h_out, w_out)."""

    batch: int
    c_in: int
    h: int
    w: int
    c_out: int
    k_h: int
    k_w: int
    stride: Tuple[int, int]
    dilation: Tuple[int, int]
    groups: int
    h_out: int
    w_out: int

    @property
    def output_shape(self) -> Tuple[int, int, int, int]:
        return self.batch, self.c_out, self.h_out, self.w_out

    @property
    def k_dim(self) -> int:
        """The length of each output's sum: (c_in / groups) · k_h · k_w."""
        return self.c_in // self.groups * self.k_h * self.k_w

    @property
    def macs(self) -> int:
        """Multiply-adds of the whole convolution."""
        return self.batch * self.c_out * self.h_out * self.w_out * self.k_dim


def _pair(value: IntPair) -> Tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def conv2d_geometry(input_shape: Sequence[int], weight_shape: Sequence[int], stride: IntPair = 1,
                    dilation: IntPair = 1, groups: int = 1) -> Conv2dGeometry:
    """The geometry of x of input_shape (B, C_in, H, W), already padded, convolved with a
    weight of weight_shape (C_out, C_in / groups, K_h, K_w). The arguments are taken as
    valid: opencl_functions.checks validates a call's before it asks."""
    batch, c_in, h, w = input_shape
    c_out, _, k_h, k_w = weight_shape
    stride, dilation = _pair(stride), _pair(dilation)
    return Conv2dGeometry(batch, c_in, h, w, c_out, k_h, k_w, stride, dilation, groups,
                          h_out=conv2d_output_size(h, k_h, stride[0], dilation[0]),
                          w_out=conv2d_output_size(w, k_w, stride[1], dilation[1]))
