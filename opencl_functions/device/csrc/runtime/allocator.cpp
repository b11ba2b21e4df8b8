// The opencl device's caching allocator (see allocator.h).
#include "allocator.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace oclf::device {

namespace {
// Addresses of consecutive blocks are this far apart at least, and aligned to it.
constexpr size_t kAddressAlign = 4096;
}  // namespace

struct Allocator::Pool {
  std::multimap<size_t, Block*> free;  // by size
  std::set<Block*> blocks;             // every block it holds, free or in use
};

Allocator& Allocator::get() {
  static Allocator* instance = new Allocator();
  return *instance;
}

// Buckets: multiples of 512 bytes up to 1 MiB; above, multiples of an eighth of the
// next lower power of two (at most 12.5 % wasted), so a training loop whose sizes repeat
// finds its buffers again.
size_t Allocator::bucket(size_t bytes) {
  if (bytes <= (size_t(1) << 20)) return round_up(std::max<size_t>(bytes, 1), 512);
  size_t power = size_t(1) << 20;
  while (power * 2 <= bytes) power *= 2;
  return round_up(bytes, power / 8);
}

c10::DataPtr Allocator::allocate(size_t bytes) {
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, device);
  Device& dev = Device::get();
  // More than the device holds can never succeed, and some drivers (NVIDIA) hand out such
  // a buffer anyway, failing only when a kernel first touches it.
  if (bytes > dev.info().global_mem_size) {
    throw Error("opencl: out of device memory allocating " + std::to_string(bytes) + " bytes: the device has " +
                    std::to_string(dev.info().global_mem_size) + " bytes in all (CL_MEM_OBJECT_ALLOCATION_FAILURE)",
                CL_MEM_OBJECT_ALLOCATION_FAILURE);
  }
  const size_t size = bucket(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.allocations;
  Block* block = nullptr;
  auto pooled = pool_ ? pool_->free.find(size) : cache_.end();
  auto cached = cache_.find(size);
  if (pool_ && pooled != pool_->free.end()) {
    block = pooled->second;
    pool_->free.erase(pooled);
    ++stats_.cache_hits;
  } else if (cached != cache_.end()) {
    block = cached->second;
    cache_.erase(cached);
    ++stats_.cache_hits;
  } else {
    // Past 80 % of device memory, the cached buffers go back first: some drivers (NVIDIA)
    // create buffers lazily and report a lack of memory only when a kernel first uses one.
    const size_t limit = dev.info().global_mem_size / 10 * 8;
    if (stats_.reserved + size > limit) {
      release_cached();
    }
    cl_int status = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(dev.context(), CL_MEM_READ_WRITE, size, nullptr, &status);
    if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES ||
        status == CL_OUT_OF_HOST_MEMORY) {
      // Give the cached buffers back and try once more.
      release_cached();
      mem = clCreateBuffer(dev.context(), CL_MEM_READ_WRITE, size, nullptr, &status);
    }
    if (status != CL_SUCCESS) {
      try {
        CL_CHECK(status);
      } catch (const Error& err) {  // the CL_* name, with what was asked and what is in use
        throw Error("opencl: out of device memory allocating " + std::to_string(bytes) + " bytes with " +
                             std::to_string(stats_.allocated) + " bytes in use: " + err.what(),
                         status);
      }
    }
    block = new Block{mem, size, next_address_, 0};
    next_address_ += round_up(size, kAddressAlign) + kAddressAlign;  // a gap: block ends never meet
    stats_.reserved += size;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.buffers_created;
  }
  if (pool_ && !block->pool) {
    block->pool = pool_;
    pool_->blocks.insert(block);
  }
  block->serial = next_serial_++;
  live_.emplace(block->base, block);
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return c10::DataPtr(reinterpret_cast<void*>(block->base), block, &free_block, device);
}

void Allocator::free_block(void* context) {
  if (context != nullptr) get().release(static_cast<Block*>(context));
}

c10::DeleterFnPtr Allocator::raw_deleter() const { return nullptr; }

void Allocator::release(Block* block) {
  uint64_t serial = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(block->base);
    stats_.allocated -= block->size;
    ++stats_.frees;
    if (block->pool) block->pool->free.emplace(block->size, block);
    else cache_.emplace(block->size, block);
    serial = block->serial;
  }
  if (on_free_ != nullptr) on_free_(serial);
}

uint64_t Allocator::serial(const void* address) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(a);
  if (it != live_.begin()) {
    --it;
    if (a >= it->second->base && a <= it->second->base + it->second->size) return it->second->serial;
  }
  return 0;
}

Location Allocator::locate(const void* address) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(a);
  if (it != live_.begin()) {
    --it;
    const Block* block = it->second;
    if (a >= block->base && a <= block->base + block->size) return Location{block->mem, size_t(a - block->base)};
  }
  throw std::invalid_argument("opencl: address " + std::to_string(a) + " is not inside a live device storage");
}

void Allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  const Location to = locate(dest), from = locate(src);
  Device::get().copy(from.mem, to.mem, from.offset, to.offset, count);
}

Allocator::Pool* Allocator::open_pool() { return new Pool(); }

void Allocator::set_pool(Pool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_ = pool;
}

void Allocator::close_pool(Pool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool_ == pool) pool_ = nullptr;
  for (auto& entry : pool->free) cache_.emplace(entry.first, entry.second);
  for (Block* block : pool->blocks) block->pool = nullptr;
  delete pool;
}

size_t Allocator::pool_bytes(const Pool* pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const Block* block : pool->blocks) bytes += block->size;
  return bytes;
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats out = stats_;
  out.live_buffers = live_.size();
  out.cached_buffers = cache_.size();
  return out;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void Allocator::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.buffers_created = 0;
  stats_.allocations = 0;
  stats_.cache_hits = 0;
  stats_.frees = 0;
  stats_.buffers_released = 0;
}

void Allocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void Allocator::release_cached() {
  for (auto& entry : cache_) {
    clReleaseMemObject(entry.second->mem);
    stats_.reserved -= entry.second->size;
    ++stats_.buffers_released;
    delete entry.second;
  }
  cache_.clear();
}

}  // namespace oclf::device
