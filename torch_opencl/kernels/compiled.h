// Helpers of the kernels torch.compile generates for the opencl device
// (torch_opencl/compile/). Each generated source includes this header; its
// kernels read and write through dtypes.h (READ / WRITE: float16 by vload_half and
// vstore_half_rte, bfloat16 as ushort, bool as uchar).
//
//   PY_FLOORDIV(a, b), PY_MOD(a, b)   integer division and remainder rounded as
//                                           Python's // and % (toward -inf): index math
//                                           whose dividend may be negative (padding)
//   oclf_ipow(base, exp)                    an integer to a natural power
//   oclf_round_half(x), oclf_round_bfloat(x) a float rounded to float16 / bfloat16 and back
//                                           (what .to(float16) does to a value in float)
//   oclf_atomic_add_float(p, v), oclf_atomic_add_int(p, v)   *p += v for stores that
//                                           accumulate (index_put with accumulate=True)
//   oclf_rand(seed, offset), oclf_randn(...), oclf_randint64(...)   counter-based random
//                                           numbers (Philox 4x32-10, philox.h): the
//                                           value at `offset` of the stream `seed`, so
//                                           every work-item draws its own without shared
//                                           state
//   KEEP_INDEX_IN(var, n)                   an index read through a tensor (an embedding's
//                                           ids) kept inside [0, n): one outside is written
//                                           to the device's index record (oclf_record,
//                                           oclf_code: parameters the generator adds), raised
//                                           at the next wait for the device, and clamped so
//                                           that no access leaves the tensor
#ifndef DEVICE_COMPILED_H
#define DEVICE_COMPILED_H

#include "dtypes.h"
#include "index_record.h"
#include "philox.h"

#define PY_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) && (((a) < 0) != ((b) < 0))))
#define PY_MOD(a, b) ((((a) % (b)) != 0 && ((((a) % (b)) < 0) != ((b) < 0))) ? ((a) % (b)) + (b) : ((a) % (b)))

#define KEEP_INDEX_IN(var, n)                                                  \
  if ((var) < 0 || (var) >= (n)) {                                             \
    index_record_error(oclf_record, oclf_code, (long)(var), (long)(n), -1L);   \
    var = clamp((long)(var), 0L, max((long)(n) - 1L, 0L));                     \
  }

inline long oclf_ipow(long base, long exp) {
  long result = 1;
  while (exp > 0) {
    if (exp & 1) result *= base;
    base *= base;
    exp >>= 1;
  }
  return result;
}

inline float oclf_round_half(const float x) {
  ushort bits;
  vstore_half_rte(x, 0, (__private half*)&bits);
  return vload_half(0, (__private const half*)&bits);
}

inline float oclf_round_bfloat(const float x) { return bfloat_to_float(float_to_bfloat(x)); }

// Compare-and-swap until no other work-item changed *p in between; every access is atomic
// (the first guess, 0.0f, is checked by the first exchange).
inline void oclf_atomic_add_float(volatile __global float* p, const float v) {
  volatile __global uint* word = (volatile __global uint*)p;
  uint expected = 0u;
  for (;;) {
    const uint seen = atomic_cmpxchg(word, expected, as_uint(as_float(expected) + v));
    if (seen == expected) break;
    expected = seen;
  }
}

inline void oclf_atomic_add_int(volatile __global int* p, const int v) { atomic_add(p, v); }

// The Philox numbers of the device's random kernels (philox.h).
inline uint4 oclf_random_bits(const long seed, const long offset) { return philox_bits((ulong)seed, (ulong)offset); }

// Uniform in [0, 1): the top 24 bits of one word, so every value is a float exactly.
inline float oclf_rand(const long seed, const long offset) {
  return (float)(oclf_random_bits(seed, offset).x >> 8) * 0x1.0p-24f;
}

// Standard normal, by Box-Muller on two words.
inline float oclf_randn(const long seed, const long offset) { return philox_normal(oclf_random_bits(seed, offset)); }

// An integer in [low, high).
inline long oclf_randint64(const long seed, const long offset, const long low, const long high) {
  const uint4 bits = oclf_random_bits(seed, offset);
  const ulong wide = ((ulong)bits.y << 32) | bits.x;
  return low + (long)(wide % (ulong)(high - low));
}

#endif  // DEVICE_COMPILED_H
