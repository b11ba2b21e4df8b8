// Softmax and log-softmax (forward and backward) and the losses on the opencl device: the
// NLL loss (so cross-entropy, with log-softmax) in kernels/softmax.cl, one work-group per
// row; the MSE loss of the device's elementwise operators and reductions.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

size_t group_size() { return is_cpu() ? 64 : 256; }

// ---- softmax ------------------------------------------------------------------------------

NDRange rows_range(int64_t rows) {
  const size_t g = group_size();
  const size_t global[1] = {size_t(rows) * g};
  const size_t local[1] = {g};
  return NDRange(1, global, local);
}

std::string softmax_options(bool log) {
  return "-DGROUP=" + std::to_string(group_size()) + (log ? " -DLOG" : "");
}

// Softmax reads float32, float16 and bfloat16 directly (it computes in float32).
void check_softmax_dtype(const at::Tensor& t, const char* what) {
  check_device(t, what);
  const at::ScalarType type = t.scalar_type();
  DEVICE_DTYPE_CHECK(type == at::kFloat || type == at::kHalf || type == at::kBFloat16, "opencl: softmax: ", what,
                   " must be float32, float16 or bfloat16, got ", type);
}

// Options naming the element types: T read, TY written.
std::string softmax_types(at::ScalarType in, at::ScalarType out) {
  return std::string(" -DT=") + cl_storage_type(in) + " -DTY=" + cl_storage_type(out);
}

template <bool Log>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  check_softmax_dtype(self, "input");
  check_softmax_dtype(out, "output");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) return out;
  const at::Tensor x = contiguous(self);
  at::Tensor y = out.is_contiguous() ? out : empty_device(self.sizes(), out.scalar_type());
  const auto [outer, D, inner] = around(x, d);
  const std::string options = softmax_options(Log) + softmax_types(x.scalar_type(), y.scalar_type());
  launch(device_kernel("softmax.cl", "softmax_forward", options), rows_range(outer * inner), arg(x), arg(y),
         int(D), int(inner));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

template <bool Log>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  at::Tensor out = empty_device(self.sizes(), half_to_float ? at::kFloat : self.scalar_type());
  return softmax_out<Log>(self, dim, half_to_float, out);
}

template <bool Log>
at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                 at::ScalarType input_dtype, at::Tensor& grad_input) {
  check_softmax_dtype(output, "output");
  check_softmax_dtype(grad_input, "grad_input");
  DEVICE_DTYPE_CHECK(grad_output.scalar_type() == output.scalar_type(), "opencl: softmax backward: grad_output is ",
                   grad_output.scalar_type(), ", output ", output.scalar_type());
  const int64_t d = at::maybe_wrap_dim(dim, output.dim());
  at::native::resize_output(grad_input, output.sizes());
  if (output.numel() == 0) return grad_input;
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(output.sizes(), grad_input.scalar_type());
  const auto [outer, D, inner] = around(output, d);
  const std::string options = softmax_options(Log) + softmax_types(output.scalar_type(), dx.scalar_type());
  launch(device_kernel("softmax.cl", "softmax_backward", options), rows_range(outer * inner),
         arg(contiguous(grad_output)), arg(contiguous(output)), arg(dx), int(D), int(inner));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

template <bool Log>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  at::Tensor grad_input = empty_device(output.sizes(), input_dtype);
  return softmax_backward_out<Log>(grad_output, output, dim, input_dtype, grad_input);
}

// ---- NLL loss -----------------------------------------------------------------------------

void check_nll(const at::Tensor& self, const at::Tensor& target) {
  check_float(self, "input");
  check_device(target, "target");
  DEVICE_CHECK(self.dim() == 1 || self.dim() == 2, "opencl: nll_loss: input must be 1-D or 2-D, got ", self.sizes());
  DEVICE_CHECK_TYPE(target.scalar_type() == at::kLong, "opencl: nll_loss: target must be int64, got ",
                   target.scalar_type());
}

