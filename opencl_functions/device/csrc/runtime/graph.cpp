// Recorded steps of the opencl device: see graph.h.
#include "graph.h"

#include <cstring>

namespace oclf::device {

namespace {

std::string kernel_name(cl_kernel kernel) {
  size_t n = 0;
  CL_CHECK(clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, 0, nullptr, &n));
  std::string name(n, '\0');
  CL_CHECK(clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, n, &name[0], nullptr));
  while (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

}  // namespace

Graph::Graph() : pool_(Allocator::get().open_pool()) {}

Graph::~Graph() {
  clFinish(Device::get().queue());  // a replay's writes read the bytes this graph holds
  for (const Command& c : commands_) {
    if (c.kernel != nullptr) clReleaseKernel(c.kernel);
  }
  Allocator::get().close_pool(pool_);
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
                    " of its " + std::to_string(count) + " arguments set since the recording began; its launch cannot be recorded",
                CL_INVALID_KERNEL_ARGS);
  }
  cl_program program = nullptr;
  CL_CHECK(clGetKernelInfo(source, CL_KERNEL_PROGRAM, sizeof(program), &program, nullptr));
  cl_int status = CL_SUCCESS;
  cl_kernel own = clCreateKernel(program, name.c_str(), &status);
  CL_CHECK(status);
  Command c{Command::kLaunch};
  c.kernel = own;  // released by ~Graph from here on
  commands_.push_back(c);
  for (cl_uint i = 0; i < count; ++i) {
    const KernelArg& a = args[i];
    if (!a.set) {
      throw Error("opencl: argument " + std::to_string(i) + " of kernel " + name +
                      " was not set since the graph began recording; its launch cannot be recorded",
                  CL_INVALID_KERNEL_ARGS);
    }
    CL_CHECK(clSetKernelArg(own, i, a.size, a.null ? nullptr : a.bytes.data()));
  }
  Command& added = commands_.back();
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

void Graph::replay() {
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  if (dev.recording() != nullptr) throw Error("opencl: a graph cannot be replayed while one records", CL_INVALID_OPERATION);
  cl_command_queue queue = dev.queue();
  for (const Command& c : commands_) {
    switch (c.kind) {
      case Command::kLaunch:
        CL_CHECK(clEnqueueNDRangeKernel(queue, c.kernel, c.dims, nullptr, c.global, c.driver_local ? nullptr : c.local,
                                        0, nullptr, nullptr));
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
}

}  // namespace oclf::device
