// More operators of the opencl device, beyond the validated networks' hot paths: variance
// and standard deviation, MSE loss, flip, roll, unfold (so repeat), cumsum, gather,
// scatter/scatter_add, random fills (randn, rand, bernoulli) and linspace. Kernels:
// kernels/gather.cl. (Indexing, x[i, j] and x[mask]: indexing.cpp.)
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/TensorShape.h>
#include <torch/library.h>

#include <climits>

#include "pointwise.h"

namespace oclf::device {

namespace {

std::string typed(const at::Tensor& t) { return std::string("-DT=") + cl_type(t.scalar_type()); }
// For kernels that only move elements: any dtype of up to 8 bytes.
std::string moved(const at::Tensor& t) { return std::string("-DT=") + cl_move_type(t.scalar_type()); }

// ---- variance, MSE -------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction, bool keepdim) {
  check_float(self, "input");
  const at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
  int64_t n = 1;
  if (dims.empty()) {
    n = self.numel();
  } else {
    for (int64_t d : dims) {
      const int64_t w = at::maybe_wrap_dim(d, self.dim());
      n *= self.dim() == 0 ? 1 : self.size(w);  // a 0-d tensor's dim 0 holds its one element
    }
  }
  const double dof = std::max(0.0, double(n) - (correction ? correction->toDouble() : 1.0));
  const at::Tensor mean = self.mean(dims, /*keepdim=*/true);
  const at::Tensor centered = self - mean;
  at::Tensor var = (centered * centered).sum(dims, keepdim).div(dof);
  return {var, keepdim ? mean : mean.sum(dims, false)};
}

at::Tensor var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
               bool keepdim) {
  return std::get<0>(oclf::device::var_mean(self, dim, correction, keepdim));
}

at::Tensor std_(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                bool keepdim) {
  return oclf::device::var(self, dim, correction, keepdim).sqrt();
}

std::tuple<at::Tensor, at::Tensor> std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction, bool keepdim) {
  auto [v, m] = oclf::device::var_mean(self, dim, correction, keepdim);
  return {v.sqrt(), m};
}

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

// ---- shape ---------------------------------------------------------------------------------

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  at::Tensor out = self;
  for (int64_t d : dims) {
    const int64_t w = at::maybe_wrap_dim(d, self.dim());
    if (self.dim() == 0) continue;  // one element: flipped, it is itself
    const at::TensorOptions options = at::TensorOptions().device(current_device()).dtype(at::kLong);
    const at::Tensor reversed = at::arange(self.size(w) - 1, -1, -1, options);
    out = out.index_select(w, reversed);
  }
  return out.is_same(self) ? self.clone() : out;
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims) {
  const at::IntArrayRef shifts = C10_AS_INTARRAYREF_SLOW(shifts_sym);
  if (dims.empty()) {
    DEVICE_CHECK(shifts.size() == 1, "opencl: roll: give one shift when no dims are given");
    return oclf::device::roll(self.flatten(), shifts_sym, {0}).view(self.sizes());
  }
  DEVICE_CHECK(shifts.size() == dims.size(), "opencl: roll: shifts and dims must have the same length");
  at::Tensor out = self;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = at::maybe_wrap_dim(dims[k], self.dim());
    if (self.dim() == 0) continue;  // one element: rolled, it is itself
    const int64_t n = self.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    out = at::cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.is_same(self) ? self.clone() : out;
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  check_device(self, "input");
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const at::ScalarType type = dtype.value_or(at::isIntegralType(self.scalar_type(), true) ? at::kLong
                                                                                            : self.scalar_type());
  at::native::resize_output(out, self.sizes());
  const at::Tensor x = contiguous(self.to(type));
  at::Tensor y = out.is_contiguous() && out.scalar_type() == type ? out : empty_device(self.sizes(), type);
  if (y.numel() > 0) {
    int64_t inner = 1;
    for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
    const int64_t D = x.dim() == 0 ? 1 : x.size(d), lines = x.numel() / D;
    launch(Device::get().kernel("gather.cl", "cumsum", typed(y)), NDRange::linear(size_t(lines)), arg(x), arg(y),
           int(D), int(inner), int(lines));
  }
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = empty_device({0}, dtype.value_or(at::isIntegralType(self.scalar_type(), true)
                                                        ? at::kLong : self.scalar_type()));
  return oclf::device::cumsum_out(self, dim, dtype, out);
}

