// torch.ops.oclf.enqueue_cost: what the OpenCL driver alone costs the host per launch, the
// floor beneath every operator of the device (bench.ops prints each operator's time over it).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// What the driver alone costs the host per launch (bench.ops): kernels/probe.cl on `out`'s
// first 16 floats, its arguments set once, enqueued `number` times straight on the queue.
// Nanoseconds per clEnqueueNDRangeKernel call, per launch including the wait for all, per
// clSetKernelArg (the buffer argument set `number` times, nothing enqueued), and per
// clEnqueueNDRangeKernel call on a queue of the same context made without profiling (what
// the device's profiling queue costs a launch), and per launch on that queue including the
// wait for all (what profiling costs the device).
std::vector<double> enqueue_cost(const at::Tensor& out, int64_t number) {
  DEVICE_CHECK_VALUE(is_device(out) && out.scalar_type() == at::kFloat && out.is_contiguous() && out.numel() >= 16,
                     "opencl: enqueue_cost: expected a contiguous float32 opencl tensor of 16 elements or more, got ",
                     out.scalar_type(), " ", out.sizes(), " on ", out.device());
  DEVICE_CHECK_VALUE(number > 0, "opencl: enqueue_cost: number must be positive, got ", number);
  c10::DeviceGuard guard(out.device());
  Stream& stream = Stream::get();
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  cl_kernel kernel = device_kernel("probe.cl", "enqueue_probe", "");
  cl_uint index = 0;
  set_arg_at(kernel, &index, arg(out));
  const size_t global[1] = {16};
  // Enqueued once through the runtime, which sets the kernel's arguments; the loops below
  // enqueue it directly with them.
  enqueue_kernel(stream.queue(), kernel, 1, global, nullptr);
  stream.synchronize();
  using clock = std::chrono::steady_clock;
  const clock::time_point start = clock::now();
  for (int64_t i = 0; i < number; ++i) {
    CL_CHECK(clEnqueueNDRangeKernel(stream.queue(), kernel, 1, nullptr, global, nullptr, 0, nullptr, nullptr));
  }
  const clock::time_point enqueued = clock::now();
  stream.synchronize();
  const clock::time_point done = clock::now();
  cl_mem mem = arg(out).mem;
  const clock::time_point set_start = clock::now();
  for (int64_t i = 0; i < number; ++i) CL_CHECK(clSetKernelArg(kernel, 0, sizeof(cl_mem), &mem));
  const clock::time_point set_done = clock::now();
  forget_kernel_args(kernel);  // set here directly: the next launch sets its arguments anew
  cl_int status = CL_SUCCESS;
  cl_command_queue plain = clCreateCommandQueue(stream.runtime().context(), stream.runtime().device(), 0, &status);
  CL_CHECK(status);
  const clock::time_point plain_start = clock::now();
  for (int64_t i = 0; i < number; ++i) {
    status = clEnqueueNDRangeKernel(plain, kernel, 1, nullptr, global, nullptr, 0, nullptr, nullptr);
    if (status != CL_SUCCESS) break;
  }
  const clock::time_point plain_done = clock::now();
  clFinish(plain);
  const clock::time_point plain_finished = clock::now();
  clReleaseCommandQueue(plain);
  CL_CHECK(status);
  const double n = double(number);
  return {std::chrono::duration<double, std::nano>(enqueued - start).count() / n,
          std::chrono::duration<double, std::nano>(done - start).count() / n,
          std::chrono::duration<double, std::nano>(set_done - set_start).count() / n,
          std::chrono::duration<double, std::nano>(plain_done - plain_start).count() / n,
          std::chrono::duration<double, std::nano>(plain_finished - plain_start).count() / n};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oclf, m) { m.def("enqueue_cost(Tensor out, int number) -> float[]", &enqueue_cost); }

}  // namespace oclf::device
