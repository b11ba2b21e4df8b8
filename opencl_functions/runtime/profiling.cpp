// Launches and their timing: see profiling.hpp.
#include "profiling.hpp"

#include "launch_log.hpp"
#include "programs.hpp"

namespace oclf {

void Profiler::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i)
    if (global[i] == 0) return;  // nothing to do; OpenCL 1.2 rejects empty ranges
  cl_event event = nullptr;
  cl_command_queue queue = device_->queue();
  launch_log::before_launch(queue, kernel, dims, global, local);
  enqueue_kernel(queue, kernel, dims, global, local, &event);
  record(event);
  launch_log::after_launch(queue);
}

void Profiler::record(cl_event event, cl_event since) {
  if (!event) return;
  if (recording_)
    events_.push_back({event, since});
  else
    clReleaseEvent(event);
}

cl_event Profiler::marker() {
  cl_event event = nullptr;
  CL_CHECK(clEnqueueMarkerWithWaitList(device_->queue(), 0, nullptr, &event));
  markers_.push_back(event);
  return event;
}

static bool profiling_time(cl_event event, cl_profiling_info what, cl_ulong* value) {
  return clGetEventProfilingInfo(event, what, sizeof(*value), value, nullptr) == CL_SUCCESS;
}

uint64_t Profiler::finish_and_take_kernel_ns() {
  CL_CHECK(clFinish(device_->queue()));
  uint64_t total = 0;
  for (const Timed& t : events_) {
    cl_ulong start = 0, end = 0;
    const bool known = t.since ? profiling_time(t.since, CL_PROFILING_COMMAND_END, &start)
                               : profiling_time(t.event, CL_PROFILING_COMMAND_START, &start);
    if (known && profiling_time(t.event, CL_PROFILING_COMMAND_END, &end) && end > start) total += end - start;
    clReleaseEvent(t.event);
  }
  for (cl_event m : markers_) clReleaseEvent(m);
  events_.clear();
  markers_.clear();
  return total;
}

uint64_t Profiler::kernel_ns_of(const std::function<void()>& run) {
  std::vector<Timed> kept_events;
  std::vector<cl_event> kept_markers;
  kept_events.swap(events_);
  kept_markers.swap(markers_);
  const bool was_recording = recording_;
  recording_ = true;
  auto restore = [&] {
    for (const Timed& t : events_) clReleaseEvent(t.event);
    for (cl_event m : markers_) clReleaseEvent(m);
    events_.swap(kept_events);
    markers_.swap(kept_markers);
    recording_ = was_recording;
  };
  uint64_t ns = 0;
  try {
    run();
    ns = finish_and_take_kernel_ns();
  } catch (...) {
    clFinish(device_->queue());
    restore();
    throw;
  }
  restore();
  return ns;
}

}  // namespace oclf
