// The OpenCL runtime shared by every operation: device choice, context and queue,
// program cache, buffer pool, profiling and CL_* error names. See ocl_runtime.hpp.
#include "ocl_runtime.hpp"

#include <clblast.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace ocl {

// ---------------------------------------------------------------------------------
// Status names

const char* status_name(cl_int status) {
  switch (status) {
#define NAME(x) \
  case x:       \
    return #x;
    NAME(CL_SUCCESS)
    NAME(CL_DEVICE_NOT_FOUND)
    NAME(CL_DEVICE_NOT_AVAILABLE)
    NAME(CL_COMPILER_NOT_AVAILABLE)
    NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    NAME(CL_OUT_OF_RESOURCES)
    NAME(CL_OUT_OF_HOST_MEMORY)
    NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
    NAME(CL_MEM_COPY_OVERLAP)
    NAME(CL_IMAGE_FORMAT_MISMATCH)
    NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    NAME(CL_BUILD_PROGRAM_FAILURE)
    NAME(CL_MAP_FAILURE)
    NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    NAME(CL_COMPILE_PROGRAM_FAILURE)
    NAME(CL_LINKER_NOT_AVAILABLE)
    NAME(CL_LINK_PROGRAM_FAILURE)
    NAME(CL_DEVICE_PARTITION_FAILED)
    NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    NAME(CL_INVALID_VALUE)
    NAME(CL_INVALID_DEVICE_TYPE)
    NAME(CL_INVALID_PLATFORM)
    NAME(CL_INVALID_DEVICE)
    NAME(CL_INVALID_CONTEXT)
    NAME(CL_INVALID_QUEUE_PROPERTIES)
    NAME(CL_INVALID_COMMAND_QUEUE)
    NAME(CL_INVALID_HOST_PTR)
    NAME(CL_INVALID_MEM_OBJECT)
    NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    NAME(CL_INVALID_IMAGE_SIZE)
    NAME(CL_INVALID_SAMPLER)
    NAME(CL_INVALID_BINARY)
    NAME(CL_INVALID_BUILD_OPTIONS)
    NAME(CL_INVALID_PROGRAM)
    NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    NAME(CL_INVALID_KERNEL_NAME)
    NAME(CL_INVALID_KERNEL_DEFINITION)
    NAME(CL_INVALID_KERNEL)
    NAME(CL_INVALID_ARG_INDEX)
    NAME(CL_INVALID_ARG_VALUE)
    NAME(CL_INVALID_ARG_SIZE)
    NAME(CL_INVALID_KERNEL_ARGS)
    NAME(CL_INVALID_WORK_DIMENSION)
    NAME(CL_INVALID_WORK_GROUP_SIZE)
    NAME(CL_INVALID_WORK_ITEM_SIZE)
    NAME(CL_INVALID_GLOBAL_OFFSET)
    NAME(CL_INVALID_EVENT_WAIT_LIST)
    NAME(CL_INVALID_EVENT)
    NAME(CL_INVALID_OPERATION)
    NAME(CL_INVALID_GL_OBJECT)
    NAME(CL_INVALID_BUFFER_SIZE)
    NAME(CL_INVALID_MIP_LEVEL)
    NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    NAME(CL_INVALID_PROPERTY)
    NAME(CL_INVALID_IMAGE_DESCRIPTOR)
    NAME(CL_INVALID_COMPILER_OPTIONS)
    NAME(CL_INVALID_LINKER_OPTIONS)
    NAME(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef NAME
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "CL_UNKNOWN_ERROR";
  }
}

const char* clblast_status_name(int status) {
  switch (status) {
    case -1024: return "CLBlastNotImplemented";
    case -1022: return "CLBlastInvalidMatrixA";
    case -1021: return "CLBlastInvalidMatrixB";
    case -1020: return "CLBlastInvalidMatrixC";
    case -1019: return "CLBlastInvalidVectorX";
    case -1018: return "CLBlastInvalidVectorY";
    case -1017: return "CLBlastInvalidDimension";
    case -1016: return "CLBlastInvalidLeadDimA";
    case -1015: return "CLBlastInvalidLeadDimB";
    case -1014: return "CLBlastInvalidLeadDimC";
    case -1013: return "CLBlastInvalidIncrementX";
    case -1012: return "CLBlastInvalidIncrementY";
    case -1011: return "CLBlastInsufficientMemoryA";
    case -1010: return "CLBlastInsufficientMemoryB";
    case -1009: return "CLBlastInsufficientMemoryC";
    case -1008: return "CLBlastInsufficientMemoryX";
    case -1007: return "CLBlastInsufficientMemoryY";
    case -2050: return "CLBlastInsufficientMemoryTemp";
    case -2049: return "CLBlastInvalidBatchCount";
    case -2048: return "CLBlastInvalidOverrideKernel";
    case -2047: return "CLBlastMissingOverrideParameter";
    case -2046: return "CLBlastInvalidLocalMemUsage";
    case -2045: return "CLBlastNoHalfPrecision";
    case -2044: return "CLBlastNoDoublePrecision";
    case -2043: return "CLBlastInvalidVectorScalar";
    case -2042: return "CLBlastInsufficientMemoryScalar";
    case -2041: return "CLBlastDatabaseError";
    case -2040: return "CLBlastUnknownError";
    case -2039: return "CLBlastUnexpectedError";
    default: return status_name(status);  // CLBlast passes OpenCL's own codes through
  }
}

static std::string describe(const char* name, int status, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(name) + " (" + std::to_string(status) + ") in " + call + " at " + (base ? base + 1 : file) +
         ":" + std::to_string(line);
}

void check(cl_int status, const char* call, const char* file, int line) {
  if (status != CL_SUCCESS) throw Error(describe(status_name(status), status, call, file, line), status);
}

void check_clblast(int status, const char* call, const char* file, int line) {
  if (status != 0) throw Error(describe(clblast_status_name(status), status, call, file, line), status);
}

// ---------------------------------------------------------------------------------
// CLBlast's tuning parameters

KernelParameters clblast_parameters(const std::string& kernel) {
  std::unordered_map<std::string, size_t> found;
  const auto status =
      clblast::RetrieveParameters(Runtime::get().device(), kernel, clblast::Precision::kSingle, found);
  if (status != clblast::StatusCode::kSuccess || found.empty())
    throw std::invalid_argument("CLBlast has no kernel '" + kernel + "' (" +
                                clblast_status_name(static_cast<int>(status)) + ")");
  return KernelParameters(found.begin(), found.end());
}

static std::string joined(const KernelParameters& params) {
  std::string out;
  for (const auto& p : params) out += (out.empty() ? "" : ", ") + p.first;
  return out;
}

void clblast_override(const std::map<std::string, KernelParameters>& params) {
  for (const auto& [kernel, given] : params) {
    const KernelParameters current = clblast_parameters(kernel);
    for (const auto& p : given)
      if (!current.count(p.first))
        throw std::invalid_argument("CLBlast kernel '" + kernel + "' has no parameter '" + p.first +
                                    "' (its parameters: " + joined(current) + ")");
    for (const auto& p : current)
      if (!given.count(p.first))
        throw std::invalid_argument("CLBlast kernel '" + kernel + "': parameter '" + p.first +
                                    "' is missing (its parameters: " + joined(current) + ")");
  }
  const cl_device_id device = Runtime::get().device();
  for (const auto& [kernel, given] : params) {
    const std::unordered_map<std::string, size_t> values(given.begin(), given.end());
    CLBLAST_CHECK(clblast::OverrideParameters(device, kernel, clblast::Precision::kSingle, values));
  }
}

// ---------------------------------------------------------------------------------
// Device discovery and selection

static std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  CL_CHECK(clGetPlatformInfo(p, what, 0, nullptr, &n));
  std::string s(n, '\0');
  CL_CHECK(clGetPlatformInfo(p, what, n, &s[0], nullptr));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

static std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  CL_CHECK(clGetDeviceInfo(d, what, 0, nullptr, &n));
  std::string s(n, '\0');
  CL_CHECK(clGetDeviceInfo(d, what, n, &s[0], nullptr));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

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

static std::vector<cl_platform_id> platforms() {
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

std::vector<DeviceEntry> Runtime::list_devices() {
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

// OCL_DEVICE is "P:D" or a case-insensitive substring of a device name, a platform name or
// a platform vendor, tried in that order. Unset, the first GPU wins, else the first device.
static const DeviceEntry& choose(const std::vector<DeviceEntry>& all) {
  if (all.empty()) throw Error("OpenCL platforms were found but they have no devices", CL_DEVICE_NOT_FOUND);
  const char* env = std::getenv("OCL_DEVICE");
  std::string want = env ? env : "";
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
  std::string msg = "OCL_DEVICE=" + want + " matches no OpenCL device; give \"P:D\" or part of a name. Devices:";
  for (const auto& e : all)
    msg += "\n  " + std::to_string(e.platform_index) + ":" + std::to_string(e.device_index) + "  " + e.platform +
           " / " + e.device + " (" + e.type + ")";
  throw Error(msg, CL_DEVICE_NOT_FOUND);
}

Runtime& Runtime::get() {
  static Runtime* instance = new Runtime();
  return *instance;
}

Runtime::Runtime() {
  auto all = list_devices();
  const DeviceEntry& e = choose(all);
  platform_ = platforms()[e.platform_index];
  device_ = devices(platform_)[e.device_index];

  info_.platform = e.platform;
  info_.device = e.device;
  info_.type = e.type;
  info_.platform_index = e.platform_index;
  info_.device_index = e.device_index;
  info_.version = device_string(device_, CL_DEVICE_VERSION);
  info_.driver_version = device_string(device_, CL_DRIVER_VERSION);
  info_.opencl_c_version = device_string(device_, CL_DEVICE_OPENCL_C_VERSION);
  info_.max_work_group_size = device_value<size_t>(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  info_.local_mem_size = device_value<cl_ulong>(device_, CL_DEVICE_LOCAL_MEM_SIZE);
  info_.global_mem_size = device_value<cl_ulong>(device_, CL_DEVICE_GLOBAL_MEM_SIZE);
  info_.compute_units = device_value<cl_uint>(device_, CL_DEVICE_MAX_COMPUTE_UNITS);
  // Freed buffers are kept for reuse up to an eighth of device memory (at most 1 GiB).
  pool_limit_ = std::min<size_t>(info_.global_mem_size / 8, size_t(1) << 30);
  const char* zero_copy = std::getenv("OCLF_ZERO_COPY");
  zero_copy_ = info_.type == "CPU" && !(zero_copy && std::string(zero_copy) == "0");

  cl_int status = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform_), 0};
  context_ = clCreateContext(props, 1, &device_, nullptr, nullptr, &status);
  CL_CHECK(status);
  queue_ = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &status);
  CL_CHECK(status);
}

// ---------------------------------------------------------------------------------
// Programs

static std::string& default_kernel_dir() {
  static std::string dir;
  return dir;
}

void Runtime::set_default_kernel_dir(const std::string& dir) { default_kernel_dir() = dir; }

std::string Runtime::kernel_dir() {
  const char* env = std::getenv("OCL_KERNEL_DIR");
  return (env && *env) ? std::string(env) : default_kernel_dir();
}

static std::string read_file(const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) throw Error("cannot read kernel file " + path + " (set OCL_KERNEL_DIR to the folder holding it)",
                       CL_INVALID_VALUE);
  std::string text;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;) text.append(chunk, n);
  std::fclose(in);
  return text;
}

