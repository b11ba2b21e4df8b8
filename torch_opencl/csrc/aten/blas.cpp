// Matrix products of the opencl device: mm, addmm, bmm, baddbmm, mv (and dot, vdot: a product
// and a sum), torch.ops.oclf.addmm_act and torch.ops.oclf.mm_group. Shapes and dtypes are
// checked and outputs made here; the products run on products.h's engines: float32 on the
// reference's kernels or CLBlast (products.cpp), float16 and bfloat16 on kernels/gemm16.cl
// (products16.cpp).

#include <torch/library.h>

#include "activations.h"
#include "dispatch.h"
#include "products.h"
#include "tensors.h"

namespace oclf::device {

namespace {

using products::all_16bit;
using products::as_matrix;
using products::bias_row;
using products::fast_product;
using products::gemm;
using products::gemm_batched;
using products::multipliable;
using products::product16;
using products::product16_group;

void check_matrix(const at::Tensor& t, int64_t dims, const char* op, const char* what) {
  check_float(t, what);
  DEVICE_CHECK(t.dim() == dims, "opencl: ", op, ": ", what, " must be ", dims, "-D, got shape ", t.sizes());
}

void check_mm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 2, op, "self");
  check_matrix(b, 2, op, "mat2");
  DEVICE_CHECK(a.size(1) == b.size(0), "opencl: ", op, ": shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied");
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (all_16bit({&self, &mat2, &out}) && multipliable(self, mat2, 2)) {
    at::native::resize_output(out, {self.size(0), mat2.size(1)});
    product16(self, mat2, out, at::Tensor(), 1.0f, 0.0f);
    return out;
  }
  check_mm(self, mat2, "mm");
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  const bool half = all_16bit({&self, &mat2});
  at::Tensor out = empty_device({self.size(0), mat2.size(1)}, half ? self.scalar_type() : at::kFloat);
  return mm_out(self, mat2, out);
}

