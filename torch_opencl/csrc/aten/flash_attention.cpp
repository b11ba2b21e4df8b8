// Scaled dot-product attention in 16 bits on tensor cores: see flash_attention.h and
// kernels/flash_attention.cl.
#include "flash_attention.h"

#include <cmath>
#include <map>
#include <mutex>
#include <string>

#include "opencl_functions/runtime/errors.hpp"
#include "opencl_functions/runtime/settings.hpp"
#include "gemm16_mma.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

constexpr int kWarps = 4, kKeysPerBlock = 64, kMaxWidth = 128;

// An operand as the kernel reads it: its rows contiguous, 16-byte aligned (the row, batch and
// head strides and the offset multiples of 8 elements); else a contiguous copy.
at::Tensor aligned(const at::Tensor& t) {
  auto fits = [](const at::Tensor& x) {
    return x.stride(3) == 1 && x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && x.stride(2) % 8 == 0 &&
           arg(x).offset % 8 == 0;
  };
  return fits(t) ? t : empty_device(t.sizes(), t.scalar_type()).copy_(t);
}

// OCLF_FLASH_ATTENTION: 1 runs the kernel where the tensor-core kernels run, 0 never; unset,
// only emulated (OCLF_MMA=emulate). On the hardware it is asked for by name until the NVIDIA
// check of tests/test_device_tensor_cores.py has passed on a device.
bool flash_wanted(TensorCores where) {
  const std::string value = setting("FLASH_ATTENTION");
  DEVICE_CHECK(value.empty() || value == "0" || value == "1", "opencl: ", setting_variable("FLASH_ATTENTION"),
               " must be 0 or 1, got \"", value, "\"");
  return value.empty() ? where == TensorCores::emulated : value == "1";
}

// The kernel for these inputs, built once per device and options; nullptr where the tensor-core
// kernels do not run, OCLF_FLASH_ATTENTION leaves them out, or the driver refuses this one (told
// once, with its log: the attention then goes the portable way).
cl_kernel flash_kernel(const at::Tensor& q, const at::Tensor& v, bool causal) {
  const TensorCores where = tensor_cores();
  if (where == TensorCores::off || !flash_wanted(where)) return nullptr;
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const std::string options = std::string("-DT=") + cl_storage_type(q.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                              " -DD=" + std::to_string(q.size(3)) + " -DE=" + std::to_string(v.size(3)) +
                              " -DWARPS=" + std::to_string(kWarps) + " -DBN=" + std::to_string(kKeysPerBlock) +
                              (causal ? " -DCAUSAL" : "") + (where == TensorCores::emulated ? " -DMMA_EMULATE" : "");
  Runtime& rt = Runtime::get();
  static std::map<std::pair<int, std::string>, bool> refused;  // under the device's lock
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  const auto key = std::make_pair(rt.index(), options);
  if (refused.count(key)) return nullptr;
  try {
    return device_kernel("flash_attention.cl", "flash_attention", options);
  } catch (const Error& e) {
    if (where == TensorCores::emulated) throw;
    TORCH_WARN("opencl: attention runs without tensor cores: flash_attention.cl does not build on ",
               rt.info().device, ": ", e.what());
    refused.emplace(key, true);
    return nullptr;
  }
}

// The kernel for these inputs where flash attention takes them (flash_attention_fits), else nullptr.
cl_kernel fitting_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal) {
  const at::ScalarType type = q.scalar_type();
  if ((type != at::kHalf && type != at::kBFloat16) || has_mask) return nullptr;
  const int64_t D = q.size(3), E = v.size(3);
  if (D % 16 || E % 16 || D == 0 || E == 0 || D > kMaxWidth || E > kMaxWidth) return nullptr;
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->numel() >= INT_MAX) return nullptr;
  return flash_kernel(q, v, causal);
}

}  // namespace

bool flash_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal) {
  return fitting_kernel(q, k, v, has_mask, causal) != nullptr;
}

bool flash_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool has_mask,
                     bool causal, double scale, const at::Tensor& out, const at::Tensor& lse) {
  cl_kernel kernel = fitting_kernel(q_in, k_in, v_in, has_mask, causal);
  if (kernel == nullptr) return false;
  const at::Tensor q = aligned(q_in), k = aligned(k_in), v = aligned(v_in);
  const TensorArg tq = arg(q), tk = arg(k), tv = arg(v), to = arg(out), tl = arg(lse);
  DEVICE_CHECK(tq.offset % 8 == 0 && tk.offset % 8 == 0 && tv.offset % 8 == 0 && to.offset % 2 == 0,
               "opencl: flash attention: operands not aligned to 16 bytes after their copies");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  const int64_t threads = 32 * kWarps, rows = 16 * kWarps;
  const size_t global[1] = {size_t((L + rows - 1) / rows * B * H * threads)};
  const size_t local[1] = {size_t(threads)};
  launch(kernel, NDRange(1, global, local), tq, strides4(q), tk, strides4(k), tv, strides4(v), to, tl, int(H),
         int(H / k.size(1)), int(L), int(S), float(scale / std::log(2.0)));
  return true;
}

}  // namespace oclf::device
