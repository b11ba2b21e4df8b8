// The resident store: see resident.hpp.
#include "resident.hpp"

#include <algorithm>

namespace oclf {

uint64_t ResidentStore::upload(const void* host, size_t bytes) {
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_ONLY, std::max<size_t>(bytes, 4), nullptr, &status);
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES) {
    pool_->clear();
    mem = clCreateBuffer(context_, CL_MEM_READ_ONLY, std::max<size_t>(bytes, 4), nullptr, &status);
  }
  CL_CHECK(status);
  if (bytes) {
    status = clEnqueueWriteBuffer(device_->queue(), mem, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr);
    if (status != CL_SUCCESS) clReleaseMemObject(mem);
    CL_CHECK(status);
  }
  const uint64_t handle = next_handle_++;
  residents_[handle] = Resident{mem, bytes, {}};
  handles_[mem] = handle;
  bytes_ += bytes;
  return handle;
}

void ResidentStore::release(uint64_t handle) {
  auto it = residents_.find(handle);
  if (it == residents_.end()) return;
  for (auto& d : it->second.derived) {
    clReleaseMemObject(d.second.first);
    bytes_ -= d.second.second;
  }
  handles_.erase(it->second.mem);
  clReleaseMemObject(it->second.mem);
  bytes_ -= it->second.bytes;
  residents_.erase(it);
}

cl_mem ResidentStore::buffer(uint64_t handle) const {
  auto it = residents_.find(handle);
  if (it == residents_.end())
    throw Error("unknown resident handle " + std::to_string(handle) + " (released already?)", CL_INVALID_MEM_OBJECT);
  return it->second.mem;
}

cl_mem ResidentStore::derived(cl_mem resident, const std::string& tag) const {
  auto h = handles_.find(resident);
  if (h == handles_.end()) return nullptr;
  const auto& derived = residents_.at(h->second).derived;
  auto d = derived.find(tag);
  return d == derived.end() ? nullptr : d->second.first;
}

cl_mem ResidentStore::keep_derived(cl_mem resident, const std::string& tag, size_t bytes) {
  auto h = handles_.find(resident);
  if (h == handles_.end()) throw Error("keep_derived: not a resident buffer", CL_INVALID_MEM_OBJECT);
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 4), nullptr, &status);
  CL_CHECK(status);
  auto& slot = residents_.at(h->second).derived[tag];
  if (slot.first) {
    clReleaseMemObject(slot.first);
    bytes_ -= slot.second;
  }
  slot = {mem, bytes};
  bytes_ += bytes;
  return mem;
}

}  // namespace oclf