cl_kernel Runtime::kernel(const std::string& file, const std::string& name, const std::string& options) {
  const std::string dir = kernel_dir();
  const std::string path = dir.empty() ? file : dir + "/" + file;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw Error("cannot find kernel file " + path + " (set OCL_KERNEL_DIR to the folder holding it)",
                CL_INVALID_VALUE);
  // No iostreams here or in messages: on some machines (the H100 image with torch loaded)
  // formatting numbers through a stream's locale crashes.
  const std::string version = path + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
                              std::to_string(st.st_mtim.tv_nsec) + "|" + std::to_string(st.st_size) + "|";
  const std::string key = version + options;

  auto it = programs_.find(key);
  if (it == programs_.end()) {
    // Forget builds of older versions of the same file so an edit loop does not accumulate
    // programs; builds of this version with other options stay.
    for (auto old = programs_.begin(); old != programs_.end();) {
      if (old->first.compare(0, path.size() + 1, path + "|") == 0 &&
          old->first.compare(0, version.size(), version) != 0) {
        for (auto& k : old->second.kernels) clReleaseKernel(k.second);
        clReleaseProgram(old->second.program);
        old = programs_.erase(old);
      } else {
        ++old;
      }
    }
    const std::string source = read_file(path);
    const char* text = source.c_str();
    size_t length = source.size();
    cl_int status = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &status);
    CL_CHECK(status);
    const std::string all_options = "-cl-std=CL1.2 " + options;
    status = clBuildProgram(program, 1, &device_, all_options.c_str(), nullptr, nullptr);
    if (status != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      clReleaseProgram(program);
      throw BuildError(std::string(status_name(status)) + " (" + std::to_string(status) + "): building " + path +
                           " for " + info_.device + "\noptions: " + all_options + "\nbuild log:\n" + log,
                       status);
    }
    it = programs_.emplace(key, Program{program, {}}).first;
  }
  auto& kernels = it->second.kernels;
  auto k = kernels.find(name);
  if (k == kernels.end()) {
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(it->second.program, name.c_str(), &status);
    if (status != CL_SUCCESS) {
      throw Error(describe(status_name(status), status, ("clCreateKernel(\"" + name + "\") from " + path).c_str(),
                           __FILE__, __LINE__),
                  status);
    }
    k = kernels.emplace(name, kernel).first;
  }
  return k->second;
}

