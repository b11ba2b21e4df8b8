// DeviceLauncher: see device_launcher.h.
#include "device_launcher.h"

#include "derived.h"
#include "tensors.h"

namespace oclf::device {

DeviceLauncher::DeviceLauncher(const at::Tensor& weight) : lock_(Stream::get().mutex()), weight_(weight) {}

const DeviceInfo& DeviceLauncher::info() const { return Runtime::get().info(); }

cl_device_id DeviceLauncher::device() const { return Runtime::get().device(); }

cl_kernel DeviceLauncher::kernel(const std::string& file, const std::string& name, const std::string& options) {
  return library_kernel(file, name, options);
}

std::string DeviceLauncher::source_hash(const std::string& file) { return library_source_hash(file); }

void DeviceLauncher::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  Stream::get().launch(kernel, dims, global, local);
}

Scratch DeviceLauncher::scratch(size_t bytes) {
  auto t = std::make_shared<at::Tensor>(empty_device({int64_t(bytes)}, at::kByte));
  return Scratch(whole_buffer(*t, "scratch memory"), t);
}

cl_mem DeviceLauncher::derived(const std::string& tag, size_t bytes, const std::function<void(cl_mem)>& fill,
                               Scratch* scratch) {
  if (!weight_.defined()) {
    *scratch = this->scratch(bytes);
    fill(scratch->get());
    return scratch->get();
  }
  const at::Tensor made = derived_from(weight_, tag + " " + std::to_string(bytes) + " bytes", [&] {
    at::Tensor out = empty_device({int64_t(bytes)}, at::kByte);
    fill(whole_buffer(out, "a derived buffer"));
    return out;
  });
  held_.push_back(made);
  return whole_buffer(made, "a derived buffer");
}

// The device launches without profiling events: each trial run waits for its own kernels.
void DeviceLauncher::trial_done() { Stream::get().synchronize(); }

Tuning& DeviceLauncher::tuning() { return Runtime::get().tuning(); }

bool DeviceLauncher::builds(const std::string& file, const std::string& name, const std::string& options) {
  return library_kernel_builds(file, name, options);
}

cl_mem whole_buffer(const at::Tensor& t, const char* what) {
  const DeviceSpan s = span(t);
  DEVICE_CHECK(s.offset == 0, "opencl: ", what, " does not start at its buffer's first element");
  return s.mem;
}

}  // namespace oclf::device
