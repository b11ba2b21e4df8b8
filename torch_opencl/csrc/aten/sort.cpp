// Sorting and sampling on the opencl device: sort (stable, so argsort and msort), topk and
// multinomial (so sampling in generate(): top-k, top-p). Kernels: kernels/sort.cl.
//
// A sort moves the sorted dimension last in a contiguous copy and merges sorted runs of
// 1, 2, 4, ... elements in log2(n) passes of one kernel, between two pairs of buffers.
// topk is the first k of a sort. multinomial draws with replacement by binary search in
// each row's cumulative sums; without replacement it takes the k largest p / E, E ~ Exp(1)
// (the exponential race, as torch does), so each draw excludes the ones before it.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "tensors.h"
#include "kernel_launch.h"
#include "dispatch.h"

namespace oclf::device {

namespace {

at::TensorOptions options(at::ScalarType dtype) { return at::TensorOptions().device(current_device()).dtype(dtype); }

// (values, indices) of self sorted along dim: fresh tensors of self's shape.
std::tuple<at::Tensor, at::Tensor> sort_along(const at::Tensor& self, int64_t dim, bool descending,
                                              const char* op) {
  check_device(self, "self");
  DEVICE_CHECK(!at::isComplexType(self.scalar_type()), "opencl: ", op, ": complex tensors cannot be sorted");
  DEVICE_CHECK(self.numel() < INT_MAX, "opencl: ", op, ": tensors over 2^31 elements are not supported, got ",
              self.sizes());
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 0 || self.numel() == 0)
    return {self.clone(), at::zeros(self.sizes(), options(at::kLong))};
  // The sorted dimension last, contiguous, in buffers of our own (the passes write them).
  at::Tensor keys[2] = {self.movedim(d, -1).clone(at::MemoryFormat::Contiguous), at::Tensor()};
  const std::vector<int64_t> shape(keys[0].sizes().begin(), keys[0].sizes().end());
  const int64_t n = shape.back(), total = keys[0].numel();
  keys[1] = empty_device(shape, self.scalar_type());
  at::Tensor idx[2] = {at::arange(n, options(at::kLong)).expand(shape).contiguous(), empty_device(shape, at::kLong)};
  std::string build = std::string("-DT=") + cl_type(self.scalar_type()) +
                      (at::isFloatingType(self.scalar_type()) ? " -DFLOATING" : "") + (descending ? " -DDESCENDING" : "");
  cl_kernel kernel = device_kernel("sort.cl", "merge_pass", build);
  int from = 0;
  for (int64_t width = 1; width < n; width *= 2, from = 1 - from) {
    launch(kernel, NDRange::linear(size_t(total)), arg(keys[from]), arg(idx[from]), arg(keys[1 - from]),
           arg(idx[1 - from]), int(n), int(width), int(total));
  }
  return {keys[from].movedim(-1, d), idx[from].movedim(-1, d)};
}

std::tuple<at::Tensor&, at::Tensor&> sort_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                              bool descending, at::Tensor& values, at::Tensor& indices) {
  check_device(values, "values");
  check_device(indices, "indices");
  DEVICE_CHECK(indices.scalar_type() == at::kLong, "opencl: sort: indices must be int64, got ", indices.scalar_type());
  const auto [v, i] = sort_along(self, dim, descending, "sort");
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

// t (sorted along a moved dimension) in the layout torch's meta functions give (what a compiled
// graph was planned with): `self`'s (empty_like) for sort, contiguous for topk.
at::Tensor laid_out(const at::Tensor& t, const at::Tensor& self) {
  at::Tensor y = self.defined() ? at::empty_like(self, t.options()) : at::empty(t.sizes(), t.options());
  return y.strides() == t.strides() ? t : y.copy_(t);
}

std::tuple<at::Tensor, at::Tensor> sort(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                        bool descending) {
  const auto [v, i] = sort_along(self, dim, descending, "sort");
  return {laid_out(v, self), laid_out(i, self)};
}

std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, c10::SymInt k_sym, int64_t dim, bool largest,
                                        bool sorted) {
  const int64_t k = k_sym.expect_int();
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(d);
  DEVICE_CHECK(k >= 0 && k <= n, "opencl: topk: selected index k out of range (k = ", k, ", dimension ", d,
              " has size ", n, ")");
  const auto [v, i] = sort_along(self, d, largest, "topk");
  if (self.dim() == 0) return {v, i};
  return {laid_out(v.narrow(d, 0, k), at::Tensor()), laid_out(i.narrow(d, 0, k), at::Tensor())};
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest,
                                              bool sorted, at::Tensor& values, at::Tensor& indices) {
  check_device(values, "values");
  check_device(indices, "indices");
  const auto [v, i] = oclf::device::topk(self, k, dim, largest, sorted);
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

// ---- multinomial ---------------------------------------------------------------------------

at::Tensor multinomial(const at::Tensor& self, int64_t num_samples, bool replacement,
                       std::optional<at::Generator> gen) {
  check_device(self, "self");
  DEVICE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: multinomial: probabilities must be floating point, got ",
              self.scalar_type());
  DEVICE_CHECK(self.dim() == 1 || self.dim() == 2, "opencl: multinomial: prob_dist must be 1 or 2 dim, got ",
              self.sizes());
  DEVICE_CHECK(num_samples > 0, "opencl: multinomial: cannot sample n_sample <= 0 samples");
  const int64_t n = self.size(-1), rows = self.dim() == 2 ? self.size(0) : 1;
  DEVICE_CHECK(n > 0, "opencl: multinomial: the distribution has no categories");
  DEVICE_CHECK(replacement || num_samples <= n, "opencl: multinomial: cannot sample n_sample > prob_dist.size(-1) (",
              num_samples, " > ", n, ") samples without replacement");
  DEVICE_CHECK(n < INT_MAX && rows * num_samples < INT_MAX, "opencl: multinomial: too many categories or samples");
  const at::Tensor p = self.to(at::kFloat).reshape({rows, n});
  // The checks torch makes, on the device (raised at the next wait, as the indexing
  // operators' are: a sampling loop does not wait for each step's draw): each row a positive
  // sum (failure 1), no negative, infinite or NaN probability (2); a row's failure is the
  // last of these it fails, torch's first. Bad probabilities meanwhile draw some category in
  // range (the search stays inside its row). As torch, drawing without replacement takes the
  // categories of probability 0 last rather than refusing more draws than nonzero categories.
  const at::Tensor failures =
      at::maximum(p.sum(1).le(0).to(at::kLong),
                  at::logical_or(p.lt(0), p.isfinite().logical_not()).any(1).to(at::kLong).mul(2));
  check_on_device(failures, {"opencl: multinomial: invalid multinomial distribution (sum of probabilities <= 0)",
                             "opencl: multinomial: probability tensor contains either `inf`, `nan` or element < 0"});
  at::Tensor draws;
  if (replacement) {
    const at::Tensor cdf = p.cumsum(1).contiguous();
    const at::Tensor u = empty_device({rows, num_samples}, at::kFloat).uniform_(0, 1, gen);
    draws = empty_device({rows, num_samples}, at::kLong);
    launch(device_kernel("sort.cl", "multinomial_draw", ""), NDRange::linear(size_t(rows * num_samples)),
           arg(cdf), arg(u), arg(draws), int(n), int(num_samples), int(rows * num_samples));
  } else {
    const at::Tensor race = empty_device({rows, n}, at::kFloat).uniform_(0, 1, gen).log_().neg_();
    draws = std::get<1>(oclf::device::topk(p.div(race), num_samples, 1, /*largest=*/true, /*sorted=*/true));
  }
  return self.dim() == 1 ? draws.reshape({num_samples}) : draws;
}

at::Tensor& multinomial_out(const at::Tensor& self, int64_t num_samples, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& out) {
  check_device(out, "out");
  const at::Tensor draws = oclf::device::multinomial(self, num_samples, replacement, gen);
  at::native::resize_output(out, draws.sizes());
  return out.copy_(draws);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("sort.stable", sort);
  m.impl("sort.values_stable", sort_out);
  m.impl("topk", topk);
  m.impl("topk.values", topk_out);
  m.impl("multinomial", multinomial);
  m.impl("multinomial.out", multinomial_out);
}

}  // namespace oclf::device
