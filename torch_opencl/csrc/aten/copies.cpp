// Copies of opencl tensors: between the host and a device (any strides and dtypes), on one
// device (a buffer copy, else the elementwise kernels), and between two devices (through
// the host: each device has a context of its own).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "dispatch.h"
#include "elementwise.h"
#include "tensors.h"

namespace oclf::device {

namespace {

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
    Stream::get().write_async(to.mem, size_t(to.offset) * dst.element_size(), staged.data_ptr(),
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
    case at::kDouble: return has_fp64();
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
    Stream::get().read(at_src.mem, size_t(at_src.offset) * from.element_size(), span_host.data_ptr(),
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
    Stream::get().read(at_src.mem, offset, dst.data_ptr(), dense_bytes(dst));
    return;
  }
  at::Tensor staged = at::empty_strided(from.sizes(), from.strides(), dst.options().dtype(from.scalar_type()));
  Stream::get().read(at_src.mem, offset, staged.data_ptr(), dense_bytes(from));
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
  // A copy onto the very elements it reads (x.copy_(x), x.copy_(x.view(-1).view(x.shape)),
  // which DistributedDataParallel makes) changes nothing, as torch's own copy_ does;
  // a partial overlap is refused by name, as torch refuses it.
  if (src.scalar_type() == dst.scalar_type() && src.data_ptr() == dst.data_ptr() && src.sizes() == dst.sizes() &&
      src.strides() == dst.strides())
    return;
  DEVICE_CHECK(at::get_overlap_status(src, dst) != at::MemOverlapStatus::Partial,
               "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
               "single memory location. Please clone() the tensor before performing the operation.");
  const bool same_layout = src.sizes() == dst.sizes() && src.strides() == dst.strides() &&
                           src.scalar_type() == dst.scalar_type() && dst.is_non_overlapping_and_dense();
  if (same_layout) {
    const DeviceSpan from = span(src), to = span(dst);
    const size_t item = dst.element_size();
    Stream::get().copy(from.mem, to.mem, size_t(from.offset) * item, size_t(to.offset) * item, dense_bytes(dst));
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
    Allocator::get().note_write(dst.storage().data());
  } else if (is_device(self) && is_device(dst)) {
    // Between two devices (two OpenCL contexts): through the host.
    at::Tensor host = at::empty(dst.sizes(), dst.options().device(at::kCPU));
    {
      const CurrentDevice on(self.get_device());
      copy_to_host(self, host);
    }
    const CurrentDevice on(dst.get_device());
    copy_to_device(host, dst);
    Allocator::get().note_write(dst.storage().data());
  } else if (is_device(dst)) {
    DEVICE_CHECK(self.device().is_cpu(), "opencl: copies go between the CPU and the opencl device, got ",
                self.device());
    const CurrentDevice on(dst.get_device());
    copy_to_device(self, dst);
    Allocator::get().note_write(dst.storage().data());
  } else {
    DEVICE_CHECK(dst.device().is_cpu(), "opencl: copies go between the CPU and the opencl device, got ",
                dst.device());
    const CurrentDevice on(self.get_device());
    copy_to_host(self, dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());  // the device's resize_ (creation.cpp) for a device tensor
  return copy_from(self, dst, false);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

// Copies from conjugate and negative views are resolved by copy_from itself: through
// these keys' fallback (which materialises the view with a copy) they would recurse.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

}  // namespace oclf::device
