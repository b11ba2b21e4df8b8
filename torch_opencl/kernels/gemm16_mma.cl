// 16-bit products on NVIDIA tensor cores, written in OpenCL C with inline PTX (sm_80 and
// later; NVIDIA's OpenCL compiler passes asm statements through):
//   C = alpha · A · B + beta · C (+ a bias row, an activation), over a batch
// with the arguments of gemm16.cl (gemm16.h): T is half or bfloat, sums in float32.
//
// Each work-group computes a BM × BN block of C. A and B come into local memory in slices
// of BK (32 unless given; 16 for deep pipelines of large blocks) along k by cp.async (16 bytes a copy, straight from global memory, no
// registers), STAGES slices in flight: while the tensor cores work on slice s, the copies of
// slices s+1 .. s+STAGES-1 are under way. Warp w computes a (BM/WM) × (BN/WN) part of the
// block in 16×8 pieces of mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16":
// lane l = 4·g + t holds A's (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..2t+9), (g+8, 2t+8..2t+9),
// B's (2t..2t+1, g) and (2t+8..2t+9, g), and the sums (g, 2t..2t+1), (g+8, 2t..2t+1)), its
// fragments read from local memory by ldmatrix (four 8×8 matrices an instruction).
//
// Layouts, as build options (the host's choice from the strides; it copies an operand that
// fits none of them):
//   A_KC  A's k contiguous (a_cs = 1, rows a_rs apart); else its m contiguous (a_rs = 1,
//         columns a_cs apart): a transposed A, staged as [k][m] and read by ldmatrix.trans;
//   B_KC  B's k contiguous (b_rs = 1: a linear layer's n×k weight); else its n contiguous
//         (b_cs = 1), staged as [k][n] and read by ldmatrix.trans.
// The strided dimension's stride, the offsets and the batch strides are multiples of 8
// elements (every 16-byte copy aligned). Edges: a copy past m, n or k reads only the
// elements inside (cp.async's source size) and fills the rest with zeros.
// Local memory rows are 16-byte chunks placed by an XOR swizzle (SWZ), so that the 8 rows
// an 8×8 matrix of ldmatrix reads fall on 8 distinct groups of 4 banks without padding.
//   C_PAIRS  c's row stride and offset are even: neighbouring values are stored as pairs.
//   MMA_EMULATE  cp.async, ldmatrix and mma.sync done in plain OpenCL C (local memory and
//         barriers standing in for the warp's exchanges), so that any device runs this file's
//         index math; for tests, slow.
//   SPLIT_K  the work-group rows of a batch's matrix split k (the arguments parts, splits,
//         k_chunk: row z = batch·splits + split sums k_chunk values of k, a multiple of BK) and
//         write float partial sums to parts (z, m, n); gemm16_mma_sum adds them and stores C.
// NDRange: (tiles · 32·WM·WN, batch · splits), tiles = ceil(m / BM) · ceil(n / BN), work-groups of
// 32·WM·WN; consecutive work-groups walk GROUP_M block rows down a column of blocks before
// the next column, so that a wave of them shares its A and B slices in the L2 cache.
#include "gemm16.h"
#include "mma.h"

#ifndef BK
#define BK 32
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#define THREADS (32 * WM * WN)
#define WTM (BM / WM)  // a warp's part of the block
#define WTN (BN / WN)
#define MT (WTM / 16)  // its 16×8 pieces
#define NT (WTN / 8)
#if BM % (16 * WM) || BN % (16 * WN) || BK % 16 || BM % 8 || BN % 8
#error "gemm16_mma: BM a multiple of 16·WM, BN of 16·WN, BK of 16"
#endif

// Rows of the local tiles (16-bit values) and their chunks of 8 values.
#ifdef A_KC
#define A_ROW BK  // [m][k]
#else
#define A_ROW BM  // [k][m]
#endif
#ifdef B_KC
#define B_ROW BK  // [n][k]
#else
#define B_ROW BN  // [k][n]
#endif
#define A_ELEMS (BM * BK)
#define B_ELEMS (BN * BK)
#define STAGE_ELEMS (A_ELEMS + B_ELEMS)

