// The CPU fallback of the opencl device, for every operator without an OpenCL kernel: the
// arguments are copied to the host, torch's CPU kernel runs, results are copied back.
// Correct but slow; each operator warns once (a UserWarning naming it). OCLF_FALLBACK=error
// (or OCL_FALLBACK) makes it an error instead (NotImplementedError), so a test can prove a
// model's hot path runs natively; OCLF_FALLBACK=silent drops the warnings.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../../../runtime/settings.hpp"
#include "fallback.h"

namespace oclf::device {

namespace {

std::mutex fallback_mutex;
std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> seen;
  return seen;
}

// OCLF_FALLBACK (or OCL_FALLBACK): warn (default), error or silent.
std::string mode() { return setting("FALLBACK"); }

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& id = op.schema().operator_name();
  const std::string name = id.overload_name.empty() ? id.name : id.name + "." + id.overload_name;
  const std::string how = mode();
  TORCH_CHECK(how.empty() || how == "warn" || how == "error" || how == "silent", "opencl: ",
              setting_variable("FALLBACK"), " must be warn, error or silent, got '", how, "'");
  TORCH_CHECK_NOT_IMPLEMENTED(how != "error", "opencl: ", name, " has no OpenCL kernel and ",
                              setting_variable("FALLBACK"), "=error forbids running it on the CPU");
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(fallback_mutex);
    first = counts()[name]++ == 0;
  }
  if (first && how != "silent") {
    TORCH_WARN("opencl: ", name, " has no OpenCL kernel; it runs on the CPU (inputs copied to the host, ",
               "results back). Warned once per operator; OCLF_FALLBACK=error makes it an error.");
  }
  at::native::cpu_fallback(op, stack);
}

}  // namespace

void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) { cpu_fallback(op, stack); }

std::vector<std::string> fallback_names() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  std::vector<std::string> names;
  for (const auto& entry : counts()) names.push_back(entry.first + " " + std::to_string(entry.second));
  return names;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  counts().clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

}  // namespace oclf::device