// ---- gather and scatter --------------------------------------------------------------------

constexpr int kMaxDims = 6;  // MAX_DIMS in gather.cl

struct Coords {
  cl_int ndim = 0;
  cl_int size[kMaxDims] = {0};
  cl_int stride_x[kMaxDims] = {0};
  cl_int stride_src[kMaxDims] = {0};
  cl_int stride_idx[kMaxDims] = {0};
};

// The walk over index's elements for gather (src undefined) and scatter along dimension d;
// checks what the kernels assume: index no larger than x outside d nor than src anywhere,
// and its values inside x's dimension d.
Coords coords(const at::Tensor& index, const at::Tensor& x, const at::Tensor& src, int64_t d, const char* op) {
  DEVICE_CHECK_NOT_IMPLEMENTED(index.dim() <= kMaxDims, "opencl: ", op, " on more than ", kMaxDims, " dimensions");
  DEVICE_CHECK(index.dim() == x.dim(), "opencl: ", op, ": index must have as many dimensions as self, got ",
              index.sizes(), " and ", x.sizes());
  DEVICE_CHECK(!src.defined() || src.dim() == x.dim(), "opencl: ", op,
              ": src must have as many dimensions as self, got ", src.sizes(), " and ", x.sizes());
  for (int64_t e = 0; e < index.dim(); ++e) {
    DEVICE_CHECK(e == d || index.size(e) <= x.size(e), "opencl: ", op, ": index of shape ", index.sizes(),
                " is larger than self of shape ", x.sizes(), " in dimension ", e);
    DEVICE_CHECK(!src.defined() || index.size(e) <= src.size(e), "opencl: ", op, ": index of shape ",
                index.sizes(), " is larger than src of shape ", src.sizes(), " in dimension ", e);
  }
  check_index_range(op, index, x.size(d));
  Coords c;
  c.ndim = cl_int(index.dim());
  for (int64_t d = 0; d < index.dim(); ++d) {
    c.size[d] = cl_int(index.size(d));
    c.stride_x[d] = cl_int(x.stride(d));
    c.stride_idx[d] = cl_int(index.stride(d));
    c.stride_src[d] = src.defined() ? cl_int(src.stride(d)) : 0;
  }
  return c;
}

at::Tensor long_index(const at::Tensor& index) {
  const at::Tensor moved = is_device(index) ? index : index.to(current_device());
  return moved.scalar_type() == at::kLong ? moved : moved.to(at::kLong);
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                       at::Tensor& out) {
  check_device(self, "self");
  check_device(out, "gather's out");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  // A 0-d self or index: the same walk over one dimension of one element.
  const at::Tensor x = self.dim() == 0 ? self.view({1}) : self;
  const at::Tensor idx = long_index(index);
  at::native::resize_output(out, idx.sizes());
  at::Tensor y = out.is_contiguous() ? out : empty_device(idx.sizes(), self.scalar_type());
  if (y.numel() > 0) {
    const at::Tensor i = idx.dim() == 0 ? idx.view({1}) : idx;
    const Coords c = coords(i, x, at::Tensor(), d, "gather");
    launch(Device::get().kernel("gather.cl", "gather", moved(x)), NDRange::linear(size_t(y.numel())), arg(x),
           arg(i), arg(y), c, int(d), int(y.numel()));
  }
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  at::Tensor out = empty_device({0}, self.scalar_type());
  return oclf::device::gather_out(self, dim, index, sparse_grad, out);
}

// self along dim at index gets src (add: +=), or the number `value` when src is undefined.
at::Tensor& scatter_into(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                         const at::Scalar& value, bool add) {
  check_device(self, "self");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const at::Tensor idx = long_index(index);
  if (idx.numel() == 0) return self;
  DEVICE_CHECK(at::has_internal_overlap(self) != at::MemOverlap::Yes, "opencl: scatter: self has elements that share "
              "memory (an expanded view); clone() it first");
  at::Tensor x = self.is_contiguous() ? self : self.contiguous();
  // 0-d tensors: the same walk over one dimension of one element.
  const auto one_d = [](const at::Tensor& t) { return t.defined() && t.dim() == 0 ? t.view({1}) : t; };
  const at::Tensor s = src.defined() ? one_d(src.to(self.scalar_type())) : at::Tensor();
  const Coords c = coords(one_d(idx), one_d(x), s, d, add ? "scatter_add" : "scatter");
  std::string options = typed(x) + (add ? " -DADD" : "") + (src.defined() ? "" : " -DVALUE");
  const ScalarArg v(value.toDouble(), x.scalar_type());
  const int64_t lines = idx.numel() / (idx.dim() == 0 ? 1 : idx.size(d));
  launch(Device::get().kernel("gather.cl", "scatter", options), NDRange::linear(size_t(lines)), arg(x), arg(idx),
         arg(s.defined() ? s : x), v, c, int(d), int(lines));
  if (!x.is_same(self)) self.copy_(x);
  return self;
}

