// The opencl device's side of each OpenCL device: kernels, launches, graphs' recording, over
// the shared Runtime (see device.h; kernel timing in timing.cpp, index checks in
// index_checks.cpp).
#include "device.h"

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "opencl_functions/runtime/cl_info.hpp"
#include "opencl_functions/runtime/launch_log.hpp"
#include "../check.h"
#include "graph.h"
#include "submitter.h"

namespace oclf::device {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The folder holding this shared library (torch_opencl/).
std::string module_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_dir), &info) == 0 || info.dli_fname == nullptr)
    throw Error("cannot locate the opencl device's shared library (dladdr failed)", CL_INVALID_VALUE);
  return folder_of(info.dli_fname);
}

}  // namespace

// Both are looked up once: dladdr walks the loaded libraries, too slow for every launch.
std::string Device::kernels_dir() {
  static const std::string dir = module_dir() + "/kernels";
  return dir;
}

std::string Device::library_dir() {
  static const std::string dir = folder_of(module_dir()) + "/opencl_functions";
  return dir;
}

namespace {
// One Device per index, made on first use and never freed; a filled slot is one atomic load.
std::atomic<Device*> opened[kMaxDevices];
std::mutex opening;
}  // namespace

Device& Device::at(int index) {
  if (index >= 0 && index < static_cast<int>(kMaxDevices))
    if (Device* dev = opened[index].load(std::memory_order_acquire)) return *dev;
  Runtime& rt = Runtime::at(index);  // throws out of range
  std::lock_guard<std::mutex> lock(opening);
  if (opened[index].load(std::memory_order_relaxed) == nullptr)
    opened[index].store(new Device(rt), std::memory_order_release);
  return *opened[index].load(std::memory_order_relaxed);
}

Device& Device::get() { return at(Runtime::current()); }

bool Device::is_open(int index) {
  return index >= 0 && index < static_cast<int>(kMaxDevices) &&
         opened[index].load(std::memory_order_acquire) != nullptr;
}

int Device::count() {
  try {
    return Runtime::count();
  } catch (const std::exception&) {
    return 0;
  }
}

bool Device::available() {
  try {
    get();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {
std::atomic<bool> forked_child{false};
std::once_flag fork_handler;
}  // namespace

bool Device::in_forked_child() { return forked_child.load(std::memory_order_relaxed); }

void Device::refuse_in_forked_child() {
  if (forked_child.load(std::memory_order_relaxed))
    throw Error("opencl: this process was forked after it opened an OpenCL device; a forked child cannot use the "
                "device (start workers with multiprocessing's 'spawn' method, or open the device in the child only)",
                CL_INVALID_OPERATION);
}

Device::Device(Runtime& rt) : rt_(rt) {
  std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, [] { forked_child = true; }); });
  is_cpu_ = rt.info().type == "CPU";
  has_fp64_ = device_string(rt.device(), CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
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
    std::call_once(at_exit, [] { std::atexit([] { oclf::Device::settle_all(); }); });
    oclf::Device::set_queue_hook(&Device::settle_hook);
    defer_kernel_args(true);
    submitter_ = std::make_unique<Submitter>(rt.index(), rt.raw_queue());
  }
}

void Device::finish_at_exit() {
  if (forked_child.load(std::memory_order_relaxed)) return;  // the parent's driver state: not ours to wait on
  oclf::Device::settle_all();
  for (auto& slot : opened)
    if (Device* dev = slot.load(std::memory_order_acquire)) clFinish(dev->rt_.raw_queue());  // errors: nothing left to tell
}

void Device::settle_hook(int index) {
  if (index < 0 || index >= static_cast<int>(kMaxDevices)) return;
  Device* dev = opened[index].load(std::memory_order_acquire);
  if (dev != nullptr && dev->submitter_) dev->submitter_->settle(false);
}

void Device::submit(std::function<void()> call) { submitter_->call(std::move(call)); }

bool Device::deferring() const {
  return submitter_ && recording_ == nullptr && !timing_ && !sync_each_ && !launch_log::active();
}

cl_kernel Device::kernel(const std::string& file, const std::string& name, const std::string& options) {
  const std::string common = " -I" + kernels_dir() + (has_fp64_ ? " -DHAS_FP64" : "");
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return rt_.programs().kernel_fixed(kernels_dir() + "/" + file, name, options + common);
}

cl_kernel Device::library_kernel(const std::string& file, const std::string& name, const std::string& options) {
  // The library's kernel folder: OCLF_KERNEL_DIR when set, else the folder of this package.
  // The options are the library's (the runtime finds the reference's headers beside its
  // files), so both launch alike and share the programs the library built.
  const std::string dir = Programs::kernel_dir();
  const std::string path = (dir.empty() ? library_dir() : dir) + "/" + file;
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return rt_.programs().kernel_fixed(path, name, options);
}

std::string Device::library_source_hash(const std::string& file) {
  // Hashed once per path, as library_kernel builds each file once per path and options: the
  // hash names the text the kernels were built from (no stat of the file per call).
  std::lock_guard<std::recursive_mutex> lock(mutex());
  const std::string dir = Programs::kernel_dir();
  const std::string path = (dir.empty() ? library_dir() : dir) + "/" + file;
  auto it = library_hashes_.find(path);
  if (it == library_hashes_.end()) it = library_hashes_.emplace(path, rt_.programs().source_hash(path)).first;
  return it->second;
}

