// The opencl device's generators (see generator.h).
#include "generator.h"

#include <atomic>
#include <mutex>

#include "../check.h"
#include "device.h"

namespace oclf::device {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::Device device_of(int index) { return c10::Device(kType, static_cast<c10::DeviceIndex>(index)); }

}  // namespace

DeviceGenerator::DeviceGenerator(int index, uint64_t seed)
    : DeviceGenerator(index, std::make_shared<at::CPUGeneratorImpl>(seed)) {}

DeviceGenerator::DeviceGenerator(int index, std::shared_ptr<at::CPUGeneratorImpl> engine)
    : c10::GeneratorImpl(device_of(index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(std::move(engine)) {}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  return new DeviceGenerator(device_.index(), engine_->clone());
}

const at::Generator& default_generator(int index) {
  static std::atomic<at::Generator*> defaults[kMaxDevices];
  static std::mutex making;
  const int n = Device::count();
  DEVICE_CHECK(index >= 0 && index < n, "opencl: there is no device ", index, "; the process has ", n);
  if (at::Generator* made = defaults[index].load(std::memory_order_acquire)) return *made;
  std::lock_guard<std::mutex> lock(making);
  if (defaults[index].load(std::memory_order_relaxed) == nullptr)  // never freed, as the devices
    defaults[index].store(new at::Generator(at::make_generator<DeviceGenerator>(index, c10::default_rng_seed_val)),
                          std::memory_order_release);
  return *defaults[index].load(std::memory_order_relaxed);
}

at::Generator new_generator(int index) {
  const int n = Device::count();
  DEVICE_CHECK(index >= 0 && index < n, "opencl: there is no device ", index, "; the process has ", n);
  return at::make_generator<DeviceGenerator>(index, c10::default_rng_seed_val);
}

uint64_t draw_seed(const std::optional<at::Generator>& gen) {
  at::Generator g = gen && gen->defined() ? *gen : default_generator(Runtime::current());
  std::lock_guard<std::mutex> lock(g.mutex());
  if (g.device().is_cpu()) return at::check_generator<at::CPUGeneratorImpl>(g)->random64();
  DEVICE_CHECK(g.device().type() == kType, "opencl: random numbers take an opencl or a CPU generator, got one of ",
               g.device());
  return static_cast<DeviceGenerator*>(g.unsafeGetGeneratorImpl())->next_seed();
}

}  // namespace oclf::device
