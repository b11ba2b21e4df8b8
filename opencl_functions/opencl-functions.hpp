// The interface between the student's host code (opencl-functions.cpp) and the rest of
// opencl_functions. opencl-functions.cpp must define exactly these two functions; the
// Python side (opencl_functions/checks.py) validates every argument before they are
// called, so they may assume shapes are consistent, sizes are positive and pointers are valid.
//
// All arrays are float32, row-major and contiguous unless a leading dimension says
// otherwise. Both functions are blocking: results are in host memory when they return.
// Launch kernels through Runtime::launch (and pass CLBlast's events to Runtime::record)
// so the runtime can report their kernel time from profiling events.
//
// A graded submission is opencl-functions.cpp and conv2d.cl alone: the grader puts them
// into a fresh copy of the reference tree, so changes to any other file do not count.
// The grader times each call whole (host code, copies and kernels) by its own clock.
#pragma once

#include <cstddef>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "launch/geometry.hpp"

namespace oclf {

// C = op(A) · op(B), where op(A) is M×K, op(B) is K×N and C is M×N (row-major, ld N).
// A is stored row-major with leading dimension lda: as M×K when a_trans is false, as
// K×M (so op(A) = Aᵀ) when it is true. a_len is the number of floats in A's storage.
// B likewise with ldb, b_trans and b_len.
struct MatmulArgs {
  const float* a;
  size_t a_len, lda;
  bool a_trans;
  const float* b;
  size_t b_len, ldb;
  bool b_trans;
  float* c;
  size_t m, n, k;
  // A device copy of B's b_len floats that stays between calls (a resident weight), or
  // nullptr. The host pointer b is always valid.
  cl_mem b_dev = nullptr;
};

// y = conv2d(x, weight) + bias, cross-correlation as in torch.nn.functional.conv2d with
// padding already applied to x. The sizes are Conv2dGeometry's (launch/geometry.hpp):
//   x      is (batch, c_in, h, w)
//   weight is (c_out, c_in / groups, k_h, k_w)
//   bias   is (c_out), or nullptr for none
//   y      is (batch, c_out, h_out, w_out), with
//          h_out = (h - dilation_h * (k_h - 1) - 1) / stride_h + 1, and w_out likewise.
// Output channel co reads input channels [g * c_in/groups, (g+1) * c_in/groups) where
// g = co / (c_out / groups). Every size here is at least 1.
struct Conv2dArgs : Conv2dGeometry {
  const float* x;
  const float* weight;
  const float* bias;
  float* y;
  // Device copies of weight and bias that stay between calls (resident parameters), or
  // nullptr: then only the host pointers above are given. Host pointers are always valid.
  // Buffers derived from weight_dev (a packed layout) may be kept with
  // Runtime::keep_derived and found again with Runtime::derived.
  cl_mem weight_dev = nullptr;
  cl_mem bias_dev = nullptr;
};

void matmul(const MatmulArgs& args);
void conv2d(const Conv2dArgs& args);

}  // namespace oclf