// ---------------------------------------------------------------------------------
// Launches and profiling

void set_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value) {
  cl_int status = clSetKernelArg(kernel, index, size, value);
  if (status != CL_SUCCESS) {
    size_t n = 0;
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, 0, nullptr, &n);
    std::string name(n, '\0');
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, n, &name[0], nullptr);
    while (!name.empty() && name.back() == '\0') name.pop_back();
    const std::string call = "clSetKernelArg(" + name + ", argument " + std::to_string(index) + ")";
    throw Error(describe(status_name(status), status, call.c_str(), __FILE__, __LINE__), status);
  }
}

void Runtime::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i)
    if (global[i] == 0) return;  // nothing to do; OpenCL 1.2 rejects empty ranges
  cl_event event = nullptr;
  CL_CHECK(clEnqueueNDRangeKernel(queue_, kernel, dims, nullptr, global, local, 0, nullptr, &event));
  events_.push_back({event, nullptr});
}

void Runtime::record(cl_event event, cl_event since) {
  if (event) events_.push_back({event, since});
}

cl_event Runtime::marker() {
  cl_event event = nullptr;
  CL_CHECK(clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &event));
  markers_.push_back(event);
  return event;
}

static bool profiling_time(cl_event event, cl_profiling_info what, cl_ulong* value) {
  return clGetEventProfilingInfo(event, what, sizeof(*value), value, nullptr) == CL_SUCCESS;
}

