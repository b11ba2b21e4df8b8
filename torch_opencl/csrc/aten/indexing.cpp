// Advanced indexing on the opencl device: x[i, j], x[:, idx], x[mask] (index.Tensor),
// x[i, j] = v and x[i, j] += v (_index_put_impl_, so index_put_ and the backward of
// indexing), with any number of integer or boolean index tensors; nonzero (so boolean
// masks and argwhere), masked_select and isin. Kernels: kernels/index.cl.
//
// The index tensors are broadcast together to J positions; their offsets into x
// (Σ_k wrap(i_k)·stride_k, each index tensor checked on the device) are one int64 tensor of
// J elements, so a single kernel reads or writes x through its own strides, without copying
// it. As in torch, the result has the broadcast index dimensions in place of the indexed ones
// when those are adjacent, else first.
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>

#include "tensors.h"
#include "kernel_launch.h"
#include "dispatch.h"
#include "fallback.h"

namespace oclf::device {

namespace {

constexpr int kMaxIndexDims = 8;  // MAX_INDEX_DIMS in index.cl

struct IndexLayout {
  cl_int ndim = 0;
  cl_int block = 0;
  cl_int size[kMaxIndexDims] = {0};
  cl_int stride_x[kMaxIndexDims] = {0};
  cl_int stride_v[kMaxIndexDims] = {0};
};

std::string typed(at::ScalarType dtype) { return std::string("-DT=") + cl_type(dtype); }

at::Tensor on_device(const at::Tensor& t) { return is_device(t) ? t : t.to(current_device()); }

// What an indexing refers to: x's indexed dimensions, the offsets of the J selected
// positions along them, and where the block of broadcast index dimensions goes.
struct Selection {
  std::vector<int64_t> dims;          // x's indexed dimensions, in order
  std::vector<int64_t> index_shape;   // the index tensors' broadcast shape (J elements)
  at::Tensor offsets;                 // (J) int64 on the device: Σ_k wrap(i_k)·x.stride(dims[k])
  int64_t block = 0;                  // the position of index_shape among the result's dimensions
  std::vector<int64_t> rest;          // x's other dimensions, in order
  // The result's shape: x's other dimensions with index_shape at `block`.
  std::vector<int64_t> shape(const at::Tensor& x) const {
    std::vector<int64_t> out;
    for (size_t r = 0; r <= rest.size(); ++r) {
      if (int64_t(r) == block) out.insert(out.end(), index_shape.begin(), index_shape.end());
      if (r < rest.size()) out.push_back(x.size(rest[r]));
    }
    return out;
  }
  int64_t positions() const {
    return std::accumulate(index_shape.begin(), index_shape.end(), int64_t(1), std::multiplies<int64_t>());
  }
};

std::string shape_text(at::IntArrayRef sizes) { return message(sizes); }

// Whether two shapes broadcast together (each trailing size equal, or one of them 1).
bool broadcastable(at::IntArrayRef a, at::IntArrayRef b) {
  for (size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
    const int64_t x = a[a.size() - k], y = b[b.size() - k];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// Torch's expansion of the indices: boolean (or uint8) masks become one int64 index per
// dimension they cover (their nonzero coordinates); `None` keeps a dimension whole.
std::vector<at::Tensor> expand_masks(const at::Tensor& x, const c10::List<std::optional<at::Tensor>>& indices,
                                     const char* op) {
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> index = indices.get(k);
    if (!index || !index->defined()) {
      out.emplace_back();
      continue;
    }
    const at::ScalarType type = index->scalar_type();
    if (type == at::kBool || type == at::kByte) {
      const int64_t first = int64_t(out.size());
      for (int64_t d = 0; d < index->dim(); ++d) {
        DEVICE_CHECK_INDEX(first + d < x.dim() && index->size(d) == x.size(first + d), "opencl: ", op,
                          ": the shape of the mask ", index->sizes(), " at index ", d,
                          " does not match the shape of the indexed tensor ", x.sizes());
      }
      const at::Tensor coords = on_device(*index).nonzero();
      for (int64_t d = 0; d < index->dim(); ++d) out.push_back(coords.select(1, d));
    } else {
      DEVICE_CHECK_INDEX(at::isIntegralType(type, /*includeBool=*/false), "opencl: ", op,
                        ": tensors used as indices must be long, int, byte or bool tensors, got ", type);
      out.push_back(on_device(*index));
    }
  }
  DEVICE_CHECK_INDEX(int64_t(out.size()) <= x.dim(), "opencl: ", op, ": too many indices for a tensor of dimension ",
                    x.dim(), " (got ", out.size(), ")");
  return out;
}

// The selection of x by these indices (an index out of range: check_index_range).
Selection select(const at::Tensor& x, const c10::List<std::optional<at::Tensor>>& indices, const char* op) {
  const std::vector<at::Tensor> expanded = expand_masks(x, indices, op);
  Selection s;
  std::vector<at::Tensor> index;
  for (size_t d = 0; d < expanded.size(); ++d) {
    if (!expanded[d].defined()) continue;
    s.dims.push_back(int64_t(d));
    index.push_back(expanded[d].scalar_type() == at::kLong ? expanded[d] : expanded[d].to(at::kLong));
  }
  DEVICE_CHECK(!index.empty(), "opencl: ", op, ": at least one index tensor is needed");
  for (const at::Tensor& t : index) {
    DEVICE_CHECK_INDEX(broadcastable(s.index_shape, t.sizes()), "opencl: ", op, ": shape mismatch: indexing tensors could not be broadcast together with shapes ",
                      shape_text(s.index_shape), ", ", shape_text(t.sizes()));
    s.index_shape = at::infer_size(s.index_shape, t.sizes());
  }
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(s.dims.begin(), s.dims.end(), d) == s.dims.end()) s.rest.push_back(d);
  const bool adjacent = s.dims.back() - s.dims.front() + 1 == int64_t(s.dims.size());
  s.block = adjacent ? s.dims.front() : 0;

  // Offsets, wrapped into each dimension (no kernel reads or writes outside x, whatever the
  // indices), and each index tensor's range checked on the device (check_index_range: an
  // index out of range raises at the next wait for the device).
  at::Tensor offsets;
  for (size_t k = 0; k < index.size(); ++k) {
    const int64_t size = x.size(s.dims[k]);
    const at::Tensor& i = index[k];
    check_index_range(op, i, size, /*negative=*/true, s.dims[k]);
    const at::Tensor term = i.remainder(std::max<int64_t>(size, 1)).mul(x.stride(s.dims[k]));
    offsets = offsets.defined() ? offsets.add(term) : term;
  }
  s.offsets = offsets.expand(s.index_shape).contiguous().reshape({-1});
  return s;
}

// The kernels' layout of a selection: the result's dimensions with the block as one.
IndexLayout layout(const Selection& s, const at::Tensor& x) {
  IndexLayout L;
  L.ndim = cl_int(s.rest.size() + 1);
  L.block = cl_int(s.block);
  for (int64_t r = 0, d = 0; d < L.ndim; ++d) {
    if (d == s.block) {
      L.size[d] = cl_int(s.positions());
      continue;
    }
    L.size[d] = cl_int(x.size(s.rest[r]));
    L.stride_x[d] = cl_int(x.stride(s.rest[r]));
    ++r;
  }
  return L;
}

// Whether the kernels take x: few enough dimensions, 32-bit sizes and strides.
bool fits(const at::Tensor& x, int64_t rest_dims) {
  if (rest_dims + 1 > kMaxIndexDims || x.numel() >= INT_MAX) return false;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.stride(d) >= INT_MAX) return false;
  return true;
}

int64_t rest_dims(const at::Tensor& x, const c10::List<std::optional<at::Tensor>>& indices) {
  int64_t covered = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    const bool mask = t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
    covered += mask ? t->dim() : 1;
  }
  return x.dim() - std::min<int64_t>(covered, x.dim());
}

