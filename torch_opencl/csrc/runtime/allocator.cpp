// The opencl device's caching allocator (see allocator.h).
#include "allocator.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../check.h"

namespace oclf::device {

namespace {
// Addresses of consecutive blocks are this far apart at least, and aligned to it.
constexpr size_t kAddressAlign = 4096;
// Serials name allocations on every device (derived caches key by them): never reused.
std::atomic<uint64_t> next_serial{1};
}  // namespace

struct DeviceMemory::Pool {
  std::multimap<size_t, Block*> free;  // by size
  std::set<Block*> blocks;             // every block it holds, free or in use
};

// Buckets: multiples of 512 bytes up to 1 MiB; above, multiples of an eighth of the
// next lower power of two (at most 12.5 % wasted), so a training loop whose sizes repeat
// finds its buffers again.
size_t Allocator::bucket(size_t bytes) {
  if (bytes <= (size_t(1) << 20)) return round_up(std::max<size_t>(bytes, 1), 512);
  size_t power = size_t(1) << 20;
  while (power * 2 <= bytes) power *= 2;
  return round_up(bytes, power / 8);
}

DeviceMemory::DeviceMemory(int index) : index_(index), next_address_(base(index)) {}

c10::DataPtr DeviceMemory::allocate(size_t bytes) {
  const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index_));
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, device);
  refuse_in_forked_child();
  Runtime& rt = Stream::at(index_).runtime();  // the stream opened with it, as for every entry point
  // More than the device holds can never succeed, and some drivers (NVIDIA) hand out such
  // a buffer anyway, failing only when a kernel first touches it.
  if (bytes > rt.info().global_mem_size) {
    throw Error("opencl: out of device memory allocating " + std::to_string(bytes) + " bytes: the device has " +
                    std::to_string(rt.info().global_mem_size) + " bytes in all (CL_MEM_OBJECT_ALLOCATION_FAILURE)",
                CL_MEM_OBJECT_ALLOCATION_FAILURE);
  }
  const size_t size = Allocator::bucket(bytes);
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
    const size_t limit = rt.info().global_mem_size / 10 * 8;
    if (stats_.reserved + size > limit) {
      release_cached();
    }
    cl_int status = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(rt.context(), CL_MEM_READ_WRITE, size, nullptr, &status);
    if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES ||
        status == CL_OUT_OF_HOST_MEMORY) {
      // Give the cached buffers back and try once more.
      release_cached();
      mem = clCreateBuffer(rt.context(), CL_MEM_READ_WRITE, size, nullptr, &status);
    }
    if (status != CL_SUCCESS) {
      ++stats_.out_of_memory;
      try {
        CL_CHECK(status);
      } catch (const Error& err) {  // the CL_* name, with what was asked and what is in use
        throw Error("opencl: out of device memory allocating " + std::to_string(bytes) + " bytes with " +
                             std::to_string(stats_.allocated) + " bytes in use: " + err.what(),
                         status);
      }
    }
    block = new Block{mem, size, next_address_, 0, this};
    next_address_ += round_up(size, kAddressAlign) + kAddressAlign;  // a gap: block ends never meet
    stats_.reserved += size;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.buffers_created;
  }
  if (pool_ && !block->pool) {
    block->pool = pool_;
    pool_->blocks.insert(block);
  }
  block->serial = next_serial++;
  block->writes = 0;
  live_.emplace(block->base, block);
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  report_to_profiler(block, int64_t(size));
  return c10::DataPtr(reinterpret_cast<void*>(block->base), block, &free_block, device);
}

// torch's profiler with profile_memory=True (and its memory timeline) sees each allocation
// and free of a device's memory, with the device's totals after it. Called under mutex_.
void DeviceMemory::report_to_profiler(const Block* block, int64_t bytes) const {
  if (!c10::memoryProfilingEnabled()) return;
  c10::reportMemoryUsageToProfiler(reinterpret_cast<void*>(block->base), bytes, stats_.allocated, stats_.reserved,
                                   c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index_)));
}

