// Pooling on the opencl device, kernels/pool.cl: max pooling with indices, average pooling,
// adaptive average and adaptive max pooling, forward and backward, 2-D on (C, H, W) or
// (B, C, H, W) and 3-D on (C, D, H, W) or (B, C, D, H, W), one code for both (a 2-D pooling
// is a 3-D one of depth 1); and the core they share with fractional pooling (pool.h).
#include "pool.h"

#include <ATen/native/Pool.h>
#include <torch/library.h>

#include <climits>

#include "dispatch.h"

namespace oclf::device {

namespace pooling {

cl_kernel kernel(const char* name, int spatial, const std::string& options) {
  return device_kernel("pool.cl", name, "-DDIMS=" + std::to_string(spatial) + options);
}

at::Tensor writable(at::Tensor& out, at::IntArrayRef shape, at::ScalarType dtype) {
  at::native::resize_output(out, shape);
  return out.is_contiguous() ? out : empty_device(shape, dtype);
}

void store(at::Tensor& out, const at::Tensor& result) {
  if (!result.is_same(out)) out.copy_(result);
}

}  // namespace pooling

namespace {

using pooling::store;
using pooling::writable;

// The sizes of one pooling, (depth, height, width) order (2-D: a depth of 1): input, output,
// kernel, stride, padding and dilation, and the work-item count, as pool.cl's GEOMETRY takes them.
struct Window {
  int in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0},
      d[3] = {1, 1, 1};
  int total = 0;
};

// set_args takes a Window as its 19 ints.
void set_arg_at(cl_kernel kernel, cl_uint* index, const Window& w) {
  for (const int* v : {w.in, w.out, w.k, w.s, w.p, w.d})
    for (int a = 0; a < 3; ++a) oclf::set_arg_at(kernel, index, v[a]);
  oclf::set_arg_at(kernel, index, w.total);
}

int64_t pick(at::IntArrayRef v, size_t i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.size() == 1 ? v[0] : v[i];
}

// The names of an operator's 2-D and 3-D forms.
const char* named(int spatial, const char* op2d, const char* op3d) { return spatial == 2 ? op2d : op3d; }

void check_input(const at::Tensor& x, int spatial, const char* op) {
  check_float(x, "input");
  DEVICE_CHECK(x.dim() == spatial + 1 || x.dim() == spatial + 2, "opencl: ", op, ": input must be ", spatial + 1,
               "-D or ", spatial + 2, "-D, got shape ", x.sizes());
  DEVICE_CHECK(x.numel() <= INT_MAX, "opencl: ", op, ": input over 2^31 elements");
}

Window window(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
              at::IntArrayRef dilation, bool ceil_mode, int spatial, const char* op) {
  check_input(x, spatial, op);
  for (int64_t d = std::max<int64_t>(x.dim() - spatial - 1, 0); d < x.dim(); ++d) {
    DEVICE_CHECK(x.size(d) > 0, "opencl: ", op, ": Expected input's non-batch dimensions to have positive length, ",
                 "but input has a shape of ", x.sizes());
  }
  Window w;
  for (int i = 0; i < spatial; ++i) {
    const int a = 3 - spatial + i;  // the axis, (depth, height, width)
    w.in[a] = int(x.size(x.dim() - spatial + i));
    w.k[a] = int(pick(kernel, size_t(i), 1));
    w.s[a] = int(pick(stride, size_t(i), w.k[a]));
    w.p[a] = int(pick(padding, size_t(i), 0));
    w.d[a] = int(pick(dilation, size_t(i), 1));
    DEVICE_CHECK(w.k[a] > 0 && w.s[a] > 0 && w.d[a] > 0 && w.p[a] >= 0 && w.p[a] <= w.k[a] / 2, "opencl: ", op,
                 ": kernel ", kernel, ", stride ", stride, ", padding ", padding, " and dilation ", dilation,
                 " are not a valid window");
    w.out[a] = int(at::native::pooling_output_shape<int64_t>(w.in[a], w.k[a], w.p[a], w.s[a], w.d[a], ceil_mode));
    DEVICE_CHECK(w.out[a] > 0, "opencl: ", op, ": output size is too small for input ", x.sizes());
  }
  return w;
}

// divisor_override: any nonzero int (negative ones too, as torch divides by them); the
// kernels read 0 as "none".
void check_divisor(std::optional<int64_t> divisor, const char* op) {
  DEVICE_CHECK(!divisor || (*divisor != 0 && std::abs(*divisor) <= INT_MAX), "opencl: ", op,
               ": divisor_override must be a nonzero 32-bit integer, got ", *divisor);
}

// x's leading dimensions with the last `spatial` replaced by `out`'s.
std::vector<int64_t> out_shape(const at::Tensor& x, const int* out, int spatial) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - spatial);
  for (int a = 0; a < spatial; ++a) shape.push_back(out[3 - spatial + a]);
  return shape;
}

