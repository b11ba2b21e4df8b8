// The geometry of one 2-D convolution, as every kernel of conv2d.cl, conv2d_backward.cl and
// the reference's kernels takes it, and round_up for their NDRanges. The student's
// Conv2dArgs (opencl-functions.hpp) adds the operands to it; the backward pass and the
// opencl device describe their convolutions with it alone.
#pragma once

#include <cstddef>

namespace oclf {

// x (batch, c_in, h, w), already padded; weight (c_out, c_in / groups, k_h, k_w);
// y (batch, c_out, h_out, w_out), h_out = (h - dilation_h * (k_h - 1) - 1) / stride_h + 1
// and w_out likewise. Output channel co reads input channels [g * c_in/groups,
// (g+1) * c_in/groups) where g = co / (c_out / groups).
struct Conv2dGeometry {
  int batch, c_in, h, w;
  int c_out, k_h, k_w;
  int stride_h, stride_w, dilation_h, dilation_w, groups;
  int h_out, w_out;

  int cin_g() const { return c_in / groups; }
  int cout_g() const { return c_out / groups; }
  // The length of each output's sum: (c_in / groups) · k_h · k_w.
  int k_dim() const { return cin_g() * k_h * k_w; }
  // Output pixels over the whole batch.
  size_t pixels() const { return size_t(batch) * h_out * w_out; }
  // One input and one output channel per group.
  bool depthwise() const { return c_in == groups && c_out == groups; }
  double macs() const { return double(pixels()) * c_out * k_dim(); }
};

namespace ndrange {

// n rounded up to a multiple of `multiple`: a global size that whole work-groups cover.
inline size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace ndrange
}  // namespace oclf
