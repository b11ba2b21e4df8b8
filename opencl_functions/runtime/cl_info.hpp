// The text of OpenCL's string queries (clGetPlatformInfo, clGetDeviceInfo, clGetKernelInfo,
// ...): names, versions, extensions, a kernel's function name.
#pragma once

#include <string>

#include "errors.hpp"

namespace oclf {

// What `query` returns for `what` of `object`, without its closing NUL:
// info_string(clGetKernelInfo, kernel, CL_KERNEL_FUNCTION_NAME). Throws Error.
template <typename Object, typename Param>
std::string info_string(cl_int (*query)(Object, Param, size_t, void*, size_t*), Object object, cl_uint what) {
  size_t n = 0;
  CL_CHECK(query(object, what, 0, nullptr, &n));
  std::string s(n, '\0');
  CL_CHECK(query(object, what, n, &s[0], nullptr));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

inline std::string device_string(cl_device_id device, cl_device_info what) {
  return info_string(clGetDeviceInfo, device, what);
}

inline std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  return info_string(clGetPlatformInfo, platform, what);
}

}  // namespace oclf
