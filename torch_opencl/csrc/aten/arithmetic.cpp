// Elementwise arithmetic of the opencl device: +, -, *, /, comparisons, logical and bitwise
// operators, math functions, where, masked_fill, clamp, pow, addcmul/addcdiv, lerp, sgn and
// xlogy, each as an OP_<name> of kernels/elementwise.cl (see pointwise.h for the wrappers);
// addr, of those kernels.
#include <ATen/ops/addr_native.h>
#include <torch/library.h>

#include "dispatch.h"
#include "elementwise.h"
#include "pointwise.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// ---- division with a rounding mode ------------------------------------------------------

std::string div_op(std::optional<c10::string_view> mode, at::ScalarType promoted_type) {
  if (!mode) return "div";
  const bool integral = !at::isFloatingType(promoted_type);
  if (*mode == "floor") return integral ? "idiv_floor" : "div_floor";
  DEVICE_CHECK(*mode == "trunc", "opencl: div: rounding_mode must be None, 'floor' or 'trunc', got '", *mode, "'");
  return integral ? "div" : "div_trunc";  // integer division in OpenCL C truncates
}

at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  const at::ScalarType type = promoted({self, other});
  return apply(div_op(mode, type), mode ? Out::Same : Out::Float, {self, other});
}

at::Tensor& div_mode_(at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  const at::ScalarType type = promoted({self, other});
  return apply_out(div_op(mode, type), mode ? Out::Same : Out::Float, self, {self, other});
}

at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
  const at::ScalarType type = promoted({self, other});
  return apply_out(div_op(mode, type), mode ? Out::Same : Out::Float, out, {self, other});
}

at::Tensor floor_divide(const at::Tensor& self, const at::Tensor& other) {
  return div_mode(self, other, c10::string_view("floor"));
}

at::Tensor floor_divide_scalar(const at::Tensor& self, const at::Scalar& other) {
  const at::ScalarType type = promoted({self, other});
  return apply(div_op(c10::string_view("floor"), type), Out::Same, {self, other});
}

at::Tensor remainder(const at::Tensor& self, const at::Tensor& other) {
  const bool integral = !at::isFloatingType(promoted({self, other}));
  return apply(integral ? "iremainder" : "remainder", Out::Same, {self, other});
}

at::Tensor remainder_scalar(const at::Tensor& self, const at::Scalar& other) {
  const bool integral = !at::isFloatingType(promoted({self, other}));
  return apply(integral ? "iremainder" : "remainder", Out::Same, {self, other});
}

// rsub: other - alpha · self.
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return apply("rsub", Out::Same, {self, other}, alpha.toDouble());
}

at::Tensor rsub_scalar(const at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return apply("rsub", Out::Same, {self, other}, alpha.toDouble());
}

// ---- where, masked_fill, clamp -----------------------------------------------------------

// The result type of where(condition, a, b): a and b promoted (the condition is bool).
at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const at::ScalarType type = promoted({self, other});
  at::Tensor out = empty_device(broadcast_shape({condition, self, other}), type);
  elementwise("where", out, {condition, self, other}, type);
  return out;
}

at::Tensor& where_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                      at::Tensor& out) {
  at::native::resize_output(out, broadcast_shape({condition, self, other}));
  elementwise("where", out, {condition, self, other}, out.scalar_type());
  return out;
}

at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  DEVICE_CHECK_TYPE(mask.scalar_type() == at::kBool, "opencl: masked_fill_: mask must be bool, got ",
                   mask.scalar_type());
  elementwise("where", self, {mask, value, self}, self.scalar_type());
  return self;
}

at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  DEVICE_CHECK(value.dim() == 0, "opencl: masked_fill_: value must be a 0-dim tensor, got ", value.dim(),
              " dimensions");
  DEVICE_CHECK_TYPE(mask.scalar_type() == at::kBool, "opencl: masked_fill_: mask must be bool, got ",
                   mask.scalar_type());
  elementwise("where", self, {mask, value, self}, self.scalar_type());
  return self;
}

// clamp with optional bounds; the bounds stand in as ±infinity (or the type's limits).
std::pair<double, double> bounds(const std::optional<at::Scalar>& lo, const std::optional<at::Scalar>& hi) {
  DEVICE_CHECK(lo || hi, "opencl: clamp: at least one of min and max must be given");
  const double inf = std::numeric_limits<double>::infinity();
  return {lo ? lo->toDouble() : -inf, hi ? hi->toDouble() : inf};
}

