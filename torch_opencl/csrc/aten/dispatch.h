// How the device's operators are registered: every kernel goes through one dtype-aware
// wrapper, so each operator handles every dtype a tensor on the device can have.
//
//   REGISTER_DEVICE_OPS(m) {            // in place of TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
//     m.impl("add.Tensor", add);    // as with torch::Library::impl
//   }
//
// A call runs the native kernel. Where a kernel does not take a dtype it throws DtypeError
// before enqueueing anything (tensors.h); the wrapper then runs the operator
//   - on float32 copies of its float16 and bfloat16 tensors (one conversion kernel each,
//     parameters too, each call), the float32 results stored back in 16 bits,
//     where the tensors are otherwise of the kernel's dtypes; else
//   - on the CPU, through the fallback (fallback.h: float64 on devices without
//     cl_khr_fp64, complex arithmetic, ...).
// The choice is remembered per operator and set of dtypes, so the exception is thrown once.
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <torch/library.h>

#include <type_traits>
#include <utility>

namespace oclf::device {

// Registers `native` as the kernel of the operator `name` (as torch::Library::impl does);
// the dispatcher calls its dtype-aware wrapper (NativeOp), which calls native.
void register_native(torch::Library& library, const char* name, c10::KernelFunction native);

class DeviceOps {
 public:
  explicit DeviceOps(torch::Library& library) : library_(library) {}

  template <typename Func>
  DeviceOps& impl(const char* name, Func* func) {
    static_assert(std::is_function_v<Func>, "register a function");
    register_native(library_, name, c10::KernelFunction::makeFromUnboxedRuntimeFunction(func));
    return *this;
  }

 private:
  torch::Library& library_;
};

}  // namespace oclf::device

// TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) with each impl() going through the dtype wrapper.
#define REGISTER_DEVICE_OPS(m) REGISTER_DEVICE_OPS_(m, C10_UID)
#define REGISTER_DEVICE_OPS_(m, uid)                                                       \
  static void C10_CONCATENATE(oclf_device_ops_, uid)(::oclf::device::DeviceOps&);      \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {                                     \
    ::oclf::device::DeviceOps ops(library);                                            \
    C10_CONCATENATE(oclf_device_ops_, uid)(ops);                                       \
  }                                                                                    \
  static void C10_CONCATENATE(oclf_device_ops_, uid)(::oclf::device::DeviceOps & m)