// A kernel with the window compiled in where it is small, as networks' are (pool.cl's WINDOW).
cl_kernel window_kernel(const char* name, int spatial, const Window& w) {
  if (std::max({w.k[0], w.k[1], w.k[2]}) > 16) return pooling::kernel(name, spatial);
  std::string options = " -DWINDOW";
  const std::pair<char, const int*> values[] = {{'K', w.k}, {'S', w.s}, {'P', w.p}, {'D', w.d}};
  for (int a = 0; a < 3; ++a) {
    for (const auto& [what, value] : values)
      options += std::string(" -DW") + what + "DHW"[a] + "=" + std::to_string(value[a]);
  }
  return pooling::kernel(name, spatial, options);
}

// ---- max and average pooling --------------------------------------------------------------

template <int S>
std::tuple<at::Tensor&, at::Tensor&> max_pool_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                                  at::IntArrayRef dilation, bool ceil_mode, at::Tensor& out,
                                                  at::Tensor& indices) {
  Window w = window(self, kernel, stride, padding, dilation, ceil_mode, S, named(S, "max_pool2d", "max_pool3d"));
  const std::vector<int64_t> shape = out_shape(self, w.out, S);
  at::Tensor y = writable(out, shape, at::kFloat), i = writable(indices, shape, at::kLong);
  w.total = int(y.numel());
  launch(window_kernel("max_pool_forward", S, w), NDRange::linear(size_t(w.total)), arg(contiguous(self)), arg(y),
         arg(i), w);
  store(out, y);
  store(indices, i);
  return {out, indices};
}

template <int S>
std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  at::Tensor out = empty_device({0}, at::kFloat), indices = empty_device({0}, at::kLong);
  max_pool_out<S>(self, kernel, stride, padding, dilation, ceil_mode, out, indices);
  return {out, indices};
}

template <int S>
at::Tensor& max_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  bool ceil_mode, const at::Tensor& indices, at::Tensor& grad_input) {
  const char* op = named(S, "max_pool2d_backward", "max_pool3d_backward");
  Window w = window(self, kernel, stride, padding, dilation, ceil_mode, S, op);
  check_float(grad_output, "grad_output");
  at::Tensor dx = writable(grad_input, self.sizes(), at::kFloat);
  w.total = int(dx.numel());
  launch(window_kernel("max_pool_backward", S, w), NDRange::linear(size_t(w.total)), arg(contiguous(grad_output)),
         arg(contiguous(indices)), arg(dx), w);
  store(grad_input, dx);
  return grad_input;
}

template <int S>
at::Tensor max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             bool ceil_mode, const at::Tensor& indices) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return max_pool_backward_out<S>(grad_output, self, kernel, stride, padding, dilation, ceil_mode, indices,
                                  grad_input);
}

template <int S>
at::Tensor& avg_pool_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                         at::IntArrayRef padding, bool ceil_mode, bool include_pad, std::optional<int64_t> divisor,
                         at::Tensor& out) {
  const char* op = named(S, "avg_pool2d", "avg_pool3d");
  Window w = window(self, kernel, stride, padding, {}, ceil_mode, S, op);
  check_divisor(divisor, op);
  at::Tensor y = writable(out, out_shape(self, w.out, S), at::kFloat);
  w.total = int(y.numel());
  launch(window_kernel("avg_pool_forward", S, w), NDRange::linear(size_t(w.total)), arg(contiguous(self)), arg(y),
         int(include_pad), int(divisor.value_or(0)), w);
  store(out, y);
  return out;
}

