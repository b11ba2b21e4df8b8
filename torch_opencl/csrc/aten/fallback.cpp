// The CPU fallback of the opencl device, for every operator without an OpenCL kernel: the
// arguments are copied to the host, torch's CPU kernel runs, results are copied back
// (fallback_run.cpp, which keeps arguments that share memory sharing it).
// Correct but slow; each operator warns once (a UserWarning naming it). OCLF_FALLBACK=error
// (or OCL_FALLBACK) makes it an error instead (NotImplementedError), so a test can prove a
// model's hot path runs natively; OCLF_FALLBACK=silent drops the warnings.
// Each call is recorded per operator: calls, wall time of the whole fallback (copies to the
// host, CPU kernel, copies back) and the bytes of device tensors it moved each way.
#include <torch/library.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_functions/runtime/settings.hpp"
#include "../check.h"
#include "../runtime/stream.h"
#include "fallback.h"

namespace oclf::device {

namespace {

std::mutex fallback_mutex;
// Two records: one since the last reset_fallback_counts() (which also makes each operator
// warn again), and one for the whole process, from which scopes take differences (so a reset
// inside a scope does not disturb them). Guarded by fallback_mutex.
std::map<std::string, FallbackRecord>& since_reset() {
  static std::map<std::string, FallbackRecord> record;
  return record;
}
std::map<std::string, FallbackRecord>& whole_process() {
  static std::map<std::string, FallbackRecord> record;
  return record;
}

// OCLF_FALLBACK (or OCL_FALLBACK): warn (default), error or silent.
std::string mode() { return setting("FALLBACK"); }

// f(t) for each defined device tensor among `values` (tensors, lists, optional lists), in order.
template <typename F>
void for_each_device_tensor(c10::ArrayRef<c10::IValue> values, F&& f) {
  auto visit = [&](const at::Tensor& t) {
    if (t.defined() && t.device().is_privateuseone()) f(t);
  };
  for (const c10::IValue& v : values) {
    if (v.isTensor()) {
      visit(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) visit(t);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) visit(*t);
      }
    }
  }
}

// Bytes of the device tensors among `values`; *device, when given, is set to the index of
// the first one's device (left as it was when there is none).
int64_t device_bytes(c10::ArrayRef<c10::IValue> values, int* device = nullptr) {
  int64_t bytes = 0;
  for_each_device_tensor(values, [&](const at::Tensor& t) {
    bytes += int64_t(t.numel()) * int64_t(t.element_size());
    if (device && *device < 0) *device = t.device().index();
  });
  return bytes;
}

// torch's names of the dtypes of the device tensors among `values`, in order of first
// appearance: "float64", "complex64 and int64".
std::string device_dtypes(c10::ArrayRef<c10::IValue> values) {
  std::vector<at::ScalarType> seen;
  for_each_device_tensor(values, [&](const at::Tensor& t) {
    for (at::ScalarType s : seen)
      if (s == t.scalar_type()) return;
    seen.push_back(t.scalar_type());
  });
  std::string out;
  for (size_t i = 0; i < seen.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == seen.size() ? " and " : ", ");
    out += std::string(c10::getDtypeNames(seen[i]).first);
  }
  return out;
}

// `for_dtypes`: the operator has an OpenCL kernel, but not for its tensors' dtypes (the
// registration wrapper's CPU route, dispatch.cpp): its record and warning name them,
// "aten::mm (float64)", so a float64 product does not read as an operator without a kernel.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool for_dtypes) {
  const c10::OperatorName& id = op.schema().operator_name();
  const std::string shown = id.overload_name.empty() ? id.name : id.name + "." + id.overload_name;
  std::string name = shown;
  const size_t arguments = op.schema().arguments().size();
  std::string missing = " has no OpenCL kernel";
  if (for_dtypes) {
    const std::string dtypes = device_dtypes(torch::jit::last(*stack, arguments));
    missing += " for " + dtypes;
    name += " (" + dtypes + ")";
  }
  const std::string how = mode();
  DEVICE_CHECK(how.empty() || how == "warn" || how == "error" || how == "silent", "opencl: ",
              setting_variable("FALLBACK"), " must be warn, error or silent, got '", how, "'");
  DEVICE_CHECK_NOT_IMPLEMENTED(how != "error", "opencl: ", shown, missing, " and ",
                              setting_variable("FALLBACK"), "=error forbids running it on the CPU");
  int device = -1;
  const int64_t to_host = device_bytes(torch::jit::last(*stack, arguments), &device);
  const CurrentDevice on(device);  // the results go back to the arguments' device
  // The first copy to the host waits for the queue anyway; waiting before the clock starts
  // keeps the kernels queued earlier out of this operator's time.
  if (to_host > 0) Stream::get().synchronize();
  const auto start = std::chrono::steady_clock::now();
  run_with_host_copies(op, stack);
  const auto stop = std::chrono::steady_clock::now();
  const size_t returns = op.schema().returns().size();
  const int64_t to_device = device_bytes(torch::jit::last(*stack, returns));
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count();

  bool first = false;
  {
    std::lock_guard<std::mutex> lock(fallback_mutex);
    FallbackRecord& recent = since_reset()[name];
    first = recent.calls == 0;
    for (FallbackRecord* r : {&recent, &whole_process()[name]}) {
      r->calls += 1;
      r->nanoseconds += ns;
      r->bytes_to_host += to_host;
      r->bytes_to_device += to_device;
    }
  }
  if (first && how != "silent") {
    TORCH_WARN("opencl: ", shown, missing, "; it runs on the CPU (inputs copied to the host, ",
               "results back). Warned once per operator", for_dtypes ? " and dtypes" : "",
               "; OCLF_FALLBACK=error makes it an error.");
  }
}

void cpu_fallback_any(const c10::OperatorHandle& op, torch::jit::Stack* stack) { cpu_fallback(op, stack, false); }

}  // namespace

void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) { cpu_fallback(op, stack, false); }

void fallback_for_dtypes(const c10::OperatorHandle& op, torch::jit::Stack* stack) { cpu_fallback(op, stack, true); }

std::vector<std::string> fallback_names() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  std::vector<std::string> names;
  for (const auto& entry : since_reset()) names.push_back(entry.first + " " + std::to_string(entry.second.calls));
  return names;
}

std::map<std::string, FallbackRecord> fallback_record(bool whole) {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  return whole ? whole_process() : since_reset();
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  since_reset().clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback_any>()); }

}  // namespace oclf::device
