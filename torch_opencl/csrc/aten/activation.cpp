// Activations of the opencl device and their backward operators (relu, gelu, silu,
// sigmoid, tanh, hardtanh/relu6, hardswish, hardsigmoid, leaky_relu; elu (so celu and
// selu), softplus, log_sigmoid, mish, hardshrink, softshrink, threshold), each an OP_<name>
// of kernels/elementwise.cl or its elementwise_nn.h (see pointwise.h for the wrappers).
#include <torch/library.h>

#include "dispatch.h"
#include "pointwise.h"

namespace oclf::device {

namespace {

std::string gelu_op(c10::string_view approximate, const char* suffix = "") {
  DEVICE_CHECK(approximate == "none" || approximate == "tanh",
              "opencl: gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return std::string(approximate == "tanh" ? "gelu_tanh" : "gelu") + suffix;
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  return apply(gelu_op(approximate), Out::Same, {self});
}

at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
  return apply_out(gelu_op(approximate), Out::Same, self, {self});
}

at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
  return apply_out(gelu_op(approximate), Out::Same, out, {self});
}

at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::string_view approximate) {
  return apply(gelu_op(approximate, "_backward"), Out::Same, {grad_output, self});
}

at::Tensor& gelu_backward_out(const at::Tensor& grad_output, const at::Tensor& self, c10::string_view approximate,
                              at::Tensor& grad_input) {
  return apply_out(gelu_op(approximate, "_backward"), Out::Same, grad_input, {grad_output, self});
}

at::Tensor threshold_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& threshold) {
  return apply("threshold_backward", Out::Same, {grad_output, self}, threshold.toDouble());
}

at::Tensor& threshold_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                   const at::Scalar& threshold, at::Tensor& grad_input) {
  return apply_out("threshold_backward", Out::Same, grad_input, {grad_output, self}, threshold.toDouble());
}

at::Tensor hardtanh(const at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi) {
  return apply("clamp", Out::Same, {self}, lo.toDouble(), hi.toDouble());
}

at::Tensor& hardtanh_(at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi) {
  return apply_out("clamp", Out::Same, self, {self}, lo.toDouble(), hi.toDouble());
}

at::Tensor& hardtanh_out(const at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi, at::Tensor& out) {
  return apply_out("clamp", Out::Same, out, {self}, lo.toDouble(), hi.toDouble());
}

at::Tensor hardtanh_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& lo,
                             const at::Scalar& hi) {
  return apply("hardtanh_backward", Out::Same, {grad_output, self}, lo.toDouble(), hi.toDouble());
}

at::Tensor& hardtanh_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& lo,
                                  const at::Scalar& hi, at::Tensor& grad_input) {
  return apply_out("hardtanh_backward", Out::Same, grad_input, {grad_output, self}, lo.toDouble(), hi.toDouble());
}

at::Tensor leaky_relu(const at::Tensor& self, const at::Scalar& slope) {
  return apply("leaky_relu", Out::Same, {self}, slope.toDouble());
}

at::Tensor& leaky_relu_(at::Tensor& self, const at::Scalar& slope) {
  return apply_out("leaky_relu", Out::Same, self, {self}, slope.toDouble());
}

at::Tensor& leaky_relu_out(const at::Tensor& self, const at::Scalar& slope, at::Tensor& out) {
  return apply_out("leaky_relu", Out::Same, out, {self}, slope.toDouble());
}

// self_is_result: self is the forward's output; its sign is the input's when slope > 0.
at::Tensor leaky_relu_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& slope,
                               bool self_is_result) {
  return apply("leaky_relu_backward", Out::Same, {grad_output, self}, slope.toDouble());
}

at::Tensor& leaky_relu_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& slope,
                                    bool self_is_result, at::Tensor& grad_input) {
  return apply_out("leaky_relu_backward", Out::Same, grad_input, {grad_output, self}, slope.toDouble());
}

// Operators torch defines for floating dtypes only: other dtypes go to the CPU, which
// raises torch's own error.
void check_floating(const at::Tensor& self, const char* op) {
  DEVICE_DTYPE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: ", op, ": not implemented for ",
                     self.scalar_type());
}

// ---- ELU: scale·x for x > 0, else alpha·scale·(exp(x·input_scale) - 1) ----------------------
// (celu and selu are torch's compositions of it.) input_scale goes as a number operand.

at::Tensor& elu_out(const at::Tensor& self, const at::Scalar& alpha, const at::Scalar& scale,
                    const at::Scalar& input_scale, at::Tensor& out) {
  check_floating(self, "elu");
  return apply_out("elu_full", Out::Same, out, {self, input_scale}, alpha.toDouble() * scale.toDouble(),
                   scale.toDouble());
}

at::Tensor elu(const at::Tensor& self, const at::Scalar& alpha, const at::Scalar& scale,
               const at::Scalar& input_scale) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return elu_out(self, alpha, scale, input_scale, out);
}

at::Tensor& elu_(at::Tensor& self, const at::Scalar& alpha, const at::Scalar& scale, const at::Scalar& input_scale) {
  return elu_out(self, alpha, scale, input_scale, self);
}

