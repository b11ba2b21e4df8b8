// Softmax and log-softmax (forward and backward), the NLL loss (so cross-entropy),
// index_select (so embedding) and the embedding's backward, cat, tril/triu and the
// infinity tests, on the opencl device (kernels/softmax.cl, kernels/index.cl).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "pointwise.h"

namespace oclf::device {

namespace {

size_t group_size() { return Device::get().is_cpu() ? 64 : 256; }

// ---- softmax ------------------------------------------------------------------------------

// x as (outer, D, inner) around dimension `dim`.
std::tuple<int64_t, int64_t, int64_t> around(const at::Tensor& x, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  return {outer, x.dim() == 0 ? 1 : x.size(dim), inner};
}

// One work-group per row.
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
  launch(Device::get().kernel("softmax.cl", "softmax_forward", options), rows_range(outer * inner), arg(x), arg(y),
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
  launch(Device::get().kernel("softmax.cl", "softmax_backward", options), rows_range(outer * inner),
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
  at::native::resize_output(output, reduction == 0 && self.dim() == 2 ? at::IntArrayRef{N} : at::IntArrayRef{});
  at::native::resize_output(total_weight, {});
  const bool has_w = weight && weight->defined();
  const at::Tensor x = contiguous(self);
  launch(Device::get().kernel("softmax.cl", "nll_forward", softmax_options(false)), rows_range(1), arg(x),
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
  launch(Device::get().kernel("softmax.cl", "nll_backward", softmax_options(false)), NDRange::linear(size_t(N)),
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

// ---- indexing -----------------------------------------------------------------------------

std::string typed(const at::Tensor& t) { return std::string("-DT=") + cl_type(t.scalar_type()); }
// For kernels that only move elements: any dtype of up to 8 bytes.
std::string moved(const at::Tensor& t) { return std::string("-DT=") + cl_move_type(t.scalar_type()); }

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  check_device(self, "self");
  check_device(index, "index");
  DEVICE_CHECK(index.dim() <= 1, "opencl: index_select: index must be 0-D or 1-D, got ", index.sizes());
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  check_index_range("index_select", index, self.dim() == 0 ? 1 : self.size(d));
  const at::Tensor idx = contiguous(index.scalar_type() == at::kLong ? index : index.to(at::kLong));
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (!shape.empty()) shape[d] = idx.numel();
  at::Tensor y = empty_device(shape, self.scalar_type());
  if (y.numel() == 0) return y;
  const at::Tensor x = contiguous(self);
  const auto [outer, D, inner] = around(x, d);
  launch(Device::get().kernel("index.cl", "index_select", moved(x)), NDRange::linear(size_t(y.numel())), arg(x),
         arg(idx), arg(y), int(D), int(idx.numel()), int(inner), int(y.numel()));
  return y;
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  check_device(self, "self");
  check_device(source, "source");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 0) {  // one element: as a 1-D tensor of one (source and index alike)
    DEVICE_CHECK(source.numel() == 1 && index.numel() == 1, "opencl: index_add: a 0-d self takes one index and one ",
                "source element, got ", index.numel(), " and ", source.numel());
    at::native::resize_output(out, {});
    at::Tensor flat = out.view({1});
    index_add_out(out.is_same(self) ? flat : self.view({1}), 0, index.reshape({1}), source.reshape({1}), alpha, flat);
    return out;
  }
  DEVICE_CHECK(source.dim() == self.dim() && index.dim() <= 1 &&
                  source.size(d) == index.numel(),
              "opencl: index_add: source must have self's dimensions (", self.sizes(), ") with index's length (",
              index.numel(), ") in dimension ", d, ", got ", source.sizes());
  for (int64_t e = 0; e < self.dim(); ++e) {
    DEVICE_CHECK(e == d || source.size(e) == self.size(e), "opencl: index_add: source of shape ", source.sizes(),
                " does not match self of shape ", self.sizes(), " outside dimension ", d);
  }
  check_index_range("index_add", index, self.size(d));
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  at::Tensor y = out.is_contiguous() ? out : out.contiguous();
  const at::Tensor idx = contiguous(index.scalar_type() == at::kLong ? index : index.to(at::kLong));
  const at::Tensor src = contiguous(source.to(y.scalar_type()));
  const auto [outer, D, inner] = around(y, d);
  const ScalarArg a(alpha.toDouble(), y.scalar_type());
  launch(Device::get().kernel("index.cl", "index_add", typed(y)), NDRange::linear(size_t(outer * inner)), arg(y),
         arg(idx), arg(src), a, int(D), int(idx.numel()), int(inner), int(outer * inner));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                     const at::Scalar& alpha) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return index_add_out(self, dim, index, source, alpha, out);
}

at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha) {
  return index_add_out(self, dim, index, source, alpha, self);
}

at::Tensor embedding_backward(const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights,
                              c10::SymInt padding_idx, bool scale_grad_by_freq) {
  DEVICE_CHECK_NOT_IMPLEMENTED(!scale_grad_by_freq, "opencl: embedding with scale_grad_by_freq has no OpenCL kernel");
  check_float(grad_output, "grad_output");
  const int64_t E = grad_output.size(-1), V = num_weights.expect_int();
  check_index_range("embedding_backward", indices, V);
  const at::Tensor idx = contiguous(indices.scalar_type() == at::kLong ? indices : indices.to(at::kLong));
  at::Tensor dw = empty_device({V, E}, at::kFloat);
  dw.zero_();
  launch(Device::get().kernel("index.cl", "embedding_backward", ""), NDRange::linear(size_t(E)),
         arg(contiguous(grad_output)), arg(idx), arg(dw), int(idx.numel()), int(E), int(padding_idx.expect_int()));
  return dw;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  DEVICE_CHECK(tensors.size() > 0, "opencl: cat: expected a non-empty list of tensors");
  check_device(out, "cat's out");
  std::vector<at::Tensor> parts;
  int64_t position = 0;
  for (const at::Tensor& t : tensors) {
    check_device(t, "every tensor of cat's list");
    DEVICE_CHECK(t.dim() > 0, "opencl: cat: a zero-dimensional tensor (at position ", position,
                ") cannot be concatenated");
    ++position;
    if (t.dim() == 1 && t.numel() == 0) continue;  // torch skips legacy empty tensors
    parts.push_back(t);
  }
  if (parts.empty()) {  // only legacy empty tensors: an empty result
    at::native::resize_output(out, {0});
    return out;
  }
  const int64_t d = at::maybe_wrap_dim(dim, parts[0].dim());
  std::vector<int64_t> shape(parts[0].sizes().begin(), parts[0].sizes().end());
  shape[d] = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const at::Tensor& t = parts[k];
    DEVICE_CHECK(t.dim() == parts[0].dim(), "opencl: cat: tensors must have the same number of dimensions: got ",
                parts[0].dim(), " and ", t.dim());
    for (int64_t e = 0; e < t.dim(); ++e) {
      DEVICE_CHECK(e == d || t.size(e) == shape[e], "opencl: cat: sizes of tensors must match except in dimension ",
                  d, ". Expected size ", shape[e], " but got size ", t.size(e), " in dimension ", e, " for tensor ",
                  t.sizes());
    }
    shape[d] += t.size(d);
  }
  at::native::resize_output(out, shape);
  DEVICE_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
              "opencl: cat: out has elements that share memory (an expanded view)");
  for (const at::Tensor& t : parts) {
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, t);
    DEVICE_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial,
                "opencl: cat: out overlaps one of the inputs; clone() the input first");
  }
  // Two contiguous parts of the output's dtype (a key/value cache growing by a step, say)
  // in one launch.
  if (parts.size() == 2 && out.is_contiguous() && out.numel() > 0 && out.numel() <= INT_MAX) {
    const at::Tensor &a = parts[0], &b = parts[1];
    if (a.is_contiguous() && b.is_contiguous() && a.scalar_type() == out.scalar_type() &&
        b.scalar_type() == out.scalar_type() && is_device(a) && is_device(b) && a.dim() == out.dim() &&
        b.dim() == out.dim() && !out.is_alias_of(a) && !out.is_alias_of(b)) {
      int64_t inner = 1;
      for (size_t i = size_t(d) + 1; i < shape.size(); ++i) inner *= shape[i];
      launch(Device::get().kernel("index.cl", "cat2", moved(out)), NDRange::linear(size_t(out.numel())), arg(a),
             arg(b), arg(out), int(a.size(d)), int(b.size(d)), int(inner), int(out.numel()));
      return out;
    }
  }
  int64_t at_index = 0;
  for (const at::Tensor& t : parts) {
    out.narrow(d, at_index, t.size(d)).copy_(t);
    at_index += t.size(d);
  }
  return out;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  at::ScalarType type = at::kBool;
  bool first = true;
  for (const at::Tensor& t : tensors) {
    type = first ? t.scalar_type() : at::promote_types(type, t.scalar_type());
    first = false;
  }
  at::Tensor out = empty_device({0}, type);
  return cat_out(tensors, dim, out);
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  check_device(out, "out");
  const double first = start.toDouble(), last = end.toDouble(), by = step.toDouble();
  DEVICE_CHECK(by != 0 && (last - first) / by >= 0, "opencl: arange: bad range from ", first, " to ", last,
              " by ", by);
  const int64_t n = static_cast<int64_t>(std::ceil((last - first) / by));
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  at::Tensor y = out.is_contiguous() ? out : empty_device({n}, out.scalar_type());
  const ScalarArg a(first, y.scalar_type()), b(by, y.scalar_type());
  launch(Device::get().kernel("index.cl", "arange", typed(y)), NDRange::linear(size_t(n)), arg(y), a, b, int(n));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

