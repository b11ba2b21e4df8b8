// Program binaries kept between processes: after a program is built from its .cl source,
// its binary (CL_PROGRAM_BINARIES) is written to a file of the cache folder; a later process
// that builds the same program loads that binary (clCreateProgramWithBinary, clBuildProgram)
// instead of compiling the source again, which takes 0.1-0.3 s per program on NVIDIA and
// more on PoCL. Programs (programs.hpp) asks it; any failure builds from source as before.
//
// A file's key is the device (platform, name, device and driver versions), the full build
// options and the hash of the source with every file its #include lines can name (in the
// source's own folder, the working folder and each -I folder of the options, all of them
// hashed, so an edited header is rebuilt); a source with an include that names no file is
// never cached. A file is "<device>-<hash of the key>.bin" holding a header line (format,
// sizes, checksum), the key itself and the binary; a file whose header, key or checksum
// does not match, or that the driver refuses, is ignored and replaced. Files are written to
// a temporary name, then renamed, so two processes never read each other's half-written file.
//
// OCLF_PROGRAM_CACHE (read when used): "1" (default) keeps binaries in the folder "programs"
// of the tuning cache's folder (OCLF_TUNE_DIR, else $XDG_CACHE_HOME/opencl_functions, else
// ~/.cache/opencl_functions); "0" turns it off; anything else is the folder to use. The
// folder must be the process owner's and written by nobody else (else it is left alone);
// a folder that cannot be made or written leaves programs built from source, as without a
// cache. Never used while the launch log is active: the grader's children build every
// program from the source it records (and the grader turns it off for them anyway).
#pragma once

#include <cstdint>
#include <string>

#include "errors.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class ProgramCache {
 public:
  ProgramCache(cl_context context, cl_device_id device) : context_(context), device_(device) {}
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // The folder binaries are kept in now: "" when OCLF_PROGRAM_CACHE is 0, no folder can be
  // named, or the launch log is active.
  static std::string folder();

  // The key of the program built from the .cl file at `path` (whose text is `source`) with
  // `options`, the whole option string given to clBuildProgram; "" when it cannot be cached
  // (an #include that names no file, or includes nested too deep).
  std::string key(const std::string& path, const std::string& source, const std::string& options);
  // The program of `key`, made from its stored binary and built with `options`, or nullptr
  // (no file, a file that does not match, or a driver that refuses it).
  cl_program load(const std::string& key, const std::string& options);
  // Writes the binary of `program` (built from source) under `key`; failures are silent.
  void store(const std::string& key, cl_program program);

  // What this cache did in this process.
  uint64_t loaded() const { return loaded_; }      // programs made from a stored binary
  uint64_t stored() const { return stored_; }      // binaries written
  uint64_t rejected() const { return rejected_; }  // files found but not used (corrupt, refused)

 private:
  std::string device_key();
  std::string file_of(const std::string& dir, const std::string& key);

  cl_context context_;
  cl_device_id device_;
  std::string device_key_, device_slug_;
  bool trimmed_ = false;  // whether this process has trimmed the folder
  uint64_t loaded_ = 0, stored_ = 0, rejected_ = 0;
};

}  // namespace oclf
#pragma GCC visibility pop