at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = self.clone();
  return scatter_into(out, dim, index, src, 0, true);
}

at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_into(self, dim, index, src, 0, true);
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return scatter_into(out, dim, index, src, 0, true);
}

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = self.clone();
  return scatter_into(out, dim, index, src, 0, false);
}

at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  at::Tensor out = self.clone();
  return scatter_into(out, dim, index, at::Tensor(), value, false);
}

at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_into(self, dim, index, src, 0, false);
}

at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  return scatter_into(self, dim, index, at::Tensor(), value, false);
}

at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return scatter_into(out, dim, index, at::Tensor(), value, false);
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return scatter_into(out, dim, index, src, 0, false);
}

// ---- random numbers and ranges -------------------------------------------------------------

// Fills self (float) from a seed drawn from torch's CPU generator (torch.manual_seed repeats it).
at::Tensor& random_fill(at::Tensor& self, int mode, double a, double b, const std::optional<at::Generator>& gen) {
  check_float(self, "self");
  if (self.numel() == 0) return self;
  uint64_t seed = 0;
  {
    at::Generator g = gen && gen->defined() ? *gen : at::detail::getDefaultCPUGenerator();
    DEVICE_CHECK(g.device().is_cpu(), "opencl: random numbers take a CPU generator (or none)");
    std::lock_guard<std::mutex> lock(g.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(g)->random64();
  }
  at::Tensor y = self.is_contiguous() ? self : empty_device(self.sizes(), at::kFloat);
  const cl_uint lo = cl_uint(seed), hi = cl_uint(seed >> 32);
  launch(Device::get().kernel("gather.cl", "random_fill", ""), NDRange::linear(size_t(y.numel())), arg(y), lo, hi,
         int(mode), float(a), float(b), int(y.numel()));
  if (!y.is_same(self)) self.copy_(y);
  return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return random_fill(self, 0, from, to, gen);
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return random_fill(self, 1, mean, std, gen);
}

at::Tensor& bernoulli_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return random_fill(self, 2, p, 0, gen);
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  check_device(out, "out");
  DEVICE_CHECK(steps >= 0, "opencl: linspace: steps must be non-negative, got ", steps);
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  at::Tensor y = out.is_contiguous() ? out : empty_device({steps}, out.scalar_type());
  // One step is the start alone (the kernel walks the second half back from the end).
  const double a = start.toDouble(), b = steps > 1 ? end.toDouble() : a;
  const double step = steps > 1 ? (b - a) / double(steps - 1) : 0.0;
  launch(Device::get().kernel("gather.cl", "linspace", typed(y)), NDRange::linear(size_t(steps)), arg(y), float(a),
         float(b), float(step), int(steps));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("var.correction", var);
  m.impl("var_mean.correction", var_mean);
  m.impl("std.correction", std_);
  m.impl("std_mean.correction", std_mean);
  m.impl("mse_loss", mse_loss);
  m.impl("mse_loss.out", mse_loss_out);
  m.impl("mse_loss_backward", mse_loss_backward);
  m.impl("unfold", at::native::unfold);
  m.impl("flip", flip);
  m.impl("roll", roll);
  m.impl("cumsum", cumsum);
  m.impl("cumsum.out", cumsum_out);
  m.impl("gather", gather);
  m.impl("gather.out", gather_out);
  m.impl("scatter_add", scatter_add);
  m.impl("scatter_add_", scatter_add_);
  m.impl("scatter_add.out", scatter_add_out);
  m.impl("scatter.src", scatter_src);
  m.impl("scatter.value", scatter_value);
  m.impl("scatter_.src", scatter_src_);
  m.impl("scatter_.value", scatter_value_);
  m.impl("scatter.src_out", scatter_src_out);
  m.impl("scatter.value_out", scatter_value_out);
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("bernoulli_.float", bernoulli_);
  m.impl("linspace.out", linspace_out);
}

}  // namespace oclf::device
