// The opencl device's functions of the process's devices: see device.h.
#include "device.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "stream.h"

namespace oclf::device {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The folder holding this shared library (torch_opencl/).
std::string module_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_dir), &info) == 0 || info.dli_fname == nullptr)
    throw Error("cannot locate the opencl device's shared library (dladdr failed)", CL_INVALID_VALUE);
  return folder_of(info.dli_fname);
}

// A library kernel file's path: OCLF_KERNEL_DIR's when set, else this package's folder.
std::string library_path(const std::string& file) {
  const std::string dir = Programs::kernel_dir();
  return (dir.empty() ? library_dir() : dir) + "/" + file;
}

// What each device learned of the library's files (library_source_hash, library_kernel_builds),
// under its runtime's lock. Never freed, as the devices.
struct LibraryFiles {
  std::map<std::string, std::string> hashes;  // by path
  std::map<std::string, bool> builds;         // by file, name and options
};
LibraryFiles& library_files(Runtime& rt) {
  static LibraryFiles* const files = new LibraryFiles[kMaxDevices];
  return files[rt.index()];
}

std::atomic<bool> forked_child{false};
std::once_flag fork_handler;

}  // namespace

int device_count() {
  try {
    return Runtime::count();
  } catch (const std::exception&) {
    return 0;
  }
}

bool device_available() {
  try {
    Stream::get();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool is_cpu() { return Runtime::get().info().type == "CPU"; }

bool has_fp64() { return Runtime::get().info().has_fp64; }

// Both are looked up once: dladdr walks the loaded libraries, too slow for every launch.
std::string kernels_dir() {
  static const std::string dir = module_dir() + "/kernels";
  return dir;
}

std::string library_dir() {
  static const std::string dir = folder_of(module_dir()) + "/opencl_functions";
  return dir;
}

cl_kernel device_kernel(const std::string& file, const std::string& name, const std::string& options) {
  Runtime& rt = Runtime::get();
  const std::string common = " -I" + kernels_dir() + (rt.info().has_fp64 ? " -DHAS_FP64" : "");
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  return rt.programs().kernel_fixed(kernels_dir() + "/" + file, name, options + common);
}

cl_kernel library_kernel(const std::string& file, const std::string& name, const std::string& options) {
  // The options are the library's (the runtime finds the reference's headers beside its
  // files), so both launch alike and share the programs the library built.
  const std::string path = library_path(file);
  Runtime& rt = Runtime::get();
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  return rt.programs().kernel_fixed(path, name, options);
}

std::string library_source_hash(const std::string& file) {
  // Hashed once per path, as library_kernel builds each file once per path and options: the
  // hash names the text the kernels were built from (no stat of the file per call).
  Runtime& rt = Runtime::get();
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  const std::string path = library_path(file);
  std::map<std::string, std::string>& hashes = library_files(rt).hashes;
  auto it = hashes.find(path);
  if (it == hashes.end()) it = hashes.emplace(path, rt.programs().source_hash(path)).first;
  return it->second;
}

bool library_kernel_builds(const std::string& file, const std::string& name, const std::string& options) {
  Runtime& rt = Runtime::get();
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  std::map<std::string, bool>& builds = library_files(rt).builds;
  const std::string key = file + "\n" + name + "\n" + options;
  auto it = builds.find(key);
  if (it == builds.end()) {
    bool builds_here = true;
    try {
      library_kernel(file, name, options);
    } catch (const Error&) {
      builds_here = false;
    }
    it = builds.emplace(key, builds_here).first;
  }
  return it->second;
}

bool in_forked_child() { return forked_child.load(std::memory_order_relaxed); }

void refuse_in_forked_child() {
  if (forked_child.load(std::memory_order_relaxed))
    throw Error("opencl: this process was forked after it opened an OpenCL device; a forked child cannot use the "
                "device (start workers with multiprocessing's 'spawn' method, or open the device in the child only)",
                CL_INVALID_OPERATION);
}

void watch_forks() {
  std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, [] { forked_child = true; }); });
}

void finish_at_exit() {
  if (in_forked_child()) return;  // the parent's driver state: not ours to wait on
  Stream::settle_all();
  for (int i = 0; i < static_cast<int>(kMaxDevices); ++i)
    if (Stream::is_open(i)) clFinish(Stream::at(i).runtime().queue());  // errors: nothing left to tell
}

}  // namespace oclf::device
