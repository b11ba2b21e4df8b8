// Losses of the opencl device beyond NLL and MSE (softmax_loss.cpp), forward and backward:
// binary cross-entropy (so BCE with logits, composed by torch of log_sigmoid), smooth L1
// and Huber as OP_<name>s of kernels/elementwise_nn.h followed by the device's reductions;
// the 2-D NLL loss on the NLL kernels (classes moved last); the multi-class and multi-label
// margin losses in kernels/loss.cl, one work-item per sample.
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "dispatch.h"
#include "kernel_launch.h"
#include "pointwise.h"

namespace oclf::device {

namespace {

// A loss of elements reduced as `reduction` asks (at::Reduction: 0 none, 1 mean, 2 sum).
at::Tensor reduce_loss(const at::Tensor& loss, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return loss.mean();
  if (reduction == at::Reduction::Sum) return loss.sum();
  return loss;
}

at::Tensor& copy_into(at::Tensor& out, const at::Tensor& value) {
  at::native::resize_output(out, value.sizes());
  return out.copy_(value);
}

// The factor of a mean's gradient: 1/numel for a mean, else 1.
double mean_norm(const at::Tensor& self, int64_t reduction) {
  return reduction == at::Reduction::Mean ? 1.0 / double(std::max<int64_t>(self.numel(), 1)) : 1.0;
}

void check_floating(const at::Tensor& self, const char* op) {
  DEVICE_DTYPE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: ", op, ": not implemented for ",
                     self.scalar_type());
}

// ---- binary cross-entropy: -w·(t·log(x) + (1-t)·log(1-x)), each log clamped at -100 ---------

// As torch's CPU kernel: every input must lie in [0, 1] (one read back; not while a graph
// records, when nothing may wait for the device).
void check_probabilities(const at::Tensor& self) {
  if (self.numel() == 0 || Stream::get().recording() != nullptr) return;
  const bool inside = apply("in_unit", Out::Bool, {self}).all().item<bool>();
  DEVICE_CHECK(inside, "opencl: binary_cross_entropy: all elements of input should be between 0 and 1");
}

at::Tensor bce(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
               int64_t reduction) {
  check_floating(self, "binary_cross_entropy");
  check_probabilities(self);
  const bool has_w = weight && weight->defined();
  const at::Tensor loss = has_w ? apply("bce", Out::Same, {self, target, *weight})
                                : apply("bce", Out::Same, {self, target, 1.0});
  return reduce_loss(loss, reduction);
}

at::Tensor& bce_out(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                    int64_t reduction, at::Tensor& out) {
  return copy_into(out, bce(self, target, weight, reduction));
}

// grad_input = norm·grad·(x - t) / max(x·(1-x), 1e-12), times the weight.
at::Tensor& bce_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& grad_input) {
  check_floating(self, "binary_cross_entropy_backward");
  at::native::resize_output(grad_input, self.sizes());
  elementwise("bce_backward", grad_input, {self, target, grad_output}, promoted({self, target, grad_output}),
              mean_norm(self, reduction));
  if (weight && weight->defined()) grad_input.mul_(*weight);
  return grad_input;
}

at::Tensor bce_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return bce_backward_out(grad_output, self, target, weight, reduction, grad_input);
}

// ---- smooth L1 (beta) and Huber (delta) ----------------------------------------------------

at::Tensor smooth_l1(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  DEVICE_CHECK(beta >= 0, "opencl: smooth_l1_loss does not support negative values for beta.");
  return reduce_loss(apply("smooth_l1", Out::Same, {self, target}, beta), reduction);
}

at::Tensor& smooth_l1_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta,
                          at::Tensor& out) {
  return copy_into(out, smooth_l1(self, target, reduction, beta));
}

at::Tensor& smooth_l1_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta, at::Tensor& grad_input) {
  at::native::resize_output(grad_input, self.sizes());
  elementwise("smooth_l1_backward", grad_input, {self, target, grad_output}, promoted({self, target, grad_output}),
              beta, mean_norm(self, reduction));
  return grad_input;
}

at::Tensor smooth_l1_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                              int64_t reduction, double beta) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return smooth_l1_backward_out(grad_output, self, target, reduction, beta, grad_input);
}

