// Scaled dot-product attention in float16 or bfloat16 on tensor cores (mma.h), forward, in one
// pass over the keys: the scores of a block of keys are made, folded into a running softmax and
// multiplied into the output before the next block, so they never reach global memory (the
// online softmax of FlashAttention, Dao et al. 2022, in the work split of its second version):
//
//   o[b,h,l,:] = Σ_j p_j · v[b,g,j,:],  p = softmax_j(scale · q[b,h,l,:] · k[b,g,j,:])
//   lse[b,h,l] = log Σ_j exp(scale · q · k_j);  g = h / KVG (KVG query heads share a key/value head)
//   CAUSAL: keys j > l left out (torch's is_causal: the upper-left triangle).
//
// A work-group of WARPS warps takes BM = 16·WARPS rows of one (b, h); warp w their rows
// 16w .. 16w + 15, its query fragments in registers for the whole pass. For each block of BN
// keys: S = Q·Kᵀ (mma over D in steps of 16), the new row maxima (each lane holds two rows,
// the quad of 4 lanes a row's BN values), the rescaling of the running sums and of O, then
// O += P·V with P's fragments taken straight from S's sums as float16/bfloat16 (a sum piece's
// layout is an A fragment's). Scores are in base 2 (scale · log2 e folded in).
//
// K and V come into local memory by cp.async (copy16), one block each: V's copies run while S
// is made, the next K's while O is. Rows are D (or E) values, 16-byte chunks placed by the
// XOR swizzle of mma.h, so that ldmatrix reads meet no bank conflicts. The query block
// passes through K's place on its way into registers.
//
// Build options: T (half or bfloat; T_IS_BFLOAT), D and E (the key and value widths, multiples
// of 16, at most 256), WARPS, BN (a multiple of 16, BN ≥ BM), CAUSAL, MMA_EMULATE (mma.h).
// Arguments: q (B,H,L,D), k (B,H/KVG,S,D), v (B,H/KVG,S,E) at element strides int4 (b, h,
// row, 1), the row strides, offsets and b, h strides multiples of 8; o (B,H,L,E) and
// lse (B,H,L) contiguous. NDRange: (ceil(L / BM) · B·H · 32·WARPS), work-groups of 32·WARPS.
#include "mma.h"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef BN
#define BN 64
#endif
#define BM (16 * WARPS)
#ifdef MMA_EMULATE
#define EXP2 exp2
#else
#define EXP2 native_exp2  // ex2.approx: a few units in float32's last place, far below T's
#endif
#define THREADS (32 * WARPS)
#if D % 16 || E % 16 || BN % 16 || BN < BM
#error "flash_attention: D, E and BN multiples of 16, BN >= 16 * WARPS"
#endif

// Chunk ch (8 values) of row `row` of K's and V's tiles (mma.h's swizzle).
#define K_AT(row, ch) ((row)*D + SWZ(row, ch, D / 8) * 8)
#define V_AT(row, ch) ((row)*E + SWZ(row, ch, E / 8) * 8)

