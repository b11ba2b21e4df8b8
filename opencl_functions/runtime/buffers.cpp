// The buffer pool and Buffer: see buffers.hpp.
#include "buffers.hpp"

#include <cstring>

#include "runtime.hpp"

namespace oclf {

cl_mem BufferPool::acquire(size_t bytes, cl_mem_flags flags) {
  auto it = pool_.find({bytes, flags});
  cl_mem mem = nullptr;
  if (it != pool_.end()) {
    mem = it->second;
    pool_.erase(it);
    bytes_pooled_ -= bytes;
  } else {
    cl_int status = CL_SUCCESS;
    mem = clCreateBuffer(context_, flags, bytes, nullptr, &status);
    if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES) {
      clear();  // give cached buffers back and try once more
      mem = clCreateBuffer(context_, flags, bytes, nullptr, &status);
    }
    CL_CHECK(status);
  }
  bytes_in_use_ += bytes;
  return mem;
}

void BufferPool::release(cl_mem mem, size_t bytes, cl_mem_flags flags) {
  bytes_in_use_ -= bytes;
  if (bytes > limit_) {
    clReleaseMemObject(mem);
    return;
  }
  while (bytes_pooled_ + bytes > limit_ && !pool_.empty()) {
    auto victim = pool_.begin();  // the smallest; cheap to make again
    bytes_pooled_ -= victim->first.first;
    clReleaseMemObject(victim->second);
    pool_.erase(victim);
  }
  pool_.emplace(std::make_pair(bytes, flags), mem);
  bytes_pooled_ += bytes;
}

void BufferPool::clear() {
  for (auto& entry : pool_) clReleaseMemObject(entry.second);
  pool_.clear();
  bytes_pooled_ = 0;
}

Buffer::Buffer(size_t bytes, cl_mem_flags flags)
    : rt_(&Runtime::get()), mem_(rt_->pool().acquire(bytes, flags)), bytes_(bytes), flags_(flags) {}

// Wraps host bytes on zero-copy devices, else a pooled buffer (filled when copy_in).
Buffer Buffer::over_host(void* host, size_t bytes, cl_mem_flags flags, bool copy_in) {
  Runtime& rt = Runtime::get();
  if (!rt.zero_copy() || bytes == 0) {
    Buffer buffer(bytes, flags);
    if (copy_in) buffer.write(host, bytes);
    return buffer;
  }
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(rt.context(), flags | CL_MEM_USE_HOST_PTR, bytes, host, &status);
  CL_CHECK(status);
  return Buffer(&rt, mem, bytes, flags, host);
}

Buffer Buffer::input(const void* host, size_t bytes) {
  return over_host(const_cast<void*>(host), bytes, CL_MEM_READ_ONLY, true);
}

Buffer Buffer::output(void* host, size_t bytes, cl_mem_flags flags) { return over_host(host, bytes, flags, false); }

Buffer::Buffer(Runtime* rt, cl_mem wrapped, size_t bytes, cl_mem_flags flags, void* host)
    : rt_(rt), mem_(wrapped), bytes_(bytes), flags_(flags), host_(host) {}

void Buffer::free() {
  if (!mem_) return;
  if (host_)
    clReleaseMemObject(mem_);
  else
    rt_->pool().release(mem_, bytes_, flags_);
  mem_ = nullptr;
}

Buffer::~Buffer() { free(); }

Buffer::Buffer(Buffer&& other) noexcept
    : rt_(other.rt_), mem_(other.mem_), bytes_(other.bytes_), flags_(other.flags_), host_(other.host_) {
  other.mem_ = nullptr;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    free();
    rt_ = other.rt_;
    mem_ = other.mem_;
    bytes_ = other.bytes_;
    flags_ = other.flags_;
    host_ = other.host_;
    other.mem_ = nullptr;
  }
  return *this;
}

void Buffer::write(const void* host, size_t bytes) {
  if (bytes == 0) return;
  CL_CHECK(clEnqueueWriteBuffer(rt_->queue(), mem_, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr));
}

void Buffer::read(void* host, size_t bytes) const {
  if (bytes == 0) return;
  cl_command_queue queue = rt_->queue();
  if (!host_) {
    CL_CHECK(clEnqueueReadBuffer(queue, mem_, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr));
    return;
  }
  // A wrapping buffer: mapping it makes the device's writes visible in the host bytes
  // (usually in place; copied when the driver mapped elsewhere).
  cl_int status = CL_SUCCESS;
  void* mapped = clEnqueueMapBuffer(queue, mem_, CL_TRUE, CL_MAP_READ, 0, bytes, 0, nullptr, nullptr, &status);
  CL_CHECK(status);
  if (mapped != host) std::memcpy(host, mapped, bytes);
  CL_CHECK(clEnqueueUnmapMemObject(queue, mem_, mapped, 0, nullptr, nullptr));
}

void Buffer::read_async(void* host, size_t bytes) const {
  if (bytes == 0) return;
  cl_command_queue queue = rt_->queue();
  if (!host_) {
    CL_CHECK(clEnqueueReadBuffer(queue, mem_, CL_FALSE, 0, bytes, host, 0, nullptr, nullptr));
    return;
  }
  cl_int status = CL_SUCCESS;
  cl_event mapped_event = nullptr;
  void* mapped =
      clEnqueueMapBuffer(queue, mem_, CL_FALSE, CL_MAP_READ, 0, bytes, 0, nullptr, &mapped_event, &status);
  CL_CHECK(status);
  if (mapped != host) {  // the driver copies to a mapping of its own: wait for it, copy out
    status = clWaitForEvents(1, &mapped_event);
    if (status == CL_SUCCESS) std::memcpy(host, mapped, bytes);
  }
  clReleaseEvent(mapped_event);
  CL_CHECK(status);
  CL_CHECK(clEnqueueUnmapMemObject(queue, mem_, mapped, 0, nullptr, nullptr));
}

void Buffer::zero() {
  const float zero = 0.0f;
  CL_CHECK(clEnqueueFillBuffer(rt_->queue(), mem_, &zero, sizeof(zero), 0, bytes_, 0, nullptr, nullptr));
}

}  // namespace oclf
