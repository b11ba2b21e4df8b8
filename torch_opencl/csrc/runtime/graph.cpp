// Recorded steps of the opencl device: see graph.h.
#include "graph.h"

#include <CL/cl_ext.h>

#include <cstring>

#include "opencl_functions/runtime/cl_info.hpp"
#include "opencl_functions/runtime/settings.hpp"

namespace oclf::device {

namespace {

// cl_khr_command_buffer's entry points, from the device's platform, when the device has the
// extension at the version these headers declare (0.9.x: the extension is provisional and
// its signatures changed between versions) and takes the device's queue as it is.
struct CommandBuffers {
  clCreateCommandBufferKHR_fn create = nullptr;
  clCommandNDRangeKernelKHR_fn ndrange = nullptr;
  clCommandCopyBufferKHR_fn copy = nullptr;
  clFinalizeCommandBufferKHR_fn finalize = nullptr;
  clEnqueueCommandBufferKHR_fn enqueue = nullptr;
  clReleaseCommandBufferKHR_fn release = nullptr;
  clGetCommandBufferInfoKHR_fn info = nullptr;
  bool usable = false;
  bool simultaneous = false;  // a command buffer may be enqueued again while it runs
};

struct NameVersion {  // cl_name_version (OpenCL 3.0)
  cl_uint version;
  char name[64];
};
constexpr cl_device_info kExtensionsWithVersion = 0x1060;  // CL_DEVICE_EXTENSIONS_WITH_VERSION

bool has_command_buffers_0_9(cl_device_id device) {
  size_t bytes = 0;
  if (clGetDeviceInfo(device, kExtensionsWithVersion, 0, nullptr, &bytes) != CL_SUCCESS || bytes == 0) return false;
  std::vector<NameVersion> all(bytes / sizeof(NameVersion));
  if (clGetDeviceInfo(device, kExtensionsWithVersion, bytes, all.data(), nullptr) != CL_SUCCESS) return false;
  for (const NameVersion& e : all) {
    const cl_uint major = e.version >> 22, minor = (e.version >> 12) & 0x3ff;
    if (std::strncmp(e.name, "cl_khr_command_buffer", sizeof(e.name)) == 0) return major == 0 && minor == 9;
  }
  return false;
}

const CommandBuffers& command_buffers() {
  static const CommandBuffers api = [] {
    CommandBuffers a;
    cl_device_id device = Runtime::get().device();
    if (!has_command_buffers_0_9(device)) return a;
    cl_bitfield required = 0;  // cl_device_command_queue_properties (OpenCL 2.0)
    if (clGetDeviceInfo(device, CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR, sizeof(required), &required,
                        nullptr) != CL_SUCCESS || required != 0)
      return a;
    cl_platform_id platform = nullptr;
    if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof(platform), &platform, nullptr) != CL_SUCCESS) return a;
    auto find = [&](const char* name) { return clGetExtensionFunctionAddressForPlatform(platform, name); };
    a.create = reinterpret_cast<clCreateCommandBufferKHR_fn>(find("clCreateCommandBufferKHR"));
    a.ndrange = reinterpret_cast<clCommandNDRangeKernelKHR_fn>(find("clCommandNDRangeKernelKHR"));
    a.copy = reinterpret_cast<clCommandCopyBufferKHR_fn>(find("clCommandCopyBufferKHR"));
    a.finalize = reinterpret_cast<clFinalizeCommandBufferKHR_fn>(find("clFinalizeCommandBufferKHR"));
    a.enqueue = reinterpret_cast<clEnqueueCommandBufferKHR_fn>(find("clEnqueueCommandBufferKHR"));
    a.release = reinterpret_cast<clReleaseCommandBufferKHR_fn>(find("clReleaseCommandBufferKHR"));
    a.info = reinterpret_cast<clGetCommandBufferInfoKHR_fn>(find("clGetCommandBufferInfoKHR"));
    a.usable = a.create && a.ndrange && a.copy && a.finalize && a.enqueue && a.release && a.info;
    cl_bitfield capabilities = 0;  // cl_device_command_buffer_capabilities_khr
    if (clGetDeviceInfo(device, CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, sizeof(capabilities), &capabilities,
                        nullptr) == CL_SUCCESS)
      a.simultaneous = (capabilities & CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR) != 0;
    return a;
  }();
  return api;
}

std::string kernel_name(cl_kernel kernel) { return info_string(clGetKernelInfo, kernel, CL_KERNEL_FUNCTION_NAME); }

}  // namespace

Graph::Graph() : device_(Stream::get().index()), pool_(Allocator::get().memory(device_).open_pool()) {}

Graph::~Graph() {
  clFinish(Stream::at(device_).queue());  // a replay's writes read the bytes this graph holds
  for (cl_kernel k : kernels_) clReleaseKernel(k);
  release_command_buffers();
  Allocator::get().memory(device_).close_pool(pool_);
}

