// The opencl device's caching allocator. Each tensor storage is an OpenCL buffer; torch
// sees it at an address of its own (a reserved range that is never dereferenced), so
// storage offsets, views and torch's overlap checks work on plain pointers, and
// locate() maps any address inside a storage back to (cl_mem, byte offset).
// Freed buffers wait in a cache by size bucket and are reused without clCreateBuffer;
// reuse is safe without events because the device runs one in-order queue.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "device.h"

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
};

class Allocator final : public c10::Allocator {
 public:
  static Allocator& get();

  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Device-to-device copy between two addresses of this allocator (queued).
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // The buffer and offset of an address inside a live storage; throws otherwise.
  Location locate(const void* address) const;
  // A number that names the allocation holding `address` (never reused), for caches of
  // data derived from a storage; on_free(serial) is called when that storage is freed.
  uint64_t serial(const void* address) const;
  void set_on_free(void (*on_free)(uint64_t serial)) { on_free_ = on_free; }
  MemoryStats stats() const;
  // The peaks start again from the current allocated and reserved bytes.
  void reset_peak();
  // The accumulated counters (buffers created, allocations, cache hits, frees, releases) to 0.
  void reset_accumulated();
  // Releases every cached (free) buffer.
  void empty_cache();
  // The bucket an allocation of `bytes` is served from (exposed for tests).
  static size_t bucket(size_t bytes);

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

 private:
  Allocator() = default;
  struct Block {
    cl_mem mem;
    size_t size;     // bucket size in bytes
    uintptr_t base;  // the block's address as torch sees it
    uint64_t serial; // of its current allocation
    Pool* pool = nullptr;
  };
  static void free_block(void* context);
  void release(Block* block);
  void release_cached();  // callers hold mutex_

  mutable std::mutex mutex_;
  std::map<uintptr_t, Block*> live_;                 // by base address
  std::multimap<size_t, Block*> cache_;              // free blocks by size
  uintptr_t next_address_ = uintptr_t(1) << 44;      // start of the reserved range
  uint64_t next_serial_ = 1;
  void (*on_free_)(uint64_t serial) = nullptr;
  MemoryStats stats_;
  Pool* pool_ = nullptr;  // the recording graph's
};

}  // namespace oclf::device