uint64_t Runtime::finish_and_take_kernel_ns() {
  CL_CHECK(clFinish(queue_));
  uint64_t total = 0;
  for (const Timed& t : events_) {
    cl_ulong start = 0, end = 0;
    const bool known = t.since ? profiling_time(t.since, CL_PROFILING_COMMAND_END, &start)
                               : profiling_time(t.event, CL_PROFILING_COMMAND_START, &start);
    if (known && profiling_time(t.event, CL_PROFILING_COMMAND_END, &end) && end > start) total += end - start;
    clReleaseEvent(t.event);
  }
  for (cl_event m : markers_) clReleaseEvent(m);
  events_.clear();
  markers_.clear();
  return total;
}

// ---------------------------------------------------------------------------------
// Buffers

cl_mem Runtime::acquire(size_t bytes, cl_mem_flags flags) {
  auto it = pool_.find({bytes, flags});
  cl_mem mem = nullptr;
  if (it != pool_.end()) {
    mem = it->second;
    pool_.erase(it);
    bytes_pooled_ -= bytes;
  } else {
    cl_int status = CL_SUCCESS;
    mem = clCreateBuffer(context_, flags, bytes, nullptr, &status);
    if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES) {
      clear_pool();  // give cached buffers back and try once more
      mem = clCreateBuffer(context_, flags, bytes, nullptr, &status);
    }
    CL_CHECK(status);
  }
  bytes_in_use_ += bytes;
  return mem;
}

