// The OpenCL runtime under opencl_functions, the one header host code includes. There is
// one Runtime per OpenCL device of the process (device_set(): opencl:0, opencl:1, ...), made
// on first use and shared by the library (_core) and the opencl torch device (_C, which
// links _core's copy of this folder). Runtime::get() is the calling thread's current
// device (the default one, OCLF_DEVICE's, unless set_current() chose another). Each owns
// one unit per concern and forwards the calls host code makes:
//   Device         (device.hpp)     which device, its context, its in-order profiling queue
//   Programs       (programs.hpp)   .cl files built once per version and options
//   Profiler       (profiling.hpp)  launches and their kernel time
//   BufferPool     (buffers.hpp)    device buffers reused by size; Buffer for host code
//   ResidentStore  (resident.hpp)   parameters kept on the device between calls
//   Tuning         (tuning.hpp)     configurations measured at first use, cached per device
// plus errors.hpp (Error, CL_CHECK), settings.hpp (OCLF_* settings) and clblast_tuning.hpp.
// The runtime is compiled once per process, into _core; pybind11 builds modules with hidden
// symbols, so each header of this folder exports its declarations (#pragma GCC visibility)
// for the opencl device's module _C, which links _core's copy.
// Students do not edit this folder; their host code (opencl-functions.cpp) uses it.
#pragma once

#include <mutex>
#include <string>

#include "buffers.hpp"
#include "clblast_tuning.hpp"
#include "device.hpp"
#include "errors.hpp"
#include "profiling.hpp"
#include "programs.hpp"
#include "resident.hpp"
#include "settings.hpp"
#include "tuning.hpp"
// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class Runtime {
 public:
  // The runtime of the calling thread's current device, opened on first use.
  static Runtime& get();
  // The runtime of device `index` (0 .. count()-1), opened on first use (its context,
  // queue and caches are made then); throws Error for an index out of range
  // (check_device_index).
  static Runtime& at(int index);
  // How many devices the process has (device_set(); no context is made). Throws Error when
  // there is no OpenCL platform or device.
  static int count();
  // The calling thread's current device, and changing it (throws Error out of range). New
  // threads start on the default device.
  static int current();
  static void set_current(int index);
  static int default_index();
  // Whether `index` has been opened (a context made) in this process.
  static bool is_open(int index);

  int index() const { return device_.info().index; }

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
  // Held while kernel arguments are set and kernels enqueued, and by the library's whole
  // operations: cached kernels are shared by the library and the device, and argument
  // setting must not interleave between threads (autograd runs the backward pass on a
  // thread of its own). Recursive: an operation's own launches take it again.
  std::recursive_mutex& mutex() { return mutex_; }

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  explicit Runtime(int index);  // never destroyed: OpenCL drivers may unload before static destructors run

  Device device_;
  Programs programs_;
  Profiler profiler_;
  BufferPool pool_;
  ResidentStore residents_;
  Tuning tuning_;
  std::recursive_mutex mutex_;
};

// Makes device `index` the calling thread's current one while it lives (the previous one
// comes back after); a negative index changes nothing.
class CurrentDevice {
 public:
  explicit CurrentDevice(int index);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  bool active_ = false;
  int saved_ = -1;
};

}  // namespace oclf
#pragma GCC visibility pop