at::Tensor huber(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  DEVICE_CHECK(delta > 0, "opencl: huber_loss does not support non-positive values for delta.");
  return reduce_loss(apply("huber", Out::Same, {self, target}, delta), reduction);
}

at::Tensor& huber_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                      at::Tensor& out) {
  return copy_into(out, huber(self, target, reduction, delta));
}

at::Tensor& huber_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta, at::Tensor& grad_input) {
  at::native::resize_output(grad_input, self.sizes());
  elementwise("huber_backward", grad_input, {self, target, grad_output}, promoted({self, target, grad_output}), delta,
              mean_norm(self, reduction));
  return grad_input;
}

at::Tensor huber_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                          int64_t reduction, double delta) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return huber_backward_out(grad_output, self, target, reduction, delta, grad_input);
}

// ---- 2-D NLL: input (N, C, H, W), target (N, H, W) as the (N·H·W, C) NLL loss --------------

void check_nll2d(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight) {
  DEVICE_CHECK(target.dim() == 3, "opencl: nll_loss2d: only batches of spatial targets supported (3D tensors) ",
               "but got targets of size: ", target.sizes());
  DEVICE_CHECK(self.dim() == 4, "opencl: nll_loss2d: only batches of spatial inputs supported (4D tensors), ",
               "but got input of size: ", self.sizes());
  DEVICE_CHECK(!(weight && weight->defined()) || weight->numel() == self.size(1),
               "opencl: nll_loss2d: weight tensor should be defined either for all or no classes");
  DEVICE_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
               "opencl: nll_loss2d: size mismatch (got input: ", self.sizes(), " , target: ", target.sizes(), ")");
}

// self (N, C, H, W) as rows (N·H·W, C), target as (N·H·W).
at::Tensor rows_of(const at::Tensor& self) { return self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)}); }

std::tuple<at::Tensor, at::Tensor> nll2d(const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight, int64_t reduction,
                                         c10::SymInt ignore_index) {
  check_nll2d(self, target, weight);
  auto [output, total] = at::nll_loss_forward_symint(rows_of(self), target.reshape({-1}), weight, reduction,
                                                     ignore_index);
  if (reduction == at::Reduction::None) output = output.view(target.sizes());
  return {output, total};
}

std::tuple<at::Tensor&, at::Tensor&> nll2d_out(const at::Tensor& self, const at::Tensor& target,
                                               const std::optional<at::Tensor>& weight, int64_t reduction,
                                               c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total) {
  const auto [loss, weight_sum] = nll2d(self, target, weight, reduction, std::move(ignore_index));
  copy_into(output, loss);
  copy_into(total, weight_sum);
  return {output, total};
}

at::Tensor nll2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                          const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                          const at::Tensor& total_weight) {
  check_nll2d(self, target, weight);
  const at::Tensor grad = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
  const at::Tensor rows = at::nll_loss_backward_symint(grad, rows_of(self), target.reshape({-1}), weight, reduction,
                                                       ignore_index, total_weight);
  const int64_t N = self.size(0), C = self.size(1), H = self.size(2), W = self.size(3);
  return rows.view({N, H, W, C}).permute({0, 3, 1, 2}).contiguous();
}

at::Tensor& nll2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight, at::Tensor& grad_input) {
  return copy_into(grad_input,
                   nll2d_backward(grad_output, self, target, weight, reduction, std::move(ignore_index), total_weight));
}

// ---- margin losses (kernels/loss.cl) -------------------------------------------------------

// Every target in [low, high): checked on the device, raised at the next wait for it
// (check_values_on_device; the kernels skip a target out of range).
void check_targets(const char* op, const at::Tensor& target, int64_t low, int64_t high) {
  DEVICE_CHECK(target.scalar_type() == at::kLong, "opencl: ", op, ": target must be int64, got ",
              target.scalar_type());  // a RuntimeError, as torch raises
  check_values_on_device(op, "target", target, low, high);
}

std::string real_option(const at::Tensor& t, const char* op) {
  return std::string("-DT=") + cl_real_type(t.scalar_type(), op);
}

