// What the 16-bit product kernels share (gemm16.cl, gemm16_mma.cl): their arguments, the
// move to one batch's matrices, and how a value of C is stored (alpha, beta·C, the bias row,
// the activation). T is half or bfloat (dtypes.h).
#ifndef GEMM16_H
#define GEMM16_H

#include "dtypes.h"

// -DEPI_ACT=n: an activation applied to each value of C as it is stored, after the bias and
// beta·C (torch.ops.oclf.addmm_act; the reference's epilogue.h names the activations).
#ifdef EPI_ACT
#include "../../opencl_functions/reference/epilogue.h"
#define C_ACT(v) epi_float(v)
#else
#define C_ACT(v) (v)
#endif

#define GEMM16_ARGS                                                                                        \
  __global const T *a, int a_off, __global const T *b, int b_off, __global T *c, int c_off,               \
      __global const T *bias, int bias_off, int m, int n, int k, int a_rs, int a_cs, long a_bs, int b_rs, \
      int b_cs, long b_bs, int c_rs, long c_bs, float alpha, float beta, int has_bias

// Moves a, b and c to batch `batch`'s matrices and bias to its first element.
#define GEMM16_AT_BATCH(batch)  \
  a += a_off + (batch) * a_bs;  \
  b += b_off + (batch) * b_bs;  \
  c += c_off + (batch) * c_bs;  \
  bias += bias_off

// The value of C at row r, column col, as stored: alpha · acc (+ beta · C) (+ the bias), activated.
inline float value_c(__global const T *c, __global const T *bias, int has_bias, int c_rs, int r, int col,
                     float alpha, float beta, float acc) {
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * READ(T, c, (long)r * c_rs + col);
  if (has_bias) v += READ(T, bias, col);
  return C_ACT(v);
}

inline void store_c(__global T *c, __global const T *bias, int has_bias, int c_rs, int r, int col, float alpha,
                    float beta, float acc) {
  WRITE(T, c, (long)r * c_rs + col, value_c(c, bias, has_bias, c_rs, r, col, alpha, beta, acc));
}

#endif  // GEMM16_H
