// The runtime's single instance and how its units are wired: see runtime.hpp.
#include "runtime.hpp"

#include <algorithm>

namespace oclf {

Runtime& Runtime::get() {
  static Runtime* instance = new Runtime();
  return *instance;
}

// Freed buffers are kept for reuse up to an eighth of device memory, at most 1 GiB.
Runtime::Runtime()
    : programs_(device_.context(), device_.id(), device_.info().device),
      profiler_(device_.queue_ptr()),
      pool_(device_.context(), std::min<size_t>(device_.info().global_mem_size / 8, size_t(1) << 30)),
      residents_(device_.context(), device_.queue_ptr(), &pool_),
      tuning_(device_.info(), device_.queue_ptr(), &profiler_) {}

}  // namespace oclf
