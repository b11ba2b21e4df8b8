// Random numbers of the opencl device: torch.Generator(device="opencl:i") and each device's
// default generator, which torch.manual_seed seeds (through torch.opencl.manual_seed_all).
// The device's numbers are a stream of their own, as CUDA's are, not the CPU generator's: a
// generator is a Philox 4x32-10 key (the seed) and a counter (the offset), and its state is
// CUDA's layout, 16 bytes: the seed (uint64) then the offset (int64), which torch's
// distributed RNG tracker (DTensor) reads and writes. A random kernel that draws n numbers
// takes (seed, offset) and gives element i the number offset + i of the stream, a word of the
// Philox block of counter (offset + i) / 4 (kernels/philox.h), so no state lives on the
// device; the generator's offset then moves on by n rounded up to a multiple of 4 (as CUDA's
// and DTensor's offsets). A seed repeats a run; saving and restoring
// the state (torch.opencl.get_rng_state, fork_rng, activation checkpointing) repeats its
// numbers.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <optional>

namespace oclf::device {

// What a random kernel computes its numbers from: element i takes number offset + i of the
// stream of key `seed` (word (offset + i) % 4 of the block of counter (offset + i) / 4).
struct PhiloxInputs {
  uint64_t seed;
  uint64_t offset;
};

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  DeviceGenerator(int index, uint64_t seed);

  // A new seed starts its stream from the beginning (offset 0), as CUDA's.
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  // Seeds the generator from a nondeterministic source and returns that seed.
  uint64_t seed() override;
  // The state: 16 bytes (uint8 CPU tensor), the seed then the offset, as CUDA's.
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  // The inputs of a kernel drawing `count` numbers; the offset moves past them (callers
  // hold mutex_).
  PhiloxInputs advance(uint64_t count);

  static constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

 private:
  DeviceGenerator* clone_impl() const override;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

// The default generator of device `index` (made on first use, seeded with torch's default seed).
const at::Generator& default_generator(int index);
// A new generator of device `index`.
at::Generator new_generator(int index);
// The inputs of one random kernel that draws `count` numbers: from `gen` (an opencl
// generator; a CPU generator gives a seed of its stream and offset 0), else from the current
// device's default generator.
PhiloxInputs draw_philox(const std::optional<at::Generator>& gen, uint64_t count);

}  // namespace oclf::device