void DeviceMemory::free_block(void* context) {
  if (context == nullptr) return;
  Block* block = static_cast<Block*>(context);
  block->owner->release(block);
}

void DeviceMemory::release(Block* block) {
  uint64_t serial = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(block->base);
    stats_.allocated -= block->size;
    ++stats_.frees;
    report_to_profiler(block, -int64_t(block->size));
    if (block->pool) block->pool->free.emplace(block->size, block);
    else cache_.emplace(block->size, block);
    serial = block->serial;
  }
  Allocator::get().notify_free(serial);
}

bool DeviceMemory::find(uintptr_t a, Location* where, uint64_t* serial, uint64_t* writes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return false;
  --it;
  const Block* block = it->second;
  if (a < block->base || a > block->base + block->size) return false;
  if (where) *where = Location{block->mem, size_t(a - block->base)};
  if (serial) *serial = block->serial;
  if (writes) *writes = block->writes;
  return true;
}

void DeviceMemory::note_write(uintptr_t a) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return;
  --it;
  if (a >= it->second->base && a <= it->second->base + it->second->size) ++it->second->writes;
}

DeviceMemory::Pool* DeviceMemory::open_pool() { return new Pool(); }

void DeviceMemory::set_pool(Pool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_ = pool;
}

void DeviceMemory::close_pool(Pool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool_ == pool) pool_ = nullptr;
  for (auto& entry : pool->free) cache_.emplace(entry.first, entry.second);
  for (Block* block : pool->blocks) block->pool = nullptr;
  delete pool;
}

size_t DeviceMemory::pool_bytes(const Pool* pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const Block* block : pool->blocks) bytes += block->size;
  return bytes;
}

MemoryStats DeviceMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats out = stats_;
  out.live_buffers = live_.size();
  out.cached_buffers = cache_.size();
  return out;
}

void DeviceMemory::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void DeviceMemory::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.buffers_created = 0;
  stats_.allocations = 0;
  stats_.cache_hits = 0;
  stats_.frees = 0;
  stats_.buffers_released = 0;
}

void DeviceMemory::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void DeviceMemory::release_cached() {
  // Launches the submission thread still holds may name these buffers (submitter.h: it
  // never frees memory, so waiting for it under this lock cannot deadlock).
  if (!cache_.empty()) Stream::at(index_).settle();
  for (auto& entry : cache_) {
    clReleaseMemObject(entry.second->mem);
    stats_.reserved -= entry.second->size;
    ++stats_.buffers_released;
    delete entry.second;
  }
  cache_.clear();
}

// ---- the allocator torch holds: each call on the right device's memory ------------------

Allocator& Allocator::get() {
  static Allocator* instance = new Allocator();
  return *instance;
}

DeviceMemory& Allocator::memory(int index) {
  DEVICE_CHECK(index >= 0 && index < static_cast<int>(kMaxDevices), "opencl: no device ", index);
  if (DeviceMemory* m = memories_[index].load(std::memory_order_acquire)) return *m;
  std::lock_guard<std::mutex> lock(opening_);
  if (memories_[index].load(std::memory_order_relaxed) == nullptr)
    memories_[index].store(new DeviceMemory(index), std::memory_order_release);
  return *memories_[index].load(std::memory_order_relaxed);
}

int Allocator::device_of(const void* address) {
  const uintptr_t range = reinterpret_cast<uintptr_t>(address) >> DeviceMemory::kRangeBits;
  return range >= 1 && range <= kMaxDevices ? static_cast<int>(range) - 1 : -1;
}

c10::DataPtr Allocator::allocate(size_t bytes) { return memory(Runtime::current()).allocate(bytes); }

c10::DeleterFnPtr Allocator::raw_deleter() const { return nullptr; }

uint64_t Allocator::serial(const void* address) const {
  const int index = device_of(address);
  DeviceMemory* m = index >= 0 ? memories_[index].load(std::memory_order_acquire) : nullptr;
  uint64_t serial = 0;
  if (m) m->find(reinterpret_cast<uintptr_t>(address), nullptr, &serial);
  return serial;
}

