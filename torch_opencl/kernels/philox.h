// Counter-based random numbers of the opencl device: Philox 4x32 with 10 rounds (Salmon et
// al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), as CUDA's generator uses.
// philox_bits(seed, counter) gives four independent 32-bit words for each counter of the
// stream `seed`; a random kernel computes its element i from the counter offset + i, where
// (seed, offset) are its generator's state when it was launched (csrc/runtime/generator.h),
// so every work-item draws its own numbers without shared state and a range of elements
// is a range of counters (DTensor gives each shard its range).
//
//   philox_bits(seed, counter)    uint4: four 32-bit words
//   philox_unit(word)             a float in (0, 1] from a word's top 24 bits (a log stays finite)
//   philox_normal(bits)           a standard normal from two words (Box-Muller)
#ifndef DEVICE_PHILOX_H
#define DEVICE_PHILOX_H

// Each round's two 32x32-bit products are taken whole in 64 bits (their high and low words):
// on PoCL's CPU devices 3 times faster than mul_hi beside a low product, on four scalars
// rather than a uint4 (measured on 4M numbers: 58 ms of CPU against 190 and 340).
inline uint4 philox_bits(const ulong seed, const ulong counter) {
  uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = 0u, c3 = 0u;
  uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const ulong p0 = (ulong)0xD2511F53u * c0, p1 = (ulong)0xCD9E8D57u * c2;
    c0 = (uint)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint)p1;
    c2 = (uint)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint4)(c0, c1, c2, c3);
}

inline float philox_unit(const uint word) { return ((float)(word >> 8) + 1.0f) * 0x1.0p-24f; }

inline float philox_normal(const uint4 bits) {
  return sqrt(-2.0f * log(philox_unit(bits.x))) * cospi(2.0f * (float)(bits.y >> 8) * 0x1.0p-24f);
}

#endif  // DEVICE_PHILOX_H