// Samples and classes of an input of 0, 1 or 2 dimensions (torch's shape checks).
std::pair<int64_t, int64_t> frames(const at::Tensor& self, const char* op) {
  const int64_t nd = self.dim();
  DEVICE_CHECK((nd == 2 && self.size(1) != 0) || (nd == 1 && self.size(0) != 0) || nd == 0, "opencl: ", op,
               ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  return {nd <= 1 ? 1 : self.size(0), nd == 0 ? 1 : self.size(nd - 1)};
}

void check_multi_margin(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                        const std::optional<at::Tensor>& weight, int64_t N, int64_t C) {
  DEVICE_CHECK(p.toLong() == 1 || p.toLong() == 2, "opencl: multi_margin_loss: only p == 1 and p == 2 supported");
  DEVICE_CHECK(target.dim() <= 1 && target.numel() == N, "opencl: multi_margin_loss: inconsistent target size, ",
               "expected ", N, " but got ", target.sizes());
  DEVICE_CHECK(!(weight && weight->defined()) || (weight->dim() <= 1 && weight->numel() == C),
               "opencl: multi_margin_loss: inconsistent weight size, expected ", C, " but got ",
               weight ? weight->sizes() : at::IntArrayRef{});
  check_targets("multi_margin_loss", target, 0, C);
}

at::Tensor multi_margin(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                        const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  const auto [N, C] = frames(self, "multi_margin_loss");
  const std::string options = real_option(self, "multi_margin_loss");
  check_multi_margin(self, target, p, weight, N, C);
  const bool has_w = weight && weight->defined();
  const at::Tensor x = contiguous(self), w = has_w ? contiguous(*weight) : x;
  at::Tensor loss = empty_device({N}, self.scalar_type());
  launch(device_kernel("loss.cl", "multi_margin_forward", options), NDRange::linear(size_t(N)), arg(x),
         arg(contiguous(target)), arg(w), int(has_w), arg(loss), int(p.toLong()),
         ScalarArg(margin.toDouble(), self.scalar_type()), int(N), int(C));
  if (reduction == at::Reduction::None) return target.dim() == 0 ? loss.view(at::IntArrayRef{}) : loss;
  return reduce_loss(loss, reduction);
}

at::Tensor& multi_margin_out(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                             const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction,
                             at::Tensor& out) {
  return copy_into(out, multi_margin(self, target, p, margin, weight, reduction));
}

at::Tensor& multi_margin_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      const at::Scalar& p, const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                      at::Tensor& grad_input) {
  const auto [N, C] = frames(self, "multi_margin_loss_backward");
  const std::string options = real_option(self, "multi_margin_loss_backward");
  check_multi_margin(self, target, p, weight, N, C);
  at::native::resize_output(grad_input, self.sizes());
  const bool has_w = weight && weight->defined();
  const at::Tensor x = contiguous(self), w = has_w ? contiguous(*weight) : x;
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), self.scalar_type());
  const double scale = reduction == at::Reduction::Mean ? 1.0 / double(N * C) : 1.0 / double(C);
  const bool per_row = reduction == at::Reduction::None && grad_output.dim() > 0;
  launch(device_kernel("loss.cl", "multi_margin_backward", options), NDRange::linear(size_t(N)),
         arg(contiguous(grad_output.to(self.scalar_type()))), int(per_row), arg(x), arg(contiguous(target)), arg(w),
         int(has_w), arg(dx), int(p.toLong()), ScalarArg(margin.toDouble(), self.scalar_type()),
         ScalarArg(scale, self.scalar_type()), int(N), int(C));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

at::Tensor multi_margin_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                 const at::Scalar& p, const at::Scalar& margin,
                                 const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return multi_margin_backward_out(grad_output, self, target, p, margin, weight, reduction, grad_input);
}

// Multi-label: target has the input's shape (classes listed, ended by -1).
std::pair<int64_t, int64_t> check_multilabel(const at::Tensor& self, const at::Tensor& target, const char* op) {
  const auto [N, C] = frames(self, op);
  const bool fits = self.dim() <= 1 ? target.dim() <= 1 && target.numel() == C
                                    : target.dim() == 2 && target.size(0) == N && target.size(1) == C;
  DEVICE_CHECK(fits, "opencl: ", op, ": inconsistent target size: ", target.sizes(), " for input of size: ",
               self.sizes());
  check_targets(op, target, -1, C);
  return {N, C};
}

