// Scaled dot-product attention in float16 or bfloat16 on tensor cores (mma.h), forward, in one
// pass over the keys: the scores of a block of keys are made, folded into a running softmax and
// multiplied into the output before the next block, so they never reach global memory (the
// online softmax of FlashAttention, Dao et al. 2022, in the work split of its second version):
//
//   o[b,h,l,:] = Σ_j p_j · v[b,g,j,:],  p = softmax_j(scale · q[b,h,l,:] · k[b,g,j,:])
//   lse[b,h,l] = log Σ_j exp(scale · q · k_j);  g = h / KVG (KVG query heads share a key/value head)
//   CAUSAL: keys j > l left out (torch's is_causal: the upper-left triangle).
//
// A work-group of WARPS warps takes BM = 16·MT·WARPS rows of one (b, h); warp w the MT pieces
// of 16 rows from 16·MT·w, their query fragments in registers for the whole pass (a key
// fragment read from local memory serves MT products). For each block of BN keys: S = Q·Kᵀ
// (mma over D in steps of 16), the new row maxima (each lane holds two rows, the quad of 4
// lanes a row's BN values), the rescaling of the running sums and of O, then
// O += P·V with P's fragments taken straight from S's sums as float16/bfloat16 (a sum piece's
// layout is an A fragment's). Scores are in base 2 (scale · log2 e folded in): scale_log2 is
// |scale| · log2 e, and negate flips the query's signs for a negative scale.
//
// K and V come into local memory by cp.async (copy16), one block each: V's copies run while S
// is made, the next K's while O is. Rows are D (or E) values, 16-byte chunks placed by the
// XOR swizzle of mma.h, so that ldmatrix reads meet no bank conflicts. The query block
// passes through K's place on its way into registers, BN rows at a time. Only the blocks that
// reach past S, or past a row (causal), are masked. Causal, the work-groups of the last rows
// (the most keys) come first, so that the short ones fill the end.
//
// Build options: T (half or bfloat; T_IS_BFLOAT), D and E (the key and value widths, multiples
// of 16, at most 256), WARPS, MT, BN (a multiple of 16), CAUSAL, MMA_EMULATE (mma.h).
// Arguments: q (B,H,L,D), k (B,H/KVG,S,D), v (B,H/KVG,S,E) at element strides int4 (b, h,
// row, 1), the row strides, offsets and b, h strides multiples of 8; o (B,H,L,E) and
// lse (B,H,L) contiguous. NDRange: (ceil(L / BM) · B·H · 32·WARPS), work-groups of 32·WARPS,
// group g taking row block ceil(L / BM) - 1 - g / (B·H) of (b, h) = g % (B·H).
#include "mma.h"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef MT
#define MT 1
#endif
#ifndef BN
#define BN 64
#endif
#define ROWS (16 * MT)  // a warp's rows
#define BM (ROWS * WARPS)
#ifdef MMA_EMULATE
#define EXP2 exp2
#else
#define EXP2 native_exp2  // ex2.approx: a few units in float32's last place, far below T's
#endif
#define THREADS (32 * WARPS)
#if D % 16 || E % 16 || BN % 16
#error "flash_attention: D, E and BN multiples of 16"
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
    const int lse_off, const int B, const int H, const int KVG, const int L, const int S, const float scale_log2,
    const int negate) {
  __local ushort kt[BN * D] __attribute__((aligned(128)));
  __local ushort vt[BN * E] __attribute__((aligned(128)));
#ifdef MMA_EMULATE
  __local uint xw[EMU_WORDS(THREADS)];
#endif
  const int blocks_m = (L + BM - 1) / BM;
  const int bh = get_group_id(0) % (B * H), m0 = (blocks_m - 1 - (int)get_group_id(0) / (B * H)) * BM;
  const int b = bh / H, h = bh % H, g = h / KVG;
  __global const ushort *qb = (__global const ushort *)q + q_off + (long)b * qs.x + (long)h * qs.y;
  __global const ushort *kb = (__global const ushort *)k + k_off + (long)b * ks.x + (long)g * ks.y;
  __global const ushort *vb = (__global const ushort *)v + v_off + (long)b * vs.x + (long)g * vs.y;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int quad = lane >> 3, l8 = lane & 7;  // the matrix of an ldmatrix this lane addresses, and its row
  const int gr = lane >> 2, t = lane & 3;     // the rows gr, gr + 8 and the columns 2t, 2t + 1 of a piece
  const int first = ROWS * warp;              // the warp's first row in the block

  // The query block into registers, BN rows at a time through K's place (every warp reads
  // each time, keeping what falls in its rows: the same instructions for all).
  uint qf[MT][D / 16][4];
  for (int c0 = 0; c0 < BM; c0 += BN) {
    copy_rows(kt, qb, qs.z, m0 + c0, min(BN, BM - c0), L, D);
    CP_COMMIT();
    CP_WAIT_GROUP(0);
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int at = first + 16 * mt - c0;  // the piece's first row in this chunk
      const int mine = at >= 0 && at < BN;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint r[4];
        ldsm4(r, kt, K_AT((mine ? at : 0) + (quad & 1) * 8 + l8, 2 * kk + (quad >> 1)), 0 EMU_PASS);
        if (mine)
#pragma unroll
          for (int e = 0; e < 4; ++e) qf[mt][kk][e] = negate ? r[e] ^ 0x80008000u : r[e];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#ifdef CAUSAL
  const int keys = min(S, m0 + BM);  // the block's last row sees keys up to itself
#else
  const int keys = S;
#endif
  copy_rows(kt, kb, ks.z, 0, BN, keys, D);
  CP_COMMIT();
  copy_rows(vt, vb, vs.z, 0, BN, keys, E);
  CP_COMMIT();

  float acc[MT][E / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < E / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][i][e] = 0.0f;
  // Per row (piece mt, half hh: row first + 16·mt + gr + 8·hh): the running maximum, this lane's sum.
  float top[MT][2], total[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) top[mt][0] = top[mt][1] = -INFINITY, total[mt][0] = total[mt][1] = 0.0f;

  for (int n0 = 0; n0 < keys; n0 += BN) {
    CP_WAIT_GROUP(1);  // K's block is in (V's may be in flight)
    barrier(CLK_LOCAL_MEM_FENCE);
    float s[MT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {
        // Matrix quad: k 8·(quad % 2), piece j + quad / 2 (Kᵀ's b0, b1 of piece j, then of j + 1).
        uint r[4];
        ldsm4(r, kt, K_AT(8 * (j + (quad >> 1)) + l8, 2 * kk + (quad & 1)), 0 EMU_PASS);
        const uint b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(s[mt][j], qf[mt][kk], b0 EMU_PASS);
          mma16816(s[mt][j + 1], qf[mt][kk], b1 EMU_PASS);
        }
      }

    // The running softmax, the maxima over raw scores (scale_log2 ≥ 0: a negative scale came
    // as the query's sign), the powers of 2 of scale_log2 · (s - max) by one fma each; keys
    // past S (and past the row, causal) left out, in the blocks that reach them.
#ifdef CAUSAL
    const int edge = n0 + BN > S || n0 + BN - 1 > m0;
#else
    const int edge = n0 + BN > S;
#endif
    float scale[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = m0 + first + 16 * mt + gr + 8 * hh;
        float most = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float x = s[mt][j][2 * hh + c];
            if (edge) {
              const int col = n0 + 8 * j + 2 * t + c;
#ifdef CAUSAL
              if (col > row) x = -INFINITY;
#endif
              if (col >= S) x = -INFINITY;
            }
            s[mt][j][2 * hh + c] = x;
            most = fmax(most, x);
          }
        most = fmax(top[mt][hh], quad_reduce(most, 1 EMU_PASS));
        // A row with no key yet (all -inf) keeps zeros: nothing to rescale, nothing added.
        const float base = most == -INFINITY ? 0.0f : most, shift = base * scale_log2;
        scale[mt][hh] = top[mt][hh] == -INFINITY ? 0.0f : EXP2((top[mt][hh] - base) * scale_log2);
        top[mt][hh] = most;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float x = s[mt][j][2 * hh + c];
            float p = EXP2(fma(x, scale_log2, -shift));
            if (edge && x == -INFINITY) p = 0.0f;  // (a zero scale would make it NaN)
            s[mt][j][2 * hh + c] = p;
            sum += p;
          }
        total[mt][hh] = total[mt][hh] * scale[mt][hh] + sum;
      }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < E / 8; ++i) {
        acc[mt][i][0] *= scale[mt][0], acc[mt][i][1] *= scale[mt][0];
        acc[mt][i][2] *= scale[mt][1], acc[mt][i][3] *= scale[mt][1];
      }

    CP_WAIT_GROUP(0);  // V's block is in
    barrier(CLK_LOCAL_MEM_FENCE);  // and every warp is done with K's
    if (n0 + BN < keys) copy_rows(kt, kb, ks.z, n0 + BN, BN, keys, D);
    CP_COMMIT();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // P's A fragments over keys 16·kk ..: the sums of pieces 2kk and 2kk + 1.
      uint pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int i = 0; i < E / 8; i += 2) {
        // Matrix quad: keys 8·(quad % 2), columns of piece i + quad / 2 (V is [key][column]: trans).
        uint r[4];
        ldsm4(r, vt, V_AT(16 * kk + (quad & 1) * 8 + l8, i + (quad >> 1)), 1 EMU_PASS);
        const uint b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(acc[mt][i], pa[mt], b0 EMU_PASS);
          mma16816(acc[mt][i + 1], pa[mt], b1 EMU_PASS);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with V's block
    if (n0 + BN < keys) copy_rows(vt, vb, vs.z, n0 + BN, BN, keys, E);
    CP_COMMIT();
  }

  // The rows' sums over their quads; the outputs divided by them and stored in pairs.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_reduce(total[mt][hh], 0 EMU_PASS);
      const int row = m0 + first + 16 * mt + gr + 8 * hh;
      if (row >= L) continue;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      __global T *out = o + o_off + ((long)bh * L + row) * E;
#pragma unroll
      for (int i = 0; i < E / 8; ++i) {
        const int col = 8 * i + 2 * t;
        *(__global uint *)(out + col) = pack2(acc[mt][i][2 * hh] * inv, acc[mt][i][2 * hh + 1] * inv);
      }
      if (t == 0)
        lse[lse_off + (long)bh * L + row] = sum > 0.0f ? top[mt][hh] * scale_log2 * M_LN2_F + log(sum) : -INFINITY;
    }
}
