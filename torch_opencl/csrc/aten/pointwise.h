// Wrappers that turn one OP_<name> of kernels/elementwise.cl into torch's functional,
// in-place and out= operators, with torch's broadcasting and type promotion. Used by
// the registration files (arithmetic.cpp, activation.cpp).
#pragma once

#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <string>

#include "tensors.h"
#include "elementwise.h"
#include "opnames.h"

namespace oclf::device {

// The dtype of a result: the inputs' promoted type, that type made floating (exp of an
// int tensor is float), or bool (comparisons).
enum class Out { Same, Float, Bool };

inline at::ScalarType result_dtype(at::ScalarType promoted, Out kind) {
  if (kind == Out::Bool) return at::kBool;
  if (kind == Out::Float && !at::isFloatingType(promoted)) return at::kFloat;
  return promoted;
}

// The type the kernel computes in: the promoted input type (float for Out::Float).
inline at::ScalarType compute_dtype(at::ScalarType promoted, Out kind) {
  if (kind == Out::Float && !at::isFloatingType(promoted)) return at::kFloat;
  return promoted;
}

// The output shape of operands broadcast together.
inline std::vector<int64_t> broadcast_shape(std::initializer_list<Operand> inputs) {
  std::vector<int64_t> shape;
  for (const Operand& in : inputs) {
    if (in.number) continue;
    shape = at::infer_size(shape, in.tensor.sizes());
  }
  return shape;
}

// out = F(inputs): a new tensor of the broadcast shape and the result dtype.
inline at::Tensor apply(const std::string& op, Out kind, std::initializer_list<Operand> inputs, double s0 = 0,
                        double s1 = 0) {
  const at::ScalarType promoted_type = promoted(inputs);
  at::Tensor out = empty_device(broadcast_shape(inputs), result_dtype(promoted_type, kind));
  elementwise(op, out, inputs, compute_dtype(promoted_type, kind), s0, s1);
  return out;
}

// out = F(inputs) into a given tensor (resized to the broadcast shape if needed).
inline at::Tensor& apply_out(const std::string& op, Out kind, at::Tensor& out, std::initializer_list<Operand> inputs,
                             double s0 = 0, double s1 = 0) {
  at::native::resize_output(out, broadcast_shape(inputs));
  elementwise(op, out, inputs, compute_dtype(promoted(inputs), kind), s0, s1);
  return out;
}

// Unary operators: f(self), f_(self), f.out(self, out).
template <const char* op, Out kind>
at::Tensor unary(const at::Tensor& self) {
  return apply(op, kind, {self});
}
template <const char* op, Out kind>
at::Tensor& unary_(at::Tensor& self) {
  return apply_out(op, kind, self, {self});
}
template <const char* op, Out kind>
at::Tensor& unary_out(const at::Tensor& self, at::Tensor& out) {
  return apply_out(op, kind, out, {self});
}

// Binary operators without a scalar parameter (mul, div, maximum, comparisons, ...).
template <const char* op, Out kind>
at::Tensor binary(const at::Tensor& self, const at::Tensor& other) {
  return apply(op, kind, {self, other});
}
template <const char* op, Out kind>
at::Tensor& binary_(at::Tensor& self, const at::Tensor& other) {
  return apply_out(op, kind, self, {self, other});
}
template <const char* op, Out kind>
at::Tensor& binary_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  return apply_out(op, kind, out, {self, other});
}
template <const char* op, Out kind>
at::Tensor binary_scalar(const at::Tensor& self, const at::Scalar& other) {
  return apply(op, kind, {self, other});
}
template <const char* op, Out kind>
at::Tensor& binary_scalar_(at::Tensor& self, const at::Scalar& other) {
  return apply_out(op, kind, self, {self, other});
}
template <const char* op, Out kind>
at::Tensor& binary_scalar_out(const at::Tensor& self, const at::Scalar& other, at::Tensor& out) {
  return apply_out(op, kind, out, {self, other});
}

// add and sub: self ± alpha · other.
template <const char* op>
at::Tensor alpha_binary(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return apply(op, Out::Same, {self, other}, alpha.toDouble());
}
template <const char* op>
at::Tensor& alpha_binary_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return apply_out(op, Out::Same, self, {self, other}, alpha.toDouble());
}
template <const char* op>
at::Tensor& alpha_binary_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                             at::Tensor& out) {
  return apply_out(op, Out::Same, out, {self, other}, alpha.toDouble());
}
template <const char* op>
at::Tensor alpha_scalar(const at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return apply(op, Out::Same, {self, other}, alpha.toDouble());
}
template <const char* op>
at::Tensor& alpha_scalar_(at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return apply_out(op, Out::Same, self, {self, other}, alpha.toDouble());
}

// Activation backward: f_backward(grad_output, self) and its .grad_input form.
template <const char* op>
at::Tensor backward(const at::Tensor& grad_output, const at::Tensor& self) {
  return apply(op, Out::Same, {grad_output, self});
}
template <const char* op>
at::Tensor& backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::Tensor& grad_input) {
  return apply_out(op, Out::Same, grad_input, {grad_output, self});
}

}  // namespace oclf::device
