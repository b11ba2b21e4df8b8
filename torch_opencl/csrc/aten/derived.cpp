// Tensors derived from device tensors, kept with them (see derived.h).
#include "derived.h"

#include <map>
#include <mutex>

#include "tensors.h"

namespace oclf::device {

namespace {

struct Derived {
  uint64_t version, writes;  // the source's version counter and its storage's writes when made
  at::Tensor data;
};
std::mutex derived_mutex;
// serial of the source's allocation -> layout -> derived tensor. Never destroyed: at exit
// its tensors would be freed into a half-destroyed cache.
std::map<uint64_t, std::map<std::string, Derived>>& derived_cache() {
  static auto* cache = new std::map<uint64_t, std::map<std::string, Derived>>();
  return *cache;
}

// Called by the allocator when a storage is freed. The derived tensors are released
// outside the lock: freeing them calls back here.
void forget_derived(uint64_t serial) {
  std::map<std::string, Derived> dropped;
  std::lock_guard<std::mutex> lock(derived_mutex);
  auto found = derived_cache().find(serial);
  if (found == derived_cache().end()) return;
  dropped.swap(found->second);
  derived_cache().erase(found);
}

}  // namespace

at::Tensor derived_from(const at::Tensor& source, const std::string& layout,
                        const std::function<at::Tensor()>& make) {
  const Allocator::StorageTag tag = Allocator::get().tag(source.data_ptr());
  const uint64_t serial = tag.serial;
  if (serial == 0) return make();
  const std::string key = layout + " @" + std::to_string(reinterpret_cast<uintptr_t>(source.data_ptr()));
  const uint64_t version = source._version();
  {
    std::lock_guard<std::mutex> lock(derived_mutex);
    auto found = derived_cache().find(serial);
    if (found != derived_cache().end()) {
      auto entry = found->second.find(key);
      if (entry != found->second.end() && entry->second.version == version && entry->second.writes == tag.writes)
        return entry->second.data;
    }
  }
  at::Tensor made = make();
  static bool hooked = (Allocator::get().set_on_free(&forget_derived), true);
  (void)hooked;
  at::Tensor replaced;  // released after the lock, as in forget_derived
  std::lock_guard<std::mutex> lock(derived_mutex);
  Derived& slot = derived_cache()[serial][key];
  replaced = std::move(slot.data);
  slot = Derived{version, tag.writes, made};
  return made;
}

bool has_derived(const void* address) {
  const uint64_t serial = Allocator::get().tag(address).serial;
  if (serial == 0) return false;
  std::lock_guard<std::mutex> lock(derived_mutex);
  auto found = derived_cache().find(serial);
  return found != derived_cache().end() && !found->second.empty();
}

// (The cache's key is joined by message(), without iostreams: c10::str of the sizes crashed
// the process on the H100 image, csrc/check.h.)
at::Tensor float32_copy(const at::Tensor& t) {
  const auto make = [&] { return t.to(at::kFloat); };
  if (!(t.is_leaf() && t.requires_grad())) return make();
  return derived_from(t, message("float32 ", t.sizes(), " ", t.strides()), make);
}

}  // namespace oclf::device
