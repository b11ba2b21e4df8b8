// Registers the opencl device with torch's core: the device guard (the devices of the
// process, opencl:0 .. opencl:N-1, the calling thread's current one being Runtime's; one
// stream per device: its in-order queue; events are markers on it), the allocator and the
// PrivateUse1 hooks (generators, pinned host memory).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "../check.h"
#include "allocator.h"
#include "generator.h"
#include "pinned.h"
#include "stream.h"

namespace oclf::device {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::DeviceIndex index_count() { return static_cast<c10::DeviceIndex>(device_count()); }

c10::DeviceIndex current_index() { return static_cast<c10::DeviceIndex>(Runtime::current()); }

// The device a c10::Device means: its index, or the current one when it has none.
int index_of(c10::Device d) {
  if (!d.has_index()) return Runtime::current();
  check_device_index(d.index());
  return d.index();
}

// The devices of the process; one stream per device (id 0), its in-order queue.
struct Guard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const int to = index_of(d);
    const c10::Device before(kType, current_index());
    if (to != before.index()) Runtime::set_current(to);
    return before;
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_index()); }
  void setDevice(c10::Device d) const override { Runtime::set_current(index_of(d)); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      Runtime::set_current(index_of(d));
    } catch (const std::exception&) {
    }
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    const c10::DeviceIndex index = d.has_index() ? d.index() : current_index_or_0();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index), 0);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return index_count(); }
  // torch.accelerator.get_device_capability(): the dtypes a device tensor can have (stored,
  // copied to and from every other, viewed, printed; docs/device/dtypes.md's table): not the
  // quantized, bit, float8, 4-bit, unsigned 16-64-bit or complex32 ones.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    auto& has = cap.capability_data.supported_scalar_types;
    has.has_Bool = has.has_Byte = has.has_Char = has.has_Short = has.has_Int = has.has_Long = 1;
    has.has_Half = has.has_BFloat16 = has.has_Float = has.has_Double = 1;
    has.has_ComplexFloat = has.has_ComplexDouble = 1;
    return cap;
  }
  bool queryStream(const c10::Stream& s) const override {
    stream_of(s.device()).synchronize();
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override { stream_of(s.device()).synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex index) const override { Stream::at(index).synchronize(); }
  // Events are markers on a device's queue (Stream::marker). With one in-order queue per
  // device, block() has nothing to order within a device (FSDP2 waits on its streams' events
  // at every layer: no host wait there); across devices it waits for the event on the host
  // (the queues of two devices are in two contexts). elapsedTime reads the markers'
  // profiling timestamps.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    cl_event fresh = stream_of(stream.device()).marker();
    if (*event != nullptr) clReleaseEvent(static_cast<cl_event>(*event));
    *event = fresh;
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    cl_command_queue queue = nullptr;
    CL_CHECK(clGetEventInfo(static_cast<cl_event>(event), CL_EVENT_COMMAND_QUEUE, sizeof(queue), &queue, nullptr));
    if (queue != stream_of(stream.device()).queue()) synchronizeEvent(event);
  }
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
  static Stream& stream_of(c10::Device d) { return Stream::at(index_of(d)); }
  static c10::DeviceIndex current_index_or_0() noexcept {
    try {
      return current_index();
    } catch (const std::exception&) {
      return 0;
    }
  }
};

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return index_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return index_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { Runtime::set_current(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_index(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex before = current_index();
    if (index >= 0 && index != before) Runtime::set_current(index);
    return before;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  at::Device getDeviceFromPtr(void* data) const override {
    const int index = Allocator::device_of(data);
    DEVICE_CHECK(index >= 0, "opencl: the address is not one of the device's storages");
    return at::Device(kType, static_cast<c10::DeviceIndex>(index));
  }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::get().is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::get(); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? Runtime::current() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index < 0 ? Runtime::current() : index);
  }
  // Storage resizes (untyped_storage().resize_()): a new buffer, the old bytes copied in.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    Allocator& allocator = Allocator::get();
    const CurrentDevice on(storage.device().has_index() ? storage.device().index() : -1);
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
