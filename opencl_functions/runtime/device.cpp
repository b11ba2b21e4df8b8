// Device discovery, choice and opening: see device.hpp.
#include "device.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#ifdef __linux__
#include <sched.h>
#include <unistd.h>
#endif

#include "cl_info.hpp"
#include "settings.hpp"

namespace oclf {

template <typename T>
static T device_value(cl_device_id d, cl_device_info what) {
  T value{};
  CL_CHECK(clGetDeviceInfo(d, what, sizeof(T), &value, nullptr));
  return value;
}

static std::string type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "ACCELERATOR";
  return "OTHER";
}

// PoCL's CPU driver leaves its worker threads unpinned, and Linux then often keeps two of
// them on one core for many kernels in a row: a 1×1 conv of ResNet-50 on a 2-core machine
// ran at 960 us for 57 calls, then at 490 us for the rest. POCL_AFFINITY=1 pins worker i to
// CPU i. Set here, before the first OpenCL call loads the drivers, unless the user set
// POCL_AFFINITY (0 keeps PoCL's default), and only when this process may run on CPUs 0 to
// N-1 of the N online ones, so a pinned worker never asks for a CPU outside its mask.
static void pin_pocl_workers() {
#ifdef __linux__
  if (std::getenv("POCL_AFFINITY")) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online <= 0 || online > CPU_SETSIZE) return;
  for (long cpu = 0; cpu < online; ++cpu)
    if (!CPU_ISSET(cpu, &mask)) return;
  setenv("POCL_AFFINITY", "1", 0);
#endif
}

static std::vector<cl_platform_id> platforms() {
  static std::once_flag pinned;
  std::call_once(pinned, pin_pocl_workers);
  cl_uint n = 0;
  cl_int status = clGetPlatformIDs(0, nullptr, &n);
  if (status == -1001 || n == 0) {  // CL_PLATFORM_NOT_FOUND_KHR from the ICD loader
    throw Error(
        "no OpenCL platform found: install a driver (on Debian: apt-get install pocl-opencl-icd) "
        "and check that /etc/OpenCL/vendors lists it (clinfo -l shows what the loader sees)",
        status ? status : CL_DEVICE_NOT_FOUND);
  }
  CL_CHECK(status);
  std::vector<cl_platform_id> ids(n);
  CL_CHECK(clGetPlatformIDs(n, ids.data(), nullptr));
  return ids;
}

static std::vector<cl_device_id> devices(cl_platform_id p) {
  cl_uint n = 0;
  cl_int status = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
  if (status == CL_DEVICE_NOT_FOUND) return {};
  CL_CHECK(status);
  std::vector<cl_device_id> ids(n);
  CL_CHECK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr));
  return ids;
}

std::vector<DeviceEntry> list_devices() {
  std::vector<DeviceEntry> out;
  auto ps = platforms();
  for (size_t i = 0; i < ps.size(); ++i) {
    std::string pname = platform_string(ps[i], CL_PLATFORM_NAME);
    std::string pvendor = platform_string(ps[i], CL_PLATFORM_VENDOR);
    auto ds = devices(ps[i]);
    for (size_t j = 0; j < ds.size(); ++j) {
      out.push_back({static_cast<int>(i), static_cast<int>(j), pname, device_string(ds[j], CL_DEVICE_NAME),
                     type_name(device_value<cl_device_type>(ds[j], CL_DEVICE_TYPE)), pvendor});
    }
  }
  return out;
}

static std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

static std::string describe(const std::vector<DeviceEntry>& all) {
  std::string out;
  for (const auto& e : all)
    out += "\n  " + std::to_string(e.platform_index) + ":" + std::to_string(e.device_index) + "  " + e.platform +
           " / " + e.device + " (" + e.type + ")";
  return out;
}

// OCLF_DEVICE is "P:D" or a case-insensitive substring of a device name, a platform name or
// a platform vendor, tried in that order. Unset, the first GPU wins, else the first device.
static const DeviceEntry& choose(const std::vector<DeviceEntry>& all) {
  if (all.empty()) throw Error("OpenCL platforms were found but they have no devices", CL_DEVICE_NOT_FOUND);
  const std::string want = setting("DEVICE");
  if (want.empty()) {
    for (const auto& e : all)
      if (e.type == "GPU") return e;
    return all.front();
  }
  int p = -1, d = -1;
  char tail = 0;
  if (std::sscanf(want.c_str(), "%d:%d%c", &p, &d, &tail) == 2) {
    for (const auto& e : all)
      if (e.platform_index == p && e.device_index == d) return e;
  } else {
    std::string w = lower(want);
    for (const auto& e : all)
      if (lower(e.device).find(w) != std::string::npos) return e;
    for (const auto& e : all)
      if (lower(e.platform).find(w) != std::string::npos) return e;
    for (const auto& e : all)  // PoCL's platform is "Portable Computing Language", its vendor "The pocl project"
      if (lower(e.platform_vendor).find(w) != std::string::npos) return e;
  }
  throw Error(setting_variable("DEVICE") + "=" + want +
                  " matches no OpenCL device; give \"P:D\" or part of a name. Devices:" + describe(all),
              CL_DEVICE_NOT_FOUND);
}

