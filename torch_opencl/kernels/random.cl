// Random kernels of the opencl device (csrc/aten/random.cpp). Each takes its generator's
// (seed, offset) and computes element i from the Philox counter offset + i (philox.h): the
// four words of that counter are element i's alone, so a draw depends on (seed, offset + i)
// only, whatever the launch's shape. One work-item per element; tensors are a buffer and an
// offset in elements.
//
//   dropout       y = x·scale where u_i ≥ p (mask[i] = 1), else 0 (mask 0); u_i in [0, 1)
//                 from word 0.
//   random_fill   y (n) contiguous: uniform in [a, b) (mode 0), normal with mean a and standard
//                 deviation b (mode 1, Box-Muller on words 0 and 1), 1 with probability a,
//                 else 0 (mode 2), exponential of rate a (mode 3), log-normal of a normal
//                 (a, b) (mode 4), Cauchy of median a and scale b (mode 5), geometric of success
//                 probability a, from 1 (mode 6).
//   random_range  y (n) contiguous, of type T: from + (words 2 and 3 as one 64-bit number) mod
//                 range, range 0 standing for 2^64 (random_ and randint on every computing type).
#include "philox.h"

#ifndef T
#define T float
#endif

__kernel void dropout(__global const float* x, const int x_off, __global float* y, const int y_off,
                      __global uchar* mask, const int mask_off, const ulong seed, const ulong offset, const float p,
                      const float scale, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const float u = 1.0f - philox_unit(philox_bits(seed, offset + i).x);  // [0, 1)
  const uchar keep = u >= p;
  mask[mask_off + i] = keep;
  y[y_off + i] = keep ? x[x_off + i] * scale : 0.0f;
}

__kernel void random_fill(__global float* y, const int y_off, const ulong seed, const ulong offset, const int mode,
                          const float a, const float b, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const uint4 bits = philox_bits(seed, offset + i);
  const float u = philox_unit(bits.x);  // (0, 1]
  float v;
  if (mode == 0) {
    v = a + (b - a) * (1.0f - u);  // [a, b)
  } else if (mode == 1 || mode == 4) {
    v = a + b * philox_normal(bits);
    if (mode == 4) v = exp(v);
  } else if (mode == 2) {
    v = (1.0f - u) < a ? 1.0f : 0.0f;
  } else if (mode == 3) {
    v = -log(u) / a;
  } else if (mode == 5) {
    v = a + b * tan(3.141592653589793f * (u - 0.5f));
  } else {
    v = ceil(log(u) / log1p(-a));  // mode 6
    v = v < 1.0f ? 1.0f : v;
  }
  y[y_off + i] = v;
}

__kernel void random_range(__global T* y, const int y_off, const ulong seed, const ulong offset, const long from,
                           const ulong range, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const uint4 bits = philox_bits(seed, offset + i);
  const ulong h = ((ulong)bits.z << 32) | bits.w;
  y[y_off + i] = (T)(from + (long)(range ? h % range : h));
}
