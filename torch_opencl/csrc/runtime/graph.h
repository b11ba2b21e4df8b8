// Recorded steps of the opencl device (torch_opencl.graph()): every command a
// forward pass or a training step enqueues, kept with its buffers and arguments so that
// replay() issues them again with no dispatcher, allocation or argument setting, as
// torch.cuda.CUDAGraph does.
//
// While a graph records (Stream::begin_recording), the device runs each command as usual
// and also adds it here: a kernel launch as a kernel object of the graph's own with the
// launch's arguments bound once (OpenCL cannot be asked for a kernel's arguments: the
// runtime keeps them as set_args gave them, kernel_args); a copy between buffers; a write from the
// host with the bytes it wrote (a constant the step makes); a call into a library that
// enqueues by itself (CLBlast) as that call. When the recording ends, each run of launches
// and copies becomes one cl_khr_command_buffer where the device has that extension (at
// the provisional version 0.9 these headers declare; PoCL has it), so a replay enqueues a
// few command buffers; elsewhere (NVIDIA) the kernels are enqueued back to back. The
// memory the step allocates comes from a
// pool of the graph's (Allocator::open_pool), so later allocations never take buffers the
// recorded commands address. Waiting for the device (.item(), .cpu(), printing) is refused
// while recording: a replayed step cannot wait for the host.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "allocator.h"
#include "stream.h"

namespace oclf::device {

class Graph {
 public:
  // A graph of the calling thread's current device: it records and replays there alone.
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Issues every recorded command again, in order, on the device's queue (not waiting).
  void replay();
  // Whether this device takes command buffers as finish() makes them.
  static bool command_buffers_available();
  // The recording ended: runs of launches and copies become command buffers, where the
  // device has them (OCLF_GRAPH_COMMAND_BUFFERS=0 keeps plain enqueues).
  void finish();
  // Points the recorded commands at other buffers: every kernel argument, copy and write that
  // named moves[i].first names moves[i].second from now on (a step's input found in a new
  // storage laid out as the old one, such as a key/value cache each generate() makes anew),
  // so that the recording serves again without recording the step anew. Waits for commands
  // the submission thread still holds. False, changing nothing, when the recording holds a
  // library call (CLBlast): the buffers inside it cannot be seen.
  bool rebind(const std::vector<std::pair<cl_mem, cl_mem>>& moves);

  struct Counts {
    size_t launches = 0, copies = 0, writes = 0, calls = 0, command_buffers = 0;
  };
  Counts counts() const { return counts_; }
  Allocator::Pool* pool() const { return pool_; }
  int device() const { return device_; }

  // Recording (from Stream).
  void add_launch(cl_kernel source, const std::vector<KernelArg>& args, cl_uint dims, const size_t* global,
                  const size_t* local);
  void add_copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes);
  void add_write(cl_mem mem, size_t offset, const void* host, size_t bytes);
  void add_call(std::function<void()> call);

 private:
  struct Command {
    enum Kind { kLaunch, kCopy, kWrite, kCall } kind;
    cl_kernel kernel = nullptr;  // kLaunch: the graph's own (in kernels_), arguments bound
    std::vector<KernelArg> args;  // kLaunch: the arguments bound (rebind() reads them)
    cl_uint dims = 0;
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    bool driver_local = true;
    cl_mem from = nullptr, to = nullptr;  // kCopy (from, to), kWrite (to)
    size_t from_offset = 0, to_offset = 0, bytes = 0;
    std::shared_ptr<std::vector<unsigned char>> data;  // kWrite
    std::function<void()> call;                        // kCall
  };
  // What replay issues, after finish(): commands_[begin, end) as one command buffer (one of
  // buffers_), or one by one where command_buffer is null.
  struct Step {
    void* command_buffer;
    size_t begin, end;
  };
  void issue(const Command& c, cl_command_queue queue) const;
  // Releases the command buffers finish() made: replays issue commands one by one until
  // finish() makes them again.
  void release_command_buffers();
  // Every command, as replay() enqueues them (on the calling or the submission thread).
  void issue_all(cl_command_queue queue) const;
  std::vector<Command> commands_;
  std::vector<Step> plan_;  // empty: commands_ one by one
  std::vector<cl_kernel> kernels_;  // owned
  std::vector<void*> buffers_;      // owned cl_command_buffer_khr
  Counts counts_;
  int device_ = 0;  // the index of its device
  Allocator::Pool* pool_ = nullptr;
};

}  // namespace oclf::device
