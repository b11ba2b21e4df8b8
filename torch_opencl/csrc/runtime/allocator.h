// The opencl device's caching allocator. Each tensor storage is an OpenCL buffer; torch
// sees it at an address of its own (a reserved range per device that is never
// dereferenced), so storage offsets, views and torch's overlap checks work on plain
// pointers, locate() maps any address inside a storage back to (cl_mem, byte offset), and
// the address alone says which device a storage lives on.
// Each device's memory (DeviceMemory) keeps freed buffers in a cache by size bucket and
// reuses them without clCreateBuffer; reuse is safe without events because each device
// runs one in-order queue. Allocator, registered with torch, is a c10::DeviceAllocator:
// torch.accelerator's memory statistics and empty_cache reach it.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "stream.h"

namespace oclf::device {

// Where a device address lies: the buffer and the byte offset into it.
struct Location {
  cl_mem mem = nullptr;
  size_t offset = 0;
};

struct MemoryStats {
  size_t allocated = 0;      // bytes of live storages (rounded to their bucket)
  size_t reserved = 0;       // allocated + cached
  size_t peak_allocated = 0;     // since the start or reset_peak()
  size_t peak_reserved = 0;      // ...
  uint64_t live_buffers = 0;     // buffers holding a storage now
  uint64_t cached_buffers = 0;   // free buffers waiting in the cache
  // Accumulated since the start or reset_accumulated():
  uint64_t buffers_created = 0;  // clCreateBuffer calls
  uint64_t allocations = 0;      // allocate() calls that needed memory
  uint64_t cache_hits = 0;       // ... served from the cache
  uint64_t frees = 0;            // storages freed (their buffer went to the cache)
  uint64_t buffers_released = 0; // clReleaseMemObject calls (empty_cache, memory pressure)
  uint64_t out_of_memory = 0;    // allocations that failed after the cache was emptied
};

// The memory of one device: its live storages, its cache of free buffers, its statistics
// and the pools of the graphs recorded on it.
class DeviceMemory {
 public:
  explicit DeviceMemory(int index);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  c10::DataPtr allocate(size_t bytes);
  // The buffer and offset of an address inside a live storage of this device, the storage's
  // serial and its count of writes; false when no live storage holds it.
  bool find(uintptr_t address, Location* where, uint64_t* serial, uint64_t* writes = nullptr) const;
  // Counts a write into the storage holding `address` (nothing when none does).
  void note_write(uintptr_t address);
  MemoryStats stats() const;
  // The peaks start again from the current allocated and reserved bytes.
  void reset_peak();
  // The accumulated counters (buffers created, allocations, cache hits, frees, releases) to 0.
  void reset_accumulated();
  // Releases every cached (free) buffer.
  void empty_cache();

  // A graph's memory (graph.h). While a pool is set, allocations come from it (its free
  // blocks, else the cache or a new buffer, which then belong to it), and its blocks, when
  // freed, wait in it instead of the cache: its graph's recorded commands address them, so
  // nothing else may get them. close_pool() (the graph released) puts its free blocks in
  // the cache and lets the ones still in use go there when they are freed.
  struct Pool;
  Pool* open_pool();
  void set_pool(Pool* pool);  // nullptr: allocate as usual again
  void close_pool(Pool* pool);
  size_t pool_bytes(const Pool* pool) const;  // bytes of the blocks it holds

  // Where this device's addresses start: device i's range is [(i + 1) << 44, (i + 2) << 44).
  static uintptr_t base(int index) { return uintptr_t(index + 1) << kRangeBits; }
  static constexpr int kRangeBits = 44;

 private:
  struct Block {
    cl_mem mem;
    size_t size;     // bucket size in bytes
    uintptr_t base;  // the block's address as torch sees it
    uint64_t serial; // of its current allocation
    DeviceMemory* owner;
    uint64_t writes = 0;  // operators that wrote it during its current allocation
    Pool* pool = nullptr;
  };
  static void free_block(void* context);
  void release(Block* block);
  void report_to_profiler(const Block* block, int64_t bytes) const;  // callers hold mutex_
  void release_cached();  // callers hold mutex_

  const int index_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block*> live_;   // by base address
  std::multimap<size_t, Block*> cache_;  // free blocks by size
  uintptr_t next_address_;
  MemoryStats stats_;
  Pool* pool_ = nullptr;  // the recording graph's
};

class Allocator final : public c10::DeviceAllocator {
 public:
  using Pool = DeviceMemory::Pool;
  static Allocator& get();

  // A storage on the calling thread's current device.
  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // A copy between two addresses of this allocator (queued on the destination's device when
  // both are on one device; through the host between two devices).
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator: torch.accelerator.memory_* and empty_cache.
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one in-order queue per device
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  // (free, total) bytes of the device: total less what this process reserved.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // The memory of device `index` (made on first use).
  DeviceMemory& memory(int index);
  // The device an address of this allocator lies on, or -1.
  static int device_of(const void* address);
  // The buffer and offset of an address inside a live storage; throws otherwise.
  Location locate(const void* address) const;
  // A number that names the allocation holding `address` (never reused), for caches of
  // data derived from a storage; on_free(serial) is called when that storage is freed.
  uint64_t serial(const void* address) const;
  // What a cache of data derived from a storage keys on: its serial (0: no live storage) and
  // how many operators wrote it so far. Writes count whatever tensor wrote (a view, or
  // .data, whose version counter is not the parameter's): the dispatch wrapper notes every
  // tensor an operator's schema marks written, and copies note their destination.
  struct StorageTag {
    uint64_t serial = 0, writes = 0;
  };
  StorageTag tag(const void* address) const;
  void note_write(const void* address);
  void set_on_free(void (*on_free)(uint64_t serial)) { on_free_ = on_free; }
  void notify_free(uint64_t serial) const {
    if (on_free_ != nullptr) on_free_(serial);
  }
  // The bucket an allocation of `bytes` is served from (exposed for tests).
  static size_t bucket(size_t bytes);

 private:
  Allocator() = default;
  std::atomic<DeviceMemory*> memories_[kMaxDevices] = {};
  std::mutex opening_;
  void (*on_free_)(uint64_t serial) = nullptr;
};

}  // namespace oclf::device