at::Tensor clamp(const at::Tensor& self, const std::optional<at::Scalar>& lo, const std::optional<at::Scalar>& hi) {
  const auto [low, high] = bounds(lo, hi);
  return apply("clamp", Out::Same, {self}, low, high);
}

at::Tensor& clamp_(at::Tensor& self, const std::optional<at::Scalar>& lo, const std::optional<at::Scalar>& hi) {
  const auto [low, high] = bounds(lo, hi);
  return apply_out("clamp", Out::Same, self, {self}, low, high);
}

at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& lo,
                      const std::optional<at::Scalar>& hi, at::Tensor& out) {
  const auto [low, high] = bounds(lo, hi);
  return apply_out("clamp", Out::Same, out, {self}, low, high);
}

at::Tensor clamp_min(const at::Tensor& self, const at::Scalar& lo) {
  return apply("clamp_min", Out::Same, {self}, lo.toDouble());
}

at::Tensor& clamp_min_(at::Tensor& self, const at::Scalar& lo) {
  return apply_out("clamp_min", Out::Same, self, {self}, lo.toDouble());
}

at::Tensor clamp_max(const at::Tensor& self, const at::Scalar& hi) {
  return apply("clamp_max", Out::Same, {self}, hi.toDouble());
}

at::Tensor& clamp_max_(at::Tensor& self, const at::Scalar& hi) {
  return apply_out("clamp_max", Out::Same, self, {self}, hi.toDouble());
}

// ---- pow, addcmul, addcdiv, lerp ---------------------------------------------------------

// Integer tensors to integer powers stay integers, computed exactly (ipow); anything floating
// computes in floating point, as torch's result types say.
bool integral(const at::Tensor& t) { return at::isIntegralType(t.scalar_type(), /*includeBool=*/true); }

// Whether self ** exponent stays an integer (ipow); a negative integer power of integers is
// refused, as torch refuses it.
bool integer_power(const at::Tensor& self, const at::Scalar& exponent) {
  if (!integral(self) || !exponent.isIntegral(false)) return false;
  DEVICE_CHECK(exponent.toLong() >= 0, "opencl: pow: Integers to negative integer powers are not allowed.");
  return true;
}

at::Tensor pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  if (integer_power(self, exponent)) return apply("ipow", Out::Same, {self, exponent});
  return apply("pow_scalar", Out::Float, {self}, exponent.toDouble());
}

at::Tensor& pow_scalar_out(const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out) {
  if (integer_power(self, exponent)) return apply_out("ipow", Out::Same, out, {self, exponent});
  return apply_out("pow_scalar", Out::Float, out, {self}, exponent.toDouble());
}

at::Tensor& pow_scalar_(at::Tensor& self, const at::Scalar& exponent) {
  return pow_scalar_out(self, exponent, self);
}

at::Tensor pow_tensor(const at::Tensor& self, const at::Tensor& exponent) {
  if (integral(self) && integral(exponent)) return apply("ipow", Out::Same, {self, exponent});
  return apply("pow", Out::Float, {self, exponent});
}

at::Tensor pow_base(const at::Scalar& base, const at::Tensor& exponent) {
  if (base.isIntegral(false) && integral(exponent)) return apply("ipow", Out::Same, {base, exponent});
  return apply("pow", Out::Float, {base, exponent});
}

template <const char* op>
at::Tensor addc(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value) {
  return apply(op, Out::Same, {self, t1, t2}, value.toDouble());
}

template <const char* op>
at::Tensor& addc_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value) {
  return apply_out(op, Out::Same, self, {self, t1, t2}, value.toDouble());
}

template <const char* op>
at::Tensor& addc_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value,
                     at::Tensor& out) {
  return apply_out(op, Out::Same, out, {self, t1, t2}, value.toDouble());
}

at::Tensor lerp_scalar(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  return apply("lerp_scalar", Out::Same, {self, end}, weight.toDouble());
}

at::Tensor& lerp_scalar_(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  return apply_out("lerp_scalar", Out::Same, self, {self, end}, weight.toDouble());
}

at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
                            at::Tensor& out) {
  return apply_out("lerp_scalar", Out::Same, out, {self, end}, weight.toDouble());
}

at::Tensor lerp_tensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  return apply("lerp", Out::Same, {self, end, weight});
}

at::Tensor& lerp_tensor_(at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  return apply_out("lerp", Out::Same, self, {self, end, weight});
}

