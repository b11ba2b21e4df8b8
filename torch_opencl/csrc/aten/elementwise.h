// The elementwise driver over kernels/elementwise.cl: one OP_<name> applied to broadcast
// operands (tensors of any strides, or numbers), with torch's type promotion and conversion
// to the output's dtype. pointwise.h turns it into torch's operators.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <optional>
#include <string>

#include "tensors.h"

namespace oclf::device {

// One input of an elementwise operation: a tensor (broadcast to the output's shape), or
// a number (a Python scalar, or a 0-dim CPU tensor, which torch allows beside device ones).
// For a number, `tensor` is the 0-dim CPU tensor it came from, or undefined where it came
// as a Scalar (`scalar`, which type promotion sees as a wrapped number).
struct Operand {
  at::Tensor tensor;
  std::optional<double> number;
  std::optional<at::Scalar> scalar;
  Operand(const at::Tensor& t);        // NOLINT: implicit on purpose
  Operand(const at::Scalar& value);    // NOLINT
  Operand(double value) : Operand(at::Scalar(value)) {}  // NOLINT
};

// out = F(inputs) elementwise (F: an OP_<op> of elementwise.cl), computing in `compute`.
// out has the broadcast shape already; s0 and s1 are F's parameters.
void elementwise(const std::string& op, const at::Tensor& out, std::initializer_list<Operand> inputs,
                 at::ScalarType compute, double s0 = 0, double s1 = 0);

// The dtype torch's type promotion gives for these operands (numbers count as wrapped).
at::ScalarType promoted(std::initializer_list<Operand> inputs);

}  // namespace oclf::device
