// Errors of the OpenCL runtime: the exceptions every failing call throws, the CL_* and
// CLBlast names of status codes, and the CL_CHECK / CLBLAST_CHECK macros that put the
// failing call's own text and file:line into the message.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <stdexcept>
#include <string>

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

// An OpenCL (or CLBlast) call failed. what() reads like
// "CL_INVALID_KERNEL_NAME (-46) in clCreateKernel(...) at file.cpp:12".
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int status) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// A kernel file failed to compile: what() holds the file, the options and the build log.
class BuildError : public Error {
 public:
  using Error::Error;
};

// The CL_* name of an OpenCL status code ("CL_UNKNOWN_ERROR" when it has none).
const char* status_name(cl_int status);
// The name of a CLBlast status code, as its header spells it ("kInvalidMatrixA"); OpenCL's
// own codes, which CLBlast passes through, get their CL_* names.
const char* clblast_status_name(int status);

// "NAME (status) in call at file:line", for messages of calls that failed.
std::string describe_failure(const char* name, int status, const std::string& call, const char* file, int line);

// Throw Error naming the call, the status and the place, unless status is success.
void check(cl_int status, const char* call, const char* file, int line);
void check_clblast(int status, const char* call, const char* file, int line);

}  // namespace oclf

#define CL_CHECK(call) ::oclf::check((call), #call, __FILE__, __LINE__)
#define CLBLAST_CHECK(call) ::oclf::check_clblast(static_cast<int>(call), #call, __FILE__, __LINE__)
#pragma GCC visibility pop
