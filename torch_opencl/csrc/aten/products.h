// The product engines under the device's matrix operators (blas.cpp): float32 products on
// the reference's kernels (reference/matmul.cl, chosen as for the library and planned once
// per shape: plans.h) or on CLBlast (products.cpp), and float16/bfloat16 products on
// kernels/gemm16.cl, read in 16 bits with float32 accumulation (products16.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <initializer_list>
#include <string>

#include "opencl_functions/launch/launcher.hpp"

namespace oclf::device::products {

// A matrix as CLBlast takes it: row-major storage with leading dimension ld, transposed
// (stored as cols × rows) when `trans`.
struct Matrix {
  at::Tensor t;
  bool trans = false;
  size_t ld = 0;
};

// rows × cols are the last two dimensions of t; a contiguous copy where neither its rows nor
// its columns are contiguous.
Matrix as_matrix(const at::Tensor& t);

// OCLF_DEVICE_MATMUL: "gpu" plans products as on a GPU on any device (so CPU machines run the
// GPUs' configurations), "clblast" leaves every product to CLBlast; else "auto" (by device).
std::string product_mode();

// c (m×n, contiguous) = op(A) · op(B) + the bias row (when defined: n contiguous floats) +
// beta · c, with `act` applied as c is stored, on the reference's own products; false
// leaves the product to CLBlast (the plan's choice, or operands the kernels do not take).
bool fast_product(const Matrix& A, const Matrix& B, const at::Tensor& c, size_t m, size_t n, size_t k,
                  const at::Tensor& row, float beta, Activation act = Activation::kNone);

// c (M×N, contiguous) = alpha · a (M×K) · b (K×N) + beta · c, or, with a bias row (N
// contiguous floats, beta 1), alpha · a · b + row added to every row (c is not read).
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
          const at::Tensor& row = at::Tensor());

// c (batch×M×N, contiguous) = alpha · a (batch×M×K) · b (batch×K×N) + beta · c.
void gemm_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta);

// ---- 16-bit products (kernels/gemm16.cl) ----------------------------------------------------

// Whether every tensor is a device tensor of one 16-bit dtype (the route of gemm16).
bool all_16bit(std::initializer_list<const at::Tensor*> tensors);

// Whether a and b are `dims`-D (2: matrices, 3: batches of them) and multiply: what
// check_mm and check_bmm require of their shapes.
bool multipliable(const at::Tensor& a, const at::Tensor& b, int64_t dims);

// Whether addmm's bias goes to the product's kernels as a row added to every row of out
// (n contiguous elements, beta 1, not out itself) rather than into out first.
bool bias_row(const at::Tensor& bias, const at::Tensor& out, float beta, int64_t n);

// out (2-D or 3-D, any strides) = act(alpha · a · b + beta · bias (broadcast)), all of one
// 16-bit dtype; a bias that is one row with beta 1 goes to the kernel, others are copied first.
void product16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const at::Tensor& bias, float alpha,
               float beta, Activation act = Activation::kNone);

// A layer norm over the rows of a few-row product's input (norm_weight and norm_bias, k
// elements each, both defined or neither) and a residual added to its result (m×n, columns
// contiguous): torch.ops.oclf.addmm_act's options.
struct RowsAround {
  at::Tensor norm_weight, norm_bias;
  double norm_eps = 0.0;
  at::Tensor residual;
};

// out (m×n, new and contiguous) = act(a · b + bias row) (+ residual), a's m ≤ 8 rows read
// through the layer norm where given, all 16-bit, b k×n with contiguous 16-byte aligned rows,
// on devices that run few-row products as GPUs do: one launch of gemm16_rows_nc. False, and
// nothing launched, where they do not fit.
bool product16_rows_around(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const at::Tensor& bias,
                           Activation act, const RowsAround& around);

// What a group of products does besides multiplying (torch.ops.oclf.mm_group's options), in
// this order: a's rows RMS-normalized (rms_weight defined: x becomes
// rms_weight · T(x · rsqrt(mean(x²) + rms_eps)), T a's dtype); the first two products made one,
// act(out_0) · out_1 (glu not kNone); the residual added to the only product's result.
struct GroupOptions {
  at::Tensor rms_weight;
  double rms_eps = 0.0;
  Activation glu = Activation::kNone;
  bool gated = false;
  at::Tensor residual;
};

// Products of one few-row matrix a (m ≤ 8, 16-bit) with up to three matrices bs[g] (k×n_g, the
// transposes of n_g×k weights: columns contiguous in k, one column stride, 16-byte aligned) in
// one launch of gemm16_rows_kc_group, on devices that run few-row products as GPUs do; each
// outs[g] m×n_g, new and contiguous (one output when gated). False, and nothing launched,
// where they do not fit.
bool product16_group(const at::Tensor& a, const std::vector<at::Tensor>& bs, std::vector<at::Tensor>& outs,
                     const GroupOptions& options = {});

}  // namespace oclf::device::products
