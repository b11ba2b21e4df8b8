// Kernel launches of the device's operators: the course runtime's set_args on the current
// device's queue, with a device tensor as two kernel arguments (its buffer and its offset)
// and numbers sized as the kernel declares them.
//   launch(kernel, NDRange::linear(n), arg(x), arg(y), int(n));
#pragma once

#include <ATen/ATen.h>

#include <mutex>
#include <string>
#include <type_traits>

#include "tensors.h"

namespace oclf::device {

//   launch(kernel, NDRange::linear(n), arg(x), arg(y), int(n));
// A device tensor is two kernel arguments (arg(): its buffer, then its offset in elements);
// scalars go as the kernel declares them: int, cl_long, float (a bool is refused).

// Build options naming a kernel's element type T: the tensor's computing type (cl_type), or
// for kernels that only move elements, an unsigned integer of the element's size
// (cl_move_type: any dtype of up to 8 bytes).
inline std::string type_option(const at::Tensor& t) { return std::string("-DT=") + cl_type(t.scalar_type()); }
inline std::string move_type_option(const at::Tensor& t) {
  return std::string("-DT=") + cl_move_type(t.scalar_type());
}

// A device tensor as kernel arguments; an empty one passes a null buffer and offset 0.
struct TensorArg {
  cl_mem mem = nullptr;
  int offset = 0;
};
TensorArg arg(const at::Tensor& t);

// A 4-D tensor's strides in elements, as one int4 argument (b, h, row, column for attention).
inline cl_int4 strides4(const at::Tensor& t) {
  cl_int4 s;
  for (int d = 0; d < 4; ++d) s.s[d] = static_cast<cl_int>(t.stride(d));
  return s;
}

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
  Stream& stream = Stream::get();
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  set_args(kernel, args...);
  stream.launch(kernel, range.dims, range.global, range.driver_local ? nullptr : range.local);
}

}  // namespace oclf::device