template <int S>
at::Tensor avg_pool(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                    bool ceil_mode, bool include_pad, std::optional<int64_t> divisor) {
  at::Tensor out = empty_device({0}, at::kFloat);
  return avg_pool_out<S>(self, kernel, stride, padding, ceil_mode, include_pad, divisor, out);
}

template <int S>
at::Tensor& avg_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                  at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool include_pad,
                                  std::optional<int64_t> divisor, at::Tensor& grad_input) {
  const char* op = named(S, "avg_pool2d_backward", "avg_pool3d_backward");
  Window w = window(self, kernel, stride, padding, {}, ceil_mode, S, op);
  check_divisor(divisor, op);
  check_float(grad_output, "grad_output");
  at::Tensor dx = writable(grad_input, self.sizes(), at::kFloat);
  w.total = int(dx.numel());
  launch(window_kernel("avg_pool_backward", S, w), NDRange::linear(size_t(w.total)), arg(contiguous(grad_output)),
         arg(dx), int(include_pad), int(divisor.value_or(0)), w);
  store(grad_input, dx);
  return grad_input;
}

template <int S>
at::Tensor avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                             at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool include_pad,
                             std::optional<int64_t> divisor) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return avg_pool_backward_out<S>(grad_output, self, kernel, stride, padding, ceil_mode, include_pad, divisor,
                                  grad_input);
}

// ---- adaptive pooling ---------------------------------------------------------------------

// Input and output sizes (depth, height, width; 2-D: a depth of 1) of an adaptive pooling of x
// over its last `spatial` dimensions to `size`.
struct Adaptive {
  int in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
};

Adaptive adaptive(const at::Tensor& x, at::IntArrayRef size, int spatial, const char* op) {
  check_input(x, spatial, op);
  DEVICE_CHECK(int(size.size()) == spatial || size.size() == 1, "opencl: ", op, ": output_size must have ", spatial,
               " values, got ", size);
  Adaptive a;
  for (int k = 0; k < spatial; ++k) {
    a.in[3 - spatial + k] = int(x.size(x.dim() - spatial + k));
    a.out[3 - spatial + k] = int(size.size() == 1 ? size[0] : size[size_t(k)]);
    DEVICE_CHECK(a.out[3 - spatial + k] > 0 || x.numel() == 0, "opencl: ", op, ": output_size must be positive, got ",
                 size);
  }
  return a;
}

// Launches an adaptive kernel over `total` work-items with its tensors, then the sizes.
template <typename... Tensors>
void launch_adaptive(const char* name, int spatial, const Adaptive& a, int64_t total, const Tensors&... tensors) {
  launch(pooling::kernel(name, spatial), NDRange::linear(size_t(total)), arg(tensors)..., a.in[0], a.in[1], a.in[2],
         a.out[0], a.out[1], a.out[2], int(total));
}

template <int S>
at::Tensor adaptive_avg(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  const char* op = named(S, "adaptive_avg_pool2d", "adaptive_avg_pool3d");
  const Adaptive a = adaptive(self, C10_AS_INTARRAYREF_SLOW(output_size), S, op);
  at::Tensor y = empty_device(out_shape(self, a.out, S), at::kFloat);
  launch_adaptive("adaptive_avg_forward", S, a, y.numel(), contiguous(self), y);
  return y;
}

template <int S>
at::Tensor adaptive_avg_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* op = named(S, "adaptive_avg_pool2d_backward", "adaptive_avg_pool3d_backward");
  const Adaptive a = adaptive(self, grad_output.sizes().slice(grad_output.dim() - S), S, op);
  at::Tensor dx = empty_device(self.sizes(), at::kFloat);
  launch_adaptive("adaptive_avg_backward", S, a, dx.numel(), contiguous(grad_output), dx);
  return dx;
}

