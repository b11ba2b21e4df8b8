// The geometry of one 2-D convolution, as every kernel of conv2d.cl, conv2d_backward.cl and
// the reference's kernels takes it, and round_up for their NDRanges. The student's
// Conv2dArgs (opencl-functions.hpp) adds the operands to it; the backward pass and the
// opencl device describe their convolutions with it alone.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

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

  // The output size along one dimension: (in - dilation·(k - 1) - 1) / stride + 1, or 0 when
  // the dilated kernel does not fit in `in`.
  static int out_size(int in, int k, int stride, int dilation) {
    const int span = dilation * (k - 1) + 1;
    return in < span ? 0 : (in - span) / stride + 1;
  }

  // The geometry of a convolution of x (batch, c_in, h, w), already padded, with weight
  // (c_out, c_in / groups, k_h, k_w): h_out and w_out by out_size(). Every path that needs
  // an output size takes it from here. Throws std::invalid_argument naming what does not
  // fit: a size, stride or dilation below 1 (batch and channels may be 0), channels that
  // do not match groups, a dilated kernel larger than the padded input.
  static Conv2dGeometry of(int batch, int c_in, int h, int w, int c_out, int w_c_in, int k_h, int k_w, int stride_h,
                           int stride_w, int dilation_h, int dilation_w, int groups) {
    const auto refuse = [](const std::string& why) { throw std::invalid_argument("conv2d: " + why); };
    if (stride_h < 1 || stride_w < 1 || dilation_h < 1 || dilation_w < 1 || groups < 1)
      refuse("stride, dilation and groups must be positive");
    if (batch < 0 || c_in < 0 || c_out < 0 || h < 1 || w < 1 || k_h < 1 || k_w < 1)
      refuse("the input's and the kernel's height and width must be positive");
    if (c_out % groups != 0 || c_in != w_c_in * groups)
      refuse("channels do not match groups: " + std::to_string(c_in) + " input channels, weight (" +
             std::to_string(c_out) + ", " + std::to_string(w_c_in) + ", ...), groups " + std::to_string(groups));
    Conv2dGeometry g{batch, c_in, h, w, c_out, k_h, k_w, stride_h, stride_w, dilation_h, dilation_w, groups, 0, 0};
    g.h_out = out_size(h, k_h, stride_h, dilation_h);
    g.w_out = out_size(w, k_w, stride_w, dilation_w);
    if (g.h_out == 0 || g.w_out == 0)
      refuse("the kernel (" + std::to_string(k_h) + "x" + std::to_string(k_w) + ", dilation " +
             std::to_string(dilation_h) + "x" + std::to_string(dilation_w) + ") is larger than the padded input (" +
             std::to_string(h) + "x" + std::to_string(w) + ")");
    return g;
  }
};

namespace ndrange {

// n rounded up to a multiple of `multiple`: a global size that whole work-groups cover.
inline size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace ndrange
}  // namespace oclf
