// The submission thread of one device. Enqueueing a kernel costs the host about 10 µs on
// NVIDIA's OpenCL, as much as the rest of a small operator's host work (Python, dispatch,
// allocation) together; enqueued from a thread of the device's own, the two overlap. On
// GPUs (OCLF_DEVICE_ASYNC; off by default for CPU devices, whose cores run the kernels, and
// for simulators such as Oclgrind, which run kernels inside OpenCL calls) the device hands
// its kernel launches, copies, writes from the host, library calls and graph replays here:
// each goes into a list and the caller goes on; the thread enqueues them in the order they
// came, each launch with the copy of its arguments taken at the launch (programs.hpp's
// kernel_args and enqueue_kernel). Everything else the device puts on the queue (reads,
// markers, synchronize, commands while a graph records) first waits for the list to be empty
// (Stream::settle(), called by Stream::queue()), so the in-order queue keeps the program's
// order. The library's own launches on the same queue touch none of the device's buffers,
// and enqueue_kernel sets a shared kernel's arguments and enqueues it as one step, so they
// need not wait. A command that fails
// here is reported by the next operator on the device, or by the next wait for it, as CUDA
// reports an asynchronous error.
//
// Commands hold no tensors (raw buffers, offsets and values): the thread never frees device
// memory, so a caller may wait for it while holding the allocator's lock.
#pragma once

#include <CL/cl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "opencl_functions/runtime/programs.hpp"

namespace oclf::device {

class Submitter {
 public:
  // A thread enqueueing on `queue`, with `device` as its current device (library calls it
  // runs look their device up).
  Submitter(int device, cl_command_queue queue);
  ~Submitter();
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;

  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local, std::vector<KernelArg> args);
  void copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes);
  // A call that enqueues by itself on the device's queue (CLBlast, a graph's replay).
  void call(std::function<void()> run);
  // Returns once every command handed over so far is enqueued. With `report`, then rethrows
  // the first error one of them met (once) and refuses a forked child; without, it never
  // throws (queue() calls it from anywhere, deleters and destructors too: the error waits for
  // the next launch or wait). On the submission thread itself it returns at once.
  void settle(bool report);

 private:
  struct Command {
    enum Kind { kLaunch, kCopy, kCall } kind = kLaunch;
    cl_kernel kernel = nullptr;
    cl_uint dims = 0;
    bool driver_local = false;
    size_t global[3] = {0, 0, 0}, local[3] = {0, 0, 0};
    std::vector<KernelArg> args;
    cl_mem from = nullptr, to = nullptr;
    size_t from_offset = 0, to_offset = 0, bytes = 0;
    std::function<void()> run;
  };
  void push(Command&& c);
  void execute(const Command& c);
  void loop();
  void rethrow_error();

  const int device_;
  const cl_command_queue queue_;
  std::mutex mutex_;
  std::condition_variable wake_, settled_;
  std::vector<Command> waiting_;      // under mutex_
  bool sleeping_ = false, stop_ = false;
  int settlers_ = 0;                  // callers waiting in settle()
  std::atomic<uint64_t> pushed_{0}, done_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;          // under mutex_
  std::thread thread_;
};

}  // namespace oclf::device
