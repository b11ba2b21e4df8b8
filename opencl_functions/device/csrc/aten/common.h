// Helpers shared by the opencl device's operators: where a tensor lives (buffer and
// offset), kernel arguments and launches, new device tensors, and the elementwise
// driver (broadcasting, strides, type conversion) over kernels/elementwise.cl.
#pragma once

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../check.h"
#include "../runtime/allocator.h"
#include "../runtime/device.h"
#include "dispatch.h"

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

// Integer index values addressing a dimension of `size` elements: throws an IndexError naming
// `op` unless every value lies in [-size, size) where `negative` ones count from the end, else
// in [0, size). Returns whether a negative one was found. Reads the smallest and largest
// value back (one wait for the queue): kernels must not read or write outside a tensor.
// Not while a graph records (no wait is possible there): recorded indices go unchecked.
bool check_index_range(const char* op, const at::Tensor& index, int64_t size, bool negative = false);

// New device tensors.
at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype);
// Contiguous copy on the device (t itself when already contiguous).
at::Tensor contiguous(const at::Tensor& t);

// A tensor derived from `source` (a weight packed for conv2d_cpu, transposed for
// gemm_rows): made by make() once and kept while source's storage lives and its version
// is unchanged, under `layout` (what it was made for; the source's address is added, so
// views of one storage keep their own). Inference derives each weight once.
at::Tensor derived_from(const at::Tensor& source, const std::string& layout,
                        const std::function<at::Tensor()>& make);

// ---- launches: the course runtime's set_args, on the device's queue ---------------------
//   launch(kernel, NDRange::linear(n), arg(x), arg(y), int(n));
// A device tensor is two kernel arguments (arg(): its buffer, then its offset in elements);
// scalars go as the kernel declares them: int, cl_long, float (a bool is refused).

// A device tensor as kernel arguments; an empty one passes a null buffer and offset 0.
struct TensorArg {
  cl_mem mem = nullptr;
  int offset = 0;
};
TensorArg arg(const at::Tensor& t);

// A number the size of the compute type it is passed as (float, double, long, int, short or uchar).
struct ScalarArg {
  unsigned char bytes[8] = {0};
  size_t size = 4;
  ScalarArg(double value, at::ScalarType type);
};

// set_args (runtime/programs.hpp) takes a TensorArg as its two arguments, a ScalarArg as its bytes.
inline void set_arg_at(cl_kernel kernel, cl_uint* index, const TensorArg& t) {
  oclf::set_arg_at(kernel, index, t.mem);
  oclf::set_arg_at(kernel, index, t.offset);
}
inline void set_arg_at(cl_kernel kernel, cl_uint* index, const ScalarArg& v) {
  set_arg(kernel, (*index)++, v.size, v.bytes);
}

// An NDRange: `dims` global sizes, and local sizes or none (the driver picks).
struct NDRange {
  cl_uint dims = 1;
  size_t global[3] = {1, 1, 1};
  size_t local[3] = {1, 1, 1};
  bool driver_local = true;
  NDRange(cl_uint dims, const size_t* global, const size_t* local);
  // One dimension of round_up(n, group) work-items in groups of `group` (64 on CPU devices:
  // PoCL compiles a kernel anew per work-group size; the driver picks when group is 0).
  static NDRange linear(size_t n, size_t group = 256);
};

// Sets a kernel's arguments in order (set_args) and enqueues it over `range` on the device's
// queue, both under the device lock (cached kernels are shared between threads). An empty
// range launches nothing.
template <typename... Args>
void launch(cl_kernel kernel, const NDRange& range, const Args&... args) {
  static_assert(!(std::is_same_v<Args, bool> || ...), "pass flags as int, as the kernels declare them");
  for (cl_uint d = 0; d < range.dims; ++d) {
    if (range.global[d] == 0) return;  // an empty tensor: nothing to compute (OpenCL refuses a 0-size range)
  }
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  set_args(kernel, args...);
  dev.launch(kernel, range.dims, range.global, range.driver_local ? nullptr : range.local);
}

// One input of an elementwise operation: a tensor (broadcast to the output's shape), or
// a number (a Python scalar, or a 0-dim CPU tensor, which torch allows beside device ones).
// `tensor` is always defined: for a number, the wrapped 0-dim tensor type promotion sees.
struct Operand {
  at::Tensor tensor;
  std::optional<double> number;
  Operand(const at::Tensor& t);        // NOLINT: implicit on purpose
  Operand(const at::Scalar& value);    // NOLINT
  Operand(double value) : Operand(at::Scalar(value)) {}  // NOLINT
};

// out = F(inputs) elementwise (F: an OP_<op> of elementwise.cl), computing in `compute`.
// out has the broadcast shape already; s0 and s1 are F's parameters.
void elementwise(const std::string& op, const at::Tensor& out, std::initializer_list<Operand> inputs,
                 at::ScalarType compute, double s0 = 0, double s1 = 0);

// The dtype torch's type promotion gives for these operands (numbers count as wrapped).
at::ScalarType promoted(std::initializer_list<Operand> inputs);

}  // namespace oclf::device
