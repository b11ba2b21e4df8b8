// The warp instructions of the tensor-core kernels (gemm16_mma.cl, flash_attention.cl), as
// inline PTX for NVIDIA devices of compute capability 8.0 and later (NVIDIA's OpenCL compiler
// passes asm statements through), or, with MMA_EMULATE, in plain OpenCL C: local memory and
// barriers stand in for the warp's exchanges, so that any device runs a kernel's index math
// (for tests; slow). T is half or bfloat (dtypes.h; T_IS_BFLOAT for bfloat).
//
//   copy16(smem, dst, src, bytes)  16 bytes from global src to local element dst, bytes of them
//                                  read and the rest zeros (cp.async: no registers; in flight
//                                  until CP_WAIT_GROUP)
//   CP_COMMIT(), CP_WAIT_GROUP(n)  closes this work-item's group of copies; waits until at most
//                                  n groups are in flight
//   ldsm4(r, smem, off, trans)     ldmatrix .x4: lane l gives the offset of row l % 8 of matrix
//                                  l / 8; r[q] is matrix q's (row l / 4, columns 2(l % 4), +1),
//                                  or with trans its (rows 2(l % 4), +1, column l / 4)
//   mma16816(d, a, b)              d += a · b, mma.sync.m16n8k16 with float sums (PTX ISA,
//                                  "Matrix fragments for mma.m16n8k16": lane l = 4·g + t holds
//                                  A's (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..), (g+8, 2t+8..),
//                                  B's (2t..2t+1, g), (2t+8..2t+9, g), sums (g, 2t..), (g+8, 2t..))
//   quad_max(v), quad_sum(v)       over the 4 lanes of v's quad (lanes 4·g .. 4·g + 3)
//   pack2(lo, hi)                  two floats as T, lo in the low 16 bits
//   SWZ(row, ch, cc)               where a tile in local memory keeps its rows' 16-byte chunks
// Under MMA_EMULATE the functions take the work-group's exchange area xw (EMU_ARGS, EMU_PASS:
// 6 words per work-item, EMU_WORDS(threads) in all) and every work-item must call them the same
// number of times, so that their barriers are uniform.
#ifndef MMA_H
#define MMA_H

#include "dtypes.h"

#ifdef T_IS_BFLOAT
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#else
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#define EMU_WORDS(threads) ((threads)*6)

// The chunk where chunk `ch` of row `row` is kept, in rows of `cc` chunks: 8 consecutive rows
// at one chunk land in 8 distinct 16-byte bank groups (a 128-byte span of banks holds 8
// chunks: one row of 8 chunks or more, two rows of 4, four rows of 2). The chunks of whole
// groups of 8 are permuted within their group, a tail of 4 or 2 (rows of 12 or 10 chunks: head
// widths of 96 or 80) within the tail, so every chunk stays in its row.
inline int swizzled_chunk(int row, int ch, int cc) {
  const int whole = cc & ~7;
  if (ch < whole) return ch ^ (row & 7);
  const int tail = cc - whole, at = ch - whole;
  return whole + (tail == 4 ? at ^ ((row >> 1) & 3) : tail == 2 ? at ^ ((row >> 2) & 1) : at);
}
#define SWZ(row, ch, cc) swizzled_chunk(row, ch, cc)

// Two floats as T, rounded to nearest even, lo in the low 16 bits: one cvt on the hardware.
inline uint pack2(float lo, float hi) {
#ifndef MMA_EMULATE
  uint out;
#ifdef T_IS_BFLOAT
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
#endif
  return out;
#elif defined(T_IS_BFLOAT)
  return (uint)float_to_bfloat(lo) | ((uint)float_to_bfloat(hi) << 16);
#else
  ushort h[2];
  vstore_half_rte(lo, 0, (__private half *)h);
  vstore_half_rte(hi, 1, (__private half *)h);
  return (uint)h[0] | ((uint)h[1] << 16);
#endif
}

#ifdef MMA_EMULATE
#define EMU_ARGS , __local uint *xw
#define EMU_PASS , xw

inline float bits_to_float(uint bits) {
#ifdef T_IS_BFLOAT
  return as_float(bits << 16);
#else
  const ushort h = (ushort)bits;
  return vload_half(0, (const __private half *)&h);
#endif
}

