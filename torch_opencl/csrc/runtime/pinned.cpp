// Pinned host memory (see pinned.h).
#include "pinned.h"

#include <cstring>
#include <string>

#include "stream.h"

namespace oclf::device {

struct PinnedAllocator::Block {
  cl_mem mem;
  void* host;
  size_t bytes;
  int device;  // whose context and queue made it
};

PinnedAllocator& PinnedAllocator::get() {
  static PinnedAllocator* instance = new PinnedAllocator();  // never destroyed, as the devices
  return *instance;
}

c10::DataPtr PinnedAllocator::allocate(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, cpu);
  Stream& stream = Stream::get();
  cl_int status = CL_SUCCESS;
  cl_mem mem =
      clCreateBuffer(stream.runtime().context(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, nullptr, &status);
  if (status != CL_SUCCESS)
    throw Error(describe_failure(status_name(status), status,
                                 "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR, " + std::to_string(bytes) +
                                     " bytes) for pinned host memory",
                                 __FILE__, __LINE__),
                status);
  void* host = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    host = clEnqueueMapBuffer(stream.queue(), mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, nullptr, nullptr,
                              &status);
  }
  if (status != CL_SUCCESS) {
    clReleaseMemObject(mem);
    CL_CHECK(status);
  }
  Block* block = new Block{mem, host, bytes, stream.index()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(reinterpret_cast<uintptr_t>(host), block);
  }
  return c10::DataPtr(host, block, &free_block, cpu);
}

void PinnedAllocator::free_block(void* context) {
  if (context == nullptr) return;
  Block* block = static_cast<Block*>(context);
  {
    PinnedAllocator& self = get();
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.live_.erase(reinterpret_cast<uintptr_t>(block->host));
  }
  // The unmap is queued behind every copy that read the block; the buffer goes with it.
  Stream& stream = Stream::at(block->device);
  {
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    clEnqueueUnmapMemObject(stream.queue(), block->mem, block->host, 0, nullptr, nullptr);
  }
  clReleaseMemObject(block->mem);
  delete block;
}

void PinnedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count) std::memcpy(dest, src, count);
}

bool PinnedAllocator::is_pinned(const void* address) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return false;
  --it;
  return a >= it->first && a < it->first + it->second->bytes;
}

}  // namespace oclf::device
