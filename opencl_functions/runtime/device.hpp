// The OpenCL devices the process works on: every device of one platform (the one
// OCLF_DEVICE picks, narrowed by OCLF_VISIBLE_DEVICES), their descriptions, and for each
// opened device the one context and in-order profiling queue made for it.
#pragma once

#include <string>
#include <vector>

#include "errors.hpp"
// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)

namespace oclf {

// The device's description, as device_info() returns it.
struct DeviceInfo {
  std::string platform, device, version, driver_version, opencl_c_version, type;
  size_t max_work_group_size = 0, local_mem_size = 0, global_mem_size = 0;
  unsigned compute_units = 0;
  // Floats per vector the device prefers and computes natively (CPUs: 4 SSE, 8 AVX2, 16
  // AVX-512; GPUs usually 1): the reference's CPU kernels take their vector width from these.
  unsigned preferred_vector_width_float = 0, native_vector_width_float = 0;
  bool has_fp64 = false;  // cl_khr_fp64: the device computes in double precision
  int platform_index = 0, device_index = 0;
  int index = 0;  // the process's index of the device (opencl:<index>; DeviceSet)
};

// One entry of list_devices().
struct DeviceEntry {
  int platform_index, device_index;
  std::string platform, device, type;
  std::string platform_vendor;  // "The pocl project", "NVIDIA Corporation": OCLF_DEVICE matches it too
};

// Every OpenCL device of every platform. Throws Error (with how to install a driver) when
// the ICD loader finds no platform.
std::vector<DeviceEntry> list_devices();

// The devices of the process, in the order of their indices (opencl:0, opencl:1, ...): the
// devices of the platform OCLF_DEVICE picks, in the platform's order, or those
// OCLF_VISIBLE_DEVICES lists ("1,0": the platform's devices 1 and 0, in that order).
// OCLF_DEVICE is "P:D" (platform and device index) or a case-insensitive part of a device
// name, platform name or platform vendor, tried in that order; it names the platform and the
// default device. Unset, the first GPU (its platform), else the first device.
constexpr size_t kMaxDevices = 64;  // more devices of one platform than this are left out

struct DeviceSet {
  cl_platform_id platform = nullptr;
  std::vector<cl_device_id> ids;
  std::vector<DeviceEntry> entries;
  int default_index = 0;  // where the device OCLF_DEVICE names is
};
// Read once, on first use (no context is made); throws Error when no platform or device can
// be found, or when a setting names none (the message lists the devices).
const DeviceSet& device_set();
// Throws Error naming the process's devices unless `index` is one of them (0 .. count-1):
// the one check of a device index, wherever one comes in.
void check_device_index(int index);

class Device {
 public:
  // Opens device `index` of device_set() (check_device_index'ed by the caller, Runtime::at):
  // its context and in-order profiling queue.
  explicit Device(int index);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  cl_device_id id() const { return device_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  cl_command_queue* queue_ptr() { return &queue_; }
  const DeviceInfo& info() const { return info_; }
  // Whether kernels work on host memory in place: CPU devices, unless OCLF_ZERO_COPY=0.
  bool zero_copy() const { return zero_copy_; }

 private:
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  DeviceInfo info_;
  bool zero_copy_ = false;
};

}  // namespace oclf
#pragma GCC visibility pop
