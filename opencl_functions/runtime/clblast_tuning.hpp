// CLBlast's tuning parameters (single precision) on a device, by CLBlast kernel name
// ("Xgemm", "XgemmDirect", "GemmRoutine", "Xgemv", "Copy", ...): read them, override them.
// opencl_functions/clblast_params.py applies the per-device files through these.
#pragma once

#include <map>
#include <string>

#include "errors.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

using KernelParameters = std::map<std::string, size_t>;

// The parameters CLBlast uses now for `kernel`: its database's, or the last override.
// Throws std::invalid_argument for a kernel CLBlast does not know.
KernelParameters clblast_parameters(cl_device_id device, const std::string& kernel);
// Replaces the parameters of each kernel in `params` (the next CLBlast call compiles with
// them). Every entry must name exactly its kernel's parameters; all are checked before any
// is applied, so a bad entry changes nothing and throws std::invalid_argument naming it.
void clblast_override(cl_device_id device, const std::map<std::string, KernelParameters>& params);

}  // namespace oclf
#pragma GCC visibility pop
