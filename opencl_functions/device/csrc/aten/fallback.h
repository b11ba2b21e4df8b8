// The CPU fallback's record: which operators ran on the CPU, and how often.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace oclf::device {

// The CPU fallback (with its warning, or its error under OCL_FALLBACK=error), for native
// operators to hand over the cases they do not cover:
//   at::native::call_fallback_fn<&fallback_boxed, at::_ops::name>::call(args...)
void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// "aten::name.overload count" for each operator that fell back since the last reset.
std::vector<std::string> fallback_names();
void reset_fallback_counts();

}  // namespace oclf::device
