// The backward pass of conv2d on OpenCL (kernels in conv2d_backward.cl): the gradients
// with respect to the padded input, the weights and the bias. The Python side
// (opencl_functions/checks.py) validates every argument first, so these functions may assume
// consistent shapes, positive sizes and valid pointers. All arrays are float32,
// row-major and contiguous; every function blocks until its result is in host memory.
// The launches are launch/gradients.hpp's, which the opencl device runs too.
#pragma once

#include <string>

#include "launch/geometry.hpp"
#include "launch/gradients.hpp"

namespace oclf {

// Which kernel version runs: "auto" picks by the channel counts; "direct" (v1) and
// "tiled" (v2) force one (for tests and benchmarks).
using BackwardVariant = gradients::Variant;
using gradients::parse_variant;

// grad_input (batch, c_in, h, w) from grad_out (batch, c_out, h_out, w_out) and weight.
void conv2d_backward_input(const Conv2dGeometry& s, const float* grad_out, const float* weight, float* grad_input,
                           BackwardVariant variant);
// grad_weight (c_out, c_in / groups, k_h, k_w) from x and grad_out.
void conv2d_backward_weight(const Conv2dGeometry& s, const float* x, const float* grad_out, float* grad_weight,
                            BackwardVariant variant);
// grad_bias (c_out) = grad_out summed over batch and pixels.
void conv2d_backward_bias(int batch, int c_out, int out_area, const float* grad_out, float* grad_bias);

}  // namespace oclf
