// The opencl device's runtime core: the OpenCL device the library's Runtime chose
// (OCLF_DEVICE), the device's own in-order queue (asynchronous: only reads to the host
// wait; profiling on, for events), its kernels (the runtime's Programs, with a fast lookup in front) for the .cl
// files of opencl_functions/device/kernels and the library's, and kernel launches.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../../../launch/geometry.hpp"
#include "../../../runtime/runtime.hpp"

namespace oclf::device {

class Graph;

// A kernel argument as set_arg set it: its size and bytes, or no bytes (a null buffer, or
// local memory of `size` bytes).
struct KernelArg {
  bool set = false;
  bool null = false;
  size_t size = 0;
  std::string bytes;
};

// One command's time on the device, while kernel timing is on (opencl_functions.device.
// kernel_profile): the kernel's name ("clblast" for a library call), the outermost operator
// that enqueued it on this thread, its global size, and the device's start-to-end time.
struct KernelTime {
  std::string kernel, op, global;
  uint64_t ns = 0;
};

// The operator running on this thread, for kernel timing: set by the dispatch wrapper for
// the outermost device operator of a call (an operator's own inner calls keep its name).
class OpLabel {
 public:
  explicit OpLabel(const std::string* name);
  ~OpLabel();
  static const std::string* current();
  OpLabel(const OpLabel&) = delete;
  OpLabel& operator=(const OpLabel&) = delete;

 private:
  bool set_ = false;
};

class Device {
 public:
  // The process's device, created on first use (opens the OpenCL device).
  static Device& get();
  // Whether an OpenCL device can be opened; never throws.
  static bool available();

  cl_context context() const { return context_; }
  cl_device_id id() const { return device_; }
  cl_command_queue queue() const { return queue_; }
  cl_command_queue* queue_ptr() { return &queue_; }
  const DeviceInfo& info() const;
  bool is_cpu() const { return is_cpu_; }
  // Whether the device computes in double precision (it reports cl_khr_fp64).
  bool has_fp64() const { return has_fp64_; }
  // One lock for every enqueue: cached cl_kernel objects are shared, and setting their
  // arguments and enqueueing them must not interleave between threads (autograd runs the
  // backward pass on a thread of its own).
  std::recursive_mutex& mutex() { return mutex_; }

  // A kernel of a device file, e.g. kernel("elementwise.cl", "ew_contig", "-DOP_add ..."):
  // programs are built once per (file, options) from kernels_dir() and kept for the
  // process, with -I kernels_dir() (for dtypes.h) and -DHAS_FP64 on fp64 devices added.
  // Throws BuildError with the build log.
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options);
  // A kernel of one of the student-facing files next to the library (conv2d.cl,
  // conv2d_backward.cl), read from OCLF_KERNEL_DIR when set, else the library's folder.
  cl_kernel library_kernel(const std::string& file, const std::string& name, const std::string& options);
  // The hash of a library kernel file's text, as the library's tuning cache keys it.
  std::string library_source_hash(const std::string& file);
  // Folder of the device's .cl files and of the library's (its parent's parent).
  static std::string kernels_dir();
  static std::string library_dir();

  // Enqueues an NDRange without waiting. `local` may be null. Empty ranges do nothing.
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local);
  // Waits until every queued command has finished.
  void synchronize();
  // Queues a marker that completes when every command queued before it has, and returns its
  // event (the caller releases it); the queue profiles, so the event's CL_PROFILING_COMMAND_END
  // is when that work was done (torch.opencl.Event).
  cl_event marker();
  // Queues a copy of host bytes into a buffer without waiting: the bytes are first
  // copied to a staging block that is freed when the write completes.
  void write_async(cl_mem mem, size_t offset, const void* host, size_t bytes);
  // Reads bytes of a buffer into host memory, after everything queued before (blocking).
  void read(cl_mem mem, size_t offset, void* host, size_t bytes);

  // Queues a copy between two buffers without waiting.
  void copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes);
  // Runs a library call that enqueues on queue() by itself (CLBlast), recording it too.
  void run_enqueuing(const std::function<void()>& call);

  // Graphs (graph.h): while `graph` records, every command is added to it as well and
  // waiting for the device throws. One graph records at a time.
  void begin_recording(Graph* graph);
  void end_recording();
  Graph* recording() const { return recording_; }

  // Kernel timing: while on, every launch and library call outside a recording gets an
  // event; stop_timing() waits for the queue and returns their device times in launch order.
  void start_timing();
  std::vector<KernelTime> stop_timing();

  uint64_t launches() const { return launches_; }
  uint64_t programs_built() const { return programs_built_; }

  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

 private:
  Device();  // never destroyed: OpenCL drivers may unload before static destructors run

  cl_kernel cached(const std::string& path, const std::string& name, const std::string& options);

  cl_context context_ = nullptr;
  cl_device_id device_ = nullptr;
  Programs programs_;  // a cache of its own: the library's runtime runs on other threads
  cl_command_queue queue_ = nullptr;
  bool is_cpu_ = false;
  bool has_fp64_ = false;
  bool sync_each_ = false;
  std::recursive_mutex mutex_;
  std::map<std::string, cl_kernel> kernels_;  // by path + options + name
  Graph* recording_ = nullptr;
  std::map<cl_kernel, std::vector<KernelArg>> args_;  // as set while recording
  static void note_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value);
  void refuse_wait(const char* what) const;
  uint64_t launches_ = 0, programs_built_ = 0;
  struct Timed {
    cl_event begin = nullptr, end = nullptr;  // begin: a marker before a library call; null for a kernel
    KernelTime what;                          // ns filled in by stop_timing()
  };
  std::atomic<bool> timing_{false};
  std::vector<Timed> timed_;  // under mutex_
  void note_timed(cl_event begin, cl_event end, std::string kernel, std::string global);
};

// Rounds n up to a multiple of `multiple` (launch/geometry.hpp).
using ndrange::round_up;

}  // namespace oclf::device
