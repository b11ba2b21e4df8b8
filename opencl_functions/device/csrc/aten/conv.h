// Convolution on the opencl device: what the forward (conv.cpp) and the backward
// (conv_backward.cpp) share: shapes as the kernels take them, padding, the path settings
// and the forward launches, on which the backward runs its gradients too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace oclf::device::conv {

// One convolution's shapes, in the order the kernels take them.
struct Shape {
  int batch, c_in, h, w;  // the padded input
  int c_out, k_h, k_w;
  int stride_h, stride_w, dilation_h, dilation_w, groups;
  int h_out, w_out;
};

inline const char* kForward = "conv2d.cl";
inline const char* kBackward = "conv2d_backward.cl";

Launch& shape_args(Launch& launch, const Shape& s);
// The library's kernels take whole buffers: a tensor with an offset is copied first.
at::Tensor whole(const at::Tensor& t);
// x (B, C, H, W), any strides, zero-padded by (ph, pw) on each side: contiguous, at offset 0.
at::Tensor padded(const at::Tensor& x, int64_t ph, int64_t pw);

// OCLF_DEVICE_CONV: "gpu" runs the GPU paths on any device (so CPU machines test them),
// "direct" computes gradients with the direct and tiled backward kernels; else by device.
enum class ConvMode { kAuto, kGpu, kDirect };
ConvMode conv_mode();
// Whether the CPU kernels (conv2d_cpu, conv2d_depthwise_cpu) run.
bool cpu_kernels();
size_t tile_size();

// conv2d_gpu (split K when its tiles fill the device less than once, into at most
// max_splits slices); swapped: x, w and y with their first two dimensions swapped.
void forward_gpu(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                 const at::Tensor& y, int max_splits = 16, bool swapped = false);
// A forward convolution without bias on the device's kernel for its shape.
void forward_any(const Shape& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                 int max_splits = 16);

// The shapes of a 2-D convolution of x (unpadded) with weight; the padded size in s.h, s.w.
Shape conv_shape(const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation, int64_t groups);

// Arguments as 2-D: conv1d's (B, C, L) become (B, C, 1, L) and its lists get a leading 1/0.
struct Args2d {
  at::Tensor x, weight;
  std::vector<int64_t> stride, padding, dilation;
  bool one_d = false;
};
Args2d as_2d(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
             at::IntArrayRef dilation, bool transposed, int64_t groups);

}  // namespace oclf::device::conv
