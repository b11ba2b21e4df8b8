// The opencl device's side of one OpenCL device: what torch's device adds to the library's
// Runtime of that device (runtime/runtime.hpp, shared with the library: its context, its
// in-order queue, its program cache, its lock). Kernels of torch_opencl/kernels
// and of the library's files, launched asynchronously (only reads to the host wait), graph
// recording (graph.h) and kernel timing. One Device per index of the process's devices
// (opencl:0, opencl:1, ...); Device::get() is the calling thread's current one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_functions/launch/geometry.hpp"
#include "opencl_functions/runtime/runtime.hpp"

namespace oclf::device {

class Graph;

using oclf::KernelArg;  // programs.hpp
class Submitter;         // submitter.h

// One command's time on the device, while kernel timing is on (torch_opencl.
// kernel_profile): the kernel's name ("clblast" for a library call), the outermost operator
// that enqueued it on this thread, its global size, and the device's start-to-end time;
// its start and end on the device's clock (CL_PROFILING_COMMAND_*, nanoseconds), and the
// torch profiler's correlation id of the operator that enqueued it (profiler.cpp; 0 when
// torch's profiler was off).
struct KernelTime {
  std::string kernel, op, global;
  uint64_t ns = 0;
  uint64_t start = 0, end = 0;
  uint64_t correlation = 0;
};

// The torch profiler's correlation id of the innermost operator running on this thread
// while torch.profiler records the device (runtime/profiler.cpp), else 0.
uint64_t profiler_correlation();

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
  // The calling thread's current device (Runtime::current()), opened on first use.
  static Device& get();
  // Device `index`, opened on first use; throws Error out of range.
  static Device& at(int index);
  // How many devices the process has; 0 when no OpenCL device can be found. Never throws.
  static int count();
  // Whether an OpenCL device can be opened; never throws.
  static bool available();
  // Whether device `index` was opened already (Device::at); never throws.
  static bool is_open(int index);
  // A child process forked after a device opened has the parent's OpenCL state but not the
  // driver's threads (nor the submission threads): a call into it could wait for ever. The
  // device's entry points (allocation, launches, reads, writes, waits) call this, which
  // throws in such a child, as CUDA refuses a forked child.
  static void refuse_in_forked_child();
  static bool in_forked_child();
  // At the interpreter's exit, before it frees the tensors (a Python exit handler, _C's
  // finish_at_exit): every open device's waiting commands enqueued and its queue finished, so
  // no command runs while buffers are freed or the driver is torn down under it.
  static void finish_at_exit();

  Runtime& runtime() const { return rt_; }
  int index() const { return rt_.index(); }
  cl_context context() const { return rt_.context(); }
  cl_device_id id() const { return rt_.device(); }
  cl_command_queue queue() const { return rt_.queue(); }
  cl_command_queue* queue_ptr() { return rt_.queue_ptr(); }
  const DeviceInfo& info() const { return rt_.info(); }
  bool is_cpu() const { return is_cpu_; }
  // Whether the device computes in double precision (it reports cl_khr_fp64).
  bool has_fp64() const { return has_fp64_; }
  // The runtime's lock, for every enqueue: cached cl_kernel objects are shared (by the
  // library too), and setting their arguments and enqueueing them must not interleave
  // between threads (autograd runs the backward pass on a thread of its own).
  std::recursive_mutex& mutex() { return rt_.mutex(); }

