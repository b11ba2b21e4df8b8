// Attention on the opencl device:
// - scaled_dot_product_attention without gradients or dropout: one kernel through torch's
//   "overrideable" backend, chosen by _fused_sdp_choice for the device, grouped key/value heads
//   (enable_gqa) included: in 16 bits without a mask, on devices with tensor cores (or
//   OCLF_MMA=emulate), flash_attention.cl (flash_attention.h), any length; else
//   kernels/attention.cl, rows up to what local memory holds. With gradients, dropout or
//   longer rows, torch's math path (matmul, softmax, ... on the device's ops).
// - nn.MultiheadAttention's fast path (eval mode, no gradients, batch_first):
//   _native_multi_head_attention, composed from the device's native operators (linear,
//   matmul, softmax). Masks go to the CPU fallback.
#include <ATen/SDPBackend.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dispatch.h"
#include "flash_attention.h"
#include "fallback.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// query (B, L, E), key and value (B, S, E); qkv_weight (3E, E) holds the q, k and v
// projections in that order. Returns the output (B, L, E) and the attention weights
// (B, L, S) averaged over heads, (B, H, L, S), or empty when need_weights is false.
std::tuple<at::Tensor, at::Tensor> multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim, int64_t num_head,
    const at::Tensor& qkv_weight, const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask, bool need_weights, bool average_weights,
    std::optional<int64_t> mask_type) {
  if (mask && mask->defined()) {
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::_native_multi_head_attention>::call(
        query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, need_weights,
        average_weights, mask_type);
  }
  check_float(query, "query");
  DEVICE_CHECK(query.dim() == 3 && embed_dim % num_head == 0, "opencl: multi-head attention: query must be (B, L, E) "
              "with E divisible by the heads, got ", query.sizes(), " and ", num_head, " heads");
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1), H = num_head, D = embed_dim / num_head;
  const std::vector<at::Tensor> w = qkv_weight.chunk(3), b = qkv_bias.chunk(3);
  // (B, len, E) -> (B, H, len, D)
  auto heads = [&](const at::Tensor& x, int64_t len) { return x.view({B, len, H, D}).transpose(1, 2); };
  const at::Tensor q = heads(at::linear(query, w[0], b[0]), L);
  const at::Tensor k = heads(at::linear(key, w[1], b[1]), S);
  const at::Tensor v = heads(at::linear(value, w[2], b[2]), S);
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(double(D)));
  const at::Tensor attn = at::softmax(scores, -1);
  const at::Tensor mixed = at::matmul(attn, v).transpose(1, 2).reshape({B, L, embed_dim});
  const at::Tensor out = at::linear(mixed, proj_weight, proj_bias);
  if (!need_weights) return {out, empty_device({0}, at::kFloat)};
  return {out, average_weights ? attn.mean(1) : attn};
}

// ---- scaled_dot_product_attention ----------------------------------------------------------

constexpr int kSdpaGroup = 64;
constexpr int64_t kSdpaMaxD = 256;

// The most keys a row may have: its scores in local memory beside the query and scratch.
int64_t sdpa_max_keys() {
  const size_t local = Runtime::get().info().local_mem_size;
  const size_t fixed = (kSdpaMaxD + kSdpaGroup) * sizeof(float) + 1024;
  const int64_t keys = local > fixed ? int64_t((local - fixed) / sizeof(float)) : 0;
  int64_t max_s = 256;
  while (max_s * 2 <= std::min<int64_t>(keys, 8192)) max_s *= 2;
  return max_s;
}

