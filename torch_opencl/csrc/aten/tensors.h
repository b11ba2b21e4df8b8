// What the device's operators ask of a tensor: where it lives (its buffer and offset), the
// OpenCL C names of its dtype, the checks every operator makes, and new device tensors on
// the current device. DtypeError is how a kernel refuses a dtype (dispatch.h takes over).
#pragma once

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>  // resize_output, which most operators use

#include <string>
#include <tuple>
#include <vector>

#include "../check.h"
#include "../runtime/allocator.h"
#include "../runtime/stream.h"

namespace oclf::device {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// Thrown (before anything is enqueued) where a kernel does not take a tensor's dtype. The
// operator registration (dispatch.h) catches it and runs the operator on float32 copies
// of float16/bfloat16 tensors, or on the CPU; elsewhere it reaches Python as a
// NotImplementedError.
class DtypeError : public c10::NotImplementedError {
 public:
  using c10::NotImplementedError::NotImplementedError;
};
#define DEVICE_DTYPE_CHECK(cond, ...)                                                                \
  if (C10_UNLIKELY(!(cond)))                                                                       \
  throw ::oclf::device::DtypeError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},          \
                                   ::oclf::device::message(__VA_ARGS__))

// The OpenCL C name of a dtype's elements ("float", "long", "uchar" for bool, ...) for
// kernels that take the device's computing types: float32 and the integers. Throws
// DtypeError naming `what` for other dtypes.
const char* cl_type(at::ScalarType dtype, const char* what = "tensor");
// The same, for kernels that read and write through kernels/dtypes.h (READ / WRITE):
// also "double" (where the device has cl_khr_fp64), "half" and "bfloat".
const char* cl_storage_type(at::ScalarType dtype, const char* what = "tensor");
// For kernels that only move elements (index_select, cat, gather, tril/triu's zeros):
// cl_type() for the device's computing types, else an unsigned integer of the element's
// size ("ushort" for float16/bfloat16, "ulong" for float64/complex64).
const char* cl_move_type(at::ScalarType dtype, const char* what = "tensor");
// For kernels of real arithmetic in the tensor's own type (-DT=float or double): float32,
// or float64 where the device has cl_khr_fp64; DtypeError naming `what` for other dtypes,
// so the registration runs 16-bit tensors on float32 copies and the rest on the CPU.
const char* cl_real_type(at::ScalarType dtype, const char* what = "tensor");
// The type arithmetic on a dtype runs in: float32 for float16 and bfloat16, else itself.
at::ScalarType compute_type(at::ScalarType dtype);
bool is_device(const at::Tensor& t);
// The calling thread's current device (an operator's: the dispatch wrapper sets it), where
// new tensors and host copies go.
inline at::Device current_device() { return at::Device(kType, static_cast<c10::DeviceIndex>(Runtime::current())); }
// Throws unless t is a device tensor of one of the given dtypes; `what` names it.
void check_device(const at::Tensor& t, const char* what);
// Throws unless t is a float32 device tensor (DtypeError for other dtypes: the
// registration then runs the operator on float32 copies or on the CPU).
void check_float(const at::Tensor& t, const char* what);

// The buffer of a device tensor and the offset of its first element, in elements.
struct DeviceSpan {
  cl_mem mem = nullptr;
  int offset = 0;
};
DeviceSpan span(const at::Tensor& t);

// Integer index values addressing a dimension of `size` elements (`dim` of the indexed
// tensor, or -1 unnamed): every value must lie in [-size, size) where `negative` ones count
// from the end, else in [0, size). An integer type is checked here; the values are checked
// on the device (kernels/index_check.cl), and one out of range raises IndexError naming `op`
// at the next wait for the device (Stream::index_record), or here with
// OCLF_DEVICE_INDEX_CHECKS=call. So the operator's kernel runs with the indices unchecked:
// it must keep every access inside its tensors (clamped or skipped). Recorded graphs
// check at each replay alike.
void check_index_range(const char* op, const at::Tensor& index, int64_t size, bool negative = false,
                       int64_t dim = -1);
// The same check of integer values against [low, high), values equal to `ignore` aside (a
// loss's ignore_index); the error names them by `noun` ("target 5 is out of bounds ...").
void check_values_on_device(const char* op, const char* noun, const at::Tensor& values, int64_t low, int64_t high,
                            int64_t dim = -1, std::optional<int64_t> ignore = std::nullopt);
// A check of any other condition, made on the device alike: `failures` holds integers, 0
// where the condition holds and k (1, 2, ...) where it fails the way messages[k - 1] says;
// the first failure found raises RuntimeError with its message at the next wait.
void check_on_device(const at::Tensor& failures, const std::vector<std::string>& messages);

// x as (outer, D, inner) around dimension `dim`: the product of the sizes before it, its
// own size, the product of those after it (a 0-d x is (1, 1, 1)).
std::tuple<int64_t, int64_t, int64_t> around(const at::Tensor& x, int64_t dim);

// float16 or bfloat16: stored in 16 bits, computed in float32.
inline bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// New device tensors.
at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype);
// Contiguous copy on the device (t itself when already contiguous).
at::Tensor contiguous(const at::Tensor& t);

}  // namespace oclf::device
