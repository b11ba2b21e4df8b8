// Registers the opencl device with torch's core: the device guard (one device, one
// stream: the in-order queue; events are markers on it), the allocator and the PrivateUse1
// hooks.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "../check.h"
#include "allocator.h"
#include "device.h"

namespace oclf::device {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::DeviceIndex device_count() { return Device::available() ? 1 : 0; }

// One device (index 0) and one stream (id 0), the in-order queue.
struct Guard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return c10::Device(kType, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kType, 0); }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, 0), 0);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  bool queryStream(const c10::Stream&) const override {
    Device::get().synchronize();
    return true;
  }
  void synchronizeStream(const c10::Stream&) const override { Device::get().synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { Device::get().synchronize(); }
  // Events are markers on the queue (Device::marker). With one in-order queue, block() has
  // nothing to order; elapsedTime reads the markers' profiling timestamps.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    check(stream.device());
    cl_event fresh = Device::get().marker();
    if (*event != nullptr) clReleaseEvent(static_cast<cl_event>(*event));
    *event = fresh;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    return event == nullptr || status(static_cast<cl_event>(event)) == CL_COMPLETE;
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    cl_event e = static_cast<cl_event>(event);
    const cl_int waited = clWaitForEvents(1, &e);
    DEVICE_CHECK(waited == CL_SUCCESS && status(e) == CL_COMPLETE, "opencl: the commands before an event failed (",
                status_name(waited == CL_SUCCESS ? status(e) : waited), ")");
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    DEVICE_CHECK(start != nullptr && end != nullptr, "opencl: elapsed_time needs two recorded events");
    const double ns = double(end_time(static_cast<cl_event>(end))) - double(end_time(static_cast<cl_event>(start)));
    return ns / 1e6;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) clReleaseEvent(static_cast<cl_event>(event));
  }

 private:
  // CL_QUEUED .. CL_COMPLETE, or a negative error code when the commands failed.
  static cl_int status(cl_event event) {
    cl_int value = CL_COMPLETE;
    CL_CHECK(clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(value), &value, nullptr));
    return value;
  }
  // When the commands before the marker had finished, in the device's nanoseconds.
  static cl_ulong end_time(cl_event event) {
    cl_ulong ns = 0;
    CL_CHECK(clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof(ns), &ns, nullptr));
    return ns;
  }
  static void check(c10::Device d) {
    DEVICE_CHECK(!d.has_index() || d.index() == 0, "opencl: there is one OpenCL device (index 0), got index ",
                int(d.index()));
  }
};

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  at::Device getDeviceFromPtr(void*) const override { return at::Device(kType, 0); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override {
    DEVICE_CHECK(false, "opencl: pinned host memory is not supported");
  }
  // Storage resizes (untyped_storage().resize_()): a new buffer, the old bytes copied in.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    Allocator& allocator = Allocator::get();
    c10::DataPtr fresh = allocator.allocate(new_bytes);
    const size_t keep = std::min(storage.nbytes(), new_bytes);
    if (keep > 0) allocator.copy_data(fresh.get(), storage.data(), keep);
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
  }
};

Guard guard_instance;
c10::impl::DeviceGuardImplRegistrar guard_registrar(kType, &guard_instance);

struct Registration {
  Registration() {
    c10::SetAllocator(kType, &Allocator::get());
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} registration;

}  // namespace

}  // namespace oclf::device
