// Device memory for host code: a pool of device buffers reused by exact size, and Buffer,
// a buffer that goes back to the pool when it goes out of scope (or, on devices that work
// in host memory, wraps the host bytes so nothing is copied).
#pragma once

#include <map>
#include <utility>

#include "errors.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class Runtime;

class BufferPool {
 public:
  // Freed buffers are kept for reuse up to `limit` bytes in all.
  BufferPool(cl_context context, size_t limit) : context_(context), limit_(limit) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of exactly `bytes` with `flags`: a pooled one, else a new one (when the device
  // is out of memory, the pool is emptied and the allocation tried once more).
  cl_mem acquire(size_t bytes, cl_mem_flags flags);
  void release(cl_mem mem, size_t bytes, cl_mem_flags flags);
  // Frees every pooled buffer.
  void clear();
  size_t bytes_in_use() const { return bytes_in_use_; }
  size_t bytes_pooled() const { return bytes_pooled_; }

 private:
  cl_context context_;
  size_t limit_;
  std::multimap<std::pair<size_t, cl_mem_flags>, cl_mem> pool_;
  size_t bytes_in_use_ = 0, bytes_pooled_ = 0;
};

// A device buffer of the current device's runtime (its pool, its queue), given back to
// that runtime's pool on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, cl_mem_flags flags);
  // A buffer for host memory that a kernel reads (input) or writes (output). On devices
  // that work in host memory (CPUs) it wraps the host bytes (CL_MEM_USE_HOST_PTR), so
  // nothing is copied; elsewhere it is a pooled buffer, with input's bytes written to it.
  // Read an output back with read(host, bytes): on a wrapping buffer that maps it. An
  // output that the device also reads (CLBlast's C, say) needs CL_MEM_READ_WRITE.
  static Buffer input(const void* host, size_t bytes);
  static Buffer output(void* host, size_t bytes, cl_mem_flags flags = CL_MEM_WRITE_ONLY);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  cl_mem get() const { return mem_; }
  size_t bytes() const { return bytes_; }
  // Blocking copies between host memory and the buffer (bytes may be less than bytes()).
  void write(const void* host, size_t bytes);
  void read(void* host, size_t bytes) const;
  // read() without waiting: the bytes are in host memory once the queue has finished (the
  // bindings finish it before an operation returns), and host must stay valid until then.
  // Saves a round trip to the device per operation; on a wrapping buffer it waits only
  // when the driver mapped the buffer elsewhere than the host bytes.
  void read_async(void* host, size_t bytes) const;
  // Sets the buffer to zero, in the queue's order.
  void zero();

 private:
  Buffer(Runtime* rt, cl_mem wrapped, size_t bytes, cl_mem_flags flags, void* host);
  static Buffer over_host(void* host, size_t bytes, cl_mem_flags flags, bool copy_in);
  void free();
  Runtime* rt_ = nullptr;  // whose pool and queue
  cl_mem mem_ = nullptr;
  size_t bytes_ = 0;
  cl_mem_flags flags_ = 0;
  void* host_ = nullptr;  // the host bytes a wrapping buffer uses, else nullptr
};

}  // namespace oclf
#pragma GCC visibility pop
