// Baseline conv2d implementations for the benchmark (see baselines.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "opencl-functions.hpp"

namespace oclf::baselines {

// Runs kernel `name` of the .cl file at `path` (built with `options`), which takes
// conv2d_tiled's arguments and computes one output per work-item: global
// (H_out·W_out, C_out, B), no work-group size.
void conv2d_from_file(const std::string& path, const std::string& name, const std::string& options,
                      const Conv2dArgs& args);

// CLBlast Convgemm (cross-correlation, no padding: x is already padded); groups must be 1
// and bias is ignored.
void convgemm(const Conv2dArgs& args);

}  // namespace oclf::baselines
