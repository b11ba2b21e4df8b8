// The opencl device's stream on one OpenCL device: what torch's device enqueues on that
// device's one in-order queue (the runtime's, runtime/runtime.hpp, shared with the library,
// as are its program cache and its lock). Kernels of torch_opencl/kernels and of
// the library's files, copies, writes and library calls are enqueued asynchronously (only
// reads to the host wait; on GPUs from a submission thread, submitter.h), recorded into
// graphs (graph.h), timed, and their index checks read back at the waits. One Stream per
// index of the process's devices (opencl:0, opencl:1, ...), as torch sees one stream per
// device; Stream::get() is the calling thread's current device's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_functions/launch/geometry.hpp"
#include "opencl_functions/runtime/runtime.hpp"
#include "device.h"

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

class Stream {
 public:
  // The calling thread's current device's stream (Runtime::current()), opened on first use.
  static Stream& get();
  // Device `index`'s stream, opened on first use; throws Error out of range.
  static Stream& at(int index);
  // Whether device `index`'s stream was opened already (Stream::at); never throws.
  static bool is_open(int index);
  // settle() for every open stream: before the process's static destructors run.
  static void settle_all();

  Runtime& runtime() const { return rt_; }
  int index() const { return rt_.index(); }
  // The device's queue, for a command enqueued now: commands the submission thread still
  // holds are enqueued first (settle()), so that what the caller enqueues lands after them.
  cl_command_queue queue() const {
    settle();
    return rt_.queue();
  }
  cl_command_queue* queue_ptr() {
    settle();
    return rt_.queue_ptr();
  }
  // The runtime's lock, for every enqueue: cached cl_kernel objects are shared (by the
  // library too), and setting their arguments and enqueueing them must not interleave
  // between threads (autograd runs the backward pass on a thread of its own).
  std::recursive_mutex& mutex() { return rt_.mutex(); }

  // Enqueues an NDRange of a kernel (device_kernel, library_kernel) with the arguments
  // set_args gave it, without waiting. `local` may be null. Empty ranges do nothing.
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local);
  // Whether commands go through the device's submission thread (submitter.h): on GPUs
  // unless OCLF_DEVICE_ASYNC=0, on CPU devices when OCLF_DEVICE_ASYNC=1.
  bool submits_async() const { return submitter_ != nullptr; }
  // Waits until the submission thread has enqueued what it holds (queue() does it too), and
  // never throws: an error waits for the next launch or wait.
  void settle() const;
  // Whether a command goes to the submission thread now: not while a graph records or
  // kernels are timed, with OCLF_DEVICE_SYNC or the launch log (they need each command's
  // own enqueue on this thread).
  bool deferring() const;
  // Hands a call that enqueues on the runtime's queue by itself (a graph's replay) to the
  // submission thread; only while deferring().
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
  // Queues a copy between two buffers without waiting.
  void copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes);
  // Runs a library call that enqueues on queue() by itself (CLBlast), recording it too.
  void run_enqueuing(const std::function<void()>& call);

  // Index checks on the device (kernels/index_check.cl, aten's check_index_range): the
  // first index found out of range is written to this buffer (made, zeroed, at first use),
  // and the next wait for the device (synchronize(), read()) reads it back and raises
  // IndexError naming the operator, the index and the dimension. index_op_code() numbers an
  // operator's name, and what its values are called ("index", "target"), for the record.
  // With OCLF_DEVICE_INDEX_CHECKS=call (or OCLF_DEVICE_SYNC=1) the check waits for the
  // device at the call instead, as on the CPU. (index_checks.cpp)
  static constexpr int kIndexRecordWords = 8;  // int64s, laid out as kernels/index_record.h writes them
  cl_mem index_record();
  static int index_op_code(const char* op, const char* noun = "index");
  // The code of a check of values other than indices (a distribution's probabilities): its
  // kernel records failure k (1, 2, ...) as the value, and the wait raises RuntimeError with
  // messages[k - 1].
  static int value_check_code(const std::vector<std::string>& messages);
  bool index_checks_at_call() const;

  // Graphs (graph.h): while `graph` records, every command is added to it as well and
  // waiting for the device throws. One graph records at a time.
  void begin_recording(Graph* graph);
  void end_recording();
  Graph* recording() const { return recording_; }

  // Kernel timing (timing.cpp): while on, every launch and library call outside a recording
  // gets an event; stop_timing() waits for the queue and returns their device times in
  // launch order.
  void start_timing();
  std::vector<KernelTime> stop_timing();

  uint64_t launches() const { return launches_; }
  // Kernels the device took from the runtime's program cache (each made once).
  uint64_t programs_built() const { return rt_.programs().fixed_kernels(); }
  // Bytes read back to the host (reads, and the CPU fallback's copies), since the start.
  uint64_t bytes_to_host() const { return bytes_to_host_; }

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

 private:
  explicit Stream(Runtime& rt);  // never destroyed: OpenCL drivers may unload before static destructors run

  Runtime& rt_;
  bool sync_each_ = false;
  cl_mem index_record_ = nullptr;  // see index_record(); read at every wait once made
  void raise_index_error(const int64_t* record);
  Graph* recording_ = nullptr;
  std::unique_ptr<Submitter> submitter_;  // see submits_async()
  void refuse_wait(const char* what) const;
  std::atomic<uint64_t> launches_{0}, bytes_to_host_{0};
  struct Timed {
    cl_event begin = nullptr, end = nullptr;  // begin: a marker before a library call; null for a kernel
    KernelTime what;                          // ns, start and end filled in by stop_timing()
  };
  std::atomic<bool> timing_{false};
  std::vector<Timed> timed_;  // under mutex()
  bool timed() const { return timing_ && recording_ == nullptr; }
  void note_timed(cl_event begin, cl_event end, std::string kernel, std::string global);
};

// Rounds n up to a multiple of `multiple` (launch/geometry.hpp).
using ndrange::round_up;

}  // namespace oclf::device
