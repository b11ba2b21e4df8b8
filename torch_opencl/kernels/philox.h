// Counter-based random numbers of the opencl device: Philox 4x32 with 10 rounds (Salmon et
// al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), as CUDA's generator uses.
// A generator's offset counts 32-bit numbers of the stream `seed`: number k is word k % 4 of
// the block of counter k / 4 (the four words one Philox evaluation gives), so a random
// kernel that draws n numbers at offset o gives its element i number o + i, and a work-item
// computes one block for the (up to) four elements whose numbers it holds (kernels/random.cl).
// Where (seed, offset) are the generator's state at the launch (csrc/runtime/generator.h), no
// state lives on the device and a range of elements is a range of numbers (DTensor gives
// each shard its range). Draws of 64 bits take number k from half k % 2 of the block k / 2 of
// a second stream (the counter's third word 1), so they share no words with the first.
//
//   philox_block(seed, counter, stream)  uint4: the four 32-bit words of (counter, stream)
//   philox_bits(seed, counter)           the same in stream 0 (the compiled kernels' numbers)
//   philox_unit(word)                    a float in (0, 1] from a word's top 24 bits (a log stays finite)
//   philox_normal(bits)                  a standard normal from two words (Box-Muller)
//   philox_normal4(bits)                 four standard normals from four words (both of
//                                        Box-Muller's on each pair: cosine, then sine)
#ifndef DEVICE_PHILOX_H
#define DEVICE_PHILOX_H

// Each round's two 32x32-bit products are taken whole in 64 bits (their high and low words):
// on PoCL's CPU devices 3 times faster than mul_hi beside a low product, on four scalars
// rather than a uint4 (measured on 4M numbers: 58 ms of CPU against 190 and 340).
inline uint4 philox_block(const ulong seed, const ulong counter, const uint stream) {
  uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = stream, c3 = 0u;
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

inline uint4 philox_bits(const ulong seed, const ulong counter) { return philox_block(seed, counter, 0u); }

inline float philox_unit(const uint word) { return ((float)(word >> 8) + 1.0f) * 0x1.0p-24f; }

inline float philox_normal(const uint4 bits) {
  return sqrt(-2.0f * log(philox_unit(bits.x))) * cospi(2.0f * (float)(bits.y >> 8) * 0x1.0p-24f);
}

inline float4 philox_normal4(const uint4 bits) {
  const float r0 = sqrt(-2.0f * log(philox_unit(bits.x))), r1 = sqrt(-2.0f * log(philox_unit(bits.z)));
  const float t0 = 2.0f * (float)(bits.y >> 8) * 0x1.0p-24f, t1 = 2.0f * (float)(bits.w >> 8) * 0x1.0p-24f;
  return (float4)(r0 * cospi(t0), r0 * sinpi(t0), r1 * cospi(t1), r1 * sinpi(t1));
}

#endif  // DEVICE_PHILOX_H