// OCLF_VISIBLE_DEVICES: the platform's device indices that become the process's devices, in
// order, separated by commas ("" or unset: all of them).
static std::vector<int> visible_devices(const std::vector<DeviceEntry>& platform) {
  const std::string text = setting("VISIBLE_DEVICES");
  std::vector<int> out;
  if (text.empty()) {
    for (const auto& e : platform) out.push_back(e.device_index);
    return out;
  }
  const auto refuse = [&](const std::string& why) {
    return Error(setting_variable("VISIBLE_DEVICES") + "=" + text + ": " + why +
                     "; give the platform's device indices separated by commas. Devices of the platform:" +
                     describe(platform),
                 CL_DEVICE_NOT_FOUND);
  };
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    int d = -1;
    char tail = 0;
    if (std::sscanf(item.c_str(), " %d %c", &d, &tail) != 1) throw refuse("'" + item + "' is not an index");
    if (d < 0 || d >= static_cast<int>(platform.size())) throw refuse("the platform has no device " + item);
    if (std::find(out.begin(), out.end(), d) != out.end()) throw refuse("device " + item + " is listed twice");
    out.push_back(d);
    at = comma + 1;
  }
  return out;
}

static DeviceSet open_set() {
  const std::vector<DeviceEntry> all = list_devices();
  const DeviceEntry& chosen = choose(all);
  std::vector<DeviceEntry> platform;
  for (const auto& e : all)
    if (e.platform_index == chosen.platform_index) platform.push_back(e);
  DeviceSet set;
  set.platform = platforms()[chosen.platform_index];
  const std::vector<cl_device_id> ids = devices(set.platform);
  set.default_index = -1;
  for (int d : visible_devices(platform)) {
    if (d == chosen.device_index) set.default_index = static_cast<int>(set.ids.size());
    set.ids.push_back(ids[d]);
    set.entries.push_back(platform[d]);
  }
  if (set.default_index < 0) {
    // The named device is not among the visible ones: an explicit OCLF_DEVICE is an error,
    // else the first visible device is the default.
    if (!setting("DEVICE").empty())
      throw Error(setting_variable("DEVICE") + " names device " + std::to_string(chosen.platform_index) + ":" +
                      std::to_string(chosen.device_index) + ", which " + setting_variable("VISIBLE_DEVICES") +
                      " leaves out",
                  CL_DEVICE_NOT_FOUND);
    set.default_index = 0;
  }
  return set;
}

// Read once and kept for the process (never freed); a failure is tried again at the next
// call. Every operator asks for it: the read after the first is one atomic load.
const DeviceSet& device_set() {
  static std::atomic<DeviceSet*> set{nullptr};
  if (DeviceSet* known = set.load(std::memory_order_acquire)) return *known;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (set.load(std::memory_order_relaxed) == nullptr) {
    DeviceSet* made = new DeviceSet(open_set());
    if (made->ids.size() > kMaxDevices) made->ids.resize(kMaxDevices), made->entries.resize(kMaxDevices);
    set.store(made, std::memory_order_release);
  }
  return *set.load(std::memory_order_relaxed);
}

void check_device_index(int index) {
  const int n = static_cast<int>(device_set().ids.size());
  if (index >= 0 && index < n) return;
  throw Error("opencl: there is no device " + std::to_string(index) + "; the process has " + std::to_string(n) +
                  (n > 0 ? " (opencl:0 to opencl:" + std::to_string(n - 1) + ")" : ""),
              CL_INVALID_DEVICE);
}

Device::Device(int index) {
  const DeviceSet& set = device_set();
  const DeviceEntry& e = set.entries[index];
  platform_ = set.platform;
  device_ = set.ids[index];

  info_.platform = e.platform;
  info_.device = e.device;
  info_.type = e.type;
  info_.platform_index = e.platform_index;
  info_.device_index = e.device_index;
  info_.index = index;
  info_.version = device_string(device_, CL_DEVICE_VERSION);
  info_.driver_version = device_string(device_, CL_DRIVER_VERSION);
  info_.opencl_c_version = device_string(device_, CL_DEVICE_OPENCL_C_VERSION);
  info_.max_work_group_size = device_value<size_t>(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  info_.local_mem_size = device_value<cl_ulong>(device_, CL_DEVICE_LOCAL_MEM_SIZE);
  info_.global_mem_size = device_value<cl_ulong>(device_, CL_DEVICE_GLOBAL_MEM_SIZE);
  info_.compute_units = device_value<cl_uint>(device_, CL_DEVICE_MAX_COMPUTE_UNITS);
  info_.preferred_vector_width_float = device_value<cl_uint>(device_, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT);
  info_.native_vector_width_float = device_value<cl_uint>(device_, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT);
  info_.has_fp64 = device_string(device_, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
  zero_copy_ = info_.type == "CPU" && setting("ZERO_COPY") != "0";

  cl_int status = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform_), 0};
  context_ = clCreateContext(props, 1, &device_, nullptr, nullptr, &status);
  CL_CHECK(status);
  queue_ = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &status);
  CL_CHECK(status);
}

}  // namespace oclf
