// Baseline conv2d implementations for the benchmark and the grader (see baselines.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "opencl-functions.hpp"

namespace baselines {

// Runs kernel `name` of the .cl file at `path` (built with `options`), which takes
// conv2d_tiled's arguments. local_0 × local_1 > 0: launched like conv2d_tiled with that
// work-group; 0: one work-item per output, global (H_out·W_out, C_out, B), no work-group size.
void conv2d_from_file(const std::string& path, const std::string& name, const std::string& options,
                      size_t local_0, size_t local_1, const oclf::Conv2dArgs& args);

// CLBlast Convgemm (cross-correlation, no padding: x is already padded); groups must be 1
// and bias is ignored.
void convgemm(const oclf::Conv2dArgs& args);

}  // namespace baselines