template <int S>
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_out(const at::Tensor& self, at::IntArrayRef output_size,
                                                      at::Tensor& out, at::Tensor& indices) {
  const Adaptive a = adaptive(self, output_size, S, named(S, "adaptive_max_pool2d", "adaptive_max_pool3d"));
  const std::vector<int64_t> shape = out_shape(self, a.out, S);
  at::Tensor y = writable(out, shape, at::kFloat), i = writable(indices, shape, at::kLong);
  launch_adaptive("adaptive_max_forward", S, a, y.numel(), contiguous(self), y, i);
  store(out, y);
  store(indices, i);
  return {out, indices};
}

template <int S>
std::tuple<at::Tensor, at::Tensor> adaptive_max(const at::Tensor& self, at::IntArrayRef output_size) {
  at::Tensor out = empty_device({0}, at::kFloat), indices = empty_device({0}, at::kLong);
  adaptive_max_out<S>(self, output_size, out, indices);
  return {out, indices};
}

template <int S>
at::Tensor& adaptive_max_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                      const at::Tensor& indices, at::Tensor& grad_input) {
  const char* op = named(S, "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward");
  check_float(grad_output, "grad_output");
  const Adaptive a = adaptive(self, grad_output.sizes().slice(grad_output.dim() - S), S, op);
  at::Tensor dx = writable(grad_input, self.sizes(), at::kFloat);
  launch_adaptive("adaptive_max_backward", S, a, dx.numel(), contiguous(grad_output), contiguous(indices), dx);
  store(grad_input, dx);
  return grad_input;
}

template <int S>
at::Tensor adaptive_max_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& indices) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return adaptive_max_backward_out<S>(grad_output, self, indices, grad_input);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("max_pool2d_with_indices", max_pool<2>);
  m.impl("max_pool2d_with_indices.out", max_pool_out<2>);
  m.impl("max_pool2d_with_indices_backward", max_pool_backward<2>);
  m.impl("max_pool2d_with_indices_backward.grad_input", max_pool_backward_out<2>);
  m.impl("avg_pool2d", avg_pool<2>);
  m.impl("avg_pool2d.out", avg_pool_out<2>);
  m.impl("avg_pool2d_backward", avg_pool_backward<2>);
  m.impl("avg_pool2d_backward.grad_input", avg_pool_backward_out<2>);
  m.impl("_adaptive_avg_pool2d", adaptive_avg<2>);
  m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_backward<2>);
  m.impl("adaptive_max_pool2d", adaptive_max<2>);
  m.impl("adaptive_max_pool2d.out", adaptive_max_out<2>);
  m.impl("adaptive_max_pool2d_backward", adaptive_max_backward<2>);
  m.impl("adaptive_max_pool2d_backward.grad_input", adaptive_max_backward_out<2>);
  m.impl("max_pool3d_with_indices", max_pool<3>);
  m.impl("max_pool3d_with_indices.out", max_pool_out<3>);
  m.impl("max_pool3d_with_indices_backward", max_pool_backward<3>);
  m.impl("max_pool3d_with_indices_backward.grad_input", max_pool_backward_out<3>);
  m.impl("avg_pool3d", avg_pool<3>);
  m.impl("avg_pool3d.out", avg_pool_out<3>);
  m.impl("avg_pool3d_backward", avg_pool_backward<3>);
  m.impl("avg_pool3d_backward.grad_input", avg_pool_backward_out<3>);
  m.impl("_adaptive_avg_pool3d", adaptive_avg<3>);
  m.impl("_adaptive_avg_pool3d_backward", adaptive_avg_backward<3>);
  m.impl("adaptive_max_pool3d", adaptive_max<3>);
  m.impl("adaptive_max_pool3d.out", adaptive_max_out<3>);
  m.impl("adaptive_max_pool3d_backward", adaptive_max_backward<3>);
  m.impl("adaptive_max_pool3d_backward.grad_input", adaptive_max_backward_out<3>);
}

}  // namespace oclf::device
