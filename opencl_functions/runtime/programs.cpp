// Program building and caching, and kernel arguments: see programs.hpp.
#include "programs.hpp"

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <memory>
#include <mutex>

#include "launch_log.hpp"
#include "settings.hpp"
#include "tuning.hpp"

namespace oclf {

static std::string& default_kernel_dir() {
  static std::string dir;
  return dir;
}

void Programs::set_default_kernel_dir(const std::string& dir) { default_kernel_dir() = dir; }

std::string Programs::kernel_dir() {
  const std::string dir = setting("KERNEL_DIR");
  return dir.empty() ? default_kernel_dir() : dir;
}

namespace {

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Whether log[at..] is ":<digits>:<digits>", a location's line and column.
bool line_and_column(const std::string& log, size_t at) {
  for (int part = 0; part < 2; ++part) {
    if (at >= log.size() || log[at] != ':' || at + 1 >= log.size() || !is_digit(log[at + 1])) return false;
    for (++at; at < log.size() && is_digit(log[at]);) ++at;
  }
  return true;
}

// How much of `token` (the non-space text before a location) names the compiler's source:
// all of a PoCL temporary file ("…tempfile_<word>.cl"), a trailing "<kernel>" or "<source>",
// or a trailing "input.cl" that starts a word; 0 when it names something else.
size_t compiler_name_length(const std::string& token) {
  const auto ends_with = [&](const std::string& tail) {
    return token.size() >= tail.size() && token.compare(token.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const std::string name : {"<kernel>", "<source>"})
    if (ends_with(name)) return name.size();
  const std::string input = "input.cl";
  if (ends_with(input) && (token.size() == input.size() || !is_word(token[token.size() - input.size() - 1])))
    return input.size();
  const std::string temp = "tempfile_", cl = ".cl";
  const size_t at = token.rfind(temp);
  if (at == std::string::npos || !ends_with(cl) || token.size() <= at + temp.size() + cl.size()) return 0;
  for (size_t i = at + temp.size(); i < token.size() - cl.size(); ++i)
    if (!is_word(token[i])) return 0;
  return token.size();
}

}  // namespace

// A build log with the compiler's name for the source (PoCL's temporary file, NVIDIA's
// "<kernel>", "<source>", "input.cl") replaced by the .cl file's path where it starts a
// "name:line:column" location, so that the location points at the file the user edits.
// Plain string search: std::regex reads the locale, which crashes on machines where torch's
// libstdc++ is older than the compiler's (see locate()).
static std::string log_naming(const std::string& log, const std::string& path) {
  std::string out;
  size_t copied = 0;
  for (size_t colon = log.find(':'); colon != std::string::npos; colon = log.find(':', colon + 1)) {
    if (!line_and_column(log, colon)) continue;
    size_t start = colon;
    while (start > copied && !std::isspace(static_cast<unsigned char>(log[start - 1]))) --start;
    const size_t n = compiler_name_length(log.substr(start, colon - start));
    if (n == 0) continue;
    out.append(log, copied, colon - n - copied);
    out += path;
    copied = colon;
  }
  out.append(log, copied, std::string::npos);
  return out;
}

static std::string read_file(const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in)
    throw Error("cannot read kernel file " + path + " (set " + setting_variable("KERNEL_DIR") +
                    " to the folder holding it)",
                CL_INVALID_VALUE);
  std::string text;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;) text.append(chunk, n);
  std::fclose(in);
  return text;
}

// The path of a .cl file and its version "path|mtime|size|"; throws Error when it is missing.
static std::pair<std::string, std::string> locate(const std::string& file) {
  const std::string dir = Programs::kernel_dir();
  const std::string path = (dir.empty() || file.front() == '/') ? file : dir + "/" + file;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw Error("cannot find kernel file " + path + " (set " + setting_variable("KERNEL_DIR") +
                    " to the folder holding it)",
                CL_INVALID_VALUE);
  // No iostreams here or in messages: on some machines (the H100 image with torch loaded)
  // formatting numbers through a stream's locale crashes.
  return {path, path + "|" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "|" +
                    std::to_string(st.st_size) + "|"};
}

