// The OpenCL runtime under opencl_functions, the one header host code includes. Runtime is
// the process's single instance, made on first use; it owns one unit per concern and
// forwards the calls host code makes:
//   Device         (device.hpp)     which device, its context, its in-order profiling queue
//   Programs       (programs.hpp)   .cl files built once per version and options
//   Profiler       (profiling.hpp)  launches and their kernel time
//   BufferPool     (buffers.hpp)    device buffers reused by size; Buffer for host code
//   ResidentStore  (resident.hpp)   parameters kept on the device between calls
//   Tuning         (tuning.hpp)     configurations measured at first use, cached per device
// plus errors.hpp (Error, CL_CHECK), settings.hpp (OCLF_* settings) and clblast_tuning.hpp.
// Students do not edit this folder; their host code (opencl-functions.cpp) uses it.
#pragma once

#include <mutex>

#include "buffers.hpp"
#include "clblast_tuning.hpp"
#include "device.hpp"
#include "errors.hpp"
#include "profiling.hpp"
#include "programs.hpp"
#include "resident.hpp"
#include "settings.hpp"
#include "tuning.hpp"

namespace oclf {

class Runtime {
 public:
  // The process's runtime, created on first use for the device OCLF_DEVICE names.
  static Runtime& get();

  // The device
  cl_context context() const { return device_.context(); }
  cl_command_queue queue() const { return device_.queue(); }
  cl_command_queue* queue_ptr() { return device_.queue_ptr(); }
  cl_device_id device() const { return device_.id(); }
  const DeviceInfo& info() const { return device_.info(); }
  bool zero_copy() const { return device_.zero_copy(); }

  // Kernels: see Programs::kernel.
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options = "") {
    return programs_.kernel(file, name, options);
  }
  // Launches and timing: see Profiler.
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
    profiler_.launch(kernel, dims, global, local);
  }
  void record(cl_event event, cl_event since = nullptr) { profiler_.record(event, since); }
  cl_event marker() { return profiler_.marker(); }
  uint64_t finish_and_take_kernel_ns() { return profiler_.finish_and_take_kernel_ns(); }

  // Resident parameters: see ResidentStore.
  cl_mem resident(uint64_t handle) const { return residents_.buffer(handle); }
  cl_mem derived(cl_mem resident, const std::string& tag) const { return residents_.derived(resident, tag); }
  cl_mem keep_derived(cl_mem resident, const std::string& tag, size_t bytes) {
    return residents_.keep_derived(resident, tag, bytes);
  }

  // Tuning at first use: see Tuning.
  Tuning& tuning() { return tuning_; }

  Programs& programs() { return programs_; }
  Profiler& profiler() { return profiler_; }
  BufferPool& pool() { return pool_; }
  ResidentStore& residents() { return residents_; }
  // Operations hold this while they run (the bindings take it): one at a time per process.
  std::mutex& mutex() { return mutex_; }

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  Runtime();  // never destroyed: OpenCL drivers may unload before static destructors run

  Device device_;
  Programs programs_;
  Profiler profiler_;
  BufferPool pool_;
  ResidentStore residents_;
  Tuning tuning_;
  std::mutex mutex_;
};

}  // namespace oclf