#define A_AT(row, ch) ((row)*A_ROW + SWZ(row, ch, A_ROW / 8) * 8)
#define B_AT(row, ch) ((row)*B_ROW + SWZ(row, ch, B_ROW / 8) * 8)

#if STAGES == 2
#define IN_FLIGHT 0
#elif STAGES == 3
#define IN_FLIGHT 1
#elif STAGES == 4
#define IN_FLIGHT 2
#elif STAGES == 5
#define IN_FLIGHT 3
#else
#error "gemm16_mma: STAGES is 2 to 5"
#endif
// Waits until at most STAGES - 2 groups of this work-item's copies are still in flight.
#define CP_WAIT() CP_WAIT_GROUP(IN_FLIGHT)

// A work-item's copies of one operand's slices: copy i takes a 16-byte chunk from src[i] (at
// k0 = 0; a slice at k0 reads from src[i] + K_STEP(k0)) to local element dst[i] of a stage;
// kat[i] is its k (A_KC, B_KC: of its first element) at k0 = 0 and bytes[i] how many of its
// bytes lie inside the matrix, k aside (0: nothing to copy). COPIES(elems) per work-item,
// the last one past the tile for some work-items when the work-group does not divide it.
#define COPIES(elems) (((elems) / 8 + THREADS - 1) / THREADS)
#define A_COPIES COPIES(A_ELEMS)
#define B_COPIES COPIES(B_ELEMS)
#define COPY_IN_TILE(elems, i) ((elems) / 8 % THREADS == 0 || (int)get_local_id(0) + (i)*THREADS < (elems) / 8)

// Starts the copies of the slice at k0 of one operand (plan as above; `kc`: its k contiguous,
// `step`: the elements between its slices; `at`: its place in the stage).
inline void copy_slice(__local ushort *at, __global const ushort *base, __global const ushort *const *src,
                       const int *dst, const int *kat, const int *bytes, int copies, int elems, int kc, long step,
                       int k0, int k) {
#pragma unroll
  for (int i = 0; i < copies; ++i) {
    if (!COPY_IN_TILE(elems, i)) continue;
    const int kk = k0 + kat[i];
    const int n = bytes[i] == 0 ? 0 : kc ? 2 * clamp(k - kk, 0, 8) : kk < k ? bytes[i] : 0;
    copy16(at, dst[i], n > 0 ? src[i] + step : base, n);
  }
}

