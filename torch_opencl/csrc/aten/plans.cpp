// Plans kept per call shape: see plans.h.
#include "plans.h"

#include <torch/library.h>

#include <charconv>
#include <mutex>
#include <unordered_map>

#include "opencl_functions/runtime/runtime.hpp"

namespace oclf::device::plans {

namespace {

// One device's plans, and the count of its tuning cache's changes they were made under.
struct DevicePlans {
  std::unordered_map<std::string, Plan> plans;
  uint64_t tuning_changes = 0;

  // Drops the plans when the device's tuning cache changed since they were made.
  void check(const Tuning& tuning) {
    if (tuning_changes == tuning.changes()) return;
    plans.clear();
    tuning_changes = tuning.changes();
  }
};

struct Kept {
  std::mutex mutex;
  std::unordered_map<int, DevicePlans> devices;  // by device index
  uint64_t made = 0;
};

Kept& kept() {
  static Kept* k = new Kept();  // never destroyed: used from autograd threads at exit
  return *k;
}

}  // namespace

Key::Key(const char* op) : text_(op) { text_.reserve(160); }

Key& Key::operator<<(int64_t value) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  text_.push_back(' ');
  text_.append(digits, end);
  return *this;
}

Key& Key::operator<<(const std::string& text) {
  text_.push_back('|');
  text_ += text;
  return *this;
}

Plan remembered(Key key, const std::function<Plan()>& make) {
  // The settings every plan depends on: OCLF_TUNE (cached choices or none, measuring or not)
  // and the kernel folder (the sources' hashes key the tuning cache).
  key << int64_t(Tuning::mode()) << Programs::kernel_dir();
  Runtime& rt = Runtime::get();
  const Tuning& tuning = rt.tuning();
  Kept& k = kept();
  {
    std::lock_guard<std::mutex> lock(k.mutex);
    DevicePlans& device = k.devices[rt.index()];
    device.check(tuning);
    auto it = device.plans.find(key.text());
    if (it != device.plans.end()) return it->second;
  }
  Plan plan = make();
  std::lock_guard<std::mutex> lock(k.mutex);
  ++k.made;
  // A measurement in make() changed the tuning cache: the plans kept before it are dropped,
  // this one (made after it) is kept.
  DevicePlans& device = k.devices[rt.index()];
  device.check(tuning);
  device.plans[key.text()] = plan;
  return plan;
}

uint64_t made() {
  std::lock_guard<std::mutex> lock(kept().mutex);
  return kept().made;
}

int64_t plans_made() { return int64_t(made()); }

}  // namespace oclf::device::plans

TORCH_LIBRARY_FRAGMENT(oclf, m) { m.def("plans_made() -> int", &oclf::device::plans::plans_made); }
