// Activations of the opencl device and their backward operators (relu, gelu, silu,
// sigmoid, tanh, hardtanh/relu6, hardswish, hardsigmoid, leaky_relu), each an OP_<name>
// of kernels/elementwise.cl (see pointwise.h for the wrappers).
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
}

}  // namespace oclf::device
