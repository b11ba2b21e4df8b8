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

cl_mem Runtime::tile_counters(size_t n) {
  if (n > tile_counters_n_) {
    const size_t count = std::max<size_t>({n, 2 * tile_counters_n_, 1024});
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(context(), CL_MEM_READ_WRITE, count * sizeof(cl_int), nullptr, &err);
    CL_CHECK(err);
    const cl_int zero = 0;
    err = clEnqueueFillBuffer(queue(), mem, &zero, sizeof(zero), 0, count * sizeof(cl_int), 0, nullptr, nullptr);
    if (err != CL_SUCCESS) {
      clReleaseMemObject(mem);
      CL_CHECK(err);
    }
    if (tile_counters_) clReleaseMemObject(tile_counters_);  // freed once the launches using it are done
    tile_counters_ = mem;
    tile_counters_n_ = count;
  }
  return tile_counters_;
}

}  // namespace oclf
