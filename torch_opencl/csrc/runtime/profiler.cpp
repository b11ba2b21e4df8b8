// torch.profiler on the opencl device: the device's kernels as Kineto activities, each with its
// device time and linked to the operator that launched it.
//
//   with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
//       model(x)
//   print(p.key_averages().table())       # "Self opencl" / "opencl total" per operator
//
// Two of torch's ways in, both here:
//   - Kineto (torch.profiler.profile, use_kineto=True): a libkineto::IActivityProfiler
//     registered with torch's PrivateUse1ProfilerRegistry. A session turns the device's kernel
//     timing on (Stream::start_timing: an OpenCL profiling event per kernel launch and per
//     CLBlast call) for every open device; torch pushes each operator's correlation id to the
//     session as the operator starts, and each timed command keeps the innermost one
//     (profiler_correlation()). When the trace is processed the commands become
//     CONCURRENT_KERNEL activities, their device timestamps moved onto the host's clock by an
//     offset measured with a marker at the start and at the end of the session, and linked to
//     their operator, which torch then charges with the kernel's device time.
//   - The legacy profiler (torch.autograd.profiler.profile(use_device="opencl",
//     use_kineto=False)): torch::profiler::impl::ProfilerStubs, which records a marker on the
//     current device's queue at each operator's start and end and reads their time difference.
// Memory (profile_memory=True) is reported by the allocator itself (allocator.cpp).
#include <ATen/record_function.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../check.h"
#include "stream.h"

// torch/csrc/profiler/standalone/privateuse1_profiler.h declares the registry behind
// USE_KINETO and includes Kineto's headers by their bare names, which the device's build does
// not put on its include path: the two members called here, as that header declares them.
// Weak: torch releases before the registry (2.11 on the GPU machines) load the device without
// it, and the Kineto activity is then not offered (the legacy profiler's stubs still are).
namespace torch::profiler::impl {
class TORCH_API PrivateUse1ProfilerRegistry {
 public:
  __attribute__((weak)) static PrivateUse1ProfilerRegistry& instance();
  __attribute__((weak)) void registerFactory(
      std::function<std::unique_ptr<libkineto::IActivityProfiler>()> factory);
};
}  // namespace torch::profiler::impl

