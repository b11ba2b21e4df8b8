// What creating and viewing opencl tensors needs: empty and empty_strided (on the device
// the dispatch wrapper made current), the view ops (as_strided, view, _reshape_alias,
// view_as_real/complex), resize_ and set_, item(), fill_ and zero_, and the ranges arange
// and linspace (kernels/index.cl, kernels/gather.cl). Copies: copies.cpp.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

#include <cmath>

#include "dispatch.h"
#include "elementwise.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// A factory's device names one of the process's devices (the dispatch wrapper made it the
// current one, which the allocator serves).
void check_index(std::optional<at::Device> device) {
  if (device && device->has_index()) check_device_index(device->index());
}

// torch.use_deterministic_algorithms(True) with torch.utils.deterministic.fill_uninitialized_memory
// (on by default): new memory holds NaN (floating and complex dtypes) or the dtype's largest
// value (integers, bool), as on the CPU and CUDA, instead of what a freed buffer held.
bool fill_uninitialized() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  DEVICE_CHECK(!pin_memory.value_or(false), "opencl: pin_memory=True is for host (CPU) tensors, which copies to the "
               "device read fastest; device tensors are not pinned");
  check_index(device);
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  at::Tensor out = at::detail::empty_generic(size, &Allocator::get(), kKeys, type, memory_format);
  if (C10_UNLIKELY(fill_uninitialized())) at::native::fill_empty_deterministic_(out);
  return out;
}

// Zeros that autograd formulas make for gradients known to be zero (sgn's, for one): CUDA's
// ZeroTensor optimisation aside, a tensor of zeros is what they read.
at::Tensor efficient_zeros(at::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                           std::optional<at::Device> device, std::optional<bool> pin_memory) {
  at::Tensor out = empty_memory_format(size, dtype, layout, device, pin_memory, std::nullopt);
  return out.zero_();
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_index(device);
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  at::Tensor out = at::detail::empty_strided_generic(size, stride, &Allocator::get(), kKeys, type);
  if (C10_UNLIKELY(fill_uninitialized())) at::native::fill_empty_deterministic_(out);
  return out;
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
  const int64_t old_bytes = int64_t(impl->unsafe_storage().nbytes());
  ensure_storage(self, bytes);
  if (C10_UNLIKELY(fill_uninitialized())) at::native::fill_resize_deterministic_(self, old_bytes);
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

at::Scalar local_scalar_dense(const at::Tensor& self) {
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  host.copy_(self.reshape(at::IntArrayRef{}));  // one read from the device (copies.cpp)
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

// ---- ranges --------------------------------------------------------------------------------

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
  launch(device_kernel("index.cl", "arange", type_option(y)), NDRange::linear(size_t(n)), arg(y), a, b, int(n));
  if (!y.is_same(out)) out.copy_(y);
  return out;
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
  launch(device_kernel("gather.cl", "linspace", type_option(y)), NDRange::linear(size_t(steps)), arg(y), float(a),
         float(b), float(step), int(steps));
  if (!y.is_same(out)) out.copy_(y);
  return out;
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
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
  m.impl("_efficientzerotensor", efficient_zeros);
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
}

}  // namespace oclf::device