at::Tensor& addmm_out(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (all_16bit({&bias, &mat1, &mat2, &out}) && multipliable(mat1, mat2, 2)) {
    const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: addmm: self of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::native::resize_output(out, shape);
    product16(mat1, mat2, out, bias, float(alpha.toDouble()), float(beta.toDouble()));
    return out;
  }
  check_mm(mat1, mat2, "addmm");
  check_float(bias, "self");
  const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
  const bool aliased = out.is_same(bias);
  at::native::resize_output(out, shape);
  at::Tensor result = out.is_contiguous() ? out : empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  // A bias row (a linear layer's) goes to the product's kernels, not through a copy into
  // the output first.
  if (bias_row(bias, out, b, shape[1])) {
    gemm(mat1, mat2, result, static_cast<float>(alpha.toDouble()), b, bias.reshape({shape[1]}));
  } else {
    if (b != 0.0f && !(aliased && result.is_same(out))) result.copy_(bias.expand(shape));
    gemm(mat1, mat2, result, static_cast<float>(alpha.toDouble()), b);
  }
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor addmm(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  const bool half = all_16bit({&bias, &mat1, &mat2});
  at::Tensor out = empty_device({mat1.size(0), mat2.size(1)}, half ? mat1.scalar_type() : at::kFloat);
  return addmm_out(bias, mat1, mat2, beta, alpha, out);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  return addmm_out(self, mat1, mat2, beta, alpha, self);
}

// torch.ops.oclf.addmm_act(bias, mat1, mat2, activation, *, norm_weight, norm_bias, norm_eps,
// residual): act(addmm(bias, x, mat2)) (+ residual), x = mat1, or mat1's rows through
// layer_norm(mat1, (k,), norm_weight, norm_bias, norm_eps) where norm_weight is given: what a
// compiled graph's product and the activation after it become (compile/passes.py), and a
// decoding step's layer norm before a product and residual after it (compile/decoding.py).
// Float32 products with a bias row that run on the reference's kernels, and 16-bit products
// (gemm16.cl), apply the activation as they store C: one kernel where the product and the
// activation took two; few-row 16-bit products over k×n weights take the norm and the
// residual too (gemm16_rows_nc); any other product (CLBlast's, another device's) runs as torch
// operations, which give the same values.
at::Tensor addmm_act_separately(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                                c10::string_view activation, const c10::optional<at::Tensor>& norm_weight,
                                const c10::optional<at::Tensor>& norm_bias, double norm_eps,
                                const c10::optional<at::Tensor>& residual) {
  DEVICE_CHECK(norm_weight.has_value() == norm_bias.has_value(),
               "opencl: addmm_act: norm_weight and norm_bias are given together");
  const at::Tensor x = norm_weight.has_value()
                           ? at::layer_norm(mat1, {mat1.size(-1)}, *norm_weight, *norm_bias, norm_eps)
                           : mat1;
  const at::Tensor y = activated(at::addmm(bias, x, mat2), activation_named(activation, "addmm_act"));
  return residual.has_value() ? *residual + y : y;
}

at::Tensor addmm_act(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                     c10::string_view activation, const c10::optional<at::Tensor>& norm_weight,
                     const c10::optional<at::Tensor>& norm_bias, double norm_eps,
                     const c10::optional<at::Tensor>& residual) {
  const Activation act = activation_named(activation, "addmm_act");
  if (norm_weight.has_value() || norm_bias.has_value() || residual.has_value()) {
    products::RowsAround around;
    if (norm_weight.has_value() && norm_bias.has_value())
      around.norm_weight = *norm_weight, around.norm_bias = *norm_bias, around.norm_eps = norm_eps;
    if (residual.has_value()) around.residual = *residual;
    if (multipliable(mat1, mat2, 2) && norm_weight.has_value() == norm_bias.has_value()) {
      at::Tensor out = empty_device({mat1.size(0), mat2.size(1)}, mat1.scalar_type());
      if (products::product16_rows_around(mat1, mat2, out, bias, act, around)) return out;
    }
    return addmm_act_separately(bias, mat1, mat2, activation, norm_weight, norm_bias, norm_eps, residual);
  }
  if (all_16bit({&bias, &mat1, &mat2}) && multipliable(mat1, mat2, 2)) {
    const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: addmm_act: bias of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::Tensor out = empty_device(shape, mat1.scalar_type());
    product16(mat1, mat2, out, bias, 1.0f, 1.0f, act);
    return out;
  }
  if (mat1.scalar_type() == at::kFloat && mat2.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
      multipliable(mat1, mat2, 2) && is_device(bias) && is_device(mat1) && is_device(mat2)) {
    const int64_t m = mat1.size(0), k = mat1.size(1), n = mat2.size(1);
    at::Tensor out = empty_device({m, n}, at::kFloat);
    if (m > 0 && n > 0 && k > 0 && bias_row(bias, out, 1.0f, n) &&
        fast_product(as_matrix(mat1), as_matrix(mat2), out, size_t(m), size_t(n), size_t(k), bias.reshape({n}), 0.0f,
                     act))
      return out;
  }
  return addmm_act_separately(bias, mat1, mat2, activation, {}, {}, 0.0, {});
}

// torch.ops.oclf.mm_group(mat1, mat2s, *, rms_weight, rms_eps, glu, residual): [mm(mat1, m) for m
// in mat2s], what a compiled graph's products of one input become (compile/decoding.py: a
// layer's query, key and value projections, an MLP's gate and up), with what decoding does
// around them, in this order:
//   rms_weight   mat1's rows through transformers' RMSNorm first:
//                rms_weight · (x · rsqrt(mean(x², -1) + rms_eps)).to(x's dtype), x = mat1 in float32;
//   glu          an activation's name: two products become one, glu(out_0) · out_1 (a gated MLP);
//   residual     added to the one result (a residual connection).
// Few-row 16-bit products with weights read through their transposes run up to three at a
// time, with the options, in one launch (gemm16_rows_kc_group); others as torch operations,
// with the same values.
struct GroupArgs {
  products::GroupOptions options;
  bool any = false;
};

GroupArgs group_args(at::TensorList mat2s, const c10::optional<at::Tensor>& rms_weight, double rms_eps,
                     c10::optional<c10::string_view> glu, const c10::optional<at::Tensor>& residual) {
  GroupArgs g;
  if (rms_weight.has_value()) g.options.rms_weight = *rms_weight, g.options.rms_eps = rms_eps;
  if (glu.has_value()) {
    g.options.glu = activation_named(*glu, "mm_group");
    g.options.gated = true;
    DEVICE_CHECK(mat2s.size() == 2, "opencl: mm_group: glu takes two products (gate, up), got ", mat2s.size());
  }
  if (residual.has_value()) {
    g.options.residual = *residual;
    DEVICE_CHECK(mat2s.size() == 1 || (g.options.gated && mat2s.size() == 2),
                 "opencl: mm_group: a residual is added to one result, got ", mat2s.size(), " products");
  }
  g.any = rms_weight.has_value() || glu.has_value() || residual.has_value();
  return g;
}

std::vector<at::Tensor> mm_group_separately(const at::Tensor& mat1, at::TensorList mat2s,
                                            const c10::optional<at::Tensor>& rms_weight, double rms_eps,
                                            c10::optional<c10::string_view> glu,
                                            const c10::optional<at::Tensor>& residual) {
  const GroupArgs g = group_args(mat2s, rms_weight, rms_eps, glu, residual);
  at::Tensor x = mat1;
  if (rms_weight.has_value()) {
    const at::Tensor h = mat1.to(at::kFloat);
    x = *rms_weight * (h * at::rsqrt(h.pow(2).mean(-1, true) + rms_eps)).to(mat1.scalar_type());
  }
  std::vector<at::Tensor> outs;
  for (const at::Tensor& m : mat2s) outs.push_back(at::mm(x, m));
  if (g.options.gated) outs = {activated(outs[0], g.options.glu) * outs[1]};
  if (residual.has_value()) outs[0] = *residual + outs[0];
  return outs;
}

std::vector<at::Tensor> mm_group(const at::Tensor& mat1, at::TensorList mat2s,
                                 const c10::optional<at::Tensor>& rms_weight, double rms_eps,
                                 c10::optional<c10::string_view> glu, const c10::optional<at::Tensor>& residual) {
  const GroupArgs g = group_args(mat2s, rms_weight, rms_eps, glu, residual);
  std::vector<at::Tensor> outs, part;
  if (g.any) {
    if (!product16_group(mat1, mat2s.vec(), outs, g.options))
      outs = mm_group_separately(mat1, mat2s, rms_weight, rms_eps, glu, residual);
    return outs;
  }
  for (size_t first = 0; first < mat2s.size(); first += 3) {
    const std::vector<at::Tensor> some(mat2s.begin() + first, mat2s.begin() + std::min(mat2s.size(), first + 3));
    if (!product16_group(mat1, some, part)) part = mm_group_separately(mat1, some, {}, 0.0, {}, {});
    outs.insert(outs.end(), part.begin(), part.end());
  }
  return outs;
}

void check_bmm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 3, op, "self");
  check_matrix(b, 3, op, "mat2");
  DEVICE_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "opencl: ", op, ": shapes ", a.sizes(), " and ",
              b.sizes(), " cannot be multiplied");
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (all_16bit({&self, &mat2, &out}) && multipliable(self, mat2, 3)) {
    at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
    product16(self, mat2, out, at::Tensor(), 1.0f, 0.0f);
    return out;
  }
  check_bmm(self, mat2, "bmm");
  at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm_batched(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  const bool half = all_16bit({&self, &mat2});
  at::Tensor out = empty_device({self.size(0), self.size(1), mat2.size(2)}, half ? self.scalar_type() : at::kFloat);
  return bmm_out(self, mat2, out);
}

