// Float32 products whose sums over k are short: CLBlast keeps one accumulator per output for
// the whole of K, which measured 3-8x torch's float32 error against float64 for K of
// 768-4096 (torch's CPU products add blocks of k). A product with a longer K runs here as a
// batch of products over kSumK values of k each, into scratch, and a sum of those partial
// products: every output is then a sum of short sums, as in the reference's own kernels
// (their SUM_K).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>

namespace oclf::device {

// k values per partial product; a product with K at most this runs as it is.
constexpr size_t kSumK = 256;

// One operand as CLBlast takes it: row-major storage with leading dimension ld, transposed
// (stored as cols × rows) when trans, `stride` elements between the matrices of a batch.
struct GemmOperand {
  const at::Tensor& t;
  bool trans;
  size_t ld;
  size_t stride;
};

// c (batch × m × n, contiguous) = alpha · op(a) · op(b) + beta · c in partial products of at
// most kSumK values of k. False (nothing done) where that does not apply: one row (CLBlast's
// GEMV), K ≤ kSumK.
bool split_k_product(const GemmOperand& a, const GemmOperand& b, const at::Tensor& c, size_t batch, size_t m,
                     size_t n, size_t k, float alpha, float beta);

}  // namespace oclf::device
