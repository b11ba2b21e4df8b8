// The pooling operators' shared core (pool.cpp): their kernels, all in kernels/pool.cl (one
// source for 2-D and 3-D), and their outputs written through contiguous tensors. The max,
// average and adaptive poolings are pool.cpp's, fractional max pooling fractional_pool.cpp's.
#pragma once

#include <string>

#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device::pooling {

// The kernel `name` of kernels/pool.cl for `spatial` (2 or 3) dimensions, with `options`
// besides (-DT=..., the window compiled in).
cl_kernel kernel(const char* name, int spatial, const std::string& options = "");

// `out` resized to `shape`, as the kernels write it: itself when contiguous, else a new
// contiguous tensor of `dtype` whose values store() then copies into out.
at::Tensor writable(at::Tensor& out, at::IntArrayRef shape, at::ScalarType dtype);
void store(at::Tensor& out, const at::Tensor& result);

}  // namespace oclf::device::pooling