bool Device::library_kernel_builds(const std::string& file, const std::string& name, const std::string& options) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  const std::string key = file + "\n" + name + "\n" + options;
  auto it = library_builds_.find(key);
  if (it == library_builds_.end()) {
    bool builds = true;
    try {
      library_kernel(file, name, options);
    } catch (const Error&) {
      builds = false;
    }
    it = library_builds_.emplace(key, builds).first;
  }
  return it->second;
}

void Device::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i)
    if (global[i] == 0) return;  // OpenCL 1.2 rejects empty ranges
  refuse_in_forked_child();
  if (deferring()) {
    submitter_->launch(kernel, dims, global, local, noted_args(kernel));
    ++launches_;
    return;
  }
  cl_command_queue q = queue();
  apply_noted_args(kernel);
  launch_log::before_launch(q, kernel, dims, global, local);
  const bool timed = timing_ && recording_ == nullptr;
  cl_event done = nullptr;
  CL_CHECK(clEnqueueNDRangeKernel(q, kernel, dims, nullptr, global, local, 0, nullptr, timed ? &done : nullptr));
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
    recording_->add_launch(kernel, args_[kernel], dims, global, local);
  }
  if (sync_each_ && recording_ == nullptr) CL_CHECK(clFinish(queue()));
}

void Device::copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (deferring()) {
    submitter_->copy(from, to, from_offset, to_offset, bytes);
    return;
  }
  CL_CHECK(clEnqueueCopyBuffer(queue(), from, to, from_offset, to_offset, bytes, 0, nullptr, nullptr));
  if (recording_ != nullptr) recording_->add_copy(from, to, from_offset, to_offset, bytes);
}

void Device::run_enqueuing(const std::function<void()>& call) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (deferring()) {
    submitter_->call(call);
    return;
  }
  settle();
  const bool timed = timing_ && recording_ == nullptr;
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

// The arguments of every kernel as they are set, while a graph records: set_arg (the
// runtime's) tells of each. Called with the device's lock held (launch() sets arguments
// under it).
void Device::note_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value) {
  Device& dev = get();
  if (dev.recording_ == nullptr) return;
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  note_arg_value(dev.args_[kernel], index, size, value);
}

namespace {
std::atomic<int> devices_recording{0};  // the argument observer is on while any device records
}  // namespace

void Device::begin_recording(Graph* graph) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (recording_ != nullptr)
    throw Error("opencl: a graph is recording already on opencl:" + std::to_string(index()) +
                    "; one records at a time per device",
                CL_INVALID_OPERATION);
  args_.clear();
  recording_ = graph;
  Allocator::get().memory(index()).set_pool(graph->pool());
  if (devices_recording++ == 0) set_arg_observer(&Device::note_arg);
}

void Device::end_recording() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (recording_ == nullptr) return;
  if (--devices_recording == 0) set_arg_observer(nullptr);
  Allocator::get().memory(index()).set_pool(nullptr);
  recording_ = nullptr;
  args_.clear();
}

void Device::refuse_wait(const char* what) const {
  if (recording_ == nullptr) return;
  throw Error(std::string("opencl: ") + what +
                  " waits for the device while a graph records; a recorded step cannot wait for the host. Keep "
                  ".item(), .cpu(), printing and data-dependent shapes (boolean masks, nonzero) out of it, and run "
                  "the step once before recording so that first-use work (kernel tuning) is done",
              CL_INVALID_OPERATION);
}

void Device::synchronize() {
  refuse_in_forked_child();
  refuse_wait("synchronize()");
  if (submitter_) submitter_->settle(true);  // a command that failed on the thread is raised here
  if (index_record_ == nullptr) {
    CL_CHECK(clFinish(queue()));
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

cl_event Device::marker() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (submitter_) submitter_->settle(true);
  cl_event event = nullptr;
  CL_CHECK(clEnqueueMarkerWithWaitList(queue(), 0, nullptr, &event));
  // Submitted now, so that query() and a wait see it progress without another command.
  CL_CHECK(clFlush(queue()));
  return event;
}

namespace {
void CL_CALLBACK free_staging(cl_event, cl_int, void* staging) { std::free(staging); }
}  // namespace

void Device::write_async(cl_mem mem, size_t offset, const void* host, size_t bytes) {
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
    cl_command_queue queue = rt_.raw_queue();
    submitter_->call([enqueue, queue] { enqueue(queue); });
    return;
  }
  enqueue(queue());
}

void Device::read(cl_mem mem, size_t offset, void* host, size_t bytes) {
  if (bytes == 0) return;
  refuse_in_forked_child();
  refuse_wait("a read to the host");
  if (submitter_) submitter_->settle(true);
  int64_t record[kIndexRecordWords] = {0};
  {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    // The index record first: the in-order queue has read it when the blocking read returns.
    if (index_record_ != nullptr)
      CL_CHECK(clEnqueueReadBuffer(queue(), index_record_, CL_FALSE, 0, sizeof record, record, 0, nullptr, nullptr));
    const cl_int status = clEnqueueReadBuffer(queue(), mem, CL_TRUE, offset, bytes, host, 0, nullptr, nullptr);
    if (status != CL_SUCCESS && index_record_ != nullptr) clFinish(queue());  // the record's read writes `record`
    CL_CHECK(status);
  }
  bytes_to_host_ += bytes;
  raise_index_error(record);
}

}  // namespace oclf::device
