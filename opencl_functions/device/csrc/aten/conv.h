// Convolution on the opencl device: what the forward (conv.cpp) and the backward
// (conv_backward.cpp) share: padding, the path settings and the forward convolutions, on
// which the backward runs its gradients too. The kernels and their choice are the
// reference's (opencl_functions/reference/conv2d.hpp), launched through DeviceLauncher.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../../../launch/geometry.hpp"
#include "../../../launch/launcher.hpp"
#include "tensors.h"
#include "launch.h"

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
Args2d as_2d(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
             at::IntArrayRef dilation, bool transposed, int64_t groups);

}  // namespace oclf::device::conv
