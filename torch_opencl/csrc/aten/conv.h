// Convolution on the opencl device: what the forward (conv.cpp) and the backward
// (conv_backward.cpp) share: padding, the path settings and the forward convolutions, on
// which the backward runs its gradients too. The kernels and their choice are the
// reference's (opencl_functions/reference/conv2d.hpp), launched through DeviceLauncher.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "opencl_functions/launch/geometry.hpp"
#include "opencl_functions/launch/launcher.hpp"
#include "tensors.h"
#include "kernel_launch.h"

namespace oclf::device::conv {

// The library's kernels take whole buffers: a tensor with an offset is copied first.
at::Tensor whole(const at::Tensor& t);
// x (B, C, H, W), any strides, zero-padded by (ph, pw) on each side: contiguous, at offset 0.
at::Tensor padded(const at::Tensor& x, int64_t ph, int64_t pw);
// The NDRange of index.cl's row kernels (pad2d, unphase2d) over a (rows, width) output:
// row_chunk() values of a row per work-item (-DCHUNK: 16 on CPUs, 1 on GPUs).
int row_chunk();
NDRange row_chunks(int64_t rows, int64_t width);

// OCLF_DEVICE_CONV: "gpu" runs the GPU paths on any device (so CPU machines test them),
// "direct" computes gradients with the direct and tiled backward kernels; else by device.
enum class ConvMode { kAuto, kGpu, kDirect };
ConvMode conv_mode();
// Whether the backward pass takes the CPU kernels' formulations (plain layouts).
bool cpu_kernels();

// y = conv2d(x, w) + bias on the reference's kernel for the layer (bias may be undefined);
// `keep`: w is a weight whose packed or transformed copies are kept with it; `epilogue`: a
// residual and an activation applied as the kernel stores y (its residual's buffer is y's
// shape, never y itself).
void forward(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
             const at::Tensor& y, bool keep, const Epilogue& epilogue = {});
// A forward convolution without bias (the backward pass's: temporary weights, not kept).
void forward_any(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y);
// conv2d_gpu with x, w and y with their first two dimensions swapped (NC_SWAPPED), K split
// up to 128 ways: the weight gradient as a forward convolution.
void forward_gpu_swapped(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y);

// The geometry of a 2-D convolution of x (unpadded) with weight; the padded size in h, w.
Conv2dGeometry conv_shape(const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// Arguments as 2-D: conv1d's (B, C, L) become (B, C, 1, L) and its lists get a leading 1/0.
struct Args2d {
  at::Tensor x, weight;
  std::vector<int64_t> stride, padding, dilation;
  bool one_d = false;
};
// `any_float`: float16 and bfloat16 operands (input and weight of one dtype) are taken too;
// else the operands must be float32.
Args2d as_2d(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
             at::IntArrayRef dilation, bool transposed, int64_t groups, bool any_float = false);

// The gradients of the convolution s (conv_backward.cpp) on the device's fastest path for
// it: the input gradient (B, C_in, height, width) of an input padded by (pad_h, pad_w), from
// dy (B, C_out, s.h_out, s.w_out); the weight gradient (C_out, C_in/groups, K_h, K_w) from the
// padded input and dy. dy and w whole (offset 0, contiguous).
at::Tensor input_gradient(const Conv2dGeometry& s, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                          const at::Tensor& dy, const at::Tensor& w);
at::Tensor weight_gradient(const Conv2dGeometry& s, const at::Tensor& x_padded, const at::Tensor& dy);

// Transposed convolutions (1-D, 2-D, 3-D) and 3-D convolutions, forward and backward, on the
// 2-D convolution's kernels (conv_nd.cpp); bias may be undefined.
at::Tensor convolution_nd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                          at::IntArrayRef output_padding, int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_nd_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask);

}  // namespace oclf::device::conv
