// What creating, copying and viewing opencl tensors needs: empty, empty_strided, the view
// ops (as_strided, view, _reshape_alias, view_as_real/complex), resize_ and set_, copies between the host and
// the device (any strides and dtypes), item(), fill_ and zero_.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

#include "common.h"

namespace oclf::device {

namespace {

const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// A factory's device names one of the process's devices (the dispatch wrapper made it the
// current one, which the allocator serves).
void check_index(std::optional<at::Device> device) {
  const int n = Device::count();
  DEVICE_CHECK(!device || !device->has_index() || device->index() < n, "opencl: there is no device ",
               device->str(), "; the process has ", n, " (opencl:0 to opencl:", n - 1, ")");
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  DEVICE_CHECK(!pin_memory.value_or(false), "opencl: pinned memory is not supported");
  check_index(device);
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  return at::detail::empty_generic(size, &Allocator::get(), kKeys, type, memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_index(device);
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  return at::detail::empty_strided_generic(size, stride, &Allocator::get(), kKeys, type);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           storage_offset ? std::optional<int64_t>(storage_offset->expect_int())
                                                          : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// Grows the storage of `self` to `bytes` if it is smaller (a new buffer, old bytes kept).
void ensure_storage(const at::Tensor& self, size_t bytes) {
  c10::StorageImpl* storage = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (bytes <= storage->nbytes()) return;
  Allocator& allocator = Allocator::get();
  c10::DataPtr fresh = allocator.allocate(bytes);
  if (storage->nbytes() > 0 && storage->data() != nullptr)
    allocator.copy_data(fresh.get(), storage->data(), storage->nbytes());
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(bytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const at::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != sizes) impl->set_sizes_contiguous(sizes);
  if (memory_format && *memory_format != at::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
  const size_t bytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                        self.storage_offset());
  ensure_storage(self, bytes);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, at::IntArrayRef size,
                        at::IntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  impl->set_sizes_and_strides(size, stride);
  const size_t bytes = at::detail::computeStorageNbytes(size, stride, self.element_size(), offset);
  ensure_storage(self, bytes);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                     C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

// ---------------------------------------------------------------------------------
// Copies

// Bytes a dense tensor's elements span, from its first element.
size_t dense_bytes(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

void copy_on_device(const at::Tensor& src, const at::Tensor& dst);

// Host to device: the source, broadcast and converted on the host, is written in place
// when dst is dense (any order of dimensions), else through a contiguous device tensor.
void copy_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.numel() == 0) return;
  at::Tensor host = src.expand(dst.sizes());
  if (dst.is_non_overlapping_and_dense()) {
    at::Tensor staged = at::empty_strided(dst.sizes(), dst.strides(), host.options().dtype(dst.scalar_type()));
    staged.copy_(host);
    const DeviceSpan to = span(dst);
    // The first element in memory is the one at the smallest offset; for a dense tensor
    // with non-negative strides that is element 0.
    Device::get().write_async(to.mem, size_t(to.offset) * dst.element_size(), staged.data_ptr(),
                              dense_bytes(dst));
    return;
  }
  at::Tensor packed = empty_device(dst.sizes(), dst.scalar_type());
  copy_to_device(host, packed);
  copy_on_device(packed, dst);
}

// Whether the device's kernels read and write this dtype (kernels/dtypes.h): complex
// tensors are copied as pairs of reals, float64 ones need cl_khr_fp64.
bool kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16:
    case at::kLong:
    case at::kInt:
    case at::kShort:
    case at::kChar:
    case at::kByte:
    case at::kBool: return true;
    case at::kDouble: return Device::get().has_fp64();
    default: return false;
  }
}

// Device to host: a dense source is read in one piece (waiting for the queue), else it is
// made contiguous on the device first (by a kernel; a dtype without kernels, complex say, is
// read as the span of storage it covers and viewed with its strides on the host, as making
// it contiguous would copy it through here again); the host then converts and scatters it
// into dst.
void copy_to_host(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.numel() == 0) return;
  at::Tensor from = src.expand(dst.sizes());
  if (!from.is_non_overlapping_and_dense() && !kernel_dtype(from.scalar_type())) {
    int64_t extent = 1;  // elements from the first to the last one it addresses (strides are >= 0)
    for (int64_t d = 0; d < from.dim(); ++d) extent += (from.size(d) - 1) * from.stride(d);
    at::Tensor span_host = at::empty({extent}, dst.options().dtype(from.scalar_type()));
    const DeviceSpan at_src = span(from);
    Device::get().read(at_src.mem, size_t(at_src.offset) * from.element_size(), span_host.data_ptr(),
                       size_t(extent) * from.element_size());
    dst.copy_(span_host.as_strided(from.sizes(), from.strides()));
    return;
  }
  if (!from.is_non_overlapping_and_dense()) from = from.contiguous();
  const DeviceSpan at_src = span(from);
  const size_t offset = size_t(at_src.offset) * from.element_size();
  const bool direct = dst.scalar_type() == from.scalar_type() && dst.strides() == from.strides() &&
                      dst.is_non_overlapping_and_dense();
  if (direct) {
    Device::get().read(at_src.mem, offset, dst.data_ptr(), dense_bytes(dst));
    return;
  }
  at::Tensor staged = at::empty_strided(from.sizes(), from.strides(), dst.options().dtype(from.scalar_type()));
  Device::get().read(at_src.mem, offset, staged.data_ptr(), dense_bytes(from));
  dst.copy_(staged);
}

// The same bytes as integers of the element's size (complex ones as pairs), so any dtype
// is moved by the integer copy kernels without converting.
at::Tensor as_bits(const at::Tensor& t) {
  const at::Tensor real = t.is_complex() ? at::view_as_real(t) : t;
  switch (real.element_size()) {
    case 1: return real.view(at::kByte);
    case 2: return real.view(at::kShort);
    case 4: return real.view(at::kInt);
    default: return real.view(at::kLong);
  }
}

void copy_on_device(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.numel() == 0) return;
  const bool same_layout = src.sizes() == dst.sizes() && src.strides() == dst.strides() &&
                           src.scalar_type() == dst.scalar_type() && dst.is_non_overlapping_and_dense();
  if (same_layout) {
    const DeviceSpan from = span(src), to = span(dst);
    const size_t item = dst.element_size();
    Device::get().copy(from.mem, to.mem, size_t(from.offset) * item, size_t(to.offset) * item, dense_bytes(dst));
    return;
  }
  if (src.scalar_type() == dst.scalar_type()) {
    const at::Tensor to = as_bits(dst);
    elementwise("copy", to, {as_bits(src).expand(to.sizes())}, to.scalar_type());
    return;
  }
  if (src.is_complex() && dst.is_complex() && kernel_dtype(c10::toRealValueType(src.scalar_type())) &&
      kernel_dtype(c10::toRealValueType(dst.scalar_type()))) {
    const at::Tensor to = at::view_as_real(dst);
    elementwise("copy", to, {at::view_as_real(src).expand(to.sizes())}, to.scalar_type());
    return;
  }
  if (!kernel_dtype(src.scalar_type()) || !kernel_dtype(dst.scalar_type())) {
    at::Tensor host = at::empty(dst.sizes(), dst.options().device(at::kCPU));
    copy_to_host(src, host);
    copy_to_device(host, dst);
    return;
  }
  at::ScalarType compute = dst.scalar_type();
  if (compute == at::kBool) compute = src.scalar_type();  // bool(x) is x != 0 in x's type
  elementwise("copy", dst, {src}, compute);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  DEVICE_CHECK(self.defined() && dst.defined(), "opencl: copy of an undefined tensor");
  // torch's lazy conjugate and negative views (x.conj() of a complex tensor) reach here (the
  // Conjugate and Negative keys fall through): the stored values are copied, then the view's
  // operation is applied to dst.
  if (is_device(self) && (self.is_conj() || self.is_neg()) && !dst.is_conj() && !dst.is_neg()) {
    const at::Tensor stored = self.is_conj() ? at::_conj(self) : self;
    copy_from(stored.is_neg() ? at::_neg_view(stored) : stored, dst, non_blocking);
    if (self.is_conj()) at::view_as_real(dst).select(-1, 1).neg_();  // imaginary parts
    if (self.is_neg()) (dst.is_complex() ? at::view_as_real(dst) : dst).neg_();
    return dst;
  }
  if (is_device(self) && is_device(dst) && self.get_device() == dst.get_device()) {
    const CurrentDevice on(dst.get_device());
    copy_on_device(self, dst);
  } else if (is_device(self) && is_device(dst)) {
    // Between two devices (two OpenCL contexts): through the host.
    at::Tensor host = at::empty(dst.sizes(), dst.options().device(at::kCPU));
    {
      const CurrentDevice on(self.get_device());
      copy_to_host(self, host);
    }
    const CurrentDevice on(dst.get_device());
    copy_to_device(host, dst);
  } else if (is_device(dst)) {
    DEVICE_CHECK(self.device().is_cpu(), "opencl: copies go between the CPU and the opencl device, got ",
                self.device());
    const CurrentDevice on(dst.get_device());
    copy_to_device(self, dst);
  } else {
    DEVICE_CHECK(dst.device().is_cpu(), "opencl: copies go between the CPU and the opencl device, got ",
                dst.device());
    const CurrentDevice on(self.get_device());
    copy_to_host(self, dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_device(dst)) {
    resize_(dst, self.sym_sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  copy_to_host(self.reshape(at::IntArrayRef{}), host);
  return host.item();
}

// ---------------------------------------------------------------------------------
// Fills

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  at::ScalarType compute = self.scalar_type();
  elementwise("fill", self, {}, compute, value.toDouble());
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  DEVICE_CHECK(value.dim() == 0, "opencl: fill_ takes a 0-dim value tensor, got ", value.dim(), " dimensions");
  if (!is_device(value)) return fill_scalar(self, value.item());
  elementwise("copy", self, {value}, self.scalar_type());
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// Whether `param.data = from` may swap storage in place: between dense tensors of the CPU
// and the device, yes. module.to("opencl") relies on it to keep parameters shared
// between modules (tied weights) shared.
bool compatible_shallow_copy(const at::Tensor& self, const at::Tensor& from) {
  return self.layout() == at::kStrided && from.layout() == at::kStrided;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
}

// Copies from conjugate and negative views are resolved by copy_from itself: through
// these keys' fallback (which materialises the view with a copy) they would recurse.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

}  // namespace oclf::device
