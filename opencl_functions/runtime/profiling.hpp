// Timing of the device's work from OpenCL profiling events: every launch is recorded, and
// the time of an operation is the sum of its kernels' spans.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "device.hpp"
#include "errors.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class Profiler {
 public:
  explicit Profiler(const Device* device) : device_(device) {}
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Enqueues an NDRange and records its event. `local` may be null. An empty range
  // enqueues nothing (OpenCL 1.2 rejects it).
  void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local);
  // Keeps an event (from CLBlast, say) for timing; the profiler releases it. Its time runs
  // from its own start, or from the end of `since` (a marker()) when given.
  void record(cl_event event, cl_event since = nullptr);
  // Enqueues a marker and returns its event (the profiler releases it). CLBlast may run
  // several kernels for one call and return only the last one's event: record that event
  // with a marker taken before the call to time them all (the span also holds CLBlast's
  // host time between its kernels, and on its first call its compilation).
  cl_event marker();
  // Waits for the queue, sums the time of the recorded events and forgets them.
  uint64_t finish_and_take_kernel_ns();
  // The kernel time of the work run() enqueues (its recorded events, summed after a
  // clFinish), with the events recorded before it kept aside and restored, so the
  // operation in progress keeps its own time; 0 when run() recorded no event (work on
  // another queue, say). Used by tuning's trial runs.
  uint64_t kernel_ns_of(const std::function<void()>& run);
  // While off, launches and record() keep no event (tuning's trial runs are not the
  // operation's kernel time).
  void set_recording(bool on) { recording_ = on; }
  bool recording() const { return recording_; }

 private:
  struct Timed {
    cl_event event;
    cl_event since;  // a marker whose end starts the span, or nullptr
  };
  const Device* device_;
  std::vector<Timed> events_;
  std::vector<cl_event> markers_;
  bool recording_ = true;
};

}  // namespace oclf
#pragma GCC visibility pop