// ~x is logical for bool tensors (a bool is stored as a byte 0 or 1).
at::Tensor bitwise_not(const at::Tensor& self) {
  return apply(self.scalar_type() == at::kBool ? "logical_not" : "bitwise_not", Out::Same, {self});
}

at::Tensor nan_to_num(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                      std::optional<double> neginf) {
  DEVICE_CHECK(!neginf || !posinf || *neginf == -*posinf, "opencl: nan_to_num: neginf must be -posinf");
  if (at::isIntegralType(self.scalar_type(), /*includeBool=*/true)) return self.clone();  // nothing to replace
  const double big = posinf.value_or(std::numeric_limits<float>::max());
  return apply("nan_to_num", Out::Same, {self}, nan.value_or(0.0), big);
}

// floor, ceil, round and trunc of an integer tensor: its values, as in torch (OpenCL's
// functions take floating types only).
template <const char* op>
at::Tensor rounded(const at::Tensor& self) {
  if (at::isIntegralType(self.scalar_type(), /*includeBool=*/false)) return self.clone();
  return unary<op, Out::Same>(self);
}

// torch refuses to negate booleans (a NotImplementedError, pointing at ~ and logical_not).
void check_negatable(const at::Tensor& self) {
  DEVICE_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "opencl: neg: Negation, the `-` operator, on a ",
                              "bool tensor is not supported. If you are trying to invert a mask, use the `~` or ",
                              "`logical_not()` operator instead.");
}
at::Tensor neg(const at::Tensor& self) {
  check_negatable(self);
  return unary<opname::neg, Out::Same>(self);
}
at::Tensor& neg_(at::Tensor& self) {
  check_negatable(self);
  return unary_<opname::neg, Out::Same>(self);
}
at::Tensor& neg_out(const at::Tensor& self, at::Tensor& out) {
  check_negatable(self);
  return unary_out<opname::neg, Out::Same>(self, out);
}

// ---- addr -------------------------------------------------------------------------------

