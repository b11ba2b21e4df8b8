// Kernels from .cl files, built once per (file version, options) and cached: a student
// edits conv2d.cl and reruns without rebuilding C++. Between processes, the binaries of
// built programs are kept on disk (program_cache.hpp) and loaded instead of compiling the
// source again. Also set_args, which sets a kernel's arguments in order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "errors.hpp"
#include "program_cache.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class Programs {
 public:
  Programs(cl_context context, cl_device_id device, std::string device_name)
      : context_(context), device_(device), device_name_(std::move(device_name)), binaries_(context, device) {}
  Programs(const Programs&) = delete;
  Programs& operator=(const Programs&) = delete;

  // The kernel `name` from the .cl file `file` (a name inside kernel_dir(), or an absolute
  // path), built with `options`. Programs are cached by (path, modification time, size,
  // options), so an edited file is rebuilt on the next call. A source with #include lines
  // is built with its own folder on the include path (-I), as a C compiler finds quoted
  // includes beside the file. A program another process built comes from its stored binary
  // (program_cache.hpp). Throws BuildError with the build log, Error when the file or the
  // kernel is missing.
  cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options = "");
  // The same kernel, looked up by (file, name, options) alone once made: for files that do
  // not change while the process runs (the opencl device's own kernels, and the library's
  // as the device launches them), where kernel()'s look at the file's time would cost every
  // launch. Kept for the process, also past a rebuild of an edited file.
  cl_kernel kernel_fixed(const std::string& file, const std::string& name, const std::string& options);
  // How many programs this cache has built from source (both lookups), how many it made from
  // stored binaries instead, and how many kernels kernel_fixed() made.
  uint64_t programs_built() const { return programs_built_; }
  uint64_t programs_loaded() const { return binaries_.loaded(); }
  // Seconds spent making programs: building from source (with the look for a binary and
  // storing one), and making them from stored binaries.
  double build_seconds() const { return build_s_; }
  double load_seconds() const { return load_s_; }
  uint64_t fixed_kernels() const { return fixed_.size(); }
  // A hash of the .cl file's text (as kernel() finds it), for keying tuning results to the
  // source they were measured with.
  std::string source_hash(const std::string& file);

  // Folder that .cl files are read from: OCLF_KERNEL_DIR (or OCL_KERNEL_DIR) if set, else the
  // default (opencl_functions/, set by its Python package).
  static std::string kernel_dir();
  static void set_default_kernel_dir(const std::string& dir);

  // The binaries kept between processes.
  const ProgramCache& binaries() const { return binaries_; }

 private:
  // Compiles `source` (the file at `path`) with `options`; throws BuildError with the log.
  cl_program build_from_source(const std::string& path, const std::string& source, const std::string& options);
  struct Program {
    cl_program program = nullptr;
    std::map<std::string, cl_kernel> kernels;
    std::string source_hash;  // of the text it was built from
  };
  cl_context context_;
  cl_device_id device_;
  std::string device_name_;
  ProgramCache binaries_;
  std::map<std::string, Program> programs_;
  std::map<std::string, std::string> hashes_;  // by file version (path, time, size)
  std::unordered_map<std::string, cl_kernel> fixed_;  // by file + options + name
  uint64_t programs_built_ = 0;
  double build_s_ = 0.0, load_s_ = 0.0;
};

// Sets a kernel's arguments in order: set_args(kernel, x.get(), n, 1.5f).
// A null cl_mem passes a null pointer (arg_value itself null, which every driver takes).
void set_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value);
// A function told of every argument set_arg sets (OpenCL cannot be asked for them
// afterwards), or none: the opencl device's graphs record launches through it.
using ArgObserver = void (*)(cl_kernel kernel, cl_uint index, size_t size, const void* value);
void set_arg_observer(ArgObserver observer);

// A kernel argument as set_arg was given it: its size and bytes, or no bytes (a null
// buffer, or local memory of `size` bytes).
struct KernelArg {
  bool set = false;
  bool null = false;
  size_t size = 0;
  std::string bytes;
  bool operator==(const KernelArg& o) const {
    return set == o.set && null == o.null && size == o.size && bytes == o.bytes;
  }
};
// Stores an argument as set_arg was given it at `index` of a kernel's list (grown to hold it).
void note_arg_value(std::vector<KernelArg>& args, cl_uint index, size_t size, const void* value);
// Deferred arguments, for the opencl device's submission thread (which enqueues a GPU's
// kernels while the caller goes on): while deferral is on (counted: on while any device
// defers), set_arg notes each argument instead of setting it, a launch takes a copy of the
// kernel's noted arguments (noted_args) for that thread to set (apply_args), and launches
// on the calling thread set them first (apply_noted_args). Kernel objects are shared, so
// the arguments of a launch still waiting must not change under it. Callers hold the
// runtime's lock, as for set_arg.
void defer_kernel_args(bool on);
bool kernel_args_deferred();
std::vector<KernelArg> noted_args(cl_kernel kernel);
// Sets the arguments that differ from those last set on the kernel by apply_args (throws
// Error naming the kernel and argument when the driver refuses one).
void apply_args(cl_kernel kernel, const std::vector<KernelArg>& args);
// apply_args(kernel, noted_args(kernel)) while deferral is on; nothing otherwise.
void apply_noted_args(cl_kernel kernel);
// Forgets what was noted and set for a kernel about to be released.
void forget_kernel_args(cl_kernel kernel);
template <typename T>
const void* arg_pointer(const T& value) {
  return &value;
}
inline const void* arg_pointer(const cl_mem& value) { return value ? &value : nullptr; }
// One value of set_args at *index, which it advances. A type that stands for several kernel
// arguments (the opencl device's tensors: a buffer, then an offset) has an overload of its own.
template <typename T>
void set_arg_at(cl_kernel kernel, cl_uint* index, const T& value) {
  set_arg(kernel, (*index)++, sizeof(T), arg_pointer(value));
}
template <typename... Args>
void set_args(cl_kernel kernel, const Args&... args) {
  cl_uint index = 0;
  (set_arg_at(kernel, &index, args), ...);
}

}  // namespace oclf
#pragma GCC visibility pop