// "-I<the source's folder> " for a source with #include lines, "" for one without (the
// student's conv2d.cl, which may include nothing: its options stay as the caller gave them).
static std::string include_option(const std::string& path, const std::string& source) {
  if (source.find("#include") == std::string::npos) return "";
  const size_t slash = path.rfind('/');
  return "-I" + (slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash)) + " ";
}

std::string Programs::source_hash(const std::string& file) {
  const auto [path, version] = locate(file);
  auto it = hashes_.find(version);
  if (it == hashes_.end()) it = hashes_.emplace(version, Tuning::hash(read_file(path))).first;
  return it->second;
}

cl_program Programs::build_from_source(const std::string& path, const std::string& source,
                                       const std::string& options) {
  const char* text = source.c_str();
  size_t length = source.size();
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &status);
  CL_CHECK(status);
  status = clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr);
  if (status != CL_SUCCESS) {
    size_t n = 0;
    clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    clReleaseProgram(program);
    throw BuildError(std::string(status_name(status)) + " (" + std::to_string(status) + "): building " + path +
                         " for " + device_name_ + "\noptions: " + options + "\nbuild log:\n" + log_naming(log, path),
                     status);
  }
  ++programs_built_;
  return program;
}

cl_kernel Programs::kernel(const std::string& file, const std::string& name, const std::string& options) {
  const auto [path, version] = locate(file);
  // While the launch log is active every build asks for argument information (its key too).
  const std::string build = launch_log::build_options(options);
  const std::string key = version + build;

  auto it = programs_.find(key);
  if (it == programs_.end()) {
    // Forget builds of older versions of the same file so an edit loop does not accumulate
    // programs; builds of this version with other options stay.
    for (auto old = programs_.begin(); old != programs_.end();) {
      if (old->first.compare(0, path.size() + 1, path + "|") == 0 &&
          old->first.compare(0, version.size(), version) != 0) {
        // A launch still waiting to be enqueued (the opencl device's) holds a kernel of
        // kernel_fixed(), which keeps it past this release, and a copy of its arguments.
        for (auto& k : old->second.kernels) {
          launch_log::forget_kernel(k.second);
          forget_kernel_args(k.second);
          clReleaseKernel(k.second);
        }
        clReleaseProgram(old->second.program);
        old = programs_.erase(old);
      } else {
        ++old;
      }
    }
    const std::string source = read_file(path);
    const std::string all_options = "-cl-std=CL1.2 " + include_option(path, source) + build;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const std::string binary_key = ProgramCache::folder().empty() ? "" : binaries_.key(path, source, all_options);
    cl_program program = binaries_.load(binary_key, all_options);
    if (program) {
      load_s_ += std::chrono::duration<double>(Clock::now() - start).count();
    } else {
      program = build_from_source(path, source, all_options);
      binaries_.store(binary_key, program);
      build_s_ += std::chrono::duration<double>(Clock::now() - start).count();
    }
    it = programs_.emplace(key, Program{program, {}, Tuning::hash(source)}).first;
  }
  auto& kernels = it->second.kernels;
  auto k = kernels.find(name);
  if (k == kernels.end()) {
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(it->second.program, name.c_str(), &status);
    if (status != CL_SUCCESS) {
      throw Error(describe_failure(status_name(status), status, "clCreateKernel(\"" + name + "\") from " + path,
                                   __FILE__, __LINE__),
                  status);
    }
    launch_log::note_kernel(kernel, path, it->second.source_hash, options, name);
    k = kernels.emplace(name, kernel).first;
  }
  return k->second;
}

cl_kernel Programs::kernel_fixed(const std::string& file, const std::string& name, const std::string& options) {
  const std::string key = file + "|" + options + "|" + name;
  auto found = fixed_.find(key);
  if (found != fixed_.end()) return found->second;
  cl_kernel made = kernel(file, name, options);
  CL_CHECK(clRetainKernel(made));  // kept past a rebuild of an edited file, which releases kernel()'s own
  fixed_.emplace(key, made);
  return made;
}

