// Scaled dot-product attention in 16 bits on tensor cores: see flash_attention.h and
// kernels/flash_attention.cl.
#include "flash_attention.h"

#include <cmath>
#include <cstdio>
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

constexpr int kMaxWidth = 128;

// A block of flash_attention.cl: `warps` warps of 16·`pieces` query rows each, keys taken `keys`
// at a time. Its text is the kernel's options.
struct Block {
  int warps = 4, pieces = 1, keys = 64;
  int threads() const { return 32 * warps; }
  int rows() const { return 16 * pieces * warps; }
  std::string options() const {
    return " -DWARPS=" + std::to_string(warps) + " -DMT=" + std::to_string(pieces) + " -DBN=" + std::to_string(keys);
  }
};

// OCLF_FLASH_BLOCK="WARPS,MT,BN" if set, else the block for these head widths. On the H200
// (float16 and bfloat16 alike, 4 warps), widths of 64 ran fastest on 2 pieces a warp over
// blocks of 64 keys (b4 h16 s1024: 88 µs, 98-109 on one piece or 128 keys; causal 60 µs
// against 63-78); widths of 128 on one piece without a mask (176 µs against 196 on two) and
// on two pieces causal (s4096: 335 µs against 362).
Block block_for(int64_t D, int64_t E, bool causal) {
  const std::string env = setting("FLASH_BLOCK");
  if (env.empty()) return D <= 64 && E <= 64 ? Block{4, 2, 64} : causal ? Block{4, 2, 64} : Block{4, 1, 64};
  Block b;
  int used = 0;
  const int read = std::sscanf(env.c_str(), "%d,%d,%d%n", &b.warps, &b.pieces, &b.keys, &used);
  DEVICE_CHECK(read == 3 && size_t(used) == env.size() && b.warps >= 1 && b.warps <= 8 && b.pieces >= 1 &&
                   b.pieces <= 4 && b.keys >= 16 && b.keys <= 256 && b.keys % 16 == 0,
               "opencl: ", setting_variable("FLASH_BLOCK"),
               " must be WARPS,MT,BN: 1 to 8 warps of MT (1 to 4) pieces of 16 rows, BN keys a block (a multiple ",
               "of 16 up to 256), got \"", env, "\"");
  return b;
}

// An operand as the kernel reads it: its rows contiguous, 16-byte aligned (the row, batch and
// head strides and the offset multiples of 8 elements); else a contiguous copy.
at::Tensor aligned(const at::Tensor& t) {
  auto fits = [](const at::Tensor& x) {
    return x.stride(3) == 1 && x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && x.stride(2) % 8 == 0 &&
           arg(x).offset % 8 == 0;
  };
  return fits(t) ? t : empty_device(t.sizes(), t.scalar_type()).copy_(t);
}

// OCLF_FLASH_ATTENTION: 0 keeps the portable kernel; unset or 1, the kernel runs where the
// tensor-core kernels run.
bool flash_wanted() {
  const std::string value = setting("FLASH_ATTENTION");
  DEVICE_CHECK(value.empty() || value == "0" || value == "1", "opencl: ", setting_variable("FLASH_ATTENTION"),
               " must be 0 or 1, got \"", value, "\"");
  return value != "0";
}

// The kernel for these inputs on `block`, built once per device and options; nullptr where the
// tensor-core kernels do not run, OCLF_FLASH_ATTENTION leaves them out, or the driver refuses
// this one (told once, with its log: the attention then goes the portable way).
cl_kernel flash_kernel(const at::Tensor& q, const at::Tensor& v, bool causal, const Block& block) {
  const TensorCores where = tensor_cores();
  if (where == TensorCores::off || !flash_wanted()) return nullptr;
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const std::string options = std::string("-DT=") + cl_storage_type(q.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                              " -DD=" + std::to_string(q.size(3)) + " -DE=" + std::to_string(v.size(3)) +
                              block.options() +
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

// The kernel for these inputs on `block` where flash attention takes them (flash_attention_fits),
// else nullptr.
cl_kernel fitting_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal,
                         const Block& block) {
  const at::ScalarType type = q.scalar_type();
  if ((type != at::kHalf && type != at::kBFloat16) || has_mask) return nullptr;
  const int64_t D = q.size(3), E = v.size(3);
  if (D % 16 || E % 16 || D == 0 || E == 0 || D > kMaxWidth || E > kMaxWidth) return nullptr;
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->numel() >= INT_MAX) return nullptr;
  return flash_kernel(q, v, causal, block);
}

}  // namespace

bool flash_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal) {
  return fitting_kernel(q, k, v, has_mask, causal, block_for(q.size(3), v.size(3), causal)) != nullptr;
}

bool flash_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool has_mask,
                     bool causal, double scale, const at::Tensor& out, const at::Tensor& lse) {
  const Block block = block_for(q_in.size(3), v_in.size(3), causal);
  cl_kernel kernel = fitting_kernel(q_in, k_in, v_in, has_mask, causal, block);
  if (kernel == nullptr) return false;
  const at::Tensor q = aligned(q_in), k = aligned(k_in), v = aligned(v_in);
  const TensorArg tq = arg(q), tk = arg(k), tv = arg(v), to = arg(out), tl = arg(lse);
  DEVICE_CHECK(tq.offset % 8 == 0 && tk.offset % 8 == 0 && tv.offset % 8 == 0 && to.offset % 2 == 0,
               "opencl: flash attention: operands not aligned to 16 bytes after their copies");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  const int64_t threads = block.threads(), rows = block.rows();
  const size_t global[1] = {size_t((L + rows - 1) / rows * B * H * threads)};
  const size_t local[1] = {size_t(threads)};
  launch(kernel, NDRange(1, global, local), tq, strides4(q), tk, strides4(k), tv, strides4(v), to, tl, int(B), int(H),
         int(H / k.size(1)), int(L), int(S), float(std::abs(scale) / std::log(2.0)), cl_int(scale < 0));
  return true;
}

}  // namespace oclf::device
