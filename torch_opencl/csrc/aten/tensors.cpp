// Tensors on the device: buffers, dtypes, checks and new tensors (see tensors.h).
#include "tensors.h"

#include <ATen/EmptyTensor.h>

#include <algorithm>
#include <climits>

#include "kernel_launch.h"

namespace oclf::device {

const char* cl_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kFloat: return "float";
    case at::kLong: return "long";
    case at::kInt: return "int";
    case at::kShort: return "short";
    case at::kChar: return "char";
    case at::kByte: return "uchar";
    case at::kBool: return "uchar";
    default: break;
  }
  DEVICE_DTYPE_CHECK(false, "opencl: ", what, " has dtype ", dtype,
                   "; this kernel takes float32, int64, int32, int16, int8, uint8 and bool");
  return nullptr;
}

const char* cl_storage_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kHalf: return "half";
    case at::kBFloat16: return "bfloat";
    case at::kDouble:
      DEVICE_DTYPE_CHECK(has_fp64(), "opencl: ", what,
                       " has dtype Double and the device has no cl_khr_fp64");
      return "double";
    default: return cl_type(dtype, what);
  }
}

const char* cl_real_type(at::ScalarType dtype, const char* what) {
  DEVICE_DTYPE_CHECK(dtype == at::kFloat || dtype == at::kDouble, "opencl: ", what,
                     " must be float32 or float64 for this kernel, got ", dtype);
  return cl_storage_type(dtype, what);
}

const char* cl_move_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kHalf:
    case at::kBFloat16: return "ushort";
    case at::kDouble:
    case at::kComplexFloat: return "ulong";
    default: return cl_type(dtype, what);
  }
}

at::ScalarType compute_type(at::ScalarType dtype) {
  return is_16bit_float(dtype) ? at::kFloat : dtype;
}

bool is_device(const at::Tensor& t) { return t.defined() && t.device().type() == kType; }

void check_device(const at::Tensor& t, const char* what) {
  DEVICE_CHECK(is_device(t), "opencl: ", what, " must be an opencl tensor, got ",
              t.defined() ? t.device().str() : std::string("an undefined tensor"));
}

void check_float(const at::Tensor& t, const char* what) {
  check_device(t, what);
  DEVICE_DTYPE_CHECK(t.scalar_type() == at::kFloat, "opencl: ", what, " must be float32, got ", t.scalar_type());
}

DeviceSpan span(const at::Tensor& t) {
  const size_t item = t.element_size();
  const char* first = static_cast<const char*>(t.storage().data()) + t.storage_offset() * item;
  const Location where = Allocator::get().locate(first);
  DEVICE_CHECK(where.offset / item <= size_t(INT_MAX), "opencl: tensor offset past 2^31 elements");
  return DeviceSpan{where.mem, static_cast<int>(where.offset / item)};
}

void check_index_range(const char* op, const at::Tensor& index, int64_t size, bool negative, int64_t dim) {
  DEVICE_CHECK_INDEX(at::isIntegralType(index.scalar_type(), /*includeBool=*/false), "opencl: ", op,
                    ": indices must be an integer tensor, got ", index.scalar_type());
  check_values_on_device(op, "index", index, negative ? -size : 0, size, dim);
}

namespace {
// Checked on the device, without waiting: one kernel writes the first value outside
// [low, high) to the device's record, which its next wait reads back (Stream::index_record).
// A check read back here made every embedding and x[i] a wait for the whole queue.
void check_range_on_device(const char* op, const at::Tensor& values, int64_t low, int64_t high, int code,
                           int64_t dim, std::optional<int64_t> ignore) {
  if (values.numel() == 0) return;
  const at::ScalarType type = values.scalar_type();
  const at::Tensor idx = contiguous(type == at::kLong || type == at::kInt ? values : values.to(at::kLong));
  DEVICE_CHECK(idx.numel() <= INT_MAX, "opencl: ", op, ": more than 2^31 values to check");
  Stream& stream = Stream::get();
  const TensorArg record{stream.index_record(), 0};
  const int64_t n = idx.numel();
  const size_t group = is_cpu() ? 64 : 256;
  const size_t items = std::min<size_t>(size_t(n), group * 64);
  launch(device_kernel("index_check.cl", "index_check", idx.scalar_type() == at::kInt ? "-DINDEX=int" : "-DINDEX=long"),
         NDRange::linear(items, group), arg(idx), int(n), cl_long(low), cl_long(high), record, code, int(dim),
         cl_long(ignore.value_or(0)), int(ignore.has_value()));
  if (stream.index_checks_at_call() && stream.recording() == nullptr) stream.synchronize();
}
}  // namespace

void check_values_on_device(const char* op, const char* noun, const at::Tensor& index, int64_t low, int64_t high,
                            int64_t dim, std::optional<int64_t> ignore) {
  check_range_on_device(op, index, low, high, Stream::index_op_code(op, noun), dim, ignore);
}

void check_on_device(const at::Tensor& failures, const std::vector<std::string>& messages) {
  check_range_on_device("a check", failures, 0, 1, Stream::value_check_code(messages), -1, std::nullopt);
}

std::tuple<int64_t, int64_t, int64_t> around(const at::Tensor& x, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  return {outer, x.dim() == 0 ? 1 : x.size(dim), inner};
}

at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype) {
  // Straight from the allocator (which serves the current device), not through the
  // dispatcher: an operator's outputs are made on every call.
  static const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(sizes, &Allocator::get(), keys, dtype, std::nullopt);
}

at::Tensor contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

}  // namespace oclf::device
