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

inline uint4 philox_rounds(uint2 key, uint4 counter) {
  for (int round = 0; round < 10; ++round) {
    const uint hi0 = mul_hi(0xD2511F53u, counter.x), lo0 = 0xD2511F53u * counter.x;
    const uint hi1 = mul_hi(0xCD9E8D57u, counter.z), lo1 = 0xCD9E8D57u * counter.z;
    counter = (uint4)(hi1 ^ counter.y ^ key.x, lo1, hi0 ^ counter.w ^ key.y, lo0);
    key += (uint2)(0x9E3779B9u, 0xBB67AE85u);
  }
  return counter;
}

inline uint4 philox_bits(const ulong seed, const ulong counter) {
  return philox_rounds((uint2)((uint)seed, (uint)(seed >> 32)), (uint4)((uint)counter, (uint)(counter >> 32), 0u, 0u));
}

inline float philox_unit(const uint word) { return ((float)(word >> 8) + 1.0f) * 0x1.0p-24f; }

inline float philox_normal(const uint4 bits) {
  return sqrt(-2.0f * log(philox_unit(bits.x))) * cospi(2.0f * (float)(bits.y >> 8) * 0x1.0p-24f);
}

#endif  // DEVICE_PHILOX_H
