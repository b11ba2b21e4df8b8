// 2-D pooling on the opencl device, kernels/pool.cl: max pooling with indices, average
// pooling and adaptive average pooling, forward and backward, on (C, H, W) or (B, C, H, W).
#include <ATen/native/Pool.h>
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// Kernel sizes, strides, paddings and dilations of one pooling, and its output size.
struct Window {
  int kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
  int64_t oh, ow;
};

int64_t pick(at::IntArrayRef v, size_t i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.size() == 1 ? v[0] : v[i];
}

Window window(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
              at::IntArrayRef dilation, bool ceil_mode, const char* op) {
  check_float(x, "input");
  DEVICE_CHECK(x.dim() == 3 || x.dim() == 4, "opencl: ", op, ": input must be 3-D or 4-D, got shape ", x.sizes());
  Window w{};
  w.kh = int(pick(kernel, 0, 1));
  w.kw = int(pick(kernel, 1, 1));
  w.sh = int(pick(stride, 0, w.kh));
  w.sw = int(pick(stride, 1, w.kw));
  w.ph = int(pick(padding, 0, 0));
  w.pw = int(pick(padding, 1, 0));
  w.dh = int(pick(dilation, 0, 1));
  w.dw = int(pick(dilation, 1, 1));
  const int64_t h = x.size(-2), wd = x.size(-1);
  w.oh = at::native::pooling_output_shape<int64_t>(h, w.kh, w.ph, w.sh, w.dh, ceil_mode);
  w.ow = at::native::pooling_output_shape<int64_t>(wd, w.kw, w.pw, w.sw, w.dw, ceil_mode);
  DEVICE_CHECK(w.oh > 0 && w.ow > 0, "opencl: ", op, ": output size is too small for input ", x.sizes());
  return w;
}

// divisor_override: any nonzero int (negative ones too, as torch divides by them); the
// kernels read 0 as "none".
void check_divisor(std::optional<int64_t> divisor, const char* op) {
  DEVICE_CHECK(!divisor || (*divisor != 0 && std::abs(*divisor) <= INT_MAX), "opencl: ", op,
              ": divisor_override must be a nonzero 32-bit integer, got ", *divisor);
}

std::vector<int64_t> out_shape(const at::Tensor& x, int64_t oh, int64_t ow) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 2);
  shape.push_back(oh);
  shape.push_back(ow);
  return shape;
}

// The window over x as the kernels take it after their tensors: H, W, OH, OW, KH, KW, SH, SW,
// PH, PW, DH, DW and the number of work-items (`total`), ints.
struct Geometry {
  int values[13];
};

Geometry geometry(const at::Tensor& x, const Window& w, int64_t total) {
  return {{int(x.size(-2)), int(x.size(-1)), int(w.oh), int(w.ow), w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw,
           int(total)}};
}

// set_args takes a Geometry as its 13 ints.
void set_arg_at(cl_kernel kernel, cl_uint* index, const Geometry& g) {
  for (const int v : g.values) oclf::set_arg_at(kernel, index, v);
}

cl_kernel pool_kernel(const char* name) { return Device::get().kernel("pool.cl", name, ""); }

// A kernel with the window compiled in (small windows, as networks use; pool.cl's WINDOW).
cl_kernel pool_kernel(const char* name, const Window& w) {
  if (w.kh > 16 || w.kw > 16) return pool_kernel(name);
  std::string options = "-DWINDOW";
  const std::pair<const char*, int> values[] = {{"WKH", w.kh}, {"WKW", w.kw}, {"WSH", w.sh}, {"WSW", w.sw},
                                                {"WPH", w.ph}, {"WPW", w.pw}, {"WDH", w.dh}, {"WDW", w.dw}};
  for (const auto& [name_, value] : values) options += std::string(" -D") + name_ + "=" + std::to_string(value);
  return Device::get().kernel("pool.cl", name, options);
}

std::tuple<at::Tensor&, at::Tensor&> max_pool_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                                  at::IntArrayRef dilation, bool ceil_mode, at::Tensor& out,
                                                  at::Tensor& indices) {
  const Window w = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  const std::vector<int64_t> shape = out_shape(self, w.oh, w.ow);
  at::native::resize_output(out, shape);
  at::native::resize_output(indices, shape);
  const at::Tensor x = contiguous(self);
  at::Tensor y = out.is_contiguous() ? out : empty_device(shape, at::kFloat);
  at::Tensor i = indices.is_contiguous() ? indices : empty_device(shape, at::kLong);
  launch(pool_kernel("max_pool_forward", w), NDRange::linear(size_t(y.numel())), arg(x), arg(y), arg(i),
         geometry(x, w, y.numel()));
  if (!y.is_same(out)) out.copy_(y);
  if (!i.is_same(indices)) indices.copy_(i);
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  at::Tensor out = empty_device({0}, at::kFloat), indices = empty_device({0}, at::kLong);
  max_pool_out(self, kernel, stride, padding, dilation, ceil_mode, out, indices);
  return {out, indices};
}