void Runtime::release(cl_mem mem, size_t bytes, cl_mem_flags flags) {
  bytes_in_use_ -= bytes;
  if (bytes > pool_limit_) {
    clReleaseMemObject(mem);
    return;
  }
  while (bytes_pooled_ + bytes > pool_limit_ && !pool_.empty()) {
    auto victim = pool_.begin();  // the smallest; cheap to make again
    bytes_pooled_ -= victim->first.first;
    clReleaseMemObject(victim->second);
    pool_.erase(victim);
  }
  pool_.emplace(std::make_pair(bytes, flags), mem);
  bytes_pooled_ += bytes;
}

void Runtime::clear_pool() {
  for (auto& entry : pool_) clReleaseMemObject(entry.second);
  pool_.clear();
  bytes_pooled_ = 0;
}

// ---------------------------------------------------------------------------------
// Resident parameters

uint64_t Runtime::resident_upload(const void* host, size_t bytes) {
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_ONLY, std::max<size_t>(bytes, 4), nullptr, &status);
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES) {
    clear_pool();
    mem = clCreateBuffer(context_, CL_MEM_READ_ONLY, std::max<size_t>(bytes, 4), nullptr, &status);
  }
  CL_CHECK(status);
  if (bytes) {
    status = clEnqueueWriteBuffer(queue_, mem, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr);
    if (status != CL_SUCCESS) clReleaseMemObject(mem);
    CL_CHECK(status);
  }
  const uint64_t handle = next_handle_++;
  residents_[handle] = Resident{mem, bytes, {}};
  resident_handles_[mem] = handle;
  bytes_resident_ += bytes;
  return handle;
}

void Runtime::resident_release(uint64_t handle) {
  auto it = residents_.find(handle);
  if (it == residents_.end()) return;
  for (auto& d : it->second.derived) {
    clReleaseMemObject(d.second.first);
    bytes_resident_ -= d.second.second;
  }
  resident_handles_.erase(it->second.mem);
  clReleaseMemObject(it->second.mem);
  bytes_resident_ -= it->second.bytes;
  residents_.erase(it);
}

cl_mem Runtime::resident(uint64_t handle) const {
  auto it = residents_.find(handle);
  if (it == residents_.end())
    throw Error("unknown resident handle " + std::to_string(handle) + " (released already?)", CL_INVALID_MEM_OBJECT);
  return it->second.mem;
}

cl_mem Runtime::derived(cl_mem resident, const std::string& tag) const {
  auto h = resident_handles_.find(resident);
  if (h == resident_handles_.end()) return nullptr;
  const auto& derived = residents_.at(h->second).derived;
  auto d = derived.find(tag);
  return d == derived.end() ? nullptr : d->second.first;
}

