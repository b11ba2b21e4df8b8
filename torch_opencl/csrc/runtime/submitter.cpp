// The submission thread of one device: see submitter.h.
#include "submitter.h"

#include <chrono>
#include <string>

#include "opencl_functions/runtime/runtime.hpp"
#include "device.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace oclf::device {

namespace {
thread_local bool submission_thread = false;

// One step of a spin: a pause that leaves the core's other thread the pipeline.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// A thread out of work spins this long for the next command before it sleeps: an operator's
// host work between two launches is a few microseconds, a wake from sleep about as much.
constexpr auto kSpin = std::chrono::microseconds(30);

// Spins until done() or kSpin has passed (the clock read every 32 pauses).
template <typename Done>
void spin(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned i = 1; !done(); ++i)
    if (i % 32 == 0 && std::chrono::steady_clock::now() >= until) return;
    else cpu_relax();
}
}  // namespace

Submitter::Submitter(int device, cl_command_queue queue) : device_(device), queue_(queue) {
  thread_ = std::thread([this] { loop(); });
}

Submitter::~Submitter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Submitter::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local,
                       std::vector<KernelArg> args) {
  Command c;
  c.kind = Command::kLaunch;
  c.kernel = kernel;
  c.dims = dims;
  c.driver_local = local == nullptr;
  for (cl_uint i = 0; i < dims && i < 3; ++i) {
    c.global[i] = global[i];
    if (local) c.local[i] = local[i];
  }
  c.args = std::move(args);
  push(std::move(c));
}

void Submitter::copy(cl_mem from, cl_mem to, size_t from_offset, size_t to_offset, size_t bytes) {
  Command c;
  c.kind = Command::kCopy;
  c.from = from;
  c.to = to;
  c.from_offset = from_offset;
  c.to_offset = to_offset;
  c.bytes = bytes;
  push(std::move(c));
}

void Submitter::call(std::function<void()> run) {
  Command c;
  c.kind = Command::kCall;
  c.run = std::move(run);
  push(std::move(c));
}

void Submitter::push(Command&& c) {
  refuse_in_forked_child();
  if (failed_.load(std::memory_order_relaxed)) rethrow_error();
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(std::move(c));
    pushed_.fetch_add(1, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) wake_.notify_one();
}

void Submitter::rethrow_error() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error.swap(error_);
    failed_.store(false, std::memory_order_relaxed);
  }
  if (error) std::rethrow_exception(error);
}

void Submitter::settle(bool report) {
  if (submission_thread) return;
  if (!report && in_forked_child()) return;  // no thread there to wait for
  if (report) refuse_in_forked_child();
  const uint64_t target = pushed_.load(std::memory_order_acquire);
  // A read after a few operators waits for tens of microseconds of enqueues: spun, not slept
  // (a wake from a condition variable costs about as much again).
  spin([&] { return done_.load(std::memory_order_acquire) >= target; });
  if (done_.load(std::memory_order_acquire) < target) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++settlers_;
    settled_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= target; });
    --settlers_;
  }
  if (report && failed_.load(std::memory_order_relaxed)) rethrow_error();
}

void Submitter::execute(const Command& c) {
  switch (c.kind) {
    case Command::kLaunch:
      enqueue_kernel(queue_, c.kernel, c.args, c.dims, c.global, c.driver_local ? nullptr : c.local);
      break;
    case Command::kCopy:
      CL_CHECK(clEnqueueCopyBuffer(queue_, c.from, c.to, c.from_offset, c.to_offset, c.bytes, 0, nullptr, nullptr));
      break;
    case Command::kCall:
      c.run();
      break;
  }
}

void Submitter::loop() {
  submission_thread = true;
  try {
    Runtime::set_current(device_);
  } catch (...) {
  }
  std::vector<Command> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (waiting_.empty() && !stop_) {
        lock.unlock();
        spin([&] { return pushed_.load(std::memory_order_acquire) != done_.load(std::memory_order_relaxed); });
        lock.lock();
        if (waiting_.empty() && !stop_) {
          clFlush(queue_);  // what was enqueued starts while this thread sleeps
          sleeping_ = true;
          wake_.wait(lock, [&] { return !waiting_.empty() || stop_; });
          sleeping_ = false;
        }
      }
      if (waiting_.empty() && stop_) return;
      batch.swap(waiting_);
    }
    for (const Command& c : batch) {
      try {
        execute(c);
      } catch (const std::exception& err) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) {
          const Error* cl = dynamic_cast<const Error*>(&err);
          error_ = std::make_exception_ptr(
              Error(std::string("opencl: an earlier command on opencl:") + std::to_string(device_) +
                        " failed when the device's submission thread enqueued it (OCLF_DEVICE_ASYNC=0 reports each "
                        "error at the operator that caused it): " + err.what(),
                    cl ? cl->status() : CL_INVALID_OPERATION));
          failed_.store(true, std::memory_order_relaxed);
        }
      }
    }
    const uint64_t finished = batch.size();
    batch.clear();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.fetch_add(finished, std::memory_order_release);
      if (settlers_ == 0) continue;
    }
    settled_.notify_all();
  }
}

}  // namespace oclf::device
