// The runtimes of the process's devices, the current device of each thread, and how each
// runtime's units are wired: see runtime.hpp.
#include "runtime.hpp"

#include <algorithm>
#include <atomic>

namespace oclf {

namespace {

// One slot per device, filled on first use and never freed (see Runtime()). Every operator
// asks for its runtime: a filled slot is one atomic load.
std::atomic<Runtime*> open_runtimes[kMaxDevices];
std::mutex opening;

thread_local int current_index = -1;  // -1: the default device

}  // namespace

int Runtime::count() { return static_cast<int>(device_set().ids.size()); }

int Runtime::default_index() { return device_set().default_index; }

int Runtime::current() { return current_index >= 0 ? current_index : default_index(); }

void Runtime::set_current(int index) {
  check_device_index(index);
  current_index = index;
}

bool Runtime::is_open(int index) {
  return index >= 0 && index < static_cast<int>(kMaxDevices) && open_runtimes[index].load() != nullptr;
}

Runtime& Runtime::at(int index) {
  if (index >= 0 && index < static_cast<int>(kMaxDevices))
    if (Runtime* rt = open_runtimes[index].load(std::memory_order_acquire)) return *rt;
  check_device_index(index);  // throws without a platform, too
  std::lock_guard<std::mutex> lock(opening);
  if (open_runtimes[index].load(std::memory_order_relaxed) == nullptr)
    open_runtimes[index].store(new Runtime(index), std::memory_order_release);
  return *open_runtimes[index].load(std::memory_order_relaxed);
}

Runtime& Runtime::get() { return at(current()); }

// Freed buffers are kept for reuse up to an eighth of device memory, at most 1 GiB.
Runtime::Runtime(int index)
    : device_(index),
      programs_(device_.context(), device_.id(), device_.info().device),
      profiler_(&device_),
      pool_(device_.context(), std::min<size_t>(device_.info().global_mem_size / 8, size_t(1) << 30)),
      residents_(&device_, &pool_),
      tuning_(&device_, &profiler_) {}

CurrentDevice::CurrentDevice(int index) {
  if (index < 0) return;
  saved_ = current_index;  // -1 (the default) stays -1, so the default comes back
  Runtime::set_current(index);
  active_ = true;
}

CurrentDevice::~CurrentDevice() {
  if (active_) current_index = saved_;
}

}  // namespace oclf