at::Tensor index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  check_device(self, "self");
  if (!fits(self, rest_dims(self, indices)))
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::index_Tensor>::call(self, indices);
  const Selection s = select(self, indices, "index");
  at::Tensor y = empty_device(s.shape(self), self.scalar_type());
  DEVICE_CHECK(y.numel() < INT_MAX, "opencl: index: results over 2^31 elements are not supported, got ", y.sizes());
  if (y.numel() == 0) return y;
  launch(device_kernel("index.cl", "index_gather", typed(self.scalar_type())),
         NDRange::linear(size_t(y.numel())), arg(self), arg(s.offsets), arg(y), layout(s, self), int(y.numel()));
  return y;
}

at::Tensor& index_put(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                      const at::Tensor& values, bool accumulate, bool unsafe) {
  check_device(self, "self");
  if (!fits(self, rest_dims(self, indices))) {
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::_index_put_impl_>::call(self, indices, values,
                                                                                          accumulate, unsafe);
  }
  at::assert_no_internal_overlap(self);
  const Selection s = select(self, indices, "index_put_");
  const std::vector<int64_t> shape = s.shape(self);
  DEVICE_CHECK_INDEX(at::is_expandable_to(values.sizes(), shape), "opencl: index_put_: shape mismatch: value tensor ",
                    "of shape ", values.sizes(), " cannot be broadcast to indexing result of shape ",
                    shape_text(shape));
  const int64_t count = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
  if (count == 0) return self;
  // The values as the kernel reads them: the selection's shape with the block as one dimension.
  IndexLayout L = layout(s, self);
  std::vector<int64_t> collapsed(L.size, L.size + L.ndim);
  at::Tensor v = on_device(values).to(self.scalar_type()).expand(shape);
  auto strides = at::detail::computeStride(v.sizes(), v.strides(), collapsed);
  if (!strides) {
    v = v.contiguous();
    strides = at::detail::computeStride(v.sizes(), v.strides(), collapsed);
  }
  for (int d = 0; d < L.ndim; ++d) L.stride_v[d] = cl_int((*strides)[d]);
  const int64_t lines = count / s.positions();
  const std::string options = typed(self.scalar_type()) + (accumulate ? " -DADD" : "");
  launch(device_kernel("index.cl", "index_put", options), NDRange::linear(size_t(lines)), arg(self),
         arg(s.offsets), arg(v), L, int(lines));
  return self;
}

