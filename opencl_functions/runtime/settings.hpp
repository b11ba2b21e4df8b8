// The settings the C++ side reads, in one place: each is an environment variable
// OCLF_<NAME>, read when used (not cached), with the older names OCL_DEVICE,
// OCL_KERNEL_DIR and OCL_FALLBACK kept as aliases. opencl_functions/settings.py lists every setting with its
// meaning and default; this is its C++ reader.
#pragma once

#include <string>

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

// The value of setting `name` ("DEVICE", "CONV_KERNEL", ...): OCLF_<name>, else its alias,
// else "" (unset or empty).
std::string setting(const char* name);
// The variable that gave setting `name` its value (OCLF_DEVICE or its alias OCL_DEVICE,
// say), for messages; OCLF_<name> when unset.
std::string setting_variable(const char* name);

}  // namespace oclf
#pragma GCC visibility pop
