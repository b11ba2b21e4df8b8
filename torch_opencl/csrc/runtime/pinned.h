// Pinned host memory for the opencl device: tensor.pin_memory() and
// DataLoader(pin_memory=True). Each block is an OpenCL buffer made with
// CL_MEM_ALLOC_HOST_PTR in the current device's context and mapped for the host: the
// driver's own page-locked memory where it has it (NVIDIA's), which it copies to the device
// fastest; on CPU devices plain host memory. is_pinned() recognises an address inside a
// live block (tensor.is_pinned()).
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace oclf::device {

class PinnedAllocator final : public c10::Allocator {
 public:
  static PinnedAllocator& get();

  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // Whether `address` lies inside a live pinned block.
  bool is_pinned(const void* address) const;

 private:
  PinnedAllocator() = default;
  struct Block;
  static void free_block(void* context);
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block*> live_;  // by host address
};

}  // namespace oclf::device
