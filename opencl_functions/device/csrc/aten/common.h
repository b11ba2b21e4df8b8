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
#include <vector>

#include "../runtime/allocator.h"
#include "../runtime/device.h"

namespace oclf::device {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// The OpenCL C name of a dtype's elements ("float", "long", "uchar" for bool, ...);
// throws a TypeError-like c10 error naming `what` for dtypes the device does not hold.
const char* cl_type(at::ScalarType dtype, const char* what = "tensor");
bool is_device(const at::Tensor& t);
// Throws unless t is a device tensor of one of the given dtypes; `what` names it.
void check_device(const at::Tensor& t, const char* what);
void check_float(const at::Tensor& t, const char* what);

// The buffer of a device tensor and the offset of its first element, in elements.
struct DeviceSpan {
  cl_mem mem = nullptr;
  int offset = 0;
};
DeviceSpan span(const at::Tensor& t);

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

// Sets a kernel's arguments in order under the device lock, then launches it.
class Launch {
 public:
  explicit Launch(cl_kernel kernel);
  Launch& mem(cl_mem m);
  Launch& tensor(const at::Tensor& t);  // its buffer, then its offset (int, in elements)
  Launch& i32(int v);
  Launch& i64(int64_t v);
  Launch& f32(float v);
  Launch& raw(const void* value, size_t size);
  void run(cl_uint dims, const size_t* global, const size_t* local);
  // One dimension of round_up(n, group) work-items in groups of `group` (64 on CPU
  // devices; the driver picks when group is 0).
  void run1(size_t n, size_t group = 256);

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  cl_kernel kernel_;
  cl_uint index_ = 0;
};

// A number the size of the compute type it is passed as (float, long, int or uchar).
struct ScalarArg {
  unsigned char bytes[8] = {0};
  size_t size = 4;
  ScalarArg(double value, at::ScalarType type);
};

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