inline void copy16(__local ushort *smem, int dst, __global const ushort *src, int bytes) {
  for (int e = 0; e < 8; ++e) smem[dst + e] = 2 * e < bytes ? src[e] : (ushort)0;
}

inline void ldsm4(uint r[4], __local const ushort *smem, int off, int trans EMU_ARGS) {
  const int lane = get_local_id(0) & 31;
  __local uint *x = xw + (get_local_id(0) >> 5) * 32 * 6;
  barrier(CLK_LOCAL_MEM_FENCE);
  x[lane * 6] = (uint)off;
  barrier(CLK_LOCAL_MEM_FENCE);
  const int g = lane >> 2, t = lane & 3;
  for (int q = 0; q < 4; ++q) {
    uint lo, hi;
    if (trans) {
      lo = smem[x[(8 * q + 2 * t) * 6] + g];
      hi = smem[x[(8 * q + 2 * t + 1) * 6] + g];
    } else {
      lo = smem[x[(8 * q + g) * 6] + 2 * t];
      hi = smem[x[(8 * q + g) * 6] + 2 * t + 1];
    }
    r[q] = lo | (hi << 16);
  }
}

inline void mma16816(float d[4], const uint a[4], const uint b[2] EMU_ARGS) {
  const int lane = get_local_id(0) & 31;
  __local uint *x = xw + (get_local_id(0) >> 5) * 32 * 6;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = 0; i < 4; ++i) x[lane * 6 + i] = a[i];
  x[lane * 6 + 4] = b[0];
  x[lane * 6 + 5] = b[1];
  barrier(CLK_LOCAL_MEM_FENCE);
  const int g = lane >> 2, t = lane & 3;
  for (int c = 0; c < 4; ++c) {
    const int row = g + 8 * (c >> 1), col = 2 * t + (c & 1);
    float sum = 0.0f;
    for (int kk = 0; kk < 16; ++kk) {
      const uint aw = x[(4 * (row & 7) + (kk & 7) / 2) * 6 + (row >> 3) + 2 * (kk >> 3)];
      const uint bw = x[(4 * col + (kk & 7) / 2) * 6 + 4 + (kk >> 3)];
      sum += bits_to_float((kk & 1) ? aw >> 16 : aw & 0xffff) * bits_to_float((kk & 1) ? bw >> 16 : bw & 0xffff);
    }
    d[c] += sum;
  }
}

// v combined over the 4 lanes of its quad (op 1: max, 0: sum).
inline float quad_reduce(float v, int is_max EMU_ARGS) {
  const int lid = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  xw[lid * 6] = as_uint(v);
  barrier(CLK_LOCAL_MEM_FENCE);
  const int first = lid & ~3;
  // The lanes in the order of the butterfly (xor 1, then xor 2), as the hardware path sums.
  const float a = as_float(xw[first * 6]), b = as_float(xw[(first + 1) * 6]);
  const float c = as_float(xw[(first + 2) * 6]), d = as_float(xw[(first + 3) * 6]);
  return is_max ? fmax(fmax(a, b), fmax(c, d)) : (a + b) + (c + d);
}
#define CP_COMMIT()
#define CP_WAIT_GROUP(n)
#else
#define EMU_ARGS
#define EMU_PASS

inline void copy16(__local ushort *smem, int dst, __global const ushort *src, int bytes) {
  const uint at = (uint)(size_t)smem + 2u * (uint)dst;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(at), "l"((ulong)(size_t)src), "r"(bytes)
               : "memory");
}

inline void ldsm4(uint r[4], __local const ushort *smem, int off, int trans) {
  const uint at = (uint)(size_t)smem + 2u * (uint)off;
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
}

inline void mma16816(float d[4], const uint a[4], const uint b[2]) {
  asm volatile(MMA_OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

inline float shfl_xor(float v, int lanes) {
  uint out;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(out) : "r"(as_uint(v)), "r"(lanes));
  return as_float(out);
}

inline float quad_reduce(float v, int is_max) {
  const float a = shfl_xor(v, 1);
  v = is_max ? fmax(v, a) : v + a;
  const float b = shfl_xor(v, 2);
  return is_max ? fmax(v, b) : v + b;
}
#define CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define CP_WAIT_GROUP(n) asm volatile("cp.async.wait_group " STR(n) ";" ::: "memory")
#endif

#endif  // MMA_H
