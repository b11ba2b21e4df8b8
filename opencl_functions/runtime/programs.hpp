// Kernels from .cl files, built once per (file version, options) and cached: a student
// edits conv2d.cl and reruns without rebuilding C++. Between processes, the binaries of
// built programs are kept on disk (program_cache.hpp) and loaded instead of compiling the
// source again. Also set_args, which sets a kernel's arguments in order, and enqueue_kernel,
// which launches a kernel with them.
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
//
// Arguments are kept as values: set_arg stores each one (OpenCL cannot be asked for a
// kernel's arguments afterwards), and enqueue_kernel() sets on the kernel those that differ
// from what its last enqueue set, then enqueues it, as one step under a lock of the kernel's
// own. Cached kernels are shared (by the library and the opencl device, whose launches may be
// enqueued later and from another thread), and each enqueue runs with the arguments it was
// given. Callers of set_arg hold the runtime's lock (Runtime::mutex) until they launch.
void set_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value);

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
// The arguments set_arg stored for `kernel` (a copy), for a launch enqueued later or
// elsewhere: a recorded graph's, a thread's that enqueues for its callers.
std::vector<KernelArg> kernel_args(cl_kernel kernel);
// Enqueues an NDRange of `kernel` with `args` (`local` and `event` may be null). Throws
// Error naming the kernel and argument when the driver refuses one.
void enqueue_kernel(cl_command_queue queue, cl_kernel kernel, const std::vector<KernelArg>& args, cl_uint dims,
                    const size_t* global, const size_t* local, cl_event* event = nullptr);
// The same with the arguments set_arg stored.
void enqueue_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t* global,
                    const size_t* local, cl_event* event = nullptr);
// Forgets what was stored and set for a kernel: one about to be released, or one whose
// arguments were set around set_arg (clSetKernelArg called directly).
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
