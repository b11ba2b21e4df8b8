// Gathering and scattering along one dimension on the opencl device: index_select (so
// embedding) and the embedding's backward, index_add, index_copy (how transformers'
// StaticCache writes each new token's keys and values into its fixed-size cache, so a
// decoding step stays on the device), gather and scatter/scatter_add. Kernels:
// kernels/index.cl, kernels/gather.cl. (Indexing, x[i, j] and x[mask]: indexing.cpp.)
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "dispatch.h"
#include "fallback.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

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
  launch(device_kernel("index.cl", "index_select", move_type_option(x)), NDRange::linear(size_t(y.numel())), arg(x),
         arg(idx), arg(y), int(D), int(idx.numel()), int(inner), int(y.numel()));
  return y;
}

// The out= form: through a new result (no aliasing with self or index, as torch checks).
at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  check_device(out, "index_select's out");
  DEVICE_CHECK(out.scalar_type() == self.scalar_type(), "opencl: index_select(): self and out must have the same ",
              "dtype, got ", self.scalar_type(), " and ", out.scalar_type());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  const at::Tensor y = oclf::device::index_select(self, dim, index);
  at::native::resize_output(out, y.sizes());
  out.copy_(y);
  return out;
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
  launch(device_kernel("index.cl", "index_add", type_option(y)), NDRange::linear(size_t(outer * inner)), arg(y),
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
  launch(device_kernel("index.cl", "embedding_backward", ""), NDRange::linear(size_t(E)),
         arg(contiguous(grad_output)), arg(idx), arg(dw), int(idx.numel()), int(E), int(padding_idx.expect_int()),
         int(V));
  return dw;
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
  DEVICE_CHECK(out.scalar_type() == self.scalar_type(), "opencl: gather: Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", out.scalar_type(), " instead");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  // A 0-d self or index: the same walk over one dimension of one element.
  const at::Tensor x = self.dim() == 0 ? self.view({1}) : self;
  const at::Tensor idx = long_index(index);
  at::native::resize_output(out, idx.sizes());
  at::assert_no_overlap(out, self);  // again: a resized out may reach into an input
  at::assert_no_overlap(out, index);
  at::Tensor y = out.is_contiguous() ? out : empty_device(idx.sizes(), self.scalar_type());
  if (y.numel() > 0) {
    const at::Tensor i = idx.dim() == 0 ? idx.view({1}) : idx;
    const Coords c = coords(i, x, at::Tensor(), d, "gather");
    launch(device_kernel("gather.cl", "gather", move_type_option(x)), NDRange::linear(size_t(y.numel())), arg(x),
           arg(i), arg(y), c, int(d), int(x.size(d)), int(y.numel()));
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
  std::string options = type_option(x) + (add ? " -DADD" : "") + (src.defined() ? "" : " -DVALUE");
  const ScalarArg v(value.toDouble(), x.scalar_type());
  const int64_t lines = idx.numel() / (idx.dim() == 0 ? 1 : idx.size(d));
  launch(device_kernel("gather.cl", "scatter", options), NDRange::linear(size_t(lines)), arg(x), arg(idx),
         arg(s.defined() ? s : x), v, c, int(d), int(one_d(x).size(d)), int(lines));
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

// torch's checks of index_copy(self, dim, index, source); dim wrapped.
int64_t index_copy_dim(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  DEVICE_CHECK(index.dim() <= 1, "opencl: index_copy: index must be a vector or a number, got ", index.sizes());
  DEVICE_CHECK(index.scalar_type() == at::kLong, "opencl: index_copy: index must be int64, got ", index.scalar_type());
  DEVICE_CHECK(source.scalar_type() == self.scalar_type(), "opencl: index_copy: source (", source.scalar_type(),
              ") and self (", self.scalar_type(), ") must have one dtype");
  DEVICE_CHECK(source.dim() == self.dim() || (self.dim() <= 1 && source.dim() <= 1),
              "opencl: index_copy: source ", source.sizes(), " and self ", self.sizes(), " differ in rank");
  if (self.dim() > 0) {
    for (int64_t k = 0; k < self.dim(); ++k) {
      const int64_t want = k == d ? index.numel() : self.size(k);
      DEVICE_CHECK(source.size(k) == want, "opencl: index_copy: source ", source.sizes(), " must be ", self.sizes(),
                  " with ", index.numel(), " along dimension ", d);
    }
  }
  return d;
}

// out (self's shape, of at least one dimension) along d at index[k] gets source's slice k: the
// index's own values checked on the device, then scatter's walk with the index broadcast
// over source (stride 0 outside d). Two launches, whatever self's size (a key/value cache's
// one new row a step).
void index_copy_into(at::Tensor& out, int64_t d, const at::Tensor& index, const at::Tensor& source) {
  DEVICE_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, "opencl: index_copy: self has elements that "
              "share memory (an expanded view); clone() it first");
  DEVICE_CHECK_NOT_IMPLEMENTED(out.dim() <= kMaxDims, "opencl: index_copy on more than ", kMaxDims, " dimensions");
  const at::Tensor idx = contiguous(long_index(index).reshape({-1}));
  check_index_range("index_copy", idx, out.size(d), /*negative=*/false, d);
  at::Tensor x = out.is_contiguous() ? out : out.contiguous();
  const at::Tensor src = source.dim() == 0 ? source.view({1}) : source;
  Coords c;
  c.ndim = cl_int(x.dim());
  for (int64_t e = 0; e < x.dim(); ++e) {
    c.size[e] = cl_int(src.size(e));
    c.stride_x[e] = cl_int(x.stride(e));
    c.stride_src[e] = cl_int(src.stride(e));
    c.stride_idx[e] = e == d ? 1 : 0;
  }
  const int64_t lines = src.numel() / idx.numel();
  // A copy: the elements moved as bits (float16 as ushort), `value` (unused) zero bytes of T's size.
  const size_t item = x.element_size();
  const ScalarArg unused(0.0, item == 1 ? at::kByte : item == 2 ? at::kShort : item == 4 ? at::kInt : at::kLong);
  launch(device_kernel("gather.cl", "scatter", move_type_option(x)), NDRange::linear(size_t(lines)), arg(x),
         arg(idx), arg(src), unused, c, int(d), int(x.size(d)), int(lines));
  if (!x.is_same(out)) out.copy_(x);
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  const int64_t d = index_copy_dim(self, dim, index, source);
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (index.numel() == 0) return out;
  if (self.dim() == 0) {  // one element: a number indexed by 0
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::index_copy_out>::call(self, dim, index, source,
                                                                                       out);
  }
  index_copy_into(out, d, index, source);
  return out;
}

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  return index_copy_out(self, dim, index, source, self);
}

at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  at::Tensor out = empty_device({0}, self.scalar_type());
  return index_copy_out(self, dim, index, source, out);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
  m.impl("index_add", index_add);
  m.impl("index_add_", index_add_);
  m.impl("index_add.out", index_add_out);
  m.impl("embedding_dense_backward", embedding_backward);
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
  m.impl("index_copy.out", index_copy_out);
  m.impl("index_copy_", index_copy_);
  m.impl("index_copy", index_copy);
}

}  // namespace oclf::device
