// The CPU fallback's record: which operators ran on the CPU, how often, for how long and
// how many bytes they moved between the device and the host.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace oclf::device {

// The CPU fallback (with its warning, or its error under OCL_FALLBACK=error), for native
// operators to hand over the cases they do not cover:
//   at::native::call_fallback_fn<&fallback_boxed, at::_ops::name>::call(args...)
void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for an operator whose OpenCL kernel does not take its tensors' dtypes: recorded
// and warned as "aten::mm (float64)", "has no OpenCL kernel for float64".
void fallback_for_dtypes(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs the operator on the stack with torch's CPU kernel: host copies of the device tensors
// among the arguments (one span of memory for those sharing it with a written one), written
// arguments copied back, results moved to the arguments' device (fallback_run.cpp).
void run_with_host_copies(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// One operator's fallback calls, summed.
struct FallbackRecord {
  int64_t calls = 0;
  int64_t nanoseconds = 0;      // wall time: copies to the host, the CPU kernel, copies back
  int64_t bytes_to_host = 0;    // device tensors among the arguments
  int64_t bytes_to_device = 0;  // device tensors among the results
};

// "aten::name.overload count" for each operator that fell back since the last reset.
std::vector<std::string> fallback_names();
// By operator name ("aten::mm (float64)" for a dtype the kernel does not take): since the last reset, or (whole) since the process started.
std::map<std::string, FallbackRecord> fallback_record(bool whole);
void reset_fallback_counts();

}  // namespace oclf::device
