// torch.ops.oclf.add_each_(selves, other): selves[i] += other for each tensor, in place. One
// launch of kernels/counters.cl's add_each per 8 one-element device tensors of one dtype
// (int64, int32, float32): a decoding step's per-layer position counters, which a compiled
// step otherwise updates in a kernel each (compile/counters.py); any other tensor runs add_.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <map>
#include <string>
#include <vector>

#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

constexpr size_t kSlots = 8;  // SLOTS in counters.cl

// The kernel's element and number types for a one-element tensor of `dtype` plus `other`
// (nullptr where add_each does not take it: add_ runs instead, with torch's checks).
const char* add_each_types(at::ScalarType dtype, const at::Scalar& other, const char** compute) {
  if ((dtype == at::kLong || dtype == at::kInt) && other.isIntegral(false)) {
    *compute = dtype == at::kLong ? "long" : "int";
    return *compute;
  }
  if (dtype == at::kFloat && (other.isIntegral(false) || other.isFloatingPoint())) {
    *compute = "float";
    return "float";
  }
  return nullptr;
}

void add_each_(at::TensorList selves, const at::Scalar& other) {
  std::map<at::ScalarType, std::vector<at::Tensor>> groups;
  for (const at::Tensor& t : selves) {
    const char* compute = nullptr;
    if (is_device(t) && t.numel() == 1 && add_each_types(t.scalar_type(), other, &compute) != nullptr)
      groups[t.scalar_type()].push_back(t);
    else
      t.add_(other);
  }
  for (const auto& [dtype, tensors] : groups) {
    const char* compute = nullptr;
    const char* type = add_each_types(dtype, other, &compute);
    const cl_kernel kernel =
        device_kernel("counters.cl", "add_each", std::string("-DT=") + type + " -DCOMPUTE=" + compute);
    for (size_t first = 0; first < tensors.size(); first += kSlots) {
      TensorArg slot[kSlots];
      const size_t count = std::min(kSlots, tensors.size() - first);
      for (size_t i = 0; i < count; ++i) slot[i] = arg(tensors[first + i]);
      const size_t global[1] = {kSlots}, local[1] = {kSlots};
      if (dtype == at::kFloat) {
        launch(kernel, NDRange(1, global, local), slot[0], slot[1], slot[2], slot[3], slot[4], slot[5], slot[6],
               slot[7], cl_int(count), cl_float(other.toFloat()));
      } else if (dtype == at::kLong) {
        launch(kernel, NDRange(1, global, local), slot[0], slot[1], slot[2], slot[3], slot[4], slot[5], slot[6],
               slot[7], cl_int(count), cl_long(other.toLong()));
      } else {
        launch(kernel, NDRange(1, global, local), slot[0], slot[1], slot[2], slot[3], slot[4], slot[5], slot[6],
               slot[7], cl_int(count), cl_int(other.toInt()));
      }
    }
  }
}

void add_each_separately(at::TensorList selves, const at::Scalar& other) {
  for (const at::Tensor& t : selves) t.add_(other);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oclf, m) { m.def("add_each_(Tensor(a!)[] selves, Scalar other) -> ()"); }

TORCH_LIBRARY_IMPL(oclf, PrivateUse1, m) { m.impl("add_each_", add_each_); }

TORCH_LIBRARY_IMPL(oclf, CompositeExplicitAutograd, m) { m.impl("add_each_", add_each_separately); }

}  // namespace oclf::device