namespace oclf::device {

namespace {

// Sessions running now (one at a time in practice); correlation ids are kept only then.
std::atomic<int> sessions_running{0};
// The operators running on this thread, innermost last, as torch pushes their ids.
thread_local std::vector<uint64_t> correlation_stack;

int64_t host_now_ns() { return c10::getTime(); }

cl_ulong event_time(cl_event event, cl_profiling_info what) {
  cl_ulong t = 0;
  CL_CHECK(clGetEventProfilingInfo(event, what, sizeof(t), &t, nullptr));
  return t;
}

// The host clock minus the device's (nanoseconds): a marker enqueued on an idle queue ends
// between the host times before its enqueue and after its wait; the middle is taken.
struct ClockPoint {
  int64_t host = 0;
  int64_t device = 0;
};

ClockPoint clock_point(Stream& stream) {
  stream.synchronize();
  const int64_t before = host_now_ns();
  cl_event marker = stream.marker();
  const cl_int waited = clWaitForEvents(1, &marker);
  const int64_t after = host_now_ns();
  const int64_t device = waited == CL_SUCCESS ? int64_t(event_time(marker, CL_PROFILING_COMMAND_END)) : 0;
  clReleaseEvent(marker);
  CL_CHECK(waited);
  return {before + (after - before) / 2, device};
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    for (int i = 0; i < device_count(); ++i) {
      if (!Stream::is_open(i) && i != Runtime::current()) continue;
      Stream& stream = Stream::at(i);
      try {
        stream.start_timing();
      } catch (const std::exception& err) {
        errors_.push_back(err.what());  // a kernel_profile() running, or a graph recording
        continue;
      }
      timed_.push_back({i, clock_point(stream), {}, {}});
    }
    sessions_running += 1;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    sessions_running -= 1;
    for (Timed& t : timed_) {
      Stream& stream = Stream::at(t.device);
      try {
        t.commands = stream.stop_timing();
        t.end = clock_point(stream);
      } catch (const std::exception& err) {
        errors_.push_back(err.what());
      }
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override { log(logger, nullptr); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    log(logger, &linked);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    const int index = timed_.empty() ? Runtime::current() : timed_.front().device;
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{index, index, "opencl:" + std::to_string(index), Runtime::at(index).info().device});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const Timed& t : timed_) out.push_back({0, 0, t.device, "queue"});
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { correlation_stack.push_back(id); }
  void popCorrelationId() override {
    if (!correlation_stack.empty()) correlation_stack.pop_back();
  }

 private:
  struct Timed {
    int device;
    ClockPoint start, end;
    std::vector<KernelTime> commands;
  };

  // A device time on the host's clock: the offset measured at the session's start, drifting
  // linearly to the one measured at its end.
  static int64_t to_host(const Timed& t, uint64_t device_ns) {
    const double span = double(t.end.device - t.start.device);
    const double drift = double((t.end.host - t.end.device) - (t.start.host - t.start.device));
    const double along = span > 0 ? (double(device_ns) - double(t.start.device)) / span : 0.0;
    return int64_t(device_ns) + (t.start.host - t.start.device) + int64_t(drift * along);
  }

  void log(libkineto::ActivityLogger& logger, const libkineto::getLinkedActivityCallback* linked) {
    buffer_->span = libkineto::TraceSpan(timed_.empty() ? 0 : timed_.front().start.host,
                                         timed_.empty() ? 0 : timed_.front().end.host, "opencl");
    for (const Timed& t : timed_) {
      for (const KernelTime& k : t.commands) {
        buffer_->emplace_activity(buffer_->span, libkineto::ActivityType::CONCURRENT_KERNEL, k.kernel);
        libkineto::GenericTraceActivity& act = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
        act.startTime = to_host(t, k.start);
        act.endTime = to_host(t, k.end);
        act.device = t.device;
        act.resource = 0;
        act.id = int32_t(k.correlation);
        act.addMetadataQuoted("operator", k.op);
        if (!k.global.empty()) act.addMetadataQuoted("global size", k.global);
        if (k.correlation != 0) {
          act.flow.id = uint32_t(k.correlation);
          act.flow.type = libkineto::kLinkAsyncCpuGpu;
          act.flow.start = false;
          if (linked != nullptr && *linked) act.linked = (*linked)(int32_t(k.correlation));
        }
        logger.handleActivity(act);
      }
    }
  }

  std::vector<Timed> timed_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&,
                                                                 const libkineto::Config&) override {
    return std::make_unique<Session>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  const std::string name_ = "opencl";
  const std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL};
};

// The legacy profiler's stubs: a marker per operator start and end on the current device.
struct Stubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    Stream& stream = Stream::get();
    if (device) *device = static_cast<c10::DeviceIndex>(stream.index());
    if (cpu_ns) *cpu_ns = host_now_ns();
    if (stream.recording() != nullptr) return;  // a graph records: no marker may be waited for
    cl_event marker = stream.marker();
    *event = std::shared_ptr<void>(marker, [](void* e) { clReleaseEvent(static_cast<cl_event>(e)); });
  }
  // Microseconds between two markers' ends (torch's CUDA stubs give microseconds too).
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* first,
                const torch::profiler::impl::ProfilerVoidEventStub* second) const override {
    if (!first || !second || !*first || !*second) return 0.0f;
    cl_event a = static_cast<cl_event>(first->get()), b = static_cast<cl_event>(second->get());
    CL_CHECK(clWaitForEvents(1, &b));
    const double ns = double(event_time(b, CL_PROFILING_COMMAND_END)) - double(event_time(a, CL_PROFILING_COMMAND_END));
    return float(ns / 1e3);
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const int previous = Runtime::current();
    for (int i = 0; i < device_count(); ++i) {
      Runtime::set_current(i);
      op(i);
    }
    Runtime::set_current(previous);
  }
  void synchronize() const override {
    for (int i = 0; i < device_count(); ++i)
      if (Stream::is_open(i)) Stream::at(i).synchronize();
  }
};

// Whether this torch has the Kineto registry for a PrivateUse1 profiler (weak symbols above).
bool has_registry() {
  using Registry = torch::profiler::impl::PrivateUse1ProfilerRegistry;
  auto instance = &Registry::instance;
  auto register_factory = &Registry::registerFactory;
  return reinterpret_cast<void*>(instance) != nullptr && register_factory != nullptr;
}

struct Registration {
  Registration() {
    static Stubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
    using Registry = torch::profiler::impl::PrivateUse1ProfilerRegistry;
    if (has_registry())
      Registry::instance().registerFactory(
          [] { return std::unique_ptr<libkineto::IActivityProfiler>(new ActivityProfiler()); });
  }
};
const Registration registration;

}  // namespace

uint64_t profiler_correlation() {
  if (sessions_running.load(std::memory_order_relaxed) == 0 || correlation_stack.empty()) return 0;
  return correlation_stack.back();
}

}  // namespace oclf::device