// Stores the sums v0, v1 of C's (r, col) and (r, col + 1) (col even; col + 1 may be past n).
inline void store_pair(__global T *c, __global const T *bias, int has_bias, int c_rs, int r, int col, int n,
                       float alpha, float beta, float v0, float v1) {
#ifdef C_PAIRS
  if (col + 1 < n && beta == 0.0f) {
    float x0 = alpha * v0, x1 = alpha * v1;
    if (has_bias) x0 += READ(T, bias, col), x1 += READ(T, bias, col + 1);
    x0 = C_ACT(x0);
    x1 = C_ACT(x1);
    const long at = (long)r * c_rs + col;
#ifdef T_IS_BFLOAT
    *(__global uint *)(c + at) = (uint)float_to_bfloat(x0) | ((uint)float_to_bfloat(x1) << 16);
#else
    vstore_half2_rte((float2)(x0, x1), 0, c + at);
#endif
    return;
  }
#endif
  store_c(c, bias, has_bias, c_rs, r, col, alpha, beta, v0);
  if (col + 1 < n) store_c(c, bias, has_bias, c_rs, r, col + 1, alpha, beta, v1);
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void gemm16_mma(GEMM16_ARGS, __global float *parts,
                                                                              int parts_off, int splits, int k_chunk) {
  __local ushort smem[STAGES * STAGE_ELEMS] __attribute__((aligned(128)));
#ifdef MMA_EMULATE
  __local uint xw[WM * WN * 32 * 6];
#endif
  // Split-K: work-group row z = batch·splits + split sums k in [split·k_chunk, +k_chunk).
  const int z = get_global_id(1), batch = z / splits, k_begin = (z - batch * splits) * k_chunk;
  const int k_end = min(k, k_begin + k_chunk);
  GEMM16_AT_BATCH(batch);
  // The block of C: GROUP_M block rows side by side, column after column.
  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int pid = get_group_id(0), width = GROUP_M * tiles_n;
  const int first_m = pid / width * GROUP_M, rows = min(tiles_m - first_m, GROUP_M);
  const int m0 = (first_m + pid % width % rows) * BM, n0 = pid % width / rows * BN;
#ifdef A_KC
  const int lda = a_rs;
#else
  const int lda = a_cs;
#endif
#ifdef B_KC
  const int ldb = b_cs;
#else
  const int ldb = b_rs;
#endif
  __global const ushort *a16 = (__global const ushort *)a, *b16 = (__global const ushort *)b;
  const int tid = get_local_id(0);

  // This work-item's copies (COPIES above): chunk e = tid + i·THREADS of a tile, row e / chunks.
  __global const ushort *a_src[A_COPIES], *b_src[B_COPIES];
  int a_dst[A_COPIES], a_kat[A_COPIES], a_bytes[A_COPIES], b_dst[B_COPIES], b_kat[B_COPIES], b_bytes[B_COPIES];
#pragma unroll
  for (int i = 0; i < A_COPIES; ++i) {
    const int e = tid + i * THREADS, row = e / (A_ROW / 8), ch = e % (A_ROW / 8);
#ifdef A_KC
    const int gm = m0 + row;
    a_kat[i] = ch * 8;
    a_bytes[i] = gm < m ? 16 : 0;
    a_src[i] = a16 + (a_bytes[i] ? (long)gm * lda + ch * 8 : 0);
#else
    const int gm = m0 + ch * 8;
    a_kat[i] = row;
    a_bytes[i] = 2 * clamp(m - gm, 0, 8);
    a_src[i] = a16 + (a_bytes[i] ? (long)row * lda + gm : 0);
#endif
    a_dst[i] = A_AT(row, ch);
  }
#pragma unroll
  for (int i = 0; i < B_COPIES; ++i) {
    const int e = tid + i * THREADS, row = e / (B_ROW / 8), ch = e % (B_ROW / 8);
#ifdef B_KC
    const int gn = n0 + row;
    b_kat[i] = ch * 8;
    b_bytes[i] = gn < n ? 16 : 0;
    b_src[i] = b16 + (b_bytes[i] ? (long)gn * ldb + ch * 8 : 0);
#else
    const int gn = n0 + ch * 8;
    b_kat[i] = row;
    b_bytes[i] = 2 * clamp(n - gn, 0, 8);
    b_src[i] = b16 + (b_bytes[i] ? (long)row * ldb + gn : 0);
#endif
    b_dst[i] = B_AT(row, ch);
  }
#ifdef A_KC
#define A_STEP(k0) (k0)
#define A_IS_KC 1
#else
#define A_STEP(k0) ((long)(k0)*lda)
#define A_IS_KC 0
#endif
#ifdef B_KC
#define B_STEP(k0) (k0)
#define B_IS_KC 1
#else
#define B_STEP(k0) ((long)(k0)*ldb)
#define B_IS_KC 0
#endif
#define LOAD_SLICE(st, k0)                                                                                       \
  copy_slice(smem + (st)*STAGE_ELEMS, a16, a_src, a_dst, a_kat, a_bytes, A_COPIES, A_ELEMS, A_IS_KC, A_STEP(k0), \
             k0, k_end);                                                                                       \
  copy_slice(smem + (st)*STAGE_ELEMS + A_ELEMS, b16, b_src, b_dst, b_kat, b_bytes, B_COPIES, B_ELEMS, B_IS_KC,  \
             B_STEP(k0), k0, k_end)

  const int lane = tid & 31, warp = tid >> 5;
  const int wm0 = warp % WM * WTM, wn0 = warp / WM * WTN;
  const int q = lane >> 3, l8 = lane & 7;  // the matrix of an ldmatrix this lane addresses, and its row
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int slices = (k_end - k_begin + BK - 1) / BK;
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) {
      LOAD_SLICE(s, k_begin + s * BK);
    }
    CP_COMMIT();
  }
  int st = 0, st_next = STAGES - 1;  // the stages of slice s and of slice s + STAGES - 1
  for (int s = 0; s < slices; ++s) {
    CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);  // slice s is in, and every warp is done with slice s - 1's stage
    if (s + STAGES - 1 < slices) {
      LOAD_SLICE(st_next, k_begin + (s + STAGES - 1) * BK);
    }
    CP_COMMIT();
    __local const ushort *as = smem + st * STAGE_ELEMS, *bs = as + A_ELEMS;
    st = st == STAGES - 1 ? 0 : st + 1;
    st_next = st_next == STAGES - 1 ? 0 : st_next + 1;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint fa[MT][4], fb[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        // Matrix q: rows 8·(q % 2) of the piece, k 8·(q / 2) (A's registers a0..a3).
#ifdef A_KC
        ldsm4(fa[i], as, A_AT(wm0 + 16 * i + (q & 1) * 8 + l8, kk / 8 + (q >> 1)), 0 EMU_PASS);
#else
        ldsm4(fa[i], as, A_AT(kk + (q >> 1) * 8 + l8, (wm0 + 16 * i) / 8 + (q & 1)), 1 EMU_PASS);
#endif
      }
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        // Matrix q: k 8·(q % 2), piece j + q / 2 (b0, b1 of piece j, then of piece j + 1).
        uint r[4];