// self_or_result: the forward's input, or its output where is_result (an in-place elu).
at::Tensor& elu_backward_out(const at::Tensor& grad_output, const at::Scalar& alpha, const at::Scalar& scale,
                             const at::Scalar& input_scale, bool is_result, const at::Tensor& self_or_result,
                             at::Tensor& grad_input) {
  check_floating(self_or_result, "elu_backward");
  DEVICE_CHECK(!is_result || alpha.toDouble() >= 0.0, "opencl: elu_backward: in-place elu backward calculation ",
               "is triggered with a negative slope which is not supported (alpha ", alpha.toDouble(), ")");
  return apply_out(is_result ? "elu_backward_y" : "elu_backward_x", Out::Same, grad_input,
                   {grad_output, self_or_result, input_scale}, alpha.toDouble() * scale.toDouble(), scale.toDouble());
}

at::Tensor elu_backward(const at::Tensor& grad_output, const at::Scalar& alpha, const at::Scalar& scale,
                        const at::Scalar& input_scale, bool is_result, const at::Tensor& self_or_result) {
  at::Tensor grad_input = empty_device(self_or_result.sizes(), self_or_result.scalar_type());
  return elu_backward_out(grad_output, alpha, scale, input_scale, is_result, self_or_result, grad_input);
}

// ---- softplus: log(1 + exp(beta·x)) / beta, x where beta·x > threshold ------------------------

at::Tensor& softplus_out(const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold,
                         at::Tensor& out) {
  check_floating(self, "softplus");
  return apply_out("softplus", Out::Same, out, {self}, beta.toDouble(), threshold.toDouble());
}

at::Tensor softplus(const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return softplus_out(self, beta, threshold, out);
}

at::Tensor& softplus_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& beta,
                                  const at::Scalar& threshold, at::Tensor& grad_input) {
  check_floating(self, "softplus_backward");
  return apply_out("softplus_backward", Out::Same, grad_input, {grad_output, self}, beta.toDouble(),
                   threshold.toDouble());
}

at::Tensor softplus_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& beta,
                             const at::Scalar& threshold) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return softplus_backward_out(grad_output, self, beta, threshold, grad_input);
}

// ---- log_sigmoid: its buffer stays empty (as on CUDA); the backward reads the input alone ----

std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                             at::Tensor& buffer) {
  check_floating(self, "log_sigmoid");
  apply_out("log_sigmoid", Out::Same, output, {self});
  at::native::resize_output(buffer, {0});
  return {output, buffer};
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor output = empty_device(self.sizes(), self.scalar_type());
  at::Tensor buffer = empty_device({0}, self.scalar_type());
  log_sigmoid_forward_out(self, output, buffer);
  return {output, buffer};
}

at::Tensor& log_sigmoid_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer,
                                     at::Tensor& grad_input) {
  check_floating(self, "log_sigmoid_backward");
  return apply_out("log_sigmoid_backward", Out::Same, grad_input, {grad_output, self});
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return log_sigmoid_backward_out(grad_output, self, buffer, grad_input);
}

// ---- mish, hardshrink, softshrink, threshold ------------------------------------------------

at::Tensor& mish_out(const at::Tensor& self, at::Tensor& out) {
  check_floating(self, "mish");
  return apply_out("mish", Out::Same, out, {self});
}

at::Tensor mish(const at::Tensor& self) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return oclf::device::mish_out(self, out);
}

at::Tensor& mish_(at::Tensor& self) { return oclf::device::mish_out(self, self); }

at::Tensor mish_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  check_floating(self, "mish_backward");
  return apply("mish_backward", Out::Same, {grad_output, self});
}

// op: "hardshrink" or "softshrink"; lambd is the half-width of the band sent to 0.
template <const char* op>
at::Tensor& shrink_out(const at::Tensor& self, const at::Scalar& lambd, at::Tensor& out) {
  check_floating(self, op);
  DEVICE_CHECK(op != opname::softshrink || lambd.toDouble() >= 0, "opencl: softshrink: lambda must be greater or ",
               "equal to 0, but found to be ", lambd.toDouble(), ".");
  return apply_out(op, Out::Same, out, {self}, lambd.toDouble());
}

template <const char* op>
at::Tensor shrink(const at::Tensor& self, const at::Scalar& lambd) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return shrink_out<op>(self, lambd, out);
}

at::Tensor& shrink_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& lambd,
                                at::Tensor& grad_input) {
  check_floating(self, "shrink_backward");
  return apply_out("shrink_backward", Out::Same, grad_input, {grad_output, self}, lambd.toDouble());
}

at::Tensor shrink_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& lambd) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return shrink_backward_out(grad_output, self, lambd, grad_input);
}

// threshold: value where x <= threshold, else x (every dtype, as torch).
at::Tensor threshold(const at::Tensor& self, const at::Scalar& threshold, const at::Scalar& value) {
  return apply("threshold", Out::Same, {self}, threshold.toDouble(), value.toDouble());
}

