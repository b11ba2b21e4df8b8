// Resident parameters: device copies of tensors (weights, biases) kept between calls, each
// under a handle, and buffers derived from them (a packed layout) that are freed with them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "buffers.hpp"
#include "device.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class ResidentStore {
 public:
  // Uploads go through `queue`; when the device is out of memory, `pool` is emptied first.
  ResidentStore(const Device* device, BufferPool* pool) : context_(device->context()), device_(device), pool_(pool) {}
  ResidentStore(const ResidentStore&) = delete;
  ResidentStore& operator=(const ResidentStore&) = delete;

  // Copies `bytes` of host memory to a new device buffer; returns its handle (never 0).
  uint64_t upload(const void* host, size_t bytes);
  // Frees a handle's buffer and what was derived from it (unknown handles are ignored).
  void release(uint64_t handle);
  // The buffer of a handle (throws Error for an unknown handle).
  cl_mem buffer(uint64_t handle) const;
  // Buffers derived from a resident buffer, kept under a tag and freed with it: derived()
  // returns nullptr until keep_derived() stored one.
  cl_mem derived(cl_mem resident, const std::string& tag) const;
  cl_mem keep_derived(cl_mem resident, const std::string& tag, size_t bytes);
  size_t bytes() const { return bytes_; }

 private:
  struct Resident {
    cl_mem mem = nullptr;
    size_t bytes = 0;
    std::map<std::string, std::pair<cl_mem, size_t>> derived;
  };
  cl_context context_;
  const Device* device_;
  BufferPool* pool_;
  std::map<uint64_t, Resident> residents_;
  std::map<cl_mem, uint64_t> handles_;
  uint64_t next_handle_ = 1;
  size_t bytes_ = 0;
};

}  // namespace oclf
#pragma GCC visibility pop
