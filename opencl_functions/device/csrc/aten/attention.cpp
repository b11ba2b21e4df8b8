// nn.MultiheadAttention's fast path (eval mode, no gradients, batch_first):
// _native_multi_head_attention, composed from the device's native operators (linear,
// matmul, softmax). Masks go to the CPU fallback.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cmath>

#include "common.h"
#include "fallback.h"

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
  TORCH_CHECK(query.dim() == 3 && embed_dim % num_head == 0, "opencl: multi-head attention: query must be (B, L, E) "
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", multi_head_attention);
}

}  // namespace oclf::device
