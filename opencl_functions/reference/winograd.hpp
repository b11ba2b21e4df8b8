// winograd_fast.hpp: Winograd F(2×2, 3×3) for stride-1, undilated 3×3 convs with one group
// (winograd.cl), a GPU candidate of conv2d_fast.hpp: transforms around conv2d_gpu's grouped
// 1×1 conv (staff-only; compiled into the host code's object).
#pragma once

#include <string>

#include "conv2d_gpu_fast.hpp"
#include "opencl-functions.hpp"
#include "runtime/runtime.hpp"

namespace oclf {
namespace fast {

// Winograd F(2×2, 3×3) (winograd.cl) takes stride-1, undilated 3×3 convs with one group.
inline bool winograd_fits(const Conv2dArgs& p) {
  return p.k_h == 3 && p.k_w == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 &&
         p.dilation_w == 1 && p.groups == 1;
}

// The 16 products of Winograd's tile positions as one grouped 1×1 conv2d_gpu: V (16·C_in
// channels over P tiles) → M (16·C_out channels), U as its weights.
inline Conv2dArgs winograd_gemm(const Conv2dArgs& p) {
  const int tiles = p.batch * ((p.h_out + 1) / 2) * ((p.w_out + 1) / 2);
  Conv2dArgs q{};
  q.batch = 1, q.c_in = 16 * p.c_in, q.h = 1, q.w = tiles, q.c_out = 16 * p.c_out, q.k_h = q.k_w = 1;
  q.stride_h = q.stride_w = q.dilation_h = q.dilation_w = 1, q.groups = 16, q.h_out = 1, q.w_out = tiles;
  return q;
}

// Winograd: transform the weights (kept with a resident weight) and the input, 16 products
// through conv2d_gpu with tile t, transform back and add the bias.
inline void conv2d_winograd(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem w, cl_mem bias, cl_mem y,
                            const GpuTile& t) {
  const int th = (p.h_out + 1) / 2, tw = (p.w_out + 1) / 2, tiles = p.batch * th * tw;
  const size_t u_bytes = size_t(16) * p.c_out * p.c_in * sizeof(float);
  Buffer u_here;
  cl_mem u = p.weight_dev ? rt.derived(p.weight_dev, "winograd-U") : nullptr;
  if (!u) {
    if (p.weight_dev) {
      u = rt.keep_derived(p.weight_dev, "winograd-U", u_bytes);
    } else {
      u_here = Buffer(u_bytes, CL_MEM_READ_WRITE);
      u = u_here.get();
    }
    cl_kernel weights = rt.kernel("winograd.cl", "winograd_weights", "");
    set_args(weights, w, u, p.c_in, p.c_out);
    const size_t global[2] = {size_t(p.c_in), size_t(p.c_out)};
    rt.launch(weights, 2, global, nullptr);
  }
  Buffer v(size_t(16) * p.c_in * tiles * sizeof(float), CL_MEM_READ_WRITE);
  Buffer m(size_t(16) * p.c_out * tiles * sizeof(float), CL_MEM_READ_WRITE);
  cl_kernel input = rt.kernel("winograd.cl", "winograd_input", "");
  set_args(input, x, v.get(), p.batch, p.c_in, p.h, p.w, th, tw);
  const size_t in_global[2] = {size_t(tiles), size_t(p.c_in)};
  rt.launch(input, 2, in_global, nullptr);
  conv2d_gpu(rt, winograd_gemm(p), v.get(), u, nullptr, m.get(), t);
  cl_kernel output = rt.kernel("winograd.cl", "winograd_output", "");
  const int has_bias = bias != nullptr;
  set_args(output, m.get(), bias, y, has_bias, p.batch, p.c_out, p.h_out, p.w_out, th, tw);
  const size_t out_global[2] = {size_t(tiles), size_t(p.c_out)};
  rt.launch(output, 2, out_global, nullptr);
}

}  // namespace fast
}  // namespace oclf