std::tuple<at::Tensor&, at::Tensor&> nll_out(const at::Tensor& self, const at::Tensor& target,
                                             const std::optional<at::Tensor>& weight, int64_t reduction,
                                             c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  check_nll(self, target);
  const int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(-1);
  // As torch's "Target 5 is out of bounds": raised at the next wait (the kernels skip it).
  check_values_on_device("nll_loss", "target", target, 0, C, -1, ignore_index.expect_int());
  at::native::resize_output(output, reduction == 0 && self.dim() == 2 ? at::IntArrayRef{N} : at::IntArrayRef{});
  at::native::resize_output(total_weight, {});
  const bool has_w = weight && weight->defined();
  const at::Tensor x = contiguous(self);
  launch(device_kernel("softmax.cl", "nll_forward", softmax_options(false)), rows_range(1), arg(x),
         arg(contiguous(target)), arg(has_w ? contiguous(*weight) : x), arg(output), arg(total_weight), int(has_w),
         int(reduction), int(ignore_index.expect_int()), int(N), int(C));
  return {output, total_weight};
}

std::tuple<at::Tensor, at::Tensor> nll(const at::Tensor& self, const at::Tensor& target,
                                       const std::optional<at::Tensor>& weight, int64_t reduction,
                                       c10::SymInt ignore_index) {
  at::Tensor output = empty_device({0}, at::kFloat), total = empty_device({0}, at::kFloat);
  nll_out(self, target, weight, reduction, ignore_index, output, total);
  return {output, total};
}

at::Tensor& nll_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight, at::Tensor& grad_input) {
  check_nll(self, target);
  const int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(-1);
  at::native::resize_output(grad_input, self.sizes());
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), at::kFloat);
  dx.zero_();
  const bool has_w = weight && weight->defined();
  launch(device_kernel("softmax.cl", "nll_backward", softmax_options(false)), NDRange::linear(size_t(N)),
         arg(contiguous(grad_output)), arg(contiguous(target)), arg(has_w ? contiguous(*weight) : dx),
         arg(total_weight), arg(dx), int(has_w), int(reduction), int(ignore_index.expect_int()), int(N), int(C));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

at::Tensor nll_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                        const at::Tensor& total_weight) {
  at::Tensor grad_input = empty_device(self.sizes(), at::kFloat);
  return nll_backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
}

// ---- MSE loss -----------------------------------------------------------------------------

// reduction: 0 none, 1 mean, 2 sum (at::Reduction).
at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  const at::Tensor d = self - target;
  const at::Tensor sq = d * d;
  if (reduction == 1) return sq.mean();
  if (reduction == 2) return sq.sum();
  return sq;
}

at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  const at::Tensor loss = oclf::device::mse_loss(self, target, reduction);
  at::native::resize_output(out, loss.sizes());
  return out.copy_(loss);
}

at::Tensor mse_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  const double scale = reduction == 1 ? 2.0 / double(std::max<int64_t>(self.numel(), 1)) : 2.0;
  return (self - target) * grad * scale;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_softmax", softmax<false>);
  m.impl("_softmax.out", softmax_out<false>);
  m.impl("_log_softmax", softmax<true>);
  m.impl("_log_softmax.out", softmax_out<true>);
  m.impl("_softmax_backward_data", softmax_backward<false>);
  m.impl("_softmax_backward_data.out", softmax_backward_out<false>);
  m.impl("_log_softmax_backward_data", softmax_backward<true>);
  m.impl("_log_softmax_backward_data.out", softmax_backward_out<true>);
  m.impl("nll_loss_forward", nll);
  m.impl("nll_loss_forward.output", nll_out);
  m.impl("nll_loss_backward", nll_backward);
  m.impl("nll_loss_backward.grad_input", nll_backward_out);
  m.impl("mse_loss", mse_loss);
  m.impl("mse_loss.out", mse_loss_out);
  m.impl("mse_loss_backward", mse_loss_backward);
}

}  // namespace oclf::device
