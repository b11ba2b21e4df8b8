// reference/winograd.hpp: Winograd F(2×2, 3×3) for stride-1, undilated 3×3 convs with one
// group (winograd.cl), a GPU candidate of conv2d.hpp: transforms around conv2d_gpu's grouped
// 1×1 conv (staff-only).
#pragma once

#include <string>

#include "../launch/launcher.hpp"
#include "conv2d_gpu.hpp"

namespace oclf::reference {

inline const char* kWinogradFile = "reference/winograd.cl";

// Winograd F(2×2, 3×3) (winograd.cl) takes stride-1, undilated 3×3 convs with one group.
inline bool winograd_fits(const Conv2dGeometry& p) {
  return p.k_h == 3 && p.k_w == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 &&
         p.dilation_w == 1 && p.groups == 1;
}

// The 16 products of Winograd's tile positions as one grouped 1×1 conv2d_gpu: V (16·C_in
// channels over P tiles) → M (16·C_out channels), U as its weights.
inline Conv2dGeometry winograd_gemm(const Conv2dGeometry& p) {
  const int tiles = p.batch * ((p.h_out + 1) / 2) * ((p.w_out + 1) / 2);
  Conv2dGeometry q{};
  q.batch = 1, q.c_in = 16 * p.c_in, q.h = 1, q.w = tiles, q.c_out = 16 * p.c_out, q.k_h = q.k_w = 1;
  q.stride_h = q.stride_w = q.dilation_h = q.dilation_w = 1, q.groups = 16, q.h_out = 1, q.w_out = tiles;
  return q;
}

// Winograd: transform the weights (kept with the weight where the launcher keeps derived
// buffers) and the input, 16 products through conv2d_gpu with tile t, transform back and add
// the bias (and the operands' epilogue). 16-bit operands (o.io) are read and written by the
// transforms; the transformed values and the products stay float32.
inline void conv2d_winograd(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const GpuTile& t) {
  const int th = (p.h_out + 1) / 2, tw = (p.w_out + 1) / 2, tiles = p.batch * th * tw;
  const size_t u_bytes = size_t(16) * p.c_out * p.c_in * sizeof(float);
  Scratch u_here;
  const cl_mem u = l.derived("winograd-U", u_bytes, [&](cl_mem made) {
    cl_kernel weights = l.kernel(kWinogradFile, "winograd_weights", o.io_options());
    set_args(weights, o.w, made, p.c_in, p.c_out);
    const size_t global[2] = {size_t(p.c_in), size_t(p.c_out)};
    l.launch(weights, 2, global, nullptr);
  }, &u_here);
  const Scratch v = l.scratch(size_t(16) * p.c_in * tiles * sizeof(float));
  const Scratch m = l.scratch(size_t(16) * p.c_out * tiles * sizeof(float));
  cl_kernel input = l.kernel(kWinogradFile, "winograd_input", o.io_options());
  set_args(input, o.x, v.get(), p.batch, p.c_in, p.h, p.w, th, tw);
  const size_t in_global[2] = {size_t(tiles), size_t(p.c_in)};
  l.launch(input, 2, in_global, nullptr);
  conv2d_gpu(l, winograd_gemm(p), {v.get(), u, nullptr, m.get()}, t);
  cl_kernel output = l.kernel(kWinogradFile, "winograd_output", o.io_options() + o.epilogue.options());
  const int has_bias = o.bias != nullptr;
  set_args(output, m.get(), o.bias, o.y, has_bias, p.batch, p.c_out, p.h_out, p.w_out, th, tw, o.epilogue);
  const size_t out_global[2] = {size_t(tiles), size_t(p.c_out)};
  l.launch(output, 2, out_global, nullptr);
}

}  // namespace oclf::reference
