// The dtype-aware registration of the device's operators (see dispatch.h).
#include "dispatch.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <c10/util/SmallVector.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensors.h"
#include "derived.h"
#include "fallback.h"

namespace oclf::device {

namespace {

// How an operator runs for a set of dtypes.
enum class Route { Native, Widened, Cpu };

// What the dispatch wrapper needs of the n arguments on top of the stack: the dtypes of
// their device tensors (one bit each), and the device they are on: that of the first device
// tensor, else of a `device=` argument naming one (factories), else -1 (the current one).
struct ArgumentScan {
  uint64_t dtypes = 0;
  int device = -1;
  int other_device = -1;  // a second device among the tensors, if any
};

ArgumentScan scan_arguments(const torch::jit::Stack& stack, size_t n) {
  ArgumentScan scan;
  const auto note = [&](const at::Tensor& t) {
    if (!is_device(t)) return;
    scan.dtypes |= uint64_t(1) << static_cast<int>(t.scalar_type());
    const int index = t.device().index();
    if (scan.device < 0) scan.device = index;
    else if (index != scan.device && scan.other_device < 0) scan.other_device = index;
  };
  int named = -1;
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      note(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) note(t);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList().vec())
        if (t) note(*t);
    } else if (v.isDevice() && named < 0) {
      const c10::Device d = v.toDevice();
      if (d.type() == kType && d.has_index()) named = d.index();
    }
  }
  if (scan.device < 0) scan.device = named;
  return scan;
}

// Operators that take tensors of two devices by design: copies between them.
bool crosses_devices(const c10::OperatorName& name) {
  return name.name == "aten::_copy_from" || name.name == "aten::_copy_from_and_resize";
}

constexpr uint64_t bit(at::ScalarType t) { return uint64_t(1) << static_cast<int>(t); }
constexpr uint64_t kKernelTypes = bit(at::kFloat) | bit(at::kLong) | bit(at::kInt) | bit(at::kShort) |
                                  bit(at::kChar) | bit(at::kByte) | bit(at::kBool);
constexpr uint64_t k16Bit = bit(at::kHalf) | bit(at::kBFloat16);

// Runs the native kernel with the float16/bfloat16 tensors of the arguments replaced by
// float32 copies; tensors the operator writes get the results back, and float32 results
// become the arguments' 16-bit dtype.
void call_widened(const c10::KernelFunction& native, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack, size_t n) {
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  const size_t base = stack->size() - n;
  at::ScalarType narrow = at::kHalf;
  bool found = false;
  const auto convert = [&](const at::Tensor& t) {
    if (!is_device(t) || !is_16bit_float(t.scalar_type())) return t;
    if (!found) narrow = t.scalar_type();
    found = true;
    return float32_copy(t);
  };
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (argument, its float32 copy)
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      const at::Tensor t = v.toTensor();
      const at::Tensor w = convert(t);
      if (w.is_same(t)) continue;
      const c10::AliasInfo* alias = schema[i].alias_info();
      if (alias && alias->isWrite()) written.emplace_back(t, w);
      v = w;
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list = v.toTensorList().vec();
      for (at::Tensor& t : list) t = convert(t);
      v = c10::List<at::Tensor>(list);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList().vec())
        list.push_back(t ? std::optional<at::Tensor>(convert(*t)) : std::nullopt);
      v = list;
    }
  }
  native.callBoxed(op, keys, stack);
  for (auto& [argument, copy] : written) {
    // An out= the operator resized (its float32 copy was): resized too, else it kept its
    // old size (an out= of size 0 stayed empty once the route was learned).
    if (!argument.sizes().equals(copy.sizes())) argument.resize_(copy.sizes());
    argument.copy_(copy);
  }
  const auto narrowed = [&](const at::Tensor& r) {
    for (const auto& [argument, copy] : written)
      if (r.is_same(copy)) return argument;
    return is_device(r) && r.scalar_type() == at::kFloat ? r.to(narrow) : r;
  };
  for (size_t i = base; i < stack->size(); ++i) {
    c10::IValue& r = (*stack)[i];
    if (r.isTensor()) {
      r = narrowed(r.toTensor());
    } else if (r.isTensorList()) {
      std::vector<at::Tensor> list = r.toTensorList().vec();
      for (at::Tensor& t : list) t = narrowed(t);
      r = c10::List<at::Tensor>(list);
    }
  }
}