// ---- nonzero, masked_select ----------------------------------------------------------------

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  check_device(self, "self");
  check_device(out, "out");
  DEVICE_CHECK(out.scalar_type() == at::kLong, "opencl: nonzero: out must be int64, got ", out.scalar_type());
  if (self.dim() > kMaxIndexDims || self.numel() >= INT_MAX)
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::nonzero_out>::call(self, out);
  const at::Tensor flag = self.ne(0).reshape({-1}).contiguous();
  const at::Tensor pos = flag.numel() > 0 ? flag.cumsum(0, at::kLong) : empty_device({0}, at::kLong);
  const int64_t n = flag.numel() > 0 ? pos[-1].item<int64_t>() : 0;
  at::native::resize_output(out, {n, self.dim()});
  if (n == 0 || self.dim() == 0) return out;
  at::Tensor y = out.is_contiguous() ? out : empty_device({n, self.dim()}, at::kLong);
  IndexLayout L;
  L.ndim = cl_int(self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) L.size[d] = cl_int(self.size(d));
  launch(device_kernel("index.cl", "nonzero_coords", ""), NDRange::linear(size_t(flag.numel())), arg(flag),
         arg(pos), arg(y), L, int(flag.numel()));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor nonzero(const at::Tensor& self) {
  at::Tensor out = empty_device({0}, at::kLong);
  return nonzero_out(self, out);
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  check_device(self, "self");
  DEVICE_CHECK(mask.scalar_type() == at::kBool, "opencl: masked_select: mask must be a bool tensor, got ",
              mask.scalar_type());
  std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  if (shape.empty()) shape.push_back(1);  // 0-d operands: one element, which a 0-d mask could not index
  c10::List<std::optional<at::Tensor>> indices;
  indices.push_back(on_device(mask).expand(shape));
  return oclf::device::index(self.expand(shape), indices);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  // torch's checks of out=, before anything is computed: its dtype, and no memory shared
  // with itself or an operand.
  DEVICE_CHECK(self.scalar_type() == out.scalar_type(), "masked_select(): self and result must have the same ",
               "scalar type, got ", self.scalar_type(), " and ", out.scalar_type());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  const at::Tensor y = oclf::device::masked_select(self, mask);
  at::native::resize_output(out, y.sizes());
  return out.copy_(y);
}

