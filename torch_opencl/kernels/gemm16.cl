// Products of 16-bit matrices, T = half (float16) or bfloat (bfloat16), over a batch:
//   C = alpha · A · B + beta · C (+ a bias row)
// reading the 16-bit operands as they are stored (half the bytes of float32 copies) and
// accumulating in float; C is stored in T. Any strides: a linear layer's weight (B stored
// n×k, read through its transpose) and transposed operands need no copies.
//
// Arguments shared by both kernels: each tensor is a buffer and an offset in elements;
// A is m×k with row, column and batch strides (a_rs, a_cs, a_bs), likewise B (k×n); C is
// m×n with row stride c_rs (its columns contiguous) and batch stride c_bs; the bias is n
// contiguous elements, read when has_bias; C is read only when beta is not 0.
#include "gemm16.h"

// Work-groups of 16×16 work-items over 64×64 blocks of C, each work-item 4×4 elements
// (rows ly + 16·i, columns lx + 16·j); A and B come through local memory in slices of 16
// along k, converted to float once as they are loaded.
#define TILE 64
#define SLICE 16

__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void gemm16_tiled(GEMM16_ARGS) {
  __local float as[SLICE][TILE + 1];
  __local float bs[SLICE][TILE + 1];
  const int lx = get_local_id(0), ly = get_local_id(1), tid = ly * 16 + lx;
  const int col0 = get_group_id(0) * TILE, row0 = get_group_id(1) * TILE;
  const long batch = get_global_id(2);
  GEMM16_AT_BATCH(batch);
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += SLICE) {
    // Neighbouring work-items read neighbouring elements of whichever layout the operand has.
    for (int e = tid; e < TILE * SLICE; e += 256) {
      const int r = a_cs == 1 ? e / SLICE : e % TILE, kk = a_cs == 1 ? e % SLICE : e / TILE;
      const int gr = row0 + r, gk = k0 + kk;
      as[kk][r] = gr < m && gk < k ? READ(T, a, (long)gr * a_rs + (long)gk * a_cs) : 0.0f;
    }
    for (int e = tid; e < TILE * SLICE; e += 256) {
      const int col = b_cs == 1 ? e % TILE : e / SLICE, kk = b_cs == 1 ? e / TILE : e % SLICE;
      const int gc = col0 + col, gk = k0 + kk;
      bs[kk][col] = gc < n && gk < k ? READ(T, b, (long)gk * b_rs + (long)gc * b_cs) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < SLICE; ++kk) {
      float av[4], bv[4];
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ly + 16 * i];
      for (int j = 0; j < 4; ++j) bv[j] = bs[kk][lx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = mad(av[i], bv[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ly + 16 * i;
    if (r >= m) continue;
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + lx + 16 * j;
      if (col < n) store_c(c, bias, has_bias, c_rs, r, col, alpha, beta, acc[i][j]);
    }
  }
}

// Few rows (up to 8: a vector or a small batch of them times a matrix, as generation runs
// its products): each work-group computes CX columns of C for every row, its KS slices of
// work-items sharing k (work-item s takes k = s, s + KS, ...) and adding their sums in local
// memory. CX and KS (a power of two) are build options chosen for B's layout (blas.cpp):
// more slices along k where B's columns are contiguous in k (a weight stored n×k), more
// columns side by side where its rows are (k×n); each A element is read by the whole group.
#ifndef CX
#define CX 1
#endif
#ifndef KS
#define KS 64
#endif
#define MAX_ROWS 8

__kernel __attribute__((reqd_work_group_size(CX, KS, 1))) void gemm16_rows(GEMM16_ARGS) {
  __local float part[MAX_ROWS][KS][CX];
  const int cx = get_local_id(0), s = get_local_id(1);
  const int col = get_group_id(0) * CX + cx;
  const long batch = get_global_id(2);
  GEMM16_AT_BATCH(batch);
  float acc[MAX_ROWS];
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.0f;
  if (col < n) {
    for (int kk = s; kk < k; kk += KS) {
      const float bv = READ(T, b, (long)kk * b_rs + (long)col * b_cs);
      for (int r = 0; r < MAX_ROWS; ++r)
        if (r < m) acc[r] = mad(READ(T, a, (long)r * a_rs + (long)kk * a_cs), bv, acc[r]);
    }
  }
  const int rows = min(m, MAX_ROWS);  // the same for the whole group: the barriers stay uniform
  for (int r = 0; r < rows; ++r) part[r][s][cx] = acc[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int half_ = KS / 2; half_ > 0; half_ >>= 1) {
    if (s < half_)
      for (int r = 0; r < rows; ++r) part[r][s][cx] += part[r][s + half_][cx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (s == 0 && col < n)
    for (int r = 0; r < rows; ++r) store_c(c, bias, has_bias, c_rs, r, col, alpha, beta, part[r][0][cx]);
}

// Few rows over a B whose columns are contiguous in k (a linear layer's weight stored n×k,
// read through its transpose; b_rs = 1), B's columns aligned to 8 elements (b_cs and b_off
// multiples of 8): each work-group computes CY columns, the 32 work-items of a column reading
// it 8 elements (16 bytes) at a time side by side, so a warp reads 512 contiguous bytes;
// k's last k % 8 elements one at a time. A_VEC: A's rows are read 8 at a time too (a_cs = 1,
// a_rs and a_off multiples of 8). The 32 partial sums of a column are added in local memory.
#ifndef CY
#define CY 8
#endif
#define LANES 32

// 8 elements at p (16-byte aligned) as floats, read as one 16-byte load.
#ifdef T_IS_BFLOAT
inline float8 load8(__global const bfloat *p) {
  const uint4 u = *(__global const uint4 *)p;  // element 2i in the low half of word i
  const uint4 lo = u << 16, hi = u & 0xffff0000u;
  return (float8)(as_float(lo.s0), as_float(hi.s0), as_float(lo.s1), as_float(hi.s1), as_float(lo.s2),
                  as_float(hi.s2), as_float(lo.s3), as_float(hi.s3));
}
#else
inline float8 load8(__global const half *p) {
  const uint4 u = *(__global const uint4 *)p;
  return vload_half8(0, (const __private half *)&u);
}
#endif

// v as T stores it (round to nearest even), back as a float.
#if defined(T_IS_BFLOAT)
inline float round_t(float v) { return bfloat_to_float(float_to_bfloat(v)); }
#else
inline float round_t(float v) {
  ushort h;
  vstore_half_rte(v, 0, (__private half *)&h);
  return vload_half(0, (const __private half *)&h);
}
#endif

inline float8 round8(float8 v) {
  return (float8)(round_t(v.s0), round_t(v.s1), round_t(v.s2), round_t(v.s3), round_t(v.s4), round_t(v.s5),
                  round_t(v.s6), round_t(v.s7));
}

// This work-item's share (lane `lane` of 32) of column bcol (k contiguous elements) times A's
// rows: acc[r] for r < m. With RMS (the group kernel's option), A's row r is read as
// gain · T(x · scale[r]) (A_VEC's aligned loads only).
#ifdef RMS
#ifndef A_VEC
#error "RMS reads A's rows 8 at a time: build it with A_VEC"
#endif
#define RMS_PARAMS , __local const float *scale, __global const T *gain
#else
#define RMS_PARAMS , int no_scale, int no_gain
#endif
inline void column_sums(float acc[MAX_ROWS], __global const T *a, int a_rs, int a_cs, int m, int k,
                        __global const T *bcol, int lane RMS_PARAMS) {
  const int whole = k & ~7;
  for (int kk = lane * 8; kk < whole; kk += LANES * 8) {
    const float8 bv = load8(bcol + kk);
#ifdef RMS
    const float8 gv = load8(gain + kk);
#endif
    for (int r = 0; r < MAX_ROWS; ++r) {
      if (r >= m) break;
#ifdef A_VEC
      float8 av = load8(a + (long)r * a_rs + kk);
#ifdef RMS
      av = round8(gv * round8(av * scale[r]));
#endif
#else
      __global const T *ar = a + (long)r * a_rs + (long)kk * a_cs;
      const float8 av = (float8)(READ(T, ar, 0), READ(T, ar, a_cs), READ(T, ar, 2 * a_cs), READ(T, ar, 3 * a_cs),
                                 READ(T, ar, 4 * a_cs), READ(T, ar, 5 * a_cs), READ(T, ar, 6 * a_cs),
                                 READ(T, ar, 7 * a_cs));
#endif
      acc[r] += dot(av.lo, bv.lo) + dot(av.hi, bv.hi);
    }
  }
  for (int kk = whole + lane; kk < k; kk += LANES) {
    const float bv = READ(T, bcol, kk);
    for (int r = 0; r < MAX_ROWS; ++r)
      if (r < m) acc[r] = mad(READ(T, a, (long)r * a_rs + (long)kk * a_cs), bv, acc[r]);
  }
}

// Lane r < rows of work-group column y gets the sum of row r's partial sums over y's lanes
// (acc, one per lane); called by the whole group (it waits at barriers), part free to write.
inline float lanes_sum(__local float part[MAX_ROWS][CY][LANES + 1], const float acc[MAX_ROWS], int rows, int y,
                       int lane) {
  for (int r = 0; r < rows; ++r) part[r][y][lane] = acc[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0.0f;
  if (lane < rows)
    for (int i = 0; i < LANES; ++i) sum += part[lane][y][i];
  barrier(CLK_LOCAL_MEM_FENCE);  // part is free again
  return sum;
}

__kernel __attribute__((reqd_work_group_size(LANES, CY, 1))) void gemm16_rows_kc(GEMM16_ARGS) {
  __local float part[MAX_ROWS][CY][LANES + 1];
  const int lane = get_local_id(0), y = get_local_id(1);
  const int col = get_group_id(1) * CY + y;
  const long batch = get_global_id(2);
  GEMM16_AT_BATCH(batch);
  float acc[MAX_ROWS];
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.0f;
  if (col < n) column_sums(acc, a, a_rs, a_cs, m, k, b + (long)col * b_cs, lane, 0, 0);
  const int rows = min(m, MAX_ROWS);  // the same for the whole group: the barriers stay uniform
  const float sum = lanes_sum(part, acc, rows, y, lane);
  if (lane < rows && col < n) store_c(c, bias, has_bias, c_rs, lane, col, alpha, beta, sum);
}

#ifdef GROUP  // (built with -DGROUP alone: Oclgrind counts every kernel's local arrays in each launch)
// Up to three products of one A (m ≤ 8 rows) in one launch, as gemm16_rows_kc computes each:
// C_g (m×n_g, contiguous) = A · B_g, B_g's n_g columns contiguous in k at one column stride
// b_cs (linear layers' weights read through their transposes: the query, key and value
// projections of one input, say). The columns of C_0, C_1 and C_2 are numbered one after the
// other; work-group column y takes column get_group_id(1)·CY + y of them. Options (each a
// build of its own), in the order they apply, each value rounded to T where torch rounds it:
//   -DRMS       A's rows RMS-normalized first (transformers' RMSNorm): row x becomes
//               g · T(x · rsqrt(mean(x²) + eps)), g (k elements at rms_w, 16-byte aligned) and
//               eps given; A's rows read 8 at a time (A_VEC; k a multiple of 8). Each work-group
//               sums the squares itself.
//   -DGLU       two products of one width, C_0 = act(A · B_0) · (A · B_1) (a gated MLP's gate
//               and up; the activation by EPI_ACT), each work-group column taking one column of
//               both; C_1 is not written.
//   -DRESIDUAL  one product, C_0 = R + A · B_0, R m×n0 at res with row stride res_rs (a
//               residual connection after a layer's last product).

__kernel __attribute__((reqd_work_group_size(LANES, CY, 1))) void gemm16_rows_kc_group(
    __global const T *a, int a_off, int a_rs, int a_cs, int m, int k, __global const T *b0, int b0_off,
    __global const T *b1, int b1_off, __global const T *b2, int b2_off, int b_cs, __global T *c0, int c0_off,
    __global T *c1, int c1_off, __global T *c2, int c2_off, int n0, int n1, int n2, __global const T *rms_w,
    int rms_off, float rms_eps, __global const T *res, int res_off, int res_rs) {
  __local float part[MAX_ROWS][CY][LANES + 1];
  const int lane = get_local_id(0), y = get_local_id(1), at = get_group_id(1) * CY + y;
  const int rows = min(m, MAX_ROWS);  // the same for the whole group: the barriers stay uniform
  a += a_off;
#ifdef RMS
  // Each row's scale rsqrt(mean(x²) + eps), summed by the whole group.
  __local float scale[MAX_ROWS];
  {
    const int t = y * LANES + lane;
    for (int r = 0; r < rows; ++r) {
      float s = 0.0f;
      for (int i = t; i < k; i += LANES * CY) {
        const float v = READ(T, a, (long)r * a_rs + i);
        s = mad(v, v, s);
      }
      part[r][y][lane] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t < rows) {
      float s = 0.0f;
      for (int yy = 0; yy < CY; ++yy)
        for (int i = 0; i < LANES; ++i) s += part[t][yy][i];
      scale[t] = rsqrt(s / (float)k + rms_eps);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#define A_SCALE scale
#define A_GAIN (rms_w + rms_off)
#else
#define A_SCALE 0
#define A_GAIN 0
#endif
#ifdef GLU
  const int g = 0, col = at, n = n0;
#else
  const int g = at < n0 ? 0 : at < n0 + n1 ? 1 : 2;
  const int col = at - (g == 0 ? 0 : g == 1 ? n0 : n0 + n1), n = g == 0 ? n0 : g == 1 ? n1 : n2;
#endif
  __global const T *b = g == 0 ? b0 + b0_off : g == 1 ? b1 + b1_off : b2 + b2_off;
  __global T *c = g == 0 ? c0 + c0_off : g == 1 ? c1 + c1_off : c2 + c2_off;
  float acc[MAX_ROWS];
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.0f;
  if (col < n) column_sums(acc, a, a_rs, a_cs, m, k, b + (long)col * b_cs, lane, A_SCALE, A_GAIN);
  const float sum = lanes_sum(part, acc, rows, y, lane);
#ifdef GLU
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.0f;
  if (col < n) column_sums(acc, a, a_rs, a_cs, m, k, b1 + b1_off + (long)col * b_cs, lane, A_SCALE, A_GAIN);
  const float up = lanes_sum(part, acc, rows, y, lane);
  if (lane < rows && col < n) WRITE(T, c, (long)lane * n + col, round_t(C_ACT(round_t(sum))) * round_t(up));
#elif defined(RESIDUAL)
  if (lane < rows && col < n)
    WRITE(T, c, (long)lane * n + col, round_t(sum) + READ(T, res + res_off, (long)lane * res_rs + col));
#else
  if (lane < rows && col < n) WRITE(T, c, (long)lane * n + col, C_ACT(sum));
#endif
}
#endif  // GROUP

// Few rows over a B whose rows are contiguous (k×n, b_cs = 1) and 16-byte aligned (b_rs and
// b_off multiples of 8): each work-item takes 8 neighbouring columns (one 16-byte load per row
// of B), and the KS work-items of a work-group's first dimension share k (slice s takes
// k = s, s + KS, ...); its second dimension holds LN such groups of columns (1 on GPUs: on the
// H200, 256 slices of one group of 8 columns ran GPT-2's few-row k×n products 1.2-3.5× faster
// than 2-4 groups of fewer slices, and than gemm16_rows). Row by row, the slices' sums meet in
// local memory: each work-item adds 8 slices of one column, then one work-item per column adds
// those KS / 8 sums. Options (one batch; torch.ops.oclf.addmm_act's):
//   -DLAYER_NORM  A's rows through a layer norm first: row x becomes
//                 T((x - mean(x)) · rsqrt(var(x) + eps) · w + b), w and b (k elements each at
//                 norm_w and norm_b) and eps given; each work-group computes the rows' moments.
//   -DRESIDUAL    C = T(the value stored) + R, R m×n at res with row stride res_rs.
#ifndef LN
#define LN 1
#endif
#define NC_COLS (LN * 8)

#ifdef LAYER_NORM
// The sum over the group's work-items of v (work-item t's), by all of them; part free to write.
inline float group_sum(__local float part[KS][NC_COLS + 1], __local float *out, float v, int s, int lane) {
  part[s][lane] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (s == 0 && lane == 0) {
    float sum = 0.0f;
    for (int i = 0; i < KS; ++i)
      for (int j = 0; j < LN; ++j) sum += part[i][j];
    *out = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return *out;
}
#define A_NC(r, kk)                                                                                  \
  round_t((READ(T, a, (long)(r) * a_rs + (long)(kk) * a_cs) - mean[r]) * rstd[r] * READ(T, norm_w, kk) + \
          READ(T, norm_b, kk))
#else
#define A_NC(r, kk) READ(T, a, (long)(r) * a_rs + (long)(kk) * a_cs)
#endif

__kernel __attribute__((reqd_work_group_size(KS, LN, 1))) void gemm16_rows_nc(
    GEMM16_ARGS, __global const T *norm_w, int norm_w_off, __global const T *norm_b, int norm_b_off, float norm_eps,
    __global const T *res, int res_off, int res_rs) {
  __local float part[KS][NC_COLS + 1];
  __local float part8[KS / 8][NC_COLS + 1];
  const int s = get_local_id(0), lane = get_local_id(1), t = lane * KS + s;
  const int col8 = (get_group_id(1) * LN + lane) * 8;
  const long batch = get_global_id(2);
  GEMM16_AT_BATCH(batch);
  const int rows = min(m, MAX_ROWS);  // the same for the whole group: the barriers stay uniform
#ifdef LAYER_NORM
  __local float mean[MAX_ROWS], rstd[MAX_ROWS], moment;
  norm_w += norm_w_off, norm_b += norm_b_off;
  for (int r = 0; r < rows; ++r) {  // two passes: the mean, then the squares about it
    float sum = 0.0f;
    for (int kk = t; kk < k; kk += KS * LN) sum += READ(T, a, (long)r * a_rs + (long)kk * a_cs);
    const float mu = group_sum(part, &moment, sum, s, lane) / (float)k;
    float squares = 0.0f;
    for (int kk = t; kk < k; kk += KS * LN) {
      const float d = READ(T, a, (long)r * a_rs + (long)kk * a_cs) - mu;
      squares = mad(d, d, squares);
    }
    const float var = group_sum(part, &moment, squares, s, lane) / (float)k;
    if (t == 0) mean[r] = mu, rstd[r] = rsqrt(var + norm_eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  float8 acc[MAX_ROWS];
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = (float8)(0.0f);
  if (col8 < n) {
    const bool whole = col8 + 8 <= n;
    for (int kk = s; kk < k; kk += KS) {
      __global const T *brow = b + (long)kk * b_rs + col8;
      float8 bv;
      if (whole) {
        bv = load8(brow);
      } else {
        float v[8];
        for (int j = 0; j < 8; ++j) v[j] = col8 + j < n ? READ(T, brow, j) : 0.0f;
        bv = (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
      }
      for (int r = 0; r < MAX_ROWS; ++r) {
        if (r >= m) break;
        acc[r] = mad((float8)(A_NC(r, kk)), bv, acc[r]);
      }
    }
  }
  const int cc = t % NC_COLS, g = t / NC_COLS;  // the column and the 8 slices this work-item adds
  for (int r = 0; r < rows; ++r) {
    const float8 v = acc[r];
    part[s][lane * 8 + 0] = v.s0, part[s][lane * 8 + 1] = v.s1, part[s][lane * 8 + 2] = v.s2;
    part[s][lane * 8 + 3] = v.s3, part[s][lane * 8 + 4] = v.s4, part[s][lane * 8 + 5] = v.s5;
    part[s][lane * 8 + 6] = v.s6, part[s][lane * 8 + 7] = v.s7;
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int i = 0; i < 8; ++i) sum += part[g * 8 + i][cc];
    part8[g][cc] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t < NC_COLS) {
      const int col = get_group_id(1) * NC_COLS + t;
      float total = 0.0f;
      for (int i = 0; i < KS / 8; ++i) total += part8[i][t];
#ifdef RESIDUAL
      if (col < n)
        WRITE(T, c, (long)r * c_rs + col,
              round_t(value_c(c, bias, has_bias, c_rs, r, col, alpha, beta, total)) +
                  READ(T, res + res_off, (long)r * res_rs + col));
#else
      if (col < n) store_c(c, bias, has_bias, c_rs, r, col, alpha, beta, total);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // part is written again for the next row
  }
}