at::Tensor& max_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  bool ceil_mode, const at::Tensor& indices, at::Tensor& grad_input) {
  const Window w = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d_backward");
  at::native::resize_output(grad_input, self.sizes());
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), at::kFloat);
  launch(pool_kernel("max_pool_backward", w), NDRange::linear(size_t(dx.numel())), arg(contiguous(grad_output)),
         arg(contiguous(indices)), arg(dx), geometry(self, w, dx.numel()));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

at::Tensor max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             bool ceil_mode, const at::Tensor& indices) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return max_pool_backward_out(grad_output, self, kernel, stride, padding, dilation, ceil_mode, indices, grad_input);
}

at::Tensor& avg_pool_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                         at::IntArrayRef padding, bool ceil_mode, bool include_pad, std::optional<int64_t> divisor,
                         at::Tensor& out) {
  const Window w = window(self, kernel, stride, padding, {}, ceil_mode, "avg_pool2d");
  check_divisor(divisor, "avg_pool2d");
  const std::vector<int64_t> shape = out_shape(self, w.oh, w.ow);
  at::native::resize_output(out, shape);
  at::Tensor y = out.is_contiguous() ? out : empty_device(shape, at::kFloat);
  const at::Tensor x = contiguous(self);
  launch(pool_kernel("avg_pool_forward", w), NDRange::linear(size_t(y.numel())), arg(x), arg(y), int(include_pad),
         int(divisor.value_or(0)), geometry(x, w, y.numel()));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor avg_pool(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                    bool ceil_mode, bool include_pad, std::optional<int64_t> divisor) {
  at::Tensor out = empty_device({0}, at::kFloat);
  return avg_pool_out(self, kernel, stride, padding, ceil_mode, include_pad, divisor, out);
}

at::Tensor& avg_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                  at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool include_pad,
                                  std::optional<int64_t> divisor, at::Tensor& grad_input) {
  const Window w = window(self, kernel, stride, padding, {}, ceil_mode, "avg_pool2d_backward");
  check_divisor(divisor, "avg_pool2d_backward");
  at::native::resize_output(grad_input, self.sizes());
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), at::kFloat);
  launch(pool_kernel("avg_pool_backward", w), NDRange::linear(size_t(dx.numel())), arg(contiguous(grad_output)),
         arg(dx), int(include_pad), int(divisor.value_or(0)), geometry(self, w, dx.numel()));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

at::Tensor avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                             at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool include_pad,
                             std::optional<int64_t> divisor) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return avg_pool_backward_out(grad_output, self, kernel, stride, padding, ceil_mode, include_pad, divisor,
                               grad_input);
}

at::Tensor adaptive_avg(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  check_float(self, "input");
  DEVICE_CHECK(self.dim() == 3 || self.dim() == 4, "opencl: adaptive_avg_pool2d: input must be 3-D or 4-D, got ",
              self.sizes());
  const at::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(output_size);
  const int64_t oh = size[0], ow = size.size() > 1 ? size[1] : size[0];
  at::Tensor y = empty_device(out_shape(self, oh, ow), at::kFloat);
  const at::Tensor x = contiguous(self);
  launch(pool_kernel("adaptive_avg_forward"), NDRange::linear(size_t(y.numel())), arg(x), arg(y), int(x.size(-2)),
         int(x.size(-1)), int(oh), int(ow), int(y.numel()));
  return y;
}

at::Tensor adaptive_avg_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  at::Tensor dx = empty_device(self.sizes(), at::kFloat);
  launch(pool_kernel("adaptive_avg_backward"), NDRange::linear(size_t(dx.numel())), arg(contiguous(grad_output)),
         arg(dx), int(self.size(-2)), int(self.size(-1)), int(grad_output.size(-2)), int(grad_output.size(-1)),
         int(dx.numel()));
  return dx;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("max_pool2d_with_indices", max_pool);
  m.impl("max_pool2d_with_indices.out", max_pool_out);
  m.impl("max_pool2d_with_indices_backward", max_pool_backward);
  m.impl("max_pool2d_with_indices_backward.grad_input", max_pool_backward_out);
  m.impl("avg_pool2d", avg_pool);
  m.impl("avg_pool2d.out", avg_pool_out);
  m.impl("avg_pool2d_backward", avg_pool_backward);
  m.impl("avg_pool2d_backward.grad_input", avg_pool_backward_out);
  m.impl("_adaptive_avg_pool2d", adaptive_avg);
  m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_backward);
}

}  // namespace oclf::device