// A kernel object of the graph's own, from the launched kernel's program, with the
// launch's arguments: the device's cached kernels get other arguments at their next use.
void Graph::add_launch(cl_kernel source, const std::vector<KernelArg>& args, cl_uint dims, const size_t* global,
                       const size_t* local) {
  const std::string name = kernel_name(source);
  cl_uint count = 0;
  CL_CHECK(clGetKernelInfo(source, CL_KERNEL_NUM_ARGS, sizeof(count), &count, nullptr));
  if (args.size() < count) {
    throw Error("opencl: kernel " + name + " was launched while a graph recorded with " + std::to_string(args.size()) +
                    " of its " + std::to_string(count) + " arguments set; its launch cannot be recorded",
                CL_INVALID_KERNEL_ARGS);
  }
  cl_program program = nullptr;
  CL_CHECK(clGetKernelInfo(source, CL_KERNEL_PROGRAM, sizeof(program), &program, nullptr));
  cl_int status = CL_SUCCESS;
  cl_kernel own = clCreateKernel(program, name.c_str(), &status);
  CL_CHECK(status);
  kernels_.push_back(own);  // released by ~Graph from here on
  for (cl_uint i = 0; i < count; ++i) {
    const KernelArg& a = args[i];
    if (!a.set) {
      throw Error("opencl: argument " + std::to_string(i) + " of kernel " + name +
                      " was not set; its launch cannot be recorded",
                  CL_INVALID_KERNEL_ARGS);
    }
    CL_CHECK(clSetKernelArg(own, i, a.size, a.null ? nullptr : a.bytes.data()));
  }
  commands_.push_back(Command{Command::kLaunch});
  Command& added = commands_.back();
  added.kernel = own;
  added.args.assign(args.begin(), args.begin() + count);
  added.dims = dims;
  added.driver_local = local == nullptr;
  for (cl_uint i = 0; i < dims; ++i) {
    added.global[i] = global[i];
    if (local) added.local[i] = local[i];
  }
  ++counts_.launches;
}

void Graph::add_copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes) {
  Command c{Command::kCopy};
  c.from = from;
  c.to = to;
  c.from_offset = from_offset;
  c.to_offset = to_offset;
  c.bytes = bytes;
  commands_.push_back(c);
  ++counts_.copies;
}

void Graph::add_write(cl_mem mem, size_t offset, const void* host, size_t bytes) {
  Command c{Command::kWrite};
  c.to = mem;
  c.to_offset = offset;
  c.bytes = bytes;
  c.data = std::make_shared<std::vector<unsigned char>>(bytes);
  std::memcpy(c.data->data(), host, bytes);
  commands_.push_back(c);
  ++counts_.writes;
}

void Graph::add_call(std::function<void()> call) {
  Command c{Command::kCall};
  c.call = std::move(call);
  commands_.push_back(c);
  ++counts_.calls;
}

bool Graph::command_buffers_available() { return command_buffers().usable; }

void Graph::release_command_buffers() {
  for (void* b : buffers_) command_buffers().release(static_cast<cl_command_buffer_khr>(b));
  buffers_.clear();
  plan_.clear();
  counts_.command_buffers = 0;
}

bool Graph::rebind(const std::vector<std::pair<cl_mem, cl_mem>>& moves) {
  if (counts_.calls > 0) return false;
  Stream& stream = Stream::at(device_);
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  if (stream.recording() == this)
    throw Error("opencl: a graph cannot be rebound while it records", CL_INVALID_OPERATION);
  // Through queue(): the submission thread has enqueued every replay of this graph it held,
  // so no launch reads the arguments changed below (OpenCL copies them at each enqueue).
  cl_command_queue queue = stream.queue();
  // One pass with the whole map: the moves may swap buffers among the inputs.
  auto moved = [&](cl_mem m) {
    for (const auto& move : moves)
      if (move.first == m) return move.second;
    return m;
  };
  for (Command& c : commands_) {
    if (c.kind == Command::kLaunch) {
      for (size_t i = 0; i < c.args.size(); ++i) {
        KernelArg& a = c.args[i];
        // A buffer argument is a cl_mem's bytes; a number the size of a pointer holding a
        // dead buffer's handle would need to equal a heap address.
        if (a.null || a.size != sizeof(cl_mem) || a.bytes.size() != sizeof(cl_mem)) continue;
        cl_mem was = nullptr;
        std::memcpy(&was, a.bytes.data(), sizeof(cl_mem));
        const cl_mem now = moved(was);
        if (now == was) continue;
        CL_CHECK(clSetKernelArg(c.kernel, cl_uint(i), sizeof(cl_mem), &now));
        a.bytes.assign(reinterpret_cast<const char*>(&now), sizeof(cl_mem));
      }
    } else if (c.kind == Command::kCopy) {
      c.from = moved(c.from);
      c.to = moved(c.to);
    } else if (c.kind == Command::kWrite) {
      c.to = moved(c.to);
    }
  }
  if (!buffers_.empty()) {
    // Command buffers hold the commands as they were made: made again from the commands.
    CL_CHECK(clFinish(queue));
    release_command_buffers();
    finish();
  }
  return true;
}

