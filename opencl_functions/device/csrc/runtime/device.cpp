// The opencl device's runtime core: queue, program cache and launches (see device.h).
#include "device.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace oclf::device {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The folder holding this shared library (opencl_functions/device/).
std::string module_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_dir), &info) == 0 || info.dli_fname == nullptr)
    throw ocl::Error("cannot locate the opencl device's shared library (dladdr failed)", CL_INVALID_VALUE);
  return folder_of(info.dli_fname);
}

std::string read_text(const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) throw ocl::Error("cannot read kernel file " + path, CL_INVALID_VALUE);
  std::string text;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;) text.append(chunk, n);
  std::fclose(in);
  return text;
}

}  // namespace

// Both are looked up once: dladdr walks the loaded libraries, too slow for every launch.
std::string Device::kernels_dir() {
  static const std::string dir = module_dir() + "/kernels";
  return dir;
}

std::string Device::library_dir() {
  static const std::string dir = folder_of(module_dir());
  return dir;
}

Device& Device::get() {
  static Device* instance = new Device();
  return *instance;
}

bool Device::available() {
  try {
    get();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

Device::Device() {
  ocl::Runtime& rt = ocl::Runtime::get();
  context_ = rt.context();
  device_ = rt.device();
  is_cpu_ = rt.info().type == "CPU";
  // A queue of our own, in order and without profiling: the library's queue records an
  // event per launch for its timings, which the device does not need.
  cl_int status = CL_SUCCESS;
  queue_ = clCreateCommandQueue(context_, device_, 0, &status);
  CL_CHECK(status);
  // OCLF_DEVICE_SYNC=1 waits for each kernel (for profiling per operator; slow).
  const char* sync = std::getenv("OCLF_DEVICE_SYNC");
  sync_each_ = sync != nullptr && std::string(sync) == "1";
}

const ocl::DeviceInfo& Device::info() const { return ocl::Runtime::get().info(); }

cl_kernel Device::kernel(const std::string& file, const std::string& name, const std::string& options) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const std::string path = kernels_dir() + "/" + file;
  const std::string program_key = path + "|" + options;
  const std::string kernel_key = program_key + "|" + name;
  auto found = kernels_.find(kernel_key);
  if (found != kernels_.end()) return found->second;

  auto program = programs_.find(program_key);
  if (program == programs_.end()) {
    const std::string source = read_text(path);
    const char* text = source.c_str();
    const size_t length = source.size();
    cl_int status = CL_SUCCESS;
    cl_program built = clCreateProgramWithSource(context_, 1, &text, &length, &status);
    CL_CHECK(status);
    const std::string all_options = "-cl-std=CL1.2 " + options;
    status = clBuildProgram(built, 1, &device_, all_options.c_str(), nullptr, nullptr);
    if (status == CL_BUILD_PROGRAM_FAILURE) {
      size_t n = 0;
      clGetProgramBuildInfo(built, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(built, device_, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      clReleaseProgram(built);
      throw ocl::BuildError("CL_BUILD_PROGRAM_FAILURE (" + std::to_string(status) + "): building " + path +
                                "\noptions: " + all_options + "\nbuild log:\n" + log,
                            status);
    }
    if (status != CL_SUCCESS) clReleaseProgram(built);
    CL_CHECK(status);
    program = programs_.emplace(program_key, built).first;
    ++programs_built_;
  }
  cl_int status = CL_SUCCESS;
  cl_kernel made = clCreateKernel(program->second, name.c_str(), &status);
  try {
    CL_CHECK(status);
  } catch (const ocl::Error& err) {  // the CL_* name, and which kernel of which file
    throw ocl::Error(std::string(err.what()) + ": kernel " + name + " of " + path, status);
  }
  kernels_.emplace(kernel_key, made);
  return made;
}

cl_kernel Device::library_kernel(const std::string& file, const std::string& name, const std::string& options) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const std::string key = "library|" + file + "|" + options + "|" + name;
  auto found = kernels_.find(key);
  if (found != kernels_.end()) return found->second;
  // ocl::Runtime reads `file` inside its kernel folder: OCL_KERNEL_DIR when set, else
  // none in this module's copy of the runtime, so the path is made absolute here.
  const std::string path = ocl::Runtime::kernel_dir().empty() ? library_dir() + "/" + file : file;
  cl_kernel made = ocl::Runtime::get().kernel(path, name, options);
  // Kept past a rebuild of the file by the runtime, which releases its own reference.
  CL_CHECK(clRetainKernel(made));
  kernels_.emplace(key, made);
  return made;
}

void Device::launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i)
    if (global[i] == 0) return;  // OpenCL 1.2 rejects empty ranges
  CL_CHECK(clEnqueueNDRangeKernel(queue_, kernel, dims, nullptr, global, local, 0, nullptr, nullptr));
  ++launches_;
  if (sync_each_) CL_CHECK(clFinish(queue_));
}

void Device::synchronize() { CL_CHECK(clFinish(queue_)); }

namespace {
void CL_CALLBACK free_staging(cl_event, cl_int, void* staging) { std::free(staging); }
}  // namespace

void Device::write_async(cl_mem mem, size_t offset, const void* host, size_t bytes) {
  if (bytes == 0) return;
  void* staging = std::malloc(bytes);
  if (staging == nullptr) throw ocl::Error("opencl: out of host memory staging a copy", CL_OUT_OF_HOST_MEMORY);
  std::memcpy(staging, host, bytes);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  cl_event done = nullptr;
  const cl_int status = clEnqueueWriteBuffer(queue_, mem, CL_FALSE, offset, bytes, staging, 0, nullptr, &done);
  if (status != CL_SUCCESS) std::free(staging);
  CL_CHECK(status);
  CL_CHECK(clSetEventCallback(done, CL_COMPLETE, &free_staging, staging));
  CL_CHECK(clReleaseEvent(done));
}

void Device::read(cl_mem mem, size_t offset, void* host, size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  CL_CHECK(clEnqueueReadBuffer(queue_, mem, CL_TRUE, offset, bytes, host, 0, nullptr, nullptr));
}

}  // namespace oclf::device