at::Tensor& threshold_(at::Tensor& self, const at::Scalar& threshold, const at::Scalar& value) {
  return apply_out("threshold", Out::Same, self, {self}, threshold.toDouble(), value.toDouble());
}

at::Tensor& threshold_out(const at::Tensor& self, const at::Scalar& threshold, const at::Scalar& value,
                          at::Tensor& out) {
  return apply_out("threshold", Out::Same, out, {self}, threshold.toDouble(), value.toDouble());
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("relu", unary<opname::relu, Out::Same>);
  m.impl("relu_", unary_<opname::relu, Out::Same>);
  m.impl("threshold_backward", threshold_backward);
  m.impl("threshold_backward.grad_input", threshold_backward_out);
  m.impl("gelu", gelu);
  m.impl("gelu_", gelu_);
  m.impl("gelu.out", gelu_out);
  m.impl("gelu_backward", gelu_backward);
  m.impl("gelu_backward.grad_input", gelu_backward_out);
  m.impl("silu", unary<opname::silu, Out::Float>);
  m.impl("silu_", unary_<opname::silu, Out::Float>);
  m.impl("silu.out", unary_out<opname::silu, Out::Float>);
  m.impl("silu_backward", backward<opname::silu_backward>);
  m.impl("silu_backward.grad_input", backward_out<opname::silu_backward>);
  m.impl("sigmoid", unary<opname::sigmoid, Out::Float>);
  m.impl("sigmoid_", unary_<opname::sigmoid, Out::Float>);
  m.impl("sigmoid.out", unary_out<opname::sigmoid, Out::Float>);
  m.impl("sigmoid_backward", backward<opname::sigmoid_backward>);
  m.impl("sigmoid_backward.grad_input", backward_out<opname::sigmoid_backward>);
  m.impl("tanh", unary<opname::tanh, Out::Float>);
  m.impl("tanh_", unary_<opname::tanh, Out::Float>);
  m.impl("tanh.out", unary_out<opname::tanh, Out::Float>);
  m.impl("tanh_backward", backward<opname::tanh_backward>);
  m.impl("tanh_backward.grad_input", backward_out<opname::tanh_backward>);
  m.impl("hardtanh", hardtanh);
  m.impl("hardtanh_", hardtanh_);
  m.impl("hardtanh.out", hardtanh_out);
  m.impl("hardtanh_backward", hardtanh_backward);
  m.impl("hardtanh_backward.grad_input", hardtanh_backward_out);
  m.impl("hardswish", unary<opname::hardswish, Out::Float>);
  m.impl("hardswish_", unary_<opname::hardswish, Out::Float>);
  m.impl("hardswish.out", unary_out<opname::hardswish, Out::Float>);
  m.impl("hardswish_backward", backward<opname::hardswish_backward>);
  m.impl("hardsigmoid", unary<opname::hardsigmoid, Out::Float>);
  m.impl("hardsigmoid_", unary_<opname::hardsigmoid, Out::Float>);
  m.impl("hardsigmoid.out", unary_out<opname::hardsigmoid, Out::Float>);
  m.impl("hardsigmoid_backward", backward<opname::hardsigmoid_backward>);
  m.impl("hardsigmoid_backward.grad_input", backward_out<opname::hardsigmoid_backward>);
  m.impl("leaky_relu", leaky_relu);
  m.impl("leaky_relu_", leaky_relu_);
  m.impl("leaky_relu.out", leaky_relu_out);
  m.impl("leaky_relu_backward", leaky_relu_backward);
  m.impl("leaky_relu_backward.grad_input", leaky_relu_backward_out);
  m.impl("elu", elu);
  m.impl("elu_", elu_);
  m.impl("elu.out", elu_out);
  m.impl("elu_backward", elu_backward);
  m.impl("elu_backward.grad_input", elu_backward_out);
  m.impl("softplus", softplus);
  m.impl("softplus.out", softplus_out);
  m.impl("softplus_backward", softplus_backward);
  m.impl("softplus_backward.grad_input", softplus_backward_out);
  m.impl("log_sigmoid_forward", log_sigmoid_forward);
  m.impl("log_sigmoid_forward.output", log_sigmoid_forward_out);
  m.impl("log_sigmoid_backward", log_sigmoid_backward);
  m.impl("log_sigmoid_backward.grad_input", log_sigmoid_backward_out);
  m.impl("mish", mish);
  m.impl("mish_", mish_);
  m.impl("mish.out", mish_out);
  m.impl("mish_backward", mish_backward);
  m.impl("hardshrink", shrink<opname::hardshrink>);
  m.impl("hardshrink.out", shrink_out<opname::hardshrink>);
  m.impl("hardshrink_backward", shrink_backward);
  m.impl("hardshrink_backward.grad_input", shrink_backward_out);
  m.impl("softshrink", shrink<opname::softshrink>);
  m.impl("softshrink.out", shrink_out<opname::softshrink>);
  m.impl("softshrink_backward", shrink_backward);
  m.impl("softshrink_backward.grad_input", shrink_backward_out);
  m.impl("threshold", threshold);
  m.impl("threshold_", threshold_);
  m.impl("threshold.out", threshold_out);
}

}  // namespace oclf::device