// One recorded command, enqueued as recorded.
void Graph::issue(const Command& c, cl_command_queue queue) const {
  switch (c.kind) {
    case Command::kLaunch:
      CL_CHECK(clEnqueueNDRangeKernel(queue, c.kernel, c.dims, nullptr, c.global, c.driver_local ? nullptr : c.local, 0,
                                      nullptr, nullptr));
      break;
    case Command::kCopy:
      CL_CHECK(clEnqueueCopyBuffer(queue, c.from, c.to, c.from_offset, c.to_offset, c.bytes, 0, nullptr, nullptr));
      break;
    case Command::kWrite:  // the graph keeps the bytes: no staging copy needed
      CL_CHECK(clEnqueueWriteBuffer(queue, c.to, CL_FALSE, c.to_offset, c.bytes, c.data->data(), 0, nullptr, nullptr));
      break;
    case Command::kCall:
      c.call();
      break;
  }
}

void Graph::replay() {
  Stream& stream = Stream::at(device_);
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  if (stream.recording() != nullptr)
    throw Error("opencl: a graph cannot be replayed while one records", CL_INVALID_OPERATION);
  if (stream.deferring()) {
    // Enqueued by the submission thread while the caller goes on (~Graph waits for it).
    cl_command_queue queue = stream.runtime().queue();
    stream.submit([this, queue] { issue_all(queue); });
    return;
  }
  issue_all(stream.queue());
}

void Graph::issue_all(cl_command_queue queue) const {
  if (plan_.empty()) {
    for (const Command& c : commands_) issue(c, queue);
    return;
  }
  const CommandBuffers& api = command_buffers();
  for (const Step& step : plan_) {
    auto buffer = static_cast<cl_command_buffer_khr>(step.command_buffer);
    if (buffer != nullptr && !api.simultaneous) {
      // Without simultaneous use, a command buffer still running from the last replay
      // cannot be enqueued again: its commands go one by one this time.
      cl_uint state = 0;
      CL_CHECK(api.info(buffer, CL_COMMAND_BUFFER_STATE_KHR, sizeof(state), &state, nullptr));
      if (state == CL_COMMAND_BUFFER_STATE_PENDING_KHR) buffer = nullptr;
    }
    if (buffer != nullptr) {
      CL_CHECK(api.enqueue(1, &queue, buffer, 0, nullptr, nullptr));
    } else {
      for (size_t i = step.begin; i < step.end; ++i) issue(commands_[i], queue);
    }
  }
}

// Each run of two or more launches and copies becomes one command buffer, its commands
// chained by sync points (so they run in the recorded order whatever the driver's
// reading of an in-order queue); writes and library calls stay between them as they were.
void Graph::finish() {
  const CommandBuffers& api = command_buffers();
  const std::string wanted = setting("GRAPH_COMMAND_BUFFERS");
  if (wanted != "" && wanted != "0" && wanted != "1")
    throw Error("opencl: " + setting_variable("GRAPH_COMMAND_BUFFERS") + " must be 0 or 1, got '" + wanted + "'",
                CL_INVALID_VALUE);
  if (!api.usable || wanted == "0") return;
  cl_command_queue queue = Stream::at(device_).queue();
  const cl_command_buffer_properties_khr simultaneous[] = {CL_COMMAND_BUFFER_FLAGS_KHR,
                                                           CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR, 0};
  std::vector<Step> plan;
  size_t i = 0;
  while (i < commands_.size()) {
    size_t end = i;
    while (end < commands_.size() && (commands_[end].kind == Command::kLaunch || commands_[end].kind == Command::kCopy))
      ++end;
    if (end - i < 2) {
      plan.push_back(Step{nullptr, i, i + 1});
      ++i;
      continue;
    }
    cl_int status = CL_SUCCESS;
    cl_command_buffer_khr buffer = api.create(1, &queue, api.simultaneous ? simultaneous : nullptr, &status);
    CL_CHECK(status);
    buffers_.push_back(buffer);  // released by ~Graph from here on
    cl_sync_point_khr previous = 0;
    for (size_t k = i; k < end; ++k) {
      const Command& c = commands_[k];
      cl_sync_point_khr point = 0;
      const cl_uint waits = k == i ? 0 : 1;
      if (c.kind == Command::kLaunch) {
        CL_CHECK(api.ndrange(buffer, nullptr, nullptr, c.kernel, c.dims, nullptr, c.global,
                             c.driver_local ? nullptr : c.local, waits, waits ? &previous : nullptr, &point, nullptr));
      } else {
        CL_CHECK(api.copy(buffer, nullptr, c.from, c.to, c.from_offset, c.to_offset, c.bytes, waits,
                          waits ? &previous : nullptr, &point, nullptr));
      }
      previous = point;
    }
    CL_CHECK(api.finalize(buffer));
    plan.push_back(Step{buffer, i, end});
    ++counts_.command_buffers;
    i = end;
  }
  plan_ = std::move(plan);
}

}  // namespace oclf::device