// Whether sdpa_forward computes this attention (else torch's math path does).
bool sdpa_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
               double dropout_p, bool is_causal, bool enable_gqa) {
  // q, k and v of one dtype: float32, float16 or bfloat16 (read directly).
  const at::ScalarType type = q.scalar_type();
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16) return false;
  for (const at::Tensor* t : {&q, &k, &v})
    if (!is_device(*t) || t->scalar_type() != type || t->dim() != 4) return false;
  if (dropout_p > 0.0) return false;
  if (c10::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) return false;
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), D = q.size(3), Hk = k.size(1);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hk || v.size(2) != S || k.size(3) != D) return false;
  // Grouped key/value heads (enable_gqa): query head h reads key/value head h / (H / Hk).
  if (Hk != H && !(enable_gqa && Hk > 0 && H % Hk == 0)) return false;
  if (B * H * L == 0 || S == 0) return false;
  if (B * H * L * std::max<int64_t>(v.size(3), 1) >= INT_MAX) return false;
  const bool has_mask = mask && mask->defined();
  if (flash_attention_fits(q, k, v, has_mask, is_causal)) return true;
  if (D > kSdpaMaxD || S > sdpa_max_keys()) return false;
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->numel() >= INT_MAX) return false;
  if (mask && mask->defined()) {
    const at::ScalarType m = mask->scalar_type();
    if (!is_device(*mask) || (m != at::kBool && m != at::kFloat && m != type)) return false;
    if (!at::is_expandable_to(mask->sizes(), {B, H, L, S})) return false;
  }
  return true;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  return int64_t(sdpa_fits(q, k, v, mask, dropout_p, is_causal, enable_gqa) ? at::SDPBackend::overrideable
                                                                   : at::SDPBackend::math);
}

// torch's overrideable SDPA: (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
// philox_seed, philox_offset, debug_attn_mask); only the first two are computed.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor,
           at::Tensor>
sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
  // Torch passes grouped heads here only when enable_gqa chose this backend (fused_sdp_choice).
  const bool grouped = k.dim() == 4 && q.dim() == 4 && k.size(1) != q.size(1);
  DEVICE_CHECK(sdpa_fits(q, k, v, attn_bias, dropout_p, is_causal, grouped) && !return_debug_mask,
              "opencl: scaled_dot_product_attention: these inputs take torch's math path (shapes ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes(), ")");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), D = q.size(3), E = v.size(3);
  at::Tensor out = empty_device({B, H, L, E}, q.scalar_type());
  at::Tensor lse = empty_device({B, H, L}, at::kFloat);
  const bool has_mask = attn_bias && attn_bias->defined();
  const at::Tensor mask = has_mask ? attn_bias->expand({B, H, L, S}) : q;
  const int kind = !has_mask ? 0 : mask.scalar_type() == at::kBool ? 1 : 2;
  const double s = scale ? *scale : 1.0 / std::sqrt(double(D));
  if (E > 0 && !flash_attention(q, k, v, has_mask, is_causal, s, out, lse)) {
    const std::string options = "-DGROUP=" + std::to_string(kSdpaGroup) + " -DMASK=" + std::to_string(kind) +
                                " -DMAX_S=" + std::to_string(sdpa_max_keys()) +
                                " -DMAX_D=" + std::to_string(kSdpaMaxD) + (is_causal ? " -DCAUSAL" : "") +
                                " -DT=" + cl_storage_type(q.scalar_type()) +
                                (kind == 2 ? std::string(" -DTM=") + cl_storage_type(mask.scalar_type()) : "");
    const cl_int4 qs = strides4(q), ks = strides4(k), vs = strides4(v), ms = strides4(mask);
    const size_t global[1] = {size_t(B * H * L) * kSdpaGroup};
    const size_t local[1] = {size_t(kSdpaGroup)};
    launch(device_kernel("attention.cl", "sdpa_forward", options), NDRange(1, global, local), arg(q), qs,
           arg(k), ks, arg(v), vs, arg(mask), ms, arg(out), arg(lse), int(H), int(H / k.size(1)), int(L), int(S),
           int(D), int(E), float(s));
  }
  const at::Tensor none;
  // The output has the query's layout (the order of its strides), as the operator's meta
  // function says (alloc_with_matching_layout): torch.compile plans memory by it.
  if (!q.is_contiguous()) {
    std::vector<int64_t> order = {0, 1, 2, 3}, sizes(4);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
    for (int d = 0; d < 4; ++d) sizes[d] = out.size(order[d]);
    std::vector<int64_t> back(4);
    for (int d = 0; d < 4; ++d) back[order[d]] = d;
    out = empty_device(sizes, q.scalar_type()).permute(back).copy_(out);
  }
  return {out, lse, none, none, c10::SymInt(L), c10::SymInt(S), empty_device({0}, at::kLong),
          empty_device({0}, at::kLong), none};
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_native_multi_head_attention", multi_head_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable", sdpa_overrideable);
}

}  // namespace oclf::device

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &oclf::device::fused_sdp_choice);
}  // namespace at::native