// beta·self + alpha·(vec1 ⊗ vec2). In float16 and bfloat16 torch's CPU and CUDA kernels compute
// beta·self + (alpha·vec1)·vec2 in the dtype's own arithmetic (c10::BFloat16 and c10::Half
// round each product and the sum, beta and alpha rounded first); so does this, with the
// device's 16-bit elementwise kernels (each rounds its result). torch's composite, which
// other dtypes take, rounds alpha·(vec1 ⊗ vec2) instead: up to 16 units off in bfloat16.
at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                const at::Scalar& alpha) {
  const at::ScalarType dtype = self.scalar_type();
  const bool half = dtype == at::kHalf, bfloat = dtype == at::kBFloat16;
  if (!(half || bfloat) || vec1.scalar_type() != dtype || vec2.scalar_type() != dtype)
    return at::native::math_addr(self, vec1, vec2, beta, alpha);
  DEVICE_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  DEVICE_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  const auto in_dtype = [&](const at::Scalar& v) {
    return bfloat ? double(float(v.to<c10::BFloat16>())) : double(float(v.to<c10::Half>()));
  };
  const double b = in_dtype(beta), a = in_dtype(alpha);
  const at::Tensor product = at::mul(vec1, a).unsqueeze(1) * vec2.unsqueeze(0);
  const at::Tensor source = self.expand(product.sizes());  // refuses a self that does not broadcast
  if (b == 0) return product;  // self is ignored, its NaN and infinities too
  return at::mul(source, b) + product;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("addr", addr);
  m.impl("add.Tensor", alpha_binary<opname::add>);
  m.impl("add_.Tensor", alpha_binary_<opname::add>);
  m.impl("add.out", alpha_binary_out<opname::add>);
  m.impl("add.Scalar", alpha_scalar<opname::add>);
  m.impl("add_.Scalar", alpha_scalar_<opname::add>);
  m.impl("sub.Tensor", alpha_binary<opname::sub>);
  m.impl("sub_.Tensor", alpha_binary_<opname::sub>);
  m.impl("sub.out", alpha_binary_out<opname::sub>);
  m.impl("sub.Scalar", alpha_scalar<opname::sub>);
  m.impl("sub_.Scalar", alpha_scalar_<opname::sub>);
  m.impl("rsub.Tensor", rsub);
  m.impl("rsub.Scalar", rsub_scalar);
  m.impl("mul.Tensor", binary<opname::mul, Out::Same>);
  m.impl("mul_.Tensor", binary_<opname::mul, Out::Same>);
  m.impl("mul.out", binary_out<opname::mul, Out::Same>);
  m.impl("mul.Scalar", binary_scalar<opname::mul, Out::Same>);
  m.impl("mul_.Scalar", binary_scalar_<opname::mul, Out::Same>);
  m.impl("div.Tensor", binary<opname::div, Out::Float>);
  m.impl("div_.Tensor", binary_<opname::div, Out::Float>);
  m.impl("div.out", binary_out<opname::div, Out::Float>);
  m.impl("div.Scalar", binary_scalar<opname::div, Out::Float>);
  m.impl("div_.Scalar", binary_scalar_<opname::div, Out::Float>);
  m.impl("div.Tensor_mode", div_mode);
  m.impl("div_.Tensor_mode", div_mode_);
  m.impl("div.out_mode", div_mode_out);
  m.impl("floor_divide", floor_divide);
  m.impl("floor_divide.Scalar", floor_divide_scalar);
  m.impl("remainder.Tensor", remainder);
  m.impl("remainder.Scalar", remainder_scalar);
  m.impl("maximum", binary<opname::maximum, Out::Same>);
  m.impl("maximum.out", binary_out<opname::maximum, Out::Same>);
  m.impl("minimum", binary<opname::minimum, Out::Same>);
  m.impl("minimum.out", binary_out<opname::minimum, Out::Same>);
  m.impl("atan2", binary<opname::atan2, Out::Float>);
  m.impl("pow.Tensor_Scalar", pow_scalar);
  m.impl("pow.Tensor_Scalar_out", pow_scalar_out);
  m.impl("pow_.Scalar", pow_scalar_);
  m.impl("pow.Tensor_Tensor", pow_tensor);
  m.impl("pow.Scalar", pow_base);
  m.impl("eq.Tensor", binary<opname::eq, Out::Bool>);
  m.impl("eq.Scalar", binary_scalar<opname::eq, Out::Bool>);
  m.impl("eq.Tensor_out", binary_out<opname::eq, Out::Bool>);
  m.impl("eq.Scalar_out", binary_scalar_out<opname::eq, Out::Bool>);
  m.impl("ne.Tensor", binary<opname::ne, Out::Bool>);
  m.impl("ne.Scalar", binary_scalar<opname::ne, Out::Bool>);
  m.impl("ne.Tensor_out", binary_out<opname::ne, Out::Bool>);
  m.impl("ne.Scalar_out", binary_scalar_out<opname::ne, Out::Bool>);
  m.impl("lt.Tensor", binary<opname::lt, Out::Bool>);
  m.impl("lt.Scalar", binary_scalar<opname::lt, Out::Bool>);
  m.impl("le.Tensor", binary<opname::le, Out::Bool>);
  m.impl("le.Scalar", binary_scalar<opname::le, Out::Bool>);
  m.impl("gt.Tensor", binary<opname::gt, Out::Bool>);
  m.impl("gt.Scalar", binary_scalar<opname::gt, Out::Bool>);
  m.impl("ge.Tensor", binary<opname::ge, Out::Bool>);
  m.impl("ge.Scalar", binary_scalar<opname::ge, Out::Bool>);
  m.impl("logical_and", binary<opname::logical_and, Out::Bool>);
  m.impl("logical_and.out", binary_out<opname::logical_and, Out::Bool>);
  m.impl("logical_or", binary<opname::logical_or, Out::Bool>);
  m.impl("logical_or.out", binary_out<opname::logical_or, Out::Bool>);
  m.impl("logical_not", unary<opname::logical_not, Out::Bool>);
  m.impl("logical_not.out", unary_out<opname::logical_not, Out::Bool>);
  m.impl("bitwise_and.Tensor", binary<opname::bitwise_and, Out::Same>);
  m.impl("bitwise_and.Tensor_out", binary_out<opname::bitwise_and, Out::Same>);
  m.impl("bitwise_or.Tensor", binary<opname::bitwise_or, Out::Same>);
  m.impl("bitwise_or.Tensor_out", binary_out<opname::bitwise_or, Out::Same>);
  m.impl("bitwise_xor.Tensor", binary<opname::bitwise_xor, Out::Same>);
  m.impl("bitwise_not", bitwise_not);
  m.impl("neg", neg);
  m.impl("neg_", neg_);
  m.impl("neg.out", neg_out);
  m.impl("abs", unary<opname::abs, Out::Same>);
  m.impl("abs_", unary_<opname::abs, Out::Same>);
  m.impl("abs.out", unary_out<opname::abs, Out::Same>);
  m.impl("sign", unary<opname::sign, Out::Same>);
  m.impl("sign.out", unary_out<opname::sign, Out::Same>);
  m.impl("sgn", unary<opname::sign, Out::Same>);  // sign, for real dtypes
  m.impl("sgn_", unary_<opname::sign, Out::Same>);
  m.impl("sgn.out", unary_out<opname::sign, Out::Same>);
  m.impl("xlogy.Tensor", binary<opname::xlogy, Out::Float>);
  m.impl("xlogy_.Tensor", binary_<opname::xlogy, Out::Float>);
  m.impl("xlogy.OutTensor", binary_out<opname::xlogy, Out::Float>);
  m.impl("special_xlog1py", binary<opname::xlog1py, Out::Float>);
  m.impl("special_xlog1py.out", binary_out<opname::xlog1py, Out::Float>);
  m.impl("exp", unary<opname::exp, Out::Float>);
  m.impl("exp_", unary_<opname::exp, Out::Float>);
  m.impl("exp.out", unary_out<opname::exp, Out::Float>);
  m.impl("log", unary<opname::log, Out::Float>);
  m.impl("log_", unary_<opname::log, Out::Float>);
  m.impl("log.out", unary_out<opname::log, Out::Float>);
  m.impl("log1p", unary<opname::log1p, Out::Float>);
  m.impl("log1p_", unary_<opname::log1p, Out::Float>);
  m.impl("log1p.out", unary_out<opname::log1p, Out::Float>);
  m.impl("expm1", unary<opname::expm1, Out::Float>);
  m.impl("sqrt", unary<opname::sqrt, Out::Float>);
  m.impl("sqrt_", unary_<opname::sqrt, Out::Float>);
  m.impl("sqrt.out", unary_out<opname::sqrt, Out::Float>);
  m.impl("rsqrt", unary<opname::rsqrt, Out::Float>);
  m.impl("rsqrt_", unary_<opname::rsqrt, Out::Float>);
  m.impl("rsqrt.out", unary_out<opname::rsqrt, Out::Float>);
  m.impl("sin", unary<opname::sin, Out::Float>);
  m.impl("cos", unary<opname::cos, Out::Float>);
  m.impl("erf", unary<opname::erf, Out::Float>);
  m.impl("reciprocal", unary<opname::reciprocal, Out::Float>);
  m.impl("reciprocal_", unary_<opname::reciprocal, Out::Float>);
  m.impl("reciprocal.out", unary_out<opname::reciprocal, Out::Float>);
  m.impl("floor", rounded<opname::floor>);
  m.impl("ceil", rounded<opname::ceil>);
  m.impl("round", rounded<opname::round>);
  m.impl("trunc", rounded<opname::trunc>);
  m.impl("isnan", unary<opname::isnan, Out::Bool>);
  m.impl("nan_to_num", nan_to_num);
  m.impl("where.self", where);
  m.impl("where.self_out", where_out);
  m.impl("masked_fill_.Scalar", masked_fill_scalar_);
  m.impl("masked_fill_.Tensor", masked_fill_tensor_);
  m.impl("clamp", clamp);
  m.impl("clamp_", clamp_);
  m.impl("clamp.out", clamp_out);
  m.impl("clamp_min", clamp_min);
  m.impl("clamp_min_", clamp_min_);
  m.impl("clamp_max", clamp_max);
  m.impl("clamp_max_", clamp_max_);
  m.impl("addcmul", addc<opname::addcmul>);
  m.impl("addcmul_", addc_<opname::addcmul>);
  m.impl("addcmul.out", addc_out<opname::addcmul>);
  m.impl("addcdiv", addc<opname::addcdiv>);
  m.impl("addcdiv_", addc_<opname::addcdiv>);
  m.impl("addcdiv.out", addc_out<opname::addcdiv>);
  m.impl("lerp.Scalar", lerp_scalar);
  m.impl("lerp_.Scalar", lerp_scalar_);
  m.impl("lerp.Scalar_out", lerp_scalar_out);
  m.impl("lerp.Tensor", lerp_tensor);
  m.impl("lerp_.Tensor", lerp_tensor_);
  m.impl("isneginf", unary<opname::isneginf, Out::Bool>);
  m.impl("isneginf.out", unary_out<opname::isneginf, Out::Bool>);
  m.impl("isposinf", unary<opname::isposinf, Out::Bool>);
  m.impl("isposinf.out", unary_out<opname::isposinf, Out::Bool>);
  m.impl("isinf", unary<opname::isinf, Out::Bool>);
}

}  // namespace oclf::device
