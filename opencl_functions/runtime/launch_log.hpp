// The launch log: what host code builds and launches, recorded by the runtime for the
// grader and `make check`, which run the same kernels again under Oclgrind. Each launch
// keeps its program (file, source hash, options), kernel, NDRange and argument values; in
// capture mode also the contents of every buffer argument before and after it.
//
// Off until the bindings start it. It is not part of runtime.hpp: host code neither sees
// nor calls it (the allowed-calls check refuses its symbols), so what it records is what
// the runtime did, not what host code says it did.
#pragma once

#include <string>
#include <vector>

#include "errors.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

struct LoggedArg {
  enum Kind { kValue, kBuffer, kLocal, kUnset };
  Kind kind = kUnset;
  std::string value;  // kValue: the argument's bytes
  size_t size = 0;    // kLocal: bytes of local memory; kValue: the value's size
  int buffer = -1;    // kBuffer: index into LoggedLaunch::buffers, -1 for a null buffer
};

struct LoggedBuffer {
  size_t bytes = 0;
  std::string before, after;  // contents around the launch (capture mode only)
};

struct LoggedLaunch {
  std::string path, source_hash, options, kernel;
  std::vector<size_t> global, local;  // local is empty when the driver chose it
  std::vector<LoggedArg> args;
  std::vector<LoggedBuffer> buffers;
  bool captured = false;
};

namespace launch_log {

// Starts recording (forgetting what was recorded); capture: keep buffer contents too.
void start(bool capture);
void set_capture(bool capture);
void stop();
bool active();
// The build options the runtime passes for `options`: while the log is active, with
// -cl-kernel-arg-info, so that the kind of every argument can be asked of the kernel.
std::string build_options(const std::string& options);
// From Programs::kernel, for every kernel it creates (recorded whether or not active).
void note_kernel(cl_kernel kernel, const std::string& path, const std::string& source_hash,
                 const std::string& options, const std::string& name);
void forget_kernel(cl_kernel kernel);
// From set_arg, for every argument set.
void note_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value);
// From Profiler::launch, around the enqueue.
void before_launch(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t* global,
                   const size_t* local);
void after_launch(cl_command_queue queue);
// What was recorded since start() or the last take().
std::vector<LoggedLaunch> take();

}  // namespace launch_log
}  // namespace oclf
#pragma GCC visibility pop