std::tuple<at::Tensor, at::Tensor> multilabel_margin(const at::Tensor& self, const at::Tensor& target,
                                                     int64_t reduction) {
  const auto [N, C] = check_multilabel(self, target, "multilabel_margin_loss");
  const std::string options = real_option(self, "multilabel_margin_loss");
  at::Tensor loss = empty_device({N}, self.scalar_type());
  at::Tensor is_target = empty_device(target.sizes(), self.scalar_type());
  launch(device_kernel("loss.cl", "multilabel_margin_forward", options), NDRange::linear(size_t(N)),
         arg(contiguous(self)), arg(contiguous(target)), arg(is_target), arg(loss), int(N), int(C));
  if (reduction == at::Reduction::None) return {target.dim() <= 1 ? loss.view(at::IntArrayRef{}) : loss, is_target};
  return {reduce_loss(loss, reduction), is_target};
}

std::tuple<at::Tensor&, at::Tensor&> multilabel_margin_out(const at::Tensor& self, const at::Tensor& target,
                                                           int64_t reduction, at::Tensor& output,
                                                           at::Tensor& is_target) {
  const auto [loss, listed] = multilabel_margin(self, target, reduction);
  copy_into(output, loss);
  copy_into(is_target, listed);
  return {output, is_target};
}

at::Tensor& multilabel_margin_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction, const at::Tensor& is_target,
                                           at::Tensor& grad_input) {
  const auto [N, C] = check_multilabel(self, target, "multilabel_margin_loss_backward");
  const std::string options = real_option(self, "multilabel_margin_loss_backward");
  DEVICE_CHECK(is_target.sizes() == target.sizes(), "opencl: multilabel_margin_loss_backward: is_target has shape ",
               is_target.sizes(), ", target ", target.sizes());
  at::native::resize_output(grad_input, self.sizes());
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), self.scalar_type());
  const double scale = reduction == at::Reduction::Mean ? 1.0 / double(N * C) : 1.0 / double(C);
  const bool per_row = reduction == at::Reduction::None && grad_output.dim() > 0;
  launch(device_kernel("loss.cl", "multilabel_margin_backward", options), NDRange::linear(size_t(N)),
         arg(contiguous(grad_output.to(self.scalar_type()))), int(per_row), arg(contiguous(self)),
         arg(contiguous(target)), arg(contiguous(is_target.to(self.scalar_type()))), arg(dx),
         ScalarArg(scale, self.scalar_type()), int(N), int(C));
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

at::Tensor multilabel_margin_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      int64_t reduction, const at::Tensor& is_target) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return multilabel_margin_backward_out(grad_output, self, target, reduction, is_target, grad_input);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("binary_cross_entropy", bce);
  m.impl("binary_cross_entropy.out", bce_out);
  m.impl("binary_cross_entropy_backward", bce_backward);
  m.impl("binary_cross_entropy_backward.grad_input", bce_backward_out);
  m.impl("smooth_l1_loss", smooth_l1);
  m.impl("smooth_l1_loss.out", smooth_l1_out);
  m.impl("smooth_l1_loss_backward", smooth_l1_backward);
  m.impl("smooth_l1_loss_backward.grad_input", smooth_l1_backward_out);
  m.impl("huber_loss", huber);
  m.impl("huber_loss.out", huber_out);
  m.impl("huber_loss_backward", huber_backward);
  m.impl("huber_loss_backward.out", huber_backward_out);
  m.impl("nll_loss2d_forward", nll2d);
  m.impl("nll_loss2d_forward.output", nll2d_out);
  m.impl("nll_loss2d_backward", nll2d_backward);
  m.impl("nll_loss2d_backward.grad_input", nll2d_backward_out);
  m.impl("multi_margin_loss", multi_margin);
  m.impl("multi_margin_loss.out", multi_margin_out);
  m.impl("multi_margin_loss_backward", multi_margin_backward);
  m.impl("multi_margin_loss_backward.grad_input", multi_margin_backward_out);
  m.impl("multilabel_margin_loss_forward", multilabel_margin);
  m.impl("multilabel_margin_loss_forward.output", multilabel_margin_out);
  m.impl("multilabel_margin_loss_backward", multilabel_margin_backward);
  m.impl("multilabel_margin_loss_backward.grad_input", multilabel_margin_backward_out);
}

}  // namespace oclf::device