  // A kernel of a device file, e.g. kernel("elementwise.cl", "ew_contig", "-DOP_add ..."):
  // built once per (file, options) by the runtime's program cache from kernels_dir() and
  // kept for the process, with -I kernels_dir() (for dtypes.h) and -DHAS_FP64 on fp64
  // devices added. Throws BuildError with the build log.
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options);
  // A kernel of one of the student-facing files next to the library (conv2d.cl,
  // conv2d_backward.cl), read from OCLF_KERNEL_DIR when set, else the library's folder.
  cl_kernel library_kernel(const std::string& file, const std::string& name, const std::string& options);
  // The hash of a library kernel file's text, as the library's tuning cache keys it (once per path).
  std::string library_source_hash(const std::string& file);
  // Whether library_kernel(file, name, options) builds on this device, learned once (a
  // capability probe: the reference's tensor-core build, whose inline PTX only NVIDIA's
  // compiler takes).
  bool library_kernel_builds(const std::string& file, const std::string& name, const std::string& options);
  // Folder of the device's .cl files, and of the library's (the opencl_functions package beside it).
  static std::string kernels_dir();
  static std::string library_dir();

  // Enqueues an NDRange without waiting. `local` may be null. Empty ranges do nothing.
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local);
  // Whether commands go through the device's submission thread (submitter.h): on GPUs
  // unless OCLF_DEVICE_ASYNC=0, on CPU devices when OCLF_DEVICE_ASYNC=1.
  bool submits_async() const { return submitter_ != nullptr; }
  // Waits until the submission thread has enqueued what it holds (queue() does it too).
  void settle() const { rt_.device_unit().settle(); }
  // Whether a command goes to the submission thread now: not while a graph records or
  // kernels are timed, with OCLF_DEVICE_SYNC or the launch log (they need each command's
  // own enqueue on this thread).
  bool deferring() const;
  // Hands a call that enqueues on the raw queue (a graph's replay) to the submission
  // thread; only while deferring().
  void submit(std::function<void()> call);
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

  // Index checks on the device (kernels/index_check.cl, aten's check_index_range): the
  // first index found out of range is written to this buffer (made, zeroed, at first use),
  // and the next wait for the device (synchronize(), read()) reads it back and raises
  // IndexError naming the operator, the index and the dimension. index_op_code() numbers an
  // operator's name, and what its values are called ("index", "target"), for the record. With OCLF_DEVICE_INDEX_CHECKS=call (or OCLF_DEVICE_SYNC=1)
  // the check waits for the device at the call instead, as on the CPU.
  static constexpr int kIndexRecordWords = 8;  // int64s, laid out as kernels/index_record.h writes them
  cl_mem index_record();
  static int index_op_code(const char* op, const char* noun = "index");
  // The code of a check of values other than indices (a distribution's probabilities): its
  // kernel records failure k (1, 2, ...) as the value, and the wait raises RuntimeError with
  // messages[k - 1].
  static int value_check_code(const std::vector<std::string>& messages);
  bool index_checks_at_call() const;

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
  // Kernels the device took from the runtime's program cache (each made once).
  uint64_t programs_built() const { return rt_.programs().fixed_kernels(); }
  // Bytes read back to the host (reads, and the CPU fallback's copies), since the start.
  uint64_t bytes_to_host() const { return bytes_to_host_; }

  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

 private:
  explicit Device(Runtime& rt);  // never destroyed: OpenCL drivers may unload before static destructors run

  Runtime& rt_;
  bool is_cpu_ = false;
  bool has_fp64_ = false;
  bool sync_each_ = false;
  cl_mem index_record_ = nullptr;  // see index_record(); read at every wait once made
  void raise_index_error(const int64_t* record);
  Graph* recording_ = nullptr;
  std::map<cl_kernel, std::vector<KernelArg>> args_;  // as set while recording
  std::unique_ptr<Submitter> submitter_;               // see submits_async()
  static void settle_hook(int index);
  std::map<std::string, std::string> library_hashes_;  // by path: library_source_hash
  std::map<std::string, bool> library_builds_;         // by file, name and options: library_kernel_builds
  static void note_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value);
  void refuse_wait(const char* what) const;
  std::atomic<uint64_t> launches_{0}, bytes_to_host_{0};
  struct Timed {
    cl_event begin = nullptr, end = nullptr;  // begin: a marker before a library call; null for a kernel
    KernelTime what;                          // ns, start and end filled in by stop_timing()
  };
  std::atomic<bool> timing_{false};
  std::vector<Timed> timed_;  // under mutex_
  void note_timed(cl_event begin, cl_event end, std::string kernel, std::string global);
};

// Rounds n up to a multiple of `multiple` (launch/geometry.hpp).
using ndrange::round_up;

}  // namespace oclf::device
