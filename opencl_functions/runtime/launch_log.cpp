// The launch log: see launch_log.hpp.
#include "launch_log.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace oclf {
namespace launch_log {
namespace {

struct Origin {
  std::string path, source_hash, options, name;
};

struct State {
  std::mutex mutex;
  // Read without the lock first by the calls every launch makes (note_arg, before_launch,
  // after_launch), so that a process not logging pays one load per call.
  std::atomic<bool> active{false};
  bool capture = false;
  std::map<cl_kernel, Origin> origins;
  std::map<cl_kernel, std::map<cl_uint, LoggedArg>> args;  // the values set, by kernel and index
  std::vector<LoggedLaunch> launches;
  std::vector<cl_mem> pending;  // the buffers of a captured launch, for after_launch
};

State& state() {
  static State* s = new State();  // never destroyed, as the runtime
  return *s;
}

std::string read_buffer(cl_command_queue queue, cl_mem mem, size_t bytes) {
  std::string data(bytes, '\0');
  if (bytes) CL_CHECK(clEnqueueReadBuffer(queue, mem, CL_TRUE, 0, bytes, &data[0], 0, nullptr, nullptr));
  return data;
}

// The address space of a kernel argument, or -1 when the driver cannot tell.
int address_qualifier(cl_kernel kernel, cl_uint index) {
  cl_kernel_arg_address_qualifier q = 0;
  if (clGetKernelArgInfo(kernel, index, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof(q), &q, nullptr) != CL_SUCCESS)
    return -1;
  return static_cast<int>(q);
}

}  // namespace

void start(bool capture) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.active = true;
  s.capture = capture;
  s.launches.clear();
}

void set_capture(bool capture) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.capture = capture;
}

void stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.active = false;
  s.capture = false;
  s.launches.clear();
  s.args.clear();
}

bool active() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.active;
}

std::string build_options(const std::string& options) {
  return active() ? options + " -cl-kernel-arg-info" : options;
}

void note_kernel(cl_kernel kernel, const std::string& path, const std::string& source_hash,
                 const std::string& options, const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.origins[kernel] = {path, source_hash, options, name};
}

void forget_kernel(cl_kernel kernel) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.origins.erase(kernel);
  s.args.erase(kernel);
}

void note_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value) {
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.active) return;
  // Kinds are told apart at launch, from the kernel's signature: a value may be a buffer's
  // handle, and a null value local memory or a null buffer.
  LoggedArg arg;
  arg.size = size;
  arg.kind = value ? LoggedArg::kValue : LoggedArg::kLocal;
  if (value) arg.value.assign(static_cast<const char*>(value), size);
  s.args[kernel][index] = arg;
}

void before_launch(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t* global,
                   const size_t* local) {
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.active) return;
  LoggedLaunch launch;
  auto origin = s.origins.find(kernel);
  if (origin != s.origins.end()) {
    launch.path = origin->second.path;
    launch.source_hash = origin->second.source_hash;
    launch.options = origin->second.options;
    launch.kernel = origin->second.name;
  }
  launch.global.assign(global, global + dims);
  if (local) launch.local.assign(local, local + dims);
  launch.captured = s.capture;
  cl_uint count = 0;
  CL_CHECK(clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof(count), &count, nullptr));
  const auto& set = s.args[kernel];
  std::map<cl_mem, int> seen;
  s.pending.clear();
  for (cl_uint i = 0; i < count; ++i) {
    auto found = set.find(i);
    LoggedArg arg = found == set.end() ? LoggedArg{} : found->second;
    const int space = address_qualifier(kernel, i);
    const bool memory = space == CL_KERNEL_ARG_ADDRESS_GLOBAL || space == CL_KERNEL_ARG_ADDRESS_CONSTANT;
    if (arg.kind == LoggedArg::kLocal && memory) {
      arg.kind = LoggedArg::kBuffer;  // a null buffer
    } else if (arg.kind == LoggedArg::kValue && memory && arg.value.size() == sizeof(cl_mem)) {
      cl_mem mem = nullptr;
      arg.value.copy(reinterpret_cast<char*>(&mem), sizeof(mem));
      arg.kind = LoggedArg::kBuffer;
      arg.value.clear();
      if (mem) {
        auto it = seen.find(mem);
        if (it == seen.end()) {
          LoggedBuffer buffer;
          CL_CHECK(clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(buffer.bytes), &buffer.bytes, nullptr));
          if (s.capture) buffer.before = read_buffer(queue, mem, buffer.bytes);
          it = seen.emplace(mem, static_cast<int>(launch.buffers.size())).first;
          launch.buffers.push_back(std::move(buffer));
          s.pending.push_back(mem);
        }
        arg.buffer = it->second;
      }
    }
    launch.args.push_back(arg);
  }
  s.launches.push_back(std::move(launch));
}

void after_launch(cl_command_queue queue) {
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.active || s.launches.empty() || !s.launches.back().captured) return;
  LoggedLaunch& launch = s.launches.back();
  for (size_t i = 0; i < s.pending.size(); ++i)
    launch.buffers[i].after = read_buffer(queue, s.pending[i], launch.buffers[i].bytes);
  s.pending.clear();
}

std::vector<LoggedLaunch> take() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<LoggedLaunch> out;
  out.swap(s.launches);
  return out;
}

}  // namespace launch_log
}  // namespace oclf
