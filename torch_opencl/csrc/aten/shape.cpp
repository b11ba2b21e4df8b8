// Operators that rearrange elements on the opencl device: cat (two parts in one kernel, else
// a copy per part), tril/triu, flip, roll and unfold (so repeat). Kernels:
// kernels/index.cl.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorShape.h>
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// index.cl's cat2_strided: the output's sizes and each part's strides, in elements.
constexpr int kCatDims = 6;  // CAT_DIMS
struct Cat2 {
  cl_int ndim = 0;
  cl_int size[kCatDims] = {0};
  cl_int stride_a[kCatDims] = {0};
  cl_int stride_b[kCatDims] = {0};
};

// Whether t's elements are reached by int offsets (its own and its strides' reach).
bool fits_int_strides(const at::Tensor& t) {
  int64_t reach = arg(t).offset;
  for (int64_t e = 0; e < t.dim(); ++e) reach += (t.size(e) - 1) * t.stride(e);
  return reach < INT_MAX;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  DEVICE_CHECK(tensors.size() > 0, "opencl: cat: expected a non-empty list of tensors");
  check_device(out, "cat's out");
  // Before out is resized (a resize may give it new memory): out must not be one of the
  // inputs, legacy empty ones included, nor share memory with them.
  for (const at::Tensor& t : tensors) {
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, t);
    DEVICE_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial,
                "opencl: cat: out overlaps one of the inputs (unsupported operation: some elements of the input ",
                "tensor and the written-to tensor refer to a single memory location); clone() the input first");
  }
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
  // Two parts of the output's dtype in one launch: contiguous (a key/value cache growing by a
  // step, say), or at any strides (a rotary embedding's halves, slices of one tensor).
  if (parts.size() == 2 && out.is_contiguous() && out.numel() > 0 && out.numel() <= INT_MAX) {
    const at::Tensor &a = parts[0], &b = parts[1];
    if (a.scalar_type() == out.scalar_type() && b.scalar_type() == out.scalar_type() && is_device(a) &&
        is_device(b) && a.dim() == out.dim() && b.dim() == out.dim() && !out.is_alias_of(a) && !out.is_alias_of(b)) {
      if (a.is_contiguous() && b.is_contiguous()) {
        int64_t inner = 1;
        for (size_t i = size_t(d) + 1; i < shape.size(); ++i) inner *= shape[i];
        launch(device_kernel("index.cl", "cat2", move_type_option(out)), NDRange::linear(size_t(out.numel())),
               arg(a), arg(b), arg(out), int(a.size(d)), int(b.size(d)), int(inner), int(out.numel()));
        return out;
      }
      if (out.dim() <= kCatDims && fits_int_strides(a) && fits_int_strides(b)) {
        Cat2 L;
        L.ndim = cl_int(out.dim());
        for (int64_t e = 0; e < out.dim(); ++e) {
          L.size[e] = cl_int(out.size(e));
          L.stride_a[e] = cl_int(a.stride(e));
          L.stride_b[e] = cl_int(b.stride(e));
        }
        launch(device_kernel("index.cl", "cat2_strided", move_type_option(out)),
               NDRange::linear(size_t(out.numel())), arg(a), arg(b), arg(out), L, int(d), int(a.size(d)),
               int(out.numel()));
        return out;
      }
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

template <bool Lower>
at::Tensor& triangle_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out) {
  check_device(self, "self");
  DEVICE_CHECK(self.dim() >= 2, "opencl: tril/triu: input must have at least 2 dimensions, got ", self.sizes());
  at::native::resize_output(out, self.sizes());
  at::Tensor y = out.is_contiguous() ? out : empty_device(self.sizes(), self.scalar_type());
  if (y.numel() == 0) return out;
  const at::Tensor x = contiguous(self);
  launch(device_kernel("index.cl", "triangle", move_type_option(x) + (Lower ? " -DLOWER" : "")),
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
  DEVICE_CHECK_INDEX(self.dim() > 0, "Dimension specified as ", dims[0], " but tensor has no dimensions");
  at::Tensor out = self;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = at::maybe_wrap_dim(dims[k], self.dim());
    const int64_t n = self.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    out = at::cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.is_same(self) ? self.clone() : out;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
  m.impl("tril", triangle<true>);
  m.impl("tril.out", triangle_out<true>);
  m.impl("triu", triangle<false>);
  m.impl("triu.out", triangle_out<false>);
  m.impl("unfold", at::native::unfold);
  m.impl("flip", flip);
  m.impl("roll", roll);
}

}  // namespace oclf::device