// The CPU fallback of an operator whose kernel does not take its dtypes (the fallback's
// record and warning name them). The convolution hooks a backend overrides have no CPU
// kernel: their CPU form is aten::convolution (the same arguments) and
// aten::convolution_backward (which also takes the bias's sizes).
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& name = op.operator_name().name;
  if (name == "aten::convolution_overrideable") {
    static const c10::OperatorHandle cpu = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    fallback_for_dtypes(cpu, stack);
    return;
  }
  if (name == "aten::convolution_backward_overrideable") {
    static const c10::OperatorHandle cpu =
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
    // (grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
    // groups, output_mask): bias_sizes goes after weight.
    const size_t weight = stack->size() - op.schema().arguments().size() + 2;
    const at::Tensor& w = (*stack)[weight].toTensor();
    const bool transposed = (*stack)[weight + 4].toBool();
    const int64_t channels = transposed ? w.size(1) * (*stack)[weight + 6].toInt() : w.size(0);
    stack->insert(stack->begin() + weight + 1, c10::IValue(std::vector<int64_t>{channels}));
    fallback_for_dtypes(cpu, stack);
    return;
  }
  fallback_for_dtypes(op, stack);
}

// The tensors an operator writes in place: the arguments its schema marks written
// (Tensor(a!), and the lists Tensor(a!)[] of the fused optimizer steps and the in-place
// foreach operators). After the operator, their storages' writes are counted (what the
// device keeps derived from a storage, derived.h, is made again after a write through any
// view or .data), and the version counters of the list members are moved: torch moves the
// version of a single tensor an operator writes, not of these.
struct Written {
  c10::SmallVector<at::Tensor, 4> tensors, lists;
};

Written written_tensors(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t n) {
  Written out;
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  for (size_t i = 0; i < n; ++i) {
    const c10::AliasInfo* alias = schema[i].alias_info();
    if (!alias || !alias->isWrite()) continue;
    const c10::IValue& v = stack[stack.size() - n + i];
    if (v.isTensor()) {
      out.tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec())
        if (t.defined()) out.lists.push_back(t);
    }
  }
  return out;
}

void note_writes(const Written& written) {
  Allocator& allocator = Allocator::get();
  for (const auto* group : {&written.tensors, &written.lists})
    for (const at::Tensor& t : *group)
      if (t.defined() && is_device(t) && t.storage().data()) allocator.note_write(t.storage().data());
  for (const at::Tensor& t : written.lists)
    if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

// An operator's kernel as the dispatcher sees it: the dtype-aware wrapper around the native
// kernel, with the routes learned for its sets of dtypes beyond the kernels' own (each
// operator has its own, so a call looks nothing up in a shared table).
class NativeOp final : public c10::OperatorKernel {
 public:
  explicit NativeOp(c10::KernelFunction native) : native_(std::move(native)) {}

  // Every native operator runs here: on the device of its tensors (made the thread's current
  // one while it runs, as torch's own backends' device guards do), by dtype, with its label
  // for kernel timing.
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const ArgumentScan scan = scan_arguments(*stack, n);
    DEVICE_CHECK(scan.other_device < 0 || crosses_devices(op.operator_name()), "opencl: ",
                 op.operator_name().name, " got tensors on two devices, opencl:", scan.device, " and opencl:",
                 scan.other_device, "; move them to one device first (tensor.to(\"opencl:", scan.device, "\"))");
    const CurrentDevice on(scan.device);
    const Written written = written_tensors(op, *stack, n);
    const OpLabel label(&op.operator_name().name);
    run(op, keys, stack, n, scan.dtypes);
    note_writes(written);
  }

 private:
  void run(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack, size_t n,
           uint64_t mask) {
    Route route = Route::Native;
    if ((mask & ~kKernelTypes) != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = learned_.find(mask);
      if (found != learned_.end()) route = found->second;
    }
    const auto learn = [&](Route chosen) {
      std::lock_guard<std::mutex> lock(mutex_);
      learned_[mask] = chosen;
    };
    // The arguments, to start again from them where a route gives up.
    const size_t depth = stack->size() - n;
    const c10::SmallVector<c10::IValue, 8> arguments(stack->end() - n, stack->end());
    const auto restore = [&] {
      stack->resize(depth);
      stack->insert(stack->end(), arguments.begin(), arguments.end());
    };
    if (route == Route::Native) {
      try {
        native_.callBoxed(op, keys, stack);
        return;
      } catch (const DtypeError&) {
        restore();
        const bool only_16bit_extra = (mask & ~(kKernelTypes | k16Bit)) == 0 && (mask & k16Bit) != 0;
        route = only_16bit_extra ? Route::Widened : Route::Cpu;
      }
    }
    if (route == Route::Widened) {
      try {
        call_widened(native_, op, keys, stack, n);
        learn(Route::Widened);
        return;
      } catch (const DtypeError&) {
        restore();
      }
    }
    learn(Route::Cpu);
    run_on_cpu(op, stack);
  }

  const c10::KernelFunction native_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Route> learned_;  // set of dtypes -> the route that worked
};

}  // namespace

void register_native(torch::Library& library, const char* name, c10::KernelFunction native) {
  library.impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<NativeOp>(std::move(native))));
}

}  // namespace oclf::device
