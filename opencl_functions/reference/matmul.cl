// reference/matmul.cl: the reference's own matrix products for the shapes where CLBlast is
// slow (one-row products of a linear layer on one token, skinny products of a few tokens).
// Staff-only; matmul.hpp launches them, matmul_plan.hpp picks these or CLBlast per shape for
// the library and the opencl device alike.
//
//   C (M×N, row-major, leading dimension N) = A (M×K) · B (K×N)
//   A: element (m, k) at a[m·sam + k·sak] (row-major: sam = lda, sak = 1;
//      stored transposed: sam = 1, sak = lda)
//   B: gemm_cols takes B stored K×N (element (k, n) at b[k·ldb + n]),
//      gemm_rows takes B stored N×K (element (k, n) at b[n·ldb + k], a linear layer's weight).
//
// Both walk M in blocks of MR rows inside each work-item, so a work-item's slice of B comes
// from memory for the first block and from its cache for the next ones; a one-row product
// (GEMV) is one block of MR = 1 and reads every weight once, as vectors of VW floats.
//
// Build options (defaults below): -DVW=4|8|16 (vector width), -DMR=1..8 (rows of A per
// block), and per kernel:
//   gemm_cols: -DCPW (vectors of columns per work-item), -DLX (work-items along N in a
//              work-group), -DLY (work-items of a work-group splitting K; reduced in local
//              memory). CPUs: LX = LY = 1 and whole vectors per work-item; GPUs: LX·LY
//              work-items with float4 each, neighbours on neighbouring columns (coalesced).
//   gemm_rows: -DRN (rows of B per work-item), -DLX (work-items splitting one row's K,
//              reduced in local memory), -DLY (row groups per work-group), -DKFIX=K (K
//              known when building: the loop over K unrolls; "KF=1" in a configuration).
// Offsets are int: A, B and C must have < 2^31 elements.
// -DEPI_ACT=n (epilogue.h's activations; the opencl device's products folded with the
// activation after them): gemm_rows, gemm_cols and gemm_sum_splits apply it to each value of
// C they store, after the bias row and beta·C (the host builds gemm_cols with it only when
// it stores C itself, not partial sums).
#include "preamble.h"

#ifndef VW
#define VW 16
#endif
#ifndef MR
#define MR 1
#endif
#ifndef CPW
#define CPW 2
#endif
#ifndef RN
#define RN 4
#endif
#ifndef LX
#define LX 1
#endif
#ifndef LY
#define LY 1
#endif
#ifndef SUM_K
#define SUM_K 64
#endif

typedef VEC(VW) floatv;
// The work-group size, required only when it is more than one work-item (CPUs launch with
// no local size and let the driver group the work-items).
#if LX * LY > 1
#define GROUP_SIZE __attribute__((reqd_work_group_size(LX, LY, 1)))
#else
#define GROUP_SIZE
#endif

// The sum of a vector's lanes.
inline float hsum(floatv v) {
#if VW == 16
  const float8 h8 = v.lo + v.hi;
  const float4 h4 = h8.lo + h8.hi;
#elif VW == 8
  const float4 h4 = v.lo + v.hi;
#else
  const float4 h4 = v;
#endif
  const float2 h2 = h4.lo + h4.hi;
  return h2.x + h2.y;
}

// VW floats at p, of which the first `count` (< VW) are real and the rest read as zero.
inline floatv load_part(__global const float* p, const int count) {
  float tmp[VW];
  for (int v = 0; v < VW; ++v) tmp[v] = v < count ? p[v] : 0.0f;
  return VLOAD(VW)(0, tmp);
}