cl_mem Runtime::keep_derived(cl_mem resident, const std::string& tag, size_t bytes) {
  auto h = resident_handles_.find(resident);
  if (h == resident_handles_.end()) throw Error("keep_derived: not a resident buffer", CL_INVALID_MEM_OBJECT);
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 4), nullptr, &status);
  CL_CHECK(status);
  auto& slot = residents_.at(h->second).derived[tag];
  if (slot.first) {
    clReleaseMemObject(slot.first);
    bytes_resident_ -= slot.second;
  }
  slot = {mem, bytes};
  bytes_resident_ += bytes;
  return mem;
}

Buffer::Buffer(size_t bytes, cl_mem_flags flags)
    : mem_(Runtime::get().acquire(bytes, flags)), bytes_(bytes), flags_(flags) {}

// Wraps host bytes on zero-copy devices, else a pooled buffer (filled when copy_in).
Buffer Buffer::over_host(void* host, size_t bytes, cl_mem_flags flags, bool copy_in) {
  Runtime& rt = Runtime::get();
  if (!rt.zero_copy() || bytes == 0) {
    Buffer buffer(bytes, flags);
    if (copy_in) buffer.write(host, bytes);
    return buffer;
  }
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(rt.context(), flags | CL_MEM_USE_HOST_PTR, bytes, host, &status);
  CL_CHECK(status);
  return Buffer(mem, bytes, flags, host);
}

Buffer Buffer::input(const void* host, size_t bytes) {
  return over_host(const_cast<void*>(host), bytes, CL_MEM_READ_ONLY, true);
}

Buffer Buffer::output(void* host, size_t bytes, cl_mem_flags flags) { return over_host(host, bytes, flags, false); }

Buffer::Buffer(cl_mem wrapped, size_t bytes, cl_mem_flags flags, void* host)
    : mem_(wrapped), bytes_(bytes), flags_(flags), host_(host) {}

void Buffer::free() {
  if (!mem_) return;
  if (host_)
    clReleaseMemObject(mem_);
  else
    Runtime::get().release(mem_, bytes_, flags_);
  mem_ = nullptr;
}

Buffer::~Buffer() { free(); }

Buffer::Buffer(Buffer&& other) noexcept
    : mem_(other.mem_), bytes_(other.bytes_), flags_(other.flags_), host_(other.host_) {
  other.mem_ = nullptr;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    free();
    mem_ = other.mem_;
    bytes_ = other.bytes_;
    flags_ = other.flags_;
    host_ = other.host_;
    other.mem_ = nullptr;
  }
  return *this;
}

void Buffer::write(const void* host, size_t bytes) {
  if (bytes == 0) return;
  CL_CHECK(clEnqueueWriteBuffer(Runtime::get().queue(), mem_, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr));
}

void Buffer::read(void* host, size_t bytes) const {
  if (bytes == 0) return;
  cl_command_queue queue = Runtime::get().queue();
  if (!host_) {
    CL_CHECK(clEnqueueReadBuffer(queue, mem_, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr));
    return;
  }
  // A wrapping buffer: mapping it makes the device's writes visible in the host bytes
  // (usually in place; copied when the driver mapped elsewhere).
  cl_int status = CL_SUCCESS;
  void* mapped = clEnqueueMapBuffer(queue, mem_, CL_TRUE, CL_MAP_READ, 0, bytes, 0, nullptr, nullptr, &status);
  CL_CHECK(status);
  if (mapped != host) std::memcpy(host, mapped, bytes);
  CL_CHECK(clEnqueueUnmapMemObject(queue, mem_, mapped, 0, nullptr, nullptr));
}

void Buffer::zero() {
  const float zero = 0.0f;
  CL_CHECK(clEnqueueFillBuffer(Runtime::get().queue(), mem_, &zero, sizeof(zero), 0, bytes_, 0, nullptr, nullptr));
}

}  // namespace ocl