Allocator::StorageTag Allocator::tag(const void* address) const {
  const int index = device_of(address);
  DeviceMemory* m = index >= 0 ? memories_[index].load(std::memory_order_acquire) : nullptr;
  StorageTag t;
  if (m) m->find(reinterpret_cast<uintptr_t>(address), nullptr, &t.serial, &t.writes);
  return t;
}

void Allocator::note_write(const void* address) {
  const int index = device_of(address);
  if (DeviceMemory* m = index >= 0 ? memories_[index].load(std::memory_order_acquire) : nullptr)
    m->note_write(reinterpret_cast<uintptr_t>(address));
}

Location Allocator::locate(const void* address) const {
  const int index = device_of(address);
  DeviceMemory* m = index >= 0 ? memories_[index].load(std::memory_order_acquire) : nullptr;
  Location where;
  if (m && m->find(reinterpret_cast<uintptr_t>(address), &where, nullptr)) return where;
  throw std::invalid_argument("opencl: address " + std::to_string(reinterpret_cast<uintptr_t>(address)) +
                              " is not inside a live device storage");
}

void Allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  const Location to = locate(dest), from = locate(src);
  const int to_device = device_of(dest), from_device = device_of(src);
  if (to_device == from_device) {
    Stream::at(to_device).copy(from.mem, to.mem, from.offset, to.offset, count);
    return;
  }
  std::vector<unsigned char> staging(count);
  Stream::at(from_device).read(from.mem, from.offset, staging.data(), count);
  Stream::at(to_device).write_async(to.mem, to.offset, staging.data(), count);
}

void Allocator::emptyCache(c10::MempoolId_t) {
  for (int i = 0; i < static_cast<int>(kMaxDevices); ++i)
    if (DeviceMemory* m = memories_[i].load(std::memory_order_acquire)) m->empty_cache();
}

c10::CachingDeviceAllocator::DeviceStats Allocator::getDeviceStats(c10::DeviceIndex device) {
  const MemoryStats s = memory(device).stats();
  c10::CachingDeviceAllocator::DeviceStats out;
  using c10::CachingAllocator::StatType;
  const auto fill = [](c10::CachingAllocator::StatArray& stat, int64_t current, int64_t peak, int64_t allocated,
                       int64_t freed) {
    auto& all = stat[static_cast<size_t>(StatType::AGGREGATE)];
    all.current = current;
    all.peak = peak;
    all.allocated = allocated;
    all.freed = freed;
  };
  // Bytes: what is live and what is held; counts: storages and buffers.
  fill(out.allocated_bytes, s.allocated, s.peak_allocated, 0, 0);
  fill(out.active_bytes, s.allocated, s.peak_allocated, 0, 0);
  fill(out.requested_bytes, s.allocated, s.peak_allocated, 0, 0);
  fill(out.reserved_bytes, s.reserved, s.peak_reserved, 0, 0);
  fill(out.allocation, s.live_buffers, s.live_buffers, s.allocations, s.frees);
  fill(out.active, s.live_buffers, s.live_buffers, s.allocations, s.frees);
  fill(out.segment, s.live_buffers + s.cached_buffers, s.live_buffers + s.cached_buffers, s.buffers_created,
       s.buffers_released);
  out.num_ooms = static_cast<int64_t>(s.out_of_memory);
  out.num_device_alloc = static_cast<int64_t>(s.buffers_created);
  out.num_device_free = static_cast<int64_t>(s.buffers_released);
  return out;
}

void Allocator::resetAccumulatedStats(c10::DeviceIndex device) { memory(device).reset_accumulated(); }

void Allocator::resetPeakStats(c10::DeviceIndex device) { memory(device).reset_peak(); }

std::pair<size_t, size_t> Allocator::getMemoryInfo(c10::DeviceIndex device) {
  const size_t total = Runtime::at(device).info().global_mem_size;
  const size_t reserved = memory(device).stats().reserved;
  return {total > reserved ? total - reserved : 0, total};
}

}  // namespace oclf::device
