// The opencl device's stream on each OpenCL device: launches, copies, writes, reads, waits
// and graphs' recording over the shared Runtime (see stream.h). Index checks read back at
// the waits are in index_checks.cpp, kernel timing in timing.cpp.
#include "stream.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_functions/runtime/launch_log.hpp"
#include "allocator.h"
#include "graph.h"
#include "submitter.h"

namespace oclf::device {

namespace {
// One Stream per index, made on first use and never freed; a filled slot is one atomic load.
std::atomic<Stream*> opened[kMaxDevices];
std::mutex opening;
}  // namespace

Stream& Stream::at(int index) {
  if (index >= 0 && index < static_cast<int>(kMaxDevices))
    if (Stream* stream = opened[index].load(std::memory_order_acquire)) return *stream;
  Runtime& rt = Runtime::at(index);  // throws out of range
  std::lock_guard<std::mutex> lock(opening);
  if (opened[index].load(std::memory_order_relaxed) == nullptr)
    opened[index].store(new Stream(rt), std::memory_order_release);
  return *opened[index].load(std::memory_order_relaxed);
}

Stream& Stream::get() { return at(Runtime::current()); }

bool Stream::is_open(int index) {
  return index >= 0 && index < static_cast<int>(kMaxDevices) &&
         opened[index].load(std::memory_order_acquire) != nullptr;
}

Stream::Stream(Runtime& rt) : rt_(rt) {
  watch_forks();
  // OCLF_DEVICE_SYNC=1 waits for each kernel (for profiling per operator; slow).
  sync_each_ = setting("DEVICE_SYNC") == "1";
  const std::string async = setting("DEVICE_ASYNC");
  if (async != "" && async != "0" && async != "1")
    throw Error("opencl: " + setting_variable("DEVICE_ASYNC") + " must be 0 or 1, got '" + async + "'",
                CL_INVALID_VALUE);
  // On by default for GPUs alone: a CPU device's cores run the kernels, and a simulator
  // (Oclgrind, which calls itself a CPU and a GPU) runs each kernel inside its enqueue call.
  cl_device_type type = 0;
  CL_CHECK(clGetDeviceInfo(rt.device(), CL_DEVICE_TYPE, sizeof(type), &type, nullptr));
  const bool gpu = (type & CL_DEVICE_TYPE_GPU) != 0 && (type & CL_DEVICE_TYPE_CPU) == 0;
  if (async == "1" || (async == "" && gpu)) {
    // The package's exit handler (finish_at_exit) runs the thread's list to the end; Python
    // exit handlers that run after it may queue more, which this one enqueues before the
    // static destructors run (the driver is still there).
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit([] { Stream::settle_all(); }); });
    submitter_ = std::make_unique<Submitter>(rt.index(), rt.queue());
  }
}

void Stream::settle() const {
  if (submitter_) submitter_->settle(false);
}

void Stream::settle_all() {
  for (auto& slot : opened)
    if (Stream* stream = slot.load(std::memory_order_acquire)) stream->settle();
}

void Stream::submit(std::function<void()> call) { submitter_->call(std::move(call)); }

bool Stream::deferring() const {
  return submitter_ && recording_ == nullptr && !timing_ && !sync_each_ && !launch_log::active();
}

void Stream::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i)
    if (global[i] == 0) return;  // OpenCL 1.2 rejects empty ranges
  refuse_in_forked_child();
  if (deferring()) {
    submitter_->launch(kernel, dims, global, local, kernel_args(kernel));
    ++launches_;
    return;
  }
  cl_command_queue q = queue();
  const std::vector<KernelArg> args = kernel_args(kernel);
  launch_log::before_launch(q, kernel, dims, global, local);
  const bool timed = this->timed();
  cl_event done = nullptr;
  enqueue_kernel(q, kernel, args, dims, global, local, timed ? &done : nullptr);
  launch_log::after_launch(q);
  ++launches_;
  if (timed) {
    char name[128] = {0};
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof(name) - 1, name, nullptr);
    std::string sizes;
    for (cl_uint i = 0; i < dims; ++i) sizes += (i ? "x" : "") + std::to_string(global[i]);
    note_timed(nullptr, done, name, sizes);
  }
  if (recording_ != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    recording_->add_launch(kernel, args, dims, global, local);
  }
  if (sync_each_ && recording_ == nullptr) CL_CHECK(clFinish(q));
}

void Stream::copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (deferring()) {
    submitter_->copy(from, to, from_offset, to_offset, bytes);
    return;
  }
  CL_CHECK(clEnqueueCopyBuffer(queue(), from, to, from_offset, to_offset, bytes, 0, nullptr, nullptr));
  if (recording_ != nullptr) recording_->add_copy(from, to, from_offset, to_offset, bytes);
}

