// Random kernels of the opencl device (csrc/aten/random.cpp). Each takes its generator's
// (seed, offset) and gives element i the number offset + i of the stream (philox.h): word
// (offset + i) % 4 of the Philox block of counter (offset + i) / 4, so a draw depends on
// (seed, offset + i) only, whatever the launch's shape. One work-item per block: it computes
// the block once and writes the (up to) four consecutive elements its words give (fewer in
// the first block when the offset is not a multiple of 4, and in the last). Work-items:
// (offset % 4 + total + 3) / 4. Tensors are a buffer and an offset in elements.
//
//   dropout        y = x·scale where u_i ≥ p (mask[i] = 1), else 0 (mask 0); u_i in [0, 1)
//                  from element i's word.
//   random_fill    y (n) contiguous: uniform in [a, b) (mode 0), normal with mean a and standard
//                  deviation b (mode 1, Box-Muller: each pair of words gives two, the cosine's
//                  and the sine's), 1 with probability a, else 0 (mode 2), exponential of rate
//                  a (mode 3), log-normal of a normal (a, b) (mode 4), Cauchy of median a and
//                  scale b (mode 5), geometric of success probability a, from 1 (mode 6).
//   random_range32 y (n) contiguous, of type T: from + word mod range (range ≤ 2^16, where the
//                  remainder's bias stays below 2^-16; random_ and randint of small ranges).
//   random_range64 the same from 64-bit numbers, range 0 standing for 2^64: element i takes
//                  half (offset + i) % 2 of the block (offset + i) / 2 of stream 1, so a
//                  work-item writes two elements; work-items (offset % 2 + total + 1) / 2.
#include "philox.h"

#ifndef T
#define T float
#endif

// The element that word 0 of this work-item's block gives (negative where the offset enters
// the first block midway); `per` elements a block.
inline int first_element(const ulong block, const ulong offset, const int per) {
  return (int)((long)(block * per) - (long)offset);
}

__kernel void dropout(__global const float* x, const int x_off, __global float* y, const int y_off,
                      __global uchar* mask, const int mask_off, const ulong seed, const ulong offset, const float p,
                      const float scale, const int total) {
  const ulong block = offset / 4 + get_global_id(0);
  const int first = first_element(block, offset, 4);
  if (first >= total) return;
  const uint4 bits = philox_bits(seed, block);
  const float4 u = 1.0f - (convert_float4(bits >> 8) + 1.0f) * 0x1.0p-24f;  // [0, 1)
  const int4 keep = u >= p;                                               // -1 where kept
  if (first >= 0 && first + 4 <= total) {
    vstore4(select((float4)(0.0f), vload4(0, x + x_off + first) * scale, keep), 0, y + y_off + first);
    vstore4(convert_uchar4(-keep), 0, mask + mask_off + first);
    return;
  }
  const int kept[4] = {keep.x, keep.y, keep.z, keep.w};
  for (int j = 0; j < 4; ++j) {
    const int i = first + j;
    if (i < 0 || i >= total) continue;
    mask[mask_off + i] = kept[j] ? 1 : 0;
    y[y_off + i] = kept[j] ? x[x_off + i] * scale : 0.0f;
  }
}

// The four values of a block, written where they are elements: all at once inside the
// tensor, one by one in a partial block.
inline void store4(__global float* y, const int first, const int total, const float4 v) {
  if (first >= 0 && first + 4 <= total) {
    vstore4(v, 0, y + first);
    return;
  }
  const float values[4] = {v.x, v.y, v.z, v.w};
  for (int j = 0; j < 4; ++j)
    if (first + j >= 0 && first + j < total) y[first + j] = values[j];
}

__kernel void random_fill(__global float* y, const int y_off, const ulong seed, const ulong offset, const int mode,
                          const float a, const float b, const int total) {
  const ulong block = offset / 4 + get_global_id(0);
  const int first = first_element(block, offset, 4);
  if (first >= total) return;
  const uint4 bits = philox_bits(seed, block);
  const float4 u = (convert_float4(bits >> 8) + 1.0f) * 0x1.0p-24f;  // philox_unit of each word: (0, 1]
  float4 v;
  if (mode == 0) {
    v = a + (b - a) * (1.0f - u);  // [a, b)
  } else if (mode == 1 || mode == 4) {
    v = a + b * philox_normal4(bits);
    if (mode == 4) v = exp(v);
  } else if (mode == 2) {
    v = select((float4)(0.0f), (float4)(1.0f), 1.0f - u < a);
  } else if (mode == 3) {
    v = -log(u) / a;
  } else if (mode == 5) {
    v = a + b * tan(3.141592653589793f * (u - 0.5f));
  } else {
    v = fmax(ceil(log(u) / log1p(-a)), 1.0f);  // mode 6
  }
  store4(y + y_off, first, total, v);
}

// convert_T4 and convert_T2, T expanded first.
#define PASTE3(a, b, c) a##b##c
#define CONVERT(t, n) PASTE3(convert_, t, n)

__kernel void random_range32(__global T* y, const int y_off, const ulong seed, const ulong offset, const long from,
                             const uint range, const int total) {
  const ulong block = offset / 4 + get_global_id(0);
  const int first = first_element(block, offset, 4);
  if (first >= total) return;
  const long4 v = convert_long4(philox_bits(seed, block) % range) + from;
  if (first >= 0 && first + 4 <= total) {
    vstore4(CONVERT(T, 4)(v), 0, y + y_off + first);
    return;
  }
  const long values[4] = {v.x, v.y, v.z, v.w};
  for (int j = 0; j < 4; ++j)
    if (first + j >= 0 && first + j < total) y[y_off + first + j] = (T)values[j];
}

__kernel void random_range64(__global T* y, const int y_off, const ulong seed, const ulong offset, const long from,
                             const ulong range, const int total) {
  const ulong block = offset / 2 + get_global_id(0);
  const int first = first_element(block, offset, 2);
  if (first >= total) return;
  const uint4 bits = philox_block(seed, block, 1u);
  ulong2 wide = (ulong2)(((ulong)bits.x << 32) | bits.y, ((ulong)bits.z << 32) | bits.w);
  if (range) wide %= range;
  const long2 v = as_long2(wide) + from;
  if (first >= 0 && first + 2 <= total) {
    vstore2(CONVERT(T, 2)(v), 0, y + y_off + first);
  } else if (first >= 0) {
    y[y_off + first] = (T)v.x;  // the last block holds one element
  } else {
    y[y_off + first + 1] = (T)v.y;  // the offset entered the first block midway
  }
}
