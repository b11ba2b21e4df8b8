// RuntimeLauncher: the shared launch functions (launcher.hpp) on the course runtime, as the
// reference's host code and the library's backward pass run them: kernels from the
// runtime's programs, launches on its profiling queue (so they are timed and logged), scratch
// memory from its buffer pool, derived buffers kept with a resident weight.
#pragma once

#include <memory>
#include <string>

#include "../runtime/runtime.hpp"
#include "launcher.hpp"

namespace oclf {

class RuntimeLauncher final : public Launcher {
 public:
  // `resident`: the device copy of the operation's weight (Conv2dArgs::weight_dev,
  // MatmulArgs::b_dev), whose derived buffers are kept with it; nullptr makes them per call.
  explicit RuntimeLauncher(Runtime& rt, cl_mem resident = nullptr) : rt_(rt), resident_(resident) {}

  const DeviceInfo& info() const override { return rt_.info(); }
  cl_device_id device() const override { return rt_.device(); }
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options) override {
    return rt_.kernel(file, name, options);
  }
  std::string source_hash(const std::string& file) override { return rt_.programs().source_hash(file); }
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) override {
    rt_.launch(kernel, dims, global, local);
  }
  Scratch scratch(size_t bytes) override {
    auto buffer = std::make_shared<Buffer>(bytes, CL_MEM_READ_WRITE);
    return Scratch(buffer->get(), buffer);
  }
  cl_mem derived(const std::string& tag, size_t bytes, const std::function<void(cl_mem)>& fill,
                 Scratch* scratch) override {
    if (resident_) {
      if (cl_mem kept = rt_.derived(resident_, tag)) return kept;
      cl_mem made = rt_.keep_derived(resident_, tag, bytes);
      fill(made);
      return made;
    }
    *scratch = this->scratch(bytes);
    fill(scratch->get());
    return scratch->get();
  }
  Tuning& tuning() override { return rt_.tuning(); }

 private:
  Runtime& rt_;
  cl_mem resident_;
};

}  // namespace oclf