at::Tensor baddbmm(const at::Tensor& bias, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  if (all_16bit({&bias, &b1, &b2}) && multipliable(b1, b2, 3)) {
    const std::vector<int64_t> shape = {b1.size(0), b1.size(1), b2.size(2)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: baddbmm: self of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::Tensor out = empty_device(shape, b1.scalar_type());
    product16(b1, b2, out, bias, float(alpha.toDouble()), float(beta.toDouble()));
    return out;
  }
  check_bmm(b1, b2, "baddbmm");
  const std::vector<int64_t> shape = {b1.size(0), b1.size(1), b2.size(2)};
  at::Tensor out = empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  if (b != 0.0f) out.copy_(bias.expand(shape));
  gemm_batched(b1, b2, out, static_cast<float>(alpha.toDouble()), b);
  return out;
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  DEVICE_CHECK(vec.dim() == 1, "opencl: mv: vec must be 1-D, got shape ", vec.sizes());
  return oclf::device::mm(self, vec.unsqueeze(1)).squeeze(1);
}

// ---- dot and vdot: Σ self·other over two vectors, as the device's product and sum -------------
// (vdot conjugates self: the same for real dtypes; complex ones run on the CPU).

at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  DEVICE_CHECK(self.dim() == 1 && other.dim() == 1, "opencl: dot: 1D tensors expected, but got ", self.dim(), "D and ",
               other.dim(), "D tensors");
  DEVICE_CHECK(self.scalar_type() == other.scalar_type(), "opencl: dot: expected both vectors to have same dtype, ",
               "but found ", self.scalar_type(), " and ", other.scalar_type());
  DEVICE_CHECK(self.numel() == other.numel(), "opencl: dot: inconsistent tensor size, expected tensor [",
               self.numel(), "] and src [", other.numel(), "] to have the same number of elements, but got ",
               self.numel(), " and ", other.numel(), " elements respectively");
  DEVICE_DTYPE_CHECK(!at::isComplexType(self.scalar_type()), "opencl: dot: complex vectors run on the CPU");
  return at::mul(self, other).sum().to(self.scalar_type());
}

at::Tensor& dot_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  const at::Tensor result = oclf::device::dot(self, other);
  at::native::resize_output(out, {});
  return out.copy_(result);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("baddbmm", baddbmm);
  m.impl("mv", mv);
  m.impl("dot", dot);
  m.impl("dot.out", dot_out);
  m.impl("vdot", dot);
  m.impl("vdot.out", dot_out);
}

TORCH_LIBRARY_FRAGMENT(oclf, m) {
  m.def("addmm_act(Tensor bias, Tensor mat1, Tensor mat2, str activation, *, Tensor? norm_weight=None, "
        "Tensor? norm_bias=None, float norm_eps=0.0, Tensor? residual=None) -> Tensor");
  m.def("mm_group(Tensor mat1, Tensor[] mat2s, *, Tensor? rms_weight=None, float rms_eps=0.0, str? glu=None, "
        "Tensor? residual=None) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(oclf, PrivateUse1, m) {
  m.impl("addmm_act", addmm_act);
  m.impl("mm_group", mm_group);
}

TORCH_LIBRARY_IMPL(oclf, CompositeExplicitAutograd, m) {
  m.impl("addmm_act", addmm_act_separately);
  m.impl("mm_group", mm_group_separately);
}

}  // namespace oclf::device
