// DeviceLauncher: the shared launch functions of opencl_functions/launch and
// opencl_functions/reference on the opencl device (launch/launcher.hpp): kernels from the
// device's program cache (the library's files, OCLF_KERNEL_DIR when set), launches on its
// own queue, scratch memory and derived buffers as device tensors. It holds the device lock
// while it lives, so an operation's argument setting and launches do not interleave with
// another thread's (autograd runs the backward pass on a thread of its own).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "opencl_functions/launch/launcher.hpp"
#include "kernel_launch.h"

namespace oclf::device {

class DeviceLauncher final : public Launcher {
 public:
  // `weight`: the tensor whose derived buffers (packed, transformed, transposed) are kept with
  // it (derived_from); undefined makes them per call.
  explicit DeviceLauncher(const at::Tensor& weight = at::Tensor());

  const DeviceInfo& info() const override;
  cl_device_id device() const override;
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options) override;
  std::string source_hash(const std::string& file) override;
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) override;
  Scratch scratch(size_t bytes) override;
  cl_mem derived(const std::string& tag, size_t bytes, const std::function<void(cl_mem)>& fill,
                 Scratch* scratch) override;
  void trial_done() override;
  Tuning& tuning() override;
  bool builds(const std::string& file, const std::string& name, const std::string& options) override;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  at::Tensor weight_;
  std::vector<at::Tensor> held_;  // derived tensors, alive at least as long as this operation
};

// The buffer of a device tensor that starts at its buffer's first element (the shared
// launches take whole buffers); `what` names it in the error otherwise.
cl_mem whole_buffer(const at::Tensor& t, const char* what);

}  // namespace oclf::device