#ifdef B_KC
        ldsm4(r, bs, B_AT(wn0 + 8 * (j + (q >> 1)) + l8, kk / 8 + (q & 1)), 0 EMU_PASS);
#else
        ldsm4(r, bs, B_AT(kk + (q & 1) * 8 + l8, (wn0 + 8 * (j + (q >> 1))) / 8), 1 EMU_PASS);
#endif
        fb[j][0] = r[0], fb[j][1] = r[1], fb[j + 1][0] = r[2], fb[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma16816(acc[i][j], fa[i], fb[j] EMU_PASS);
    }
  }

  // Sum e of piece (i, j): row 16·i + g + 8·(e / 2), column 8·j + 2·t + e % 2 of the warp's part.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = n0 + wn0 + 8 * j + 2 * t;
      if (col >= n) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + wm0 + 16 * i + g + 8 * h;
        if (r >= m) continue;
#ifdef SPLIT_K
        __global float *part = parts + parts_off + ((long)z * m + r) * n + col;
        part[0] = acc[i][j][2 * h];
        if (col + 1 < n) part[1] = acc[i][j][2 * h + 1];
#else
        store_pair(c, bias, has_bias, c_rs, r, col, n, alpha, beta, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
#endif
      }
    }
}

// Split-K's second step: C's value (col, r) of batch b is the sum of the splits' partial sums
// (gemm16_mma with SPLIT_K), stored as gemm16.h stores a value. NDRange (n, m, batch).
__kernel void gemm16_mma_sum(GEMM16_ARGS, __global const float *parts, int parts_off, int splits, int k_chunk) {
  const int col = get_global_id(0), r = get_global_id(1), batch = get_global_id(2);
  if (col >= n || r >= m) return;
  GEMM16_AT_BATCH(batch);
  __global const float *part = parts + parts_off + ((long)batch * splits * m + r) * n + col;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += part[(long)s * m * n];
  store_c(c, bias, has_bias, c_rs, r, col, alpha, beta, sum);
}