// ---------------------------------------------------------------------------------
// gemm_cols: B stored K×N. Work-item (tx, ty) of work-group (gx, 0, s) owns CPW vectors of
// columns, vector c (c < CPW) at n = (gx·CPW·LX + c·LX + tx)·VW .. +VW-1, and the K range of
// split s, [s·k_chunk, min(K, (s+1)·k_chunk)), of which it takes k = k_begin + ty, + LY, ...
// Per k: CPW vector loads of B, MR scalars of A, MR·CPW vector multiply-adds into acc.
// The LY partial sums of a work-group are added in local memory; with KS > 1 splits, split s
// writes its partial C to c + s·M·N and gemm_sum_splits adds them.
// NDRange: (ceil(N / (VW·CPW·LX))·LX, LY, KS), local (LX, LY, 1) (CPUs: no local size).
__kernel GROUP_SIZE
void gemm_cols(const int M, const int N, const int K, __global const float* restrict a, const int sam,
               const int sak, __global const float* restrict b, const int ldb, __global float* restrict c,
               const int k_chunk) {
  // From global ids, so that CPUs may launch with any work-group size when LX = LY = 1.
  const int gid = get_global_id(0);
  const int tx = gid % LX, ty = LY > 1 ? get_local_id(1) : 0;
  const int split = get_global_id(2);
  const int n_first = ((gid / LX) * CPW * LX + tx) * VW;  // column of vector 0; vector j is j·LX·VW on
  const int k_begin = split * k_chunk + ty;
  const int k_end = min(K, (split + 1) * k_chunk);
  __global float* c_split = c + (size_t)split * M * N;
  // Whole vectors everywhere in this work-item: no per-element guard in the loop.
  const bool whole = n_first + ((CPW - 1) * LX + 1) * VW <= N;
#if LY > 1
  __local floatv partial[LY][LX][CPW];
#endif

  for (int m0 = 0; m0 < M; m0 += MR) {
    // Two-level sums: each run of SUM_K products accumulates from zero into acc, then adds to
    // total (one accumulator over all of K drifted to 3-8x torch's float32 error).
    floatv acc[MR][CPW], total[MR][CPW];
#pragma unroll
    for (int i = 0; i < MR; ++i)
#pragma unroll
      for (int j = 0; j < CPW; ++j) total[i][j] = (floatv)(0.0f);
    // Rows past M read row m0 again (valid memory) and are not stored.
    int a_row[MR];
#pragma unroll
    for (int i = 0; i < MR; ++i) a_row[i] = min(m0 + i, M - 1) * sam;

    for (int k_run = k_begin; k_run < k_end; k_run += SUM_K * LY) {
      const int k_stop = min(k_end, k_run + SUM_K * LY);
#pragma unroll
      for (int i = 0; i < MR; ++i)
#pragma unroll
        for (int j = 0; j < CPW; ++j) acc[i][j] = (floatv)(0.0f);
      if (whole) {
        for (int k = k_run; k < k_stop; k += LY) {
          __global const float* b_row = b + (size_t)k * ldb + n_first;
          floatv bv[CPW];
#pragma unroll
          for (int j = 0; j < CPW; ++j) bv[j] = VLOAD(VW)(0, b_row + j * LX * VW);
#pragma unroll
          for (int i = 0; i < MR; ++i) {
            const floatv av = (floatv)(a[a_row[i] + k * sak]);
#pragma unroll
            for (int j = 0; j < CPW; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
          }
        }
      } else {
        for (int k = k_run; k < k_stop; k += LY) {
          __global const float* b_row = b + (size_t)k * ldb + n_first;
          floatv bv[CPW];
          for (int j = 0; j < CPW; ++j) {
            const int left = N - (n_first + j * LX * VW);
            bv[j] = left >= VW ? VLOAD(VW)(0, b_row + j * LX * VW)
                               : left > 0 ? load_part(b_row + j * LX * VW, left) : (floatv)(0.0f);
          }
          for (int i = 0; i < MR; ++i) {
            const floatv av = (floatv)(a[a_row[i] + k * sak]);
            for (int j = 0; j < CPW; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < MR; ++i)
#pragma unroll
        for (int j = 0; j < CPW; ++j) total[i][j] += acc[i][j];
    }

#pragma unroll
    for (int i = 0; i < MR; ++i) {
#if LY > 1
      // Work-item (tx, 0) adds the LY partial sums of its columns.
      for (int j = 0; j < CPW; ++j) partial[ty][tx][j] = total[i][j];
      barrier(CLK_LOCAL_MEM_FENCE);
      if (ty == 0)
        for (int r = 1; r < LY; ++r)
          for (int j = 0; j < CPW; ++j) total[i][j] += partial[r][tx][j];
      barrier(CLK_LOCAL_MEM_FENCE);  // partial is free again for the next row
      if (ty != 0) continue;
#endif
      if (m0 + i >= M) continue;
      __global float* c_row = c_split + (size_t)(m0 + i) * N + n_first;
      for (int j = 0; j < CPW; ++j) {
        const int left = N - (n_first + j * LX * VW);
        if (left >= VW) {
          VSTORE(VW)(ACTV(total[i][j], VW), 0, c_row + j * LX * VW);
        } else if (left > 0) {
          float tmp[VW];
          VSTORE(VW)(ACTV(total[i][j], VW), 0, tmp);
          for (int v = 0; v < left; ++v) c_row[j * LX * VW + v] = tmp[v];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// gemm_rows: B stored N×K (a linear layer's weight, out × in). Work-item (tx, ty) of
// work-group gx owns the RN rows of B n = (gx·LY + ty)·RN + r (r < RN) and, of each row, the
// vectors k = (j·LX + tx)·VW .. +VW-1 (j = 0, 1, ...): the LX work-items of a row group read
// neighbouring vectors (coalesced on GPUs; one work-item reads the whole row when LX = 1).
// Per vector: RN loads of B, MR loads of A (sak = 1), MR·RN vector multiply-adds; then the
// lanes are summed, the LX work-items' sums added in local memory, and K's last K % VW
// elements added by work-item tx = 0, which adds bias[bias_off + n] too when has_bias (the
// opencl device's addmm; bias may be any buffer when has_bias is 0).
// NDRange: (LX, ceil(N / (RN·LY))·LY), local (LX, LY) (CPUs: no local size).
__kernel GROUP_SIZE
void gemm_rows(const int M, const int N, const int K, __global const float* restrict a, const int sam,
               __global const float* restrict b, const int ldb, __global float* restrict c,
               __global const float* restrict bias, const int bias_off, const int has_bias) {
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int n0 = get_global_id(1) * RN;
#ifdef KFIX
  // K fixed at build time: the loop over K below unrolls completely, so all of a
  // work-item's loads of B are in flight at once.
  const int k_vectors = KFIX / VW;
#else
  const int k_vectors = K / VW;
#endif
  const int k_tail = k_vectors * VW;
  // Rows of B past N read row N-1 again (valid memory) and are not stored.
  int b_row[RN];
#pragma unroll
  for (int r = 0; r < RN; ++r) b_row[r] = min(n0 + r, N - 1) * ldb;
#if LX > 1
  __local float partial[LY][MR * RN][LX];
#endif

  for (int m0 = 0; m0 < M; m0 += MR) {
    int a_row[MR];
#pragma unroll
    for (int i = 0; i < MR; ++i) a_row[i] = min(m0 + i, M - 1) * sam;
    floatv acc[MR][RN];
#pragma unroll
    for (int i = 0; i < MR; ++i)
#pragma unroll
      for (int r = 0; r < RN; ++r) acc[i][r] = (floatv)(0.0f);

#ifdef KFIX
#pragma unroll
#endif
    for (int j0 = 0; j0 < k_vectors; j0 += LX) {
      const int j = j0 + tx;
      if (LX > 1 && j >= k_vectors) break;
      floatv bv[RN];
#pragma unroll
      for (int r = 0; r < RN; ++r) bv[r] = VLOAD(VW)(j, b + b_row[r]);
#pragma unroll
      for (int i = 0; i < MR; ++i) {
        const floatv av = VLOAD(VW)(j, a + a_row[i]);
#pragma unroll
        for (int r = 0; r < RN; ++r) acc[i][r] = fma(av, bv[r], acc[i][r]);
      }
    }

    float sum[MR][RN];
#pragma unroll
    for (int i = 0; i < MR; ++i)
#pragma unroll
      for (int r = 0; r < RN; ++r) sum[i][r] = hsum(acc[i][r]);
    if (tx == 0) {
      for (int k = k_tail; k < K; ++k)
        for (int i = 0; i < MR; ++i)
          for (int r = 0; r < RN; ++r) sum[i][r] = fma(a[a_row[i] + k], b[b_row[r] + k], sum[i][r]);
    }
#if LX > 1
    // Tree sum over the LX work-items of the row group (LX a power of two).
    for (int i = 0; i < MR; ++i)
      for (int r = 0; r < RN; ++r) partial[ty][i * RN + r][tx] = sum[i][r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = LX / 2; span > 0; span /= 2) {
      if (tx < span)
        for (int q = 0; q < MR * RN; ++q) partial[ty][q][tx] += partial[ty][q][tx + span];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tx == 0)
      for (int i = 0; i < MR; ++i)
        for (int r = 0; r < RN; ++r) sum[i][r] = partial[ty][i * RN + r][0];
    barrier(CLK_LOCAL_MEM_FENCE);  // partial is free again for the next block of rows
#endif
    if (tx == 0) {
      for (int i = 0; i < MR; ++i) {
        if (m0 + i >= M) continue;
        for (int r = 0; r < RN; ++r)
          if (n0 + r < N)
            c[(size_t)(m0 + i) * N + n0 + r] = ACT(sum[i][r] + (has_bias ? bias[bias_off + n0 + r] : 0.0f));
      }
    }
  }
}

// C = the sum over s of parts[s] (KS splits of gemm_cols, or one product of either kernel),
// plus a bias row (bias[bias_off + n] added to every row, when has_bias) and beta·C (C is
// read only when beta ≠ 0). parts is (KS, M·N), C is M×N; NDRange (M·N).
__kernel void gemm_sum_splits(__global const float* restrict parts, __global float* c, const int splits,
                              const int total, const int N, __global const float* bias, const int bias_off,
                              const int has_bias, const float beta) {
  const int i = get_global_id(0);
  if (i >= total) return;
  float s = 0.0f;
  for (int k = 0; k < splits; ++k) s += parts[(size_t)k * total + i];
  if (has_bias) s += bias[bias_off + i % N];
  if (beta != 0.0f) s += beta * c[i];
  c[i] = ACT(s);
}

// out (cols × rows) = in (rows × cols, leading dimension ld) transposed: a resident weight
// turned once into the layout another kernel reads best. 16×16 tiles through local memory,
// so both the reads and the writes of a work-group are whole rows.
// NDRange (ceil(cols/16)·16, ceil(rows/16)·16), local (16, 16).
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void transpose(__global const float* restrict in, __global float* restrict out, const int rows, const int cols,
               const int ld) {
  __local float tile[16][17];  // +1: the column reads below hit different banks
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int c = get_global_id(0), r = get_global_id(1);
  tile[ly][lx] = (r < rows && c < cols) ? in[(size_t)r * ld + c] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  // Work-item (lx, ly) writes out[row = input column][column = input row].
  const int out_row = get_group_id(0) * 16 + ly, out_col = get_group_id(1) * 16 + lx;
  if (out_row < cols && out_col < rows) out[(size_t)out_row * rows + out_col] = tile[lx][ly];
}