// Dropout with a seed drawn from torch's CPU generator, so torch.manual_seed repeats it.
std::tuple<at::Tensor, at::Tensor> dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  check_float(input, "input");
  const at::Tensor x = contiguous(input);
  at::Tensor y = empty_device(x.sizes(), at::kFloat), mask = empty_device(x.sizes(), at::kBool);
  if (!train.value_or(true) || p == 0) {
    y.copy_(x);
    mask.fill_(true);
    return {y, mask};
  }
  uint64_t seed = 0;
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  const cl_uint lo = cl_uint(seed), hi = cl_uint(seed >> 32);
  const float scale = p >= 1 ? 0.0f : float(1.0 / (1.0 - p));
  launch(Device::get().kernel("index.cl", "dropout", ""), NDRange::linear(size_t(x.numel())), arg(x), arg(y),
         arg(mask), lo, hi, float(p), scale, int(x.numel()));
  return {y, mask};
}

at::Tensor dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  return apply("dropout_backward", Out::Same, {grad_output, mask}, scale);
}

template <bool Lower>
at::Tensor& triangle_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out) {
  check_device(self, "self");
  DEVICE_CHECK(self.dim() >= 2, "opencl: tril/triu: input must have at least 2 dimensions, got ", self.sizes());
  at::native::resize_output(out, self.sizes());
  at::Tensor y = out.is_contiguous() ? out : empty_device(self.sizes(), self.scalar_type());
  if (y.numel() == 0) return out;
  const at::Tensor x = contiguous(self);
  launch(Device::get().kernel("index.cl", "triangle", moved(x) + (Lower ? " -DLOWER" : "")),
         NDRange::linear(size_t(y.numel())), arg(x), arg(y), int(x.size(-2)), int(x.size(-1)),
         int(diagonal.expect_int()), int(y.numel()));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

template <bool Lower>
at::Tensor triangle(const at::Tensor& self, c10::SymInt diagonal) {
  at::Tensor out = empty_device(self.sizes(), self.scalar_type());
  return triangle_out<Lower>(self, diagonal, out);
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
  m.impl("index_select", index_select);
  m.impl("index_add", index_add);
  m.impl("index_add_", index_add_);
  m.impl("index_add.out", index_add_out);
  m.impl("embedding_dense_backward", embedding_backward);
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
  m.impl("arange.start_out", arange_out);
  m.impl("native_dropout", dropout);
  m.impl("native_dropout_backward", dropout_backward);
  m.impl("tril", triangle<true>);
  m.impl("tril.out", triangle_out<true>);
  m.impl("triu", triangle<false>);
  m.impl("triu.out", triangle_out<false>);
  m.impl("isneginf", unary<opname::isneginf, Out::Bool>);
  m.impl("isneginf.out", unary_out<opname::isneginf, Out::Bool>);
  m.impl("isposinf", unary<opname::isposinf, Out::Bool>);
  m.impl("isposinf.out", unary_out<opname::isposinf, Out::Bool>);
  m.impl("isinf", unary<opname::isinf, Out::Bool>);
}

}  // namespace oclf::device
