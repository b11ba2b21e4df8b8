// The opencl device's generators (see generator.h).
#include "generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "../check.h"
#include "stream.h"

namespace oclf::device {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::Device device_of(int index) { return c10::Device(kType, static_cast<c10::DeviceIndex>(index)); }

}  // namespace

DeviceGenerator::DeviceGenerator(int index, uint64_t seed)
    : c10::GeneratorImpl(device_of(index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)), seed_(seed) {}

void DeviceGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t DeviceGenerator::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(random);
  return random;
}

c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  at::Tensor state = at::empty({int64_t(kStateBytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  uint8_t* bytes = state.data_ptr<uint8_t>();
  const int64_t offset = static_cast<int64_t>(offset_);
  std::memcpy(bytes, &seed_, sizeof(seed_));
  std::memcpy(bytes + sizeof(seed_), &offset, sizeof(offset));
  return state.getIntrusivePtr();
}

void DeviceGenerator::set_state(const c10::TensorImpl& state) {
  DEVICE_CHECK(state.layout() == c10::kStrided && state.device().is_cpu() && state.dtype() == at::kByte,
               "opencl: a generator's state is a uint8 CPU tensor (torch.opencl.get_rng_state()), got one of ",
               std::string(state.dtype().name()), " on ", state.device());
  DEVICE_CHECK(state.numel() == int64_t(kStateBytes) && state.is_contiguous(),
               "opencl: a generator's state is ", kStateBytes, " bytes (its seed, then its offset, as CUDA's), got ",
               state.numel());
  const uint8_t* bytes = static_cast<const uint8_t*>(state.data());
  uint64_t seed = 0;
  int64_t offset = 0;
  std::memcpy(&seed, bytes, sizeof(seed));
  std::memcpy(&offset, bytes + sizeof(seed), sizeof(offset));
  DEVICE_CHECK(offset >= 0, "opencl: a generator's offset cannot be negative, got ", offset);
  seed_ = seed;
  offset_ = static_cast<uint64_t>(offset);
}

PhiloxInputs DeviceGenerator::advance(uint64_t count) {
  const PhiloxInputs inputs{seed_, offset_};
  offset_ += (count + 3) / 4 * 4;
  return inputs;
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  auto* copy = new DeviceGenerator(device_.index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(int index) {
  static std::atomic<at::Generator*> defaults[kMaxDevices];
  static std::mutex making;
  check_device_index(index);
  if (at::Generator* made = defaults[index].load(std::memory_order_acquire)) return *made;
  std::lock_guard<std::mutex> lock(making);
  if (defaults[index].load(std::memory_order_relaxed) == nullptr)  // never freed, as the devices
    defaults[index].store(new at::Generator(at::make_generator<DeviceGenerator>(index, c10::default_rng_seed_val)),
                          std::memory_order_release);
  return *defaults[index].load(std::memory_order_relaxed);
}

at::Generator new_generator(int index) {
  check_device_index(index);
  return at::make_generator<DeviceGenerator>(index, c10::default_rng_seed_val);
}

PhiloxInputs draw_philox(const std::optional<at::Generator>& gen, uint64_t count) {
  at::Generator g = gen && gen->defined() ? *gen : default_generator(Runtime::current());
  std::lock_guard<std::mutex> lock(g.mutex());
  if (g.device().is_cpu()) return {at::check_generator<at::CPUGeneratorImpl>(g)->random64(), 0};
  DEVICE_CHECK(g.device().type() == kType, "opencl: random numbers take an opencl or a CPU generator, got one of ",
               g.device());
  return static_cast<DeviceGenerator*>(g.unsafeGetGeneratorImpl())->advance(count);
}

}  // namespace oclf::device