// Starts the copies of rows [row0, row0 + rows) of a (rows of `width` values, `rs` apart, from
// base) into tile; rows at or past `limit` are zeros.
inline void copy_rows(__local ushort *tile, __global const ushort *base, long rs, int row0, int rows, int limit,
                      int width) {
  const int chunks = width / 8;
  for (int e = get_local_id(0); e < rows * chunks; e += THREADS) {
    const int row = e / chunks, ch = e % chunks;
    const int inside = row0 + row < limit;
    copy16(tile, row * width + SWZ(row, ch, chunks) * 8, base + (inside ? (row0 + row) * rs + ch * 8 : 0),
           inside ? 16 : 0);
  }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void flash_attention(
    __global const T *q, const int q_off, const int4 qs, __global const T *k, const int k_off, const int4 ks,
    __global const T *v, const int v_off, const int4 vs, __global T *o, const int o_off, __global float *lse,
    const int lse_off, const int H, const int KVG, const int L, const int S, const float scale_log2) {
  __local ushort kt[BN * D] __attribute__((aligned(128)));
  __local ushort vt[BN * E] __attribute__((aligned(128)));
#ifdef MMA_EMULATE
  __local uint xw[EMU_WORDS(THREADS)];
#endif
  const int blocks_m = (L + BM - 1) / BM;
  const int bh = get_group_id(0) / blocks_m, m0 = get_group_id(0) % blocks_m * BM;
  const int b = bh / H, h = bh % H, g = h / KVG;
  __global const ushort *qb = (__global const ushort *)q + q_off + (long)b * qs.x + (long)h * qs.y;
  __global const ushort *kb = (__global const ushort *)k + k_off + (long)b * ks.x + (long)g * ks.y;
  __global const ushort *vb = (__global const ushort *)v + v_off + (long)b * vs.x + (long)g * vs.y;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int quad = lane >> 3, l8 = lane & 7;  // the matrix of an ldmatrix this lane addresses, and its row
  const int gr = lane >> 2, t = lane & 3;     // the rows gr, gr + 8 and the columns 2t, 2t + 1 of a piece
  const int row0 = m0 + 16 * warp + gr;       // this lane's rows: row0, row0 + 8

  // The query block into registers, through K's place.
  copy_rows(kt, qb, qs.z, m0, BM, L, D);
  CP_COMMIT();
  CP_WAIT_GROUP(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  uint qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldsm4(qf[kk], kt, K_AT(16 * warp + (quad & 1) * 8 + l8, 2 * kk + (quad >> 1)), 0 EMU_PASS);
  barrier(CLK_LOCAL_MEM_FENCE);

#ifdef CAUSAL
  const int keys = min(S, m0 + BM);  // the block's last row sees keys up to itself
#else
  const int keys = S;
#endif
  copy_rows(kt, kb, ks.z, 0, BN, keys, D);
  CP_COMMIT();
  copy_rows(vt, vb, vs.z, 0, BN, keys, E);
  CP_COMMIT();

  float acc[E / 8][4];
#pragma unroll
  for (int i = 0; i < E / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
  float top[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};  // per row: running max, this lane's sum

  for (int n0 = 0; n0 < keys; n0 += BN) {
    CP_WAIT_GROUP(1);  // K's block is in (V's may be in flight)
    barrier(CLK_LOCAL_MEM_FENCE);
    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {
        // Matrix quad: k 8·(quad % 2), piece j + quad / 2 (Kᵀ's b0, b1 of piece j, then of j + 1).
        uint r[4];
        ldsm4(r, kt, K_AT(8 * (j + (quad >> 1)) + l8, 2 * kk + (quad & 1)), 0 EMU_PASS);
        const uint b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma16816(s[j], qf[kk], b0 EMU_PASS);
        mma16816(s[j + 1], qf[kk], b1 EMU_PASS);
      }

    // The running softmax: scores in base 2, keys past S (and past the row, causal) left out.
    float scale[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = row0 + 8 * hh;
      float most = -INFINITY;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = n0 + 8 * j + 2 * t + c;
          float x = s[j][2 * hh + c] * scale_log2;
#ifdef CAUSAL
          if (col > row) x = -INFINITY;
#endif
          if (col >= S) x = -INFINITY;
          s[j][2 * hh + c] = x;
          most = fmax(most, x);
        }
      most = fmax(top[hh], quad_reduce(most, 1 EMU_PASS));
      // A row with no key yet (all -inf) keeps zeros: nothing to rescale, nothing added.
      scale[hh] = most == -INFINITY ? 1.0f : EXP2(top[hh] - most);
      top[hh] = most;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float p = most == -INFINITY ? 0.0f : EXP2(s[j][2 * hh + c] - most);
          s[j][2 * hh + c] = p;
          sum += p;
        }
      total[hh] = total[hh] * scale[hh] + sum;
    }
#pragma unroll
    for (int i = 0; i < E / 8; ++i) {
      acc[i][0] *= scale[0], acc[i][1] *= scale[0];
      acc[i][2] *= scale[1], acc[i][3] *= scale[1];
    }

    CP_WAIT_GROUP(0);  // V's block is in
    barrier(CLK_LOCAL_MEM_FENCE);  // and every warp is done with K's
    if (n0 + BN < keys) copy_rows(kt, kb, ks.z, n0 + BN, BN, keys, D);
    CP_COMMIT();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // P's A fragment over keys 16·kk ..: the sums of pieces 2kk and 2kk + 1.
      const uint pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                          pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int i = 0; i < E / 8; i += 2) {
        // Matrix quad: keys 8·(quad % 2), columns of piece i + quad / 2 (V is [key][column]: trans).
        uint r[4];
        ldsm4(r, vt, V_AT(16 * kk + (quad & 1) * 8 + l8, i + (quad >> 1)), 1 EMU_PASS);
        const uint b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma16816(acc[i], pa, b0 EMU_PASS);
        mma16816(acc[i + 1], pa, b1 EMU_PASS);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with V's block
    if (n0 + BN < keys) copy_rows(vt, vb, vs.z, n0 + BN, BN, keys, E);
    CP_COMMIT();
  }

  // The rows' sums over their quads; the outputs divided by them and stored in pairs.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = quad_reduce(total[hh], 0 EMU_PASS);
    const int row = row0 + 8 * hh;
    if (row >= L) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    __global T *out = o + o_off + ((long)bh * L + row) * E;
#pragma unroll
    for (int i = 0; i < E / 8; ++i) {
      const int col = 8 * i + 2 * t;
      *(__global uint *)(out + col) = pack2(acc[i][2 * hh] * inv, acc[i][2 * hh + 1] * inv);
    }
    if (t == 0) lse[lse_off + (long)bh * L + row] = sum > 0.0f ? top[hh] * M_LN2_F + log(sum) : -INFINITY;
  }
}
