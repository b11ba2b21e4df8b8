// Scaled dot-product attention in 16 bits on tensor cores (kernels/flash_attention.cl), for
// attention.cpp's scaled_dot_product_attention.
#pragma once

#include <ATen/ATen.h>

namespace oclf::device {

// Whether flash_attention takes these inputs (the caller has checked their shapes and devices):
// q (B,H,L,D), k (B,Hk,S,D), v (B,Hk,S,E) of one 16-bit dtype, D and E multiples of 16 up to
// 128, no mask (is_causal aside), and the current device runs the tensor-core kernels
// (gemm16_mma.h's tensor_cores()) and builds this one (a refusal is warned once, with its log).
bool flash_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal);

// Where flash_attention_fits takes the inputs: out (B,H,L,E) and lse (B,H,L), contiguous, from q,
// k and v at any strides (operands whose rows the kernel cannot copy from are copied first), and
// true. Else false, and nothing is launched.
bool flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool has_mask, bool causal,
                     double scale, const at::Tensor& out, const at::Tensor& lse);

}  // namespace oclf::device