namespace {
std::string kernel_function_name(cl_kernel kernel) {
  size_t n = 0;
  clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, 0, nullptr, &n);
  std::string name(n, '\0');
  clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, n, &name[0], nullptr);
  while (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

[[noreturn]] void refused_arg(cl_kernel kernel, cl_uint index, cl_int status) {
  const std::string call = "clSetKernelArg(" + kernel_function_name(kernel) + ", argument " + std::to_string(index) + ")";
  throw Error(describe_failure(status_name(status), status, call, __FILE__, __LINE__), status);
}

// Kernel arguments (programs.hpp): what set_arg stored, per kernel, under one lock that its
// callers take once per argument; and what each kernel's last enqueue set on it, under a
// lock of that kernel's own, held across the enqueue, so that enqueues of one kernel from
// several threads take turns while set_arg and other kernels' enqueues never wait for them.
// Made once and never destroyed: a thread may still enqueue while the process exits and
// static objects are torn down.
struct Enqueued {
  std::mutex mutex;
  std::vector<KernelArg> set;
};
std::mutex& stored_mutex = *new std::mutex;
std::mutex& enqueued_mutex = *new std::mutex;  // the map below (each entry has its own)
auto& stored = *new std::unordered_map<cl_kernel, std::vector<KernelArg>>;
auto& enqueued = *new std::unordered_map<cl_kernel, std::shared_ptr<Enqueued>>;

std::shared_ptr<Enqueued> enqueued_of(cl_kernel kernel) {
  std::lock_guard<std::mutex> lock(enqueued_mutex);
  std::shared_ptr<Enqueued>& entry = enqueued[kernel];
  if (!entry) entry = std::make_shared<Enqueued>();
  return entry;
}
}  // namespace

void set_arg(cl_kernel kernel, cl_uint index, size_t size, const void* value) {
  {
    std::lock_guard<std::mutex> lock(stored_mutex);
    std::vector<KernelArg>& args = stored[kernel];
    if (args.size() <= index) args.resize(index + 1);
    KernelArg& arg = args[index];
    arg.set = true;
    arg.size = size;
    arg.null = value == nullptr;
    arg.bytes.assign(value ? static_cast<const char*>(value) : "", value ? size : 0);
  }
  launch_log::note_arg(kernel, index, size, value);
}

std::vector<KernelArg> kernel_args(cl_kernel kernel) {
  std::lock_guard<std::mutex> lock(stored_mutex);
  auto it = stored.find(kernel);
  return it == stored.end() ? std::vector<KernelArg>() : it->second;
}

void enqueue_kernel(cl_command_queue queue, cl_kernel kernel, const std::vector<KernelArg>& args, cl_uint dims,
                    const size_t* global, const size_t* local, cl_event* event) {
  const std::shared_ptr<Enqueued> entry = enqueued_of(kernel);
  std::lock_guard<std::mutex> lock(entry->mutex);
  std::vector<KernelArg>& set = entry->set;
  if (set.size() < args.size()) set.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    if (!a.set || set[i] == a) continue;
    const cl_int status = clSetKernelArg(kernel, cl_uint(i), a.size, a.null ? nullptr : a.bytes.data());
    if (status != CL_SUCCESS) {
      set[i] = KernelArg();
      refused_arg(kernel, cl_uint(i), status);
    }
    set[i] = a;
  }
  CL_CHECK(clEnqueueNDRangeKernel(queue, kernel, dims, nullptr, global, local, 0, nullptr, event));
}

void enqueue_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t* global,
                    const size_t* local, cl_event* event) {
  enqueue_kernel(queue, kernel, kernel_args(kernel), dims, global, local, event);
}

void forget_kernel_args(cl_kernel kernel) {
  {
    std::lock_guard<std::mutex> lock(stored_mutex);
    stored.erase(kernel);
  }
  std::lock_guard<std::mutex> lock(enqueued_mutex);
  enqueued.erase(kernel);
}

}  // namespace oclf
