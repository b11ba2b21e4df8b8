// Random numbers of the opencl device: torch.Generator(device="opencl:i") and each device's
// default generator, which torch.manual_seed seeds (through torch.opencl.manual_seed_all).
// A device generator keeps an MT19937 engine on the host, as torch's CPU generator does (its
// state is a CPU generator's state, so get_state/set_state and fork_rng work); each random
// kernel (dropout, uniform_, normal_, bernoulli_, multinomial's draws) takes one 64-bit seed
// drawn from it, so a seed repeats a run.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <memory>
#include <optional>

namespace oclf::device {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  DeviceGenerator(int index, uint64_t seed);

  void set_current_seed(uint64_t seed) override { engine_->set_current_seed(seed); }
  void set_offset(uint64_t offset) override { engine_->set_offset(offset); }
  uint64_t get_offset() const override { return engine_->get_offset(); }
  uint64_t current_seed() const override { return engine_->current_seed(); }
  uint64_t seed() override { return engine_->seed(); }
  void set_state(const c10::TensorImpl& state) override { engine_->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return engine_->get_state(); }
  // The seed of one random kernel (callers hold mutex_).
  uint64_t next_seed() { return engine_->random64(); }

 private:
  DeviceGenerator(int index, std::shared_ptr<at::CPUGeneratorImpl> engine);
  DeviceGenerator* clone_impl() const override;
  std::shared_ptr<at::CPUGeneratorImpl> engine_;
};

// The default generator of device `index` (made on first use, seeded with torch's default seed).
const at::Generator& default_generator(int index);
// A new generator of device `index`.
at::Generator new_generator(int index);
// The seed of one random kernel: from `gen` (an opencl or a CPU generator), else from the
// current device's default generator.
uint64_t draw_seed(const std::optional<at::Generator>& gen);

}  // namespace oclf::device