// ---- isin ----------------------------------------------------------------------------------

at::Tensor& isin_out(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert,
                     at::Tensor& out) {
  check_device(out, "out");
  DEVICE_CHECK(out.scalar_type() == at::kBool, "opencl: isin: out must be a bool tensor, got ", out.scalar_type());
  const at::ScalarType common = at::result_type(elements, test);
  DEVICE_CHECK(!at::isComplexType(common), "opencl: isin: complex tensors are not supported, got ", common);
  at::native::resize_output(out, elements.sizes());
  if (elements.numel() == 0) return out;
  DEVICE_CHECK(elements.numel() < INT_MAX && test.numel() < INT_MAX,
              "opencl: isin: tensors over 2^31 elements are not supported");
  const at::Tensor x = contiguous(on_device(elements).to(common));
  const at::Tensor t = contiguous(on_device(test).to(common));
  at::Tensor y = out.is_contiguous() ? out : empty_device(elements.sizes(), at::kBool);
  launch(device_kernel("index.cl", "isin", typed(common)), NDRange::linear(size_t(x.numel())), arg(x),
         arg(t.numel() > 0 ? t : x), arg(y), int(t.numel()), int(invert), int(x.numel()));
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor isin(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert) {
  at::Tensor out = empty_device({0}, at::kBool);
  return isin_out(elements, test, assume_unique, invert, out);
}

// A number as a 0-dim tensor of its own type (type promotion treats it as a wrapped number).
at::Tensor number(const at::Scalar& value) {
  at::Tensor t = at::scalar_to_tensor(value);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

at::Tensor& isin_scalar_out(const at::Tensor& elements, const at::Scalar& test, bool assume_unique, bool invert,
                            at::Tensor& out) {
  return isin_out(elements, number(test), assume_unique, invert, out);
}

at::Tensor isin_scalar(const at::Tensor& elements, const at::Scalar& test, bool assume_unique, bool invert) {
  return oclf::device::isin(elements, number(test), assume_unique, invert);
}

at::Tensor& scalar_isin_out(const at::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert,
                            at::Tensor& out) {
  return isin_out(number(element), test, assume_unique, invert, out);
}

at::Tensor scalar_isin(const at::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert) {
  at::Tensor out = empty_device({0}, at::kBool);
  return isin_out(number(element), test, assume_unique, invert, out);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("index.Tensor", index);
  m.impl("_index_put_impl_", index_put);
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
  m.impl("masked_select", masked_select);
  m.impl("masked_select.out", masked_select_out);
  m.impl("isin.Tensor_Tensor", isin);
  m.impl("isin.Tensor_Tensor_out", isin_out);
  m.impl("isin.Tensor_Scalar", isin_scalar);
  m.impl("isin.Tensor_Scalar_out", isin_scalar_out);
  m.impl("isin.Scalar_Tensor", scalar_isin);
  m.impl("isin.Scalar_Tensor_out", scalar_isin_out);
}

}  // namespace oclf::device