void Stream::run_enqueuing(const std::function<void()>& call) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (deferring()) {
    submitter_->call(call);
    return;
  }
  settle();
  const bool timed = this->timed();
  cl_event begin = nullptr, end = nullptr;
  // A library's commands are timed between two markers (the queue is in order).
  if (timed) CL_CHECK(clEnqueueMarkerWithWaitList(queue(), 0, nullptr, &begin));
  call();
  if (timed) {
    CL_CHECK(clEnqueueMarkerWithWaitList(queue(), 0, nullptr, &end));
    note_timed(begin, end, "clblast", "");
  }
  if (recording_ != nullptr) recording_->add_call(call);
}

void Stream::begin_recording(Graph* graph) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (recording_ != nullptr)
    throw Error("opencl: a graph is recording already on opencl:" + std::to_string(index()) +
                    "; one records at a time per device",
                CL_INVALID_OPERATION);
  recording_ = graph;
  Allocator::get().memory(index()).set_pool(graph->pool());
}

void Stream::end_recording() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (recording_ == nullptr) return;
  Allocator::get().memory(index()).set_pool(nullptr);
  recording_ = nullptr;
}

void Stream::refuse_wait(const char* what) const {
  if (recording_ == nullptr) return;
  throw Error(std::string("opencl: ") + what +
                  " waits for the device while a graph records; a recorded step cannot wait for the host. Keep "
                  ".item(), .cpu(), printing and data-dependent shapes (boolean masks, nonzero) out of it, and run "
                  "the step once before recording so that first-use work (kernel tuning) is done",
              CL_INVALID_OPERATION);
}

void Stream::synchronize() {
  refuse_in_forked_child();
  refuse_wait("synchronize()");
  if (submitter_) submitter_->settle(true);  // a command that failed on the thread is raised here
  if (index_record_ == nullptr) {
    CL_CHECK(clFinish(rt_.queue()));
    return;
  }
  // Reading the index record back waits for everything queued before it, as clFinish would.
  int64_t record[kIndexRecordWords];
  {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    CL_CHECK(clEnqueueReadBuffer(queue(), index_record_, CL_TRUE, 0, sizeof record, record, 0, nullptr, nullptr));
  }
  raise_index_error(record);
}

cl_event Stream::marker() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (submitter_) submitter_->settle(true);
  cl_event event = nullptr;
  CL_CHECK(clEnqueueMarkerWithWaitList(rt_.queue(), 0, nullptr, &event));
  // Submitted now, so that query() and a wait see it progress without another command.
  CL_CHECK(clFlush(rt_.queue()));
  return event;
}

namespace {
void CL_CALLBACK free_staging(cl_event, cl_int, void* staging) { std::free(staging); }
}  // namespace

void Stream::write_async(cl_mem mem, size_t offset, const void* host, size_t bytes) {
  if (bytes == 0) return;
  refuse_in_forked_child();
  if (recording_ != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    recording_->add_write(mem, offset, host, bytes);
  }
  void* staging = std::malloc(bytes);
  if (staging == nullptr) throw Error("opencl: out of host memory staging a copy", CL_OUT_OF_HOST_MEMORY);
  std::memcpy(staging, host, bytes);
  std::lock_guard<std::recursive_mutex> lock(mutex());
  auto enqueue = [mem, offset, bytes, staging](cl_command_queue queue) {
    cl_event done = nullptr;
    const cl_int status = clEnqueueWriteBuffer(queue, mem, CL_FALSE, offset, bytes, staging, 0, nullptr, &done);
    if (status != CL_SUCCESS) std::free(staging);
    CL_CHECK(status);
    CL_CHECK(clSetEventCallback(done, CL_COMPLETE, &free_staging, staging));
    CL_CHECK(clReleaseEvent(done));
  };
  if (deferring()) {
    cl_command_queue queue = rt_.queue();
    submitter_->call([enqueue, queue] { enqueue(queue); });
    return;
  }
  enqueue(queue());
}

void Stream::read(cl_mem mem, size_t offset, void* host, size_t bytes) {
  if (bytes == 0) return;
  refuse_in_forked_child();
  refuse_wait("a read to the host");
  if (submitter_) submitter_->settle(true);
  int64_t record[kIndexRecordWords] = {0};
  {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    cl_command_queue queue = rt_.queue();
    // The index record first: the in-order queue has read it when the blocking read returns.
    if (index_record_ != nullptr)
      CL_CHECK(clEnqueueReadBuffer(queue, index_record_, CL_FALSE, 0, sizeof record, record, 0, nullptr, nullptr));
    const cl_int status = clEnqueueReadBuffer(queue, mem, CL_TRUE, offset, bytes, host, 0, nullptr, nullptr);
    if (status != CL_SUCCESS && index_record_ != nullptr) clFinish(queue);  // the record's read writes `record`
    CL_CHECK(status);
  }
  bytes_to_host_ += bytes;
  raise_index_error(record);
}

}  // namespace oclf::device
