// Kernel timing on the opencl device's streams (Stream::start_timing, torch_opencl.
// kernel_profile, torch.profiler): an OpenCL profiling event per launch and per library call,
// read back as device times in launch order; and the operator each was enqueued for (OpLabel).
#include <algorithm>
#include <string>
#include <vector>

#include "stream.h"

namespace oclf::device {

namespace {
thread_local const std::string* current_op = nullptr;

cl_ulong profiling_time(cl_event event, cl_profiling_info what) {
  cl_ulong t = 0;
  CL_CHECK(clGetEventProfilingInfo(event, what, sizeof(t), &t, nullptr));
  return t;
}
}  // namespace

OpLabel::OpLabel(const std::string* name) {
  if (current_op != nullptr) return;
  current_op = name;
  set_ = true;
}

OpLabel::~OpLabel() {
  if (set_) current_op = nullptr;
}

const std::string* OpLabel::current() { return current_op; }

void Stream::note_timed(cl_event begin, cl_event end, std::string kernel, std::string global) {
  const std::string* op = OpLabel::current();
  std::lock_guard<std::recursive_mutex> lock(mutex());
  KernelTime what{std::move(kernel), op ? *op : std::string("(outside an operator)"), std::move(global)};
  what.correlation = profiler_correlation();
  timed_.push_back({begin, end, std::move(what)});
}

void Stream::start_timing() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  refuse_wait("kernel timing");
  if (timing_)
    throw Error("opencl: a kernel profile is running already; one runs at a time", CL_INVALID_OPERATION);
  for (const Timed& t : timed_) {
    if (t.begin) clReleaseEvent(t.begin);
    clReleaseEvent(t.end);
  }
  timed_.clear();
  timing_ = true;
}

std::vector<KernelTime> Stream::stop_timing() {
  std::vector<Timed> timed;
  {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    timing_ = false;
    timed.swap(timed_);
  }
  try {
    synchronize();  // may raise an index found out of range (index_record)
  } catch (...) {
    for (Timed& t : timed) {
      if (t.begin) clReleaseEvent(t.begin);
      clReleaseEvent(t.end);
    }
    throw;
  }
  std::vector<KernelTime> out;
  out.reserve(timed.size());
  for (Timed& t : timed) {
    // A kernel from its start to its end; a library call from the end of the marker before it
    // to the end of the one after.
    const cl_ulong start = t.begin ? profiling_time(t.begin, CL_PROFILING_COMMAND_END)
                                   : profiling_time(t.end, CL_PROFILING_COMMAND_START);
    const cl_ulong finish = profiling_time(t.end, CL_PROFILING_COMMAND_END);
    t.what.ns = finish > start ? uint64_t(finish - start) : 0;
    t.what.start = start;
    t.what.end = std::max(start, finish);
    out.push_back(std::move(t.what));
    if (t.begin) clReleaseEvent(t.begin);
    clReleaseEvent(t.end);
  }
  return out;
}

}  // namespace oclf::device
