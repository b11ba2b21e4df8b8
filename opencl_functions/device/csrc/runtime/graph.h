// Recorded steps of the opencl device (opencl_functions.device.graph()): every command a
// forward pass or a training step enqueues, kept with its buffers and arguments so that
// replay() issues them again with no dispatcher, allocation or argument setting, as
// torch.cuda.CUDAGraph does.
//
// While a graph records (Device::begin_recording), the device runs each command as usual
// and also adds it here: a kernel launch as a kernel object of the graph's own with the
// launch's arguments bound once (OpenCL cannot be asked for a kernel's arguments, so the
// runtime tells the device of each as it is set); a copy between buffers; a write from the
// host with the bytes it wrote (a constant the step makes); a call into a library that
// enqueues by itself (CLBlast) as that call. The memory the step allocates comes from a
// pool of the graph's (Allocator::open_pool), so later allocations never take buffers the
// recorded commands address. Waiting for the device (.item(), .cpu(), printing) is refused
// while recording: a replayed step cannot wait for the host.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allocator.h"
#include "device.h"

namespace oclf::device {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Issues every recorded command again, in order, on the device's queue (not waiting).
  void replay();

  struct Counts {
    size_t launches = 0, copies = 0, writes = 0, calls = 0;
  };
  Counts counts() const { return counts_; }
  Allocator::Pool* pool() const { return pool_; }

  // Recording (from Device).
  void add_launch(cl_kernel source, const std::vector<KernelArg>& args, cl_uint dims, const size_t* global,
                  const size_t* local);
  void add_copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes);
  void add_write(cl_mem mem, size_t offset, const void* host, size_t bytes);
  void add_call(std::function<void()> call);

 private:
  struct Command {
    enum Kind { kLaunch, kCopy, kWrite, kCall } kind;
    cl_kernel kernel = nullptr;  // kLaunch: the graph's own, arguments bound
    cl_uint dims = 0;
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    bool driver_local = true;
    cl_mem from = nullptr, to = nullptr;  // kCopy (from, to), kWrite (to)
    size_t from_offset = 0, to_offset = 0, bytes = 0;
    std::shared_ptr<std::vector<unsigned char>> data;  // kWrite
    std::function<void()> call;                        // kCall
  };
  std::vector<Command> commands_;
  Counts counts_;
  Allocator::Pool* pool_ = nullptr;
};

}  // namespace oclf::device
