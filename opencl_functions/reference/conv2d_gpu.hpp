// conv2d_gpu_fast.hpp: conv2d_gpu (v4, conv2d.cl), the reference's implicit GEMM for GPUs:
// its tiles, the default tile of a layer shape, the tuning candidates and the launch with
// split-K (staff-only; included by conv2d_fast.hpp, compiled into the host code's object).
// matmul_fast.hpp and winograd_fast.hpp run their GEMMs through it too.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "fast_tuning.hpp"
#include "opencl-functions.hpp"
#include "runtime/runtime.hpp"

namespace oclf {
namespace fast {

inline size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

inline bool is_pointwise(const Conv2dArgs& p) {
  return (p.h_out * p.w_out) % 4 == 0 && p.k_h == 1 && p.k_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
         p.h == p.h_out && p.w == p.w_out;
}

// The default tile of a layer shape (fast_tuning.hpp default_tile).
inline GpuTile default_gpu_tile(Runtime& rt, const Conv2dArgs& p) {
  const size_t pixels = size_t(p.batch) * p.h_out * p.w_out;
  return default_tile(rt.info(), p.c_out / p.groups, (p.c_in / p.groups) * p.k_h * p.k_w, pixels, p.groups,
                      is_pointwise(p));
}

// Tile candidates of a layer (the default first); `full`: a sweep's.
inline std::vector<std::string> gpu_candidates(Runtime& rt, const Conv2dArgs& p, bool full) {
  std::vector<GpuTile> tiles = {default_gpu_tile(rt, p), {64, 64, 4, 4, 32}, {32, 32, 4, 4, 16}, {64, 32, 4, 4, 16}};
  if (full) {
    for (GpuTile t : {GpuTile{128, 64, 8, 4, 16}, GpuTile{64, 128, 4, 8, 16}, GpuTile{128, 128, 8, 8, 16},
                      GpuTile{64, 64, 4, 4, 16}, GpuTile{32, 64, 4, 4, 16}})
      tiles.push_back(t);
  }
  std::vector<std::string> out;
  for (const GpuTile& t : tiles)
    if (valid_tile(t) && fits_device(t, rt.info()) && std::find(out.begin(), out.end(), t.text()) == out.end())
      out.push_back(t.text());
  return out;
}

// Split-K aims at this many work-groups per compute unit; OCLF_GPU_SPLIT_TARGET overrides it.
inline int split_target() {
  const std::string env = setting("GPU_SPLIT_TARGET");
  if (env.empty()) return 2;
  const int target = std::atoi(env.c_str());
  if (target < 1 || target > 64) throw Error("OCLF_GPU_SPLIT_TARGET must be 1..64, got " + env, CL_INVALID_VALUE);
  return target;
}

// `target`: split-K's work-groups per compute unit (0: split_target()).
inline void conv2d_gpu(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem w, cl_mem bias, cl_mem y,
                       const GpuTile& t, int target = 0) {
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int hw_out = p.h_out * p.w_out;
  const size_t pixels = size_t(p.batch) * hw_out;
  const bool pointwise = is_pointwise(p);
  std::string options = "-cl-mad-enable -DGTM=" + std::to_string(t.tm) + " -DGTN=" + std::to_string(t.tn) +
                        " -DGWM=" + std::to_string(t.wm) + " -DGWN=" + std::to_string(t.wn) +
                        " -DGTK=" + std::to_string(t.tk);
  std::string conv_options = options;
  if (p.k_h <= 7 && p.k_w <= 7) conv_options += " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w);
  if (k_dim % 4 == 0) conv_options += " -DVEC_W";
  if (hw_out % 4 == 0) conv_options += " -DVEC_OUT";
  if (pointwise) conv_options += " -DPOINTWISE";
  // Split K when the output tiles would not fill the device once, into enough parts to fill
  // it split_target() times over (splitting 1–2 waves of tiles measured slower).
  const size_t tiles = round_up(cout_g, t.tm) / t.tm * (round_up(pixels, t.tn) / t.tn) * p.groups;
  const size_t wanted = size_t(target > 0 ? target : split_target()) * rt.info().compute_units;
  int splits = 1;
  if (tiles < rt.info().compute_units)
    splits = int(std::min<size_t>({(wanted + tiles - 1) / tiles, size_t(k_dim / (4 * t.tk)), 16}));
  splits = std::max(splits, 1);
  const int k_chunk = int(round_up((k_dim + splits - 1) / splits, t.tk));
  splits = (k_dim + k_chunk - 1) / k_chunk;

  const size_t y_len = pixels * p.c_out;
  Buffer parts;
  if (splits > 1) parts = Buffer(splits * y_len * sizeof(float), CL_MEM_READ_WRITE);
  const cl_mem out = splits > 1 ? parts.get() : y;
  const int has_bias = bias != nullptr && splits == 1;
  cl_kernel kernel = rt.kernel("conv2d.cl", "conv2d_gpu", conv_options);
  set_args(kernel, x, w, bias, out, has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h,
                p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out, splits, k_chunk);
  const size_t global[3] = {round_up(pixels, t.tn) / t.wn, round_up(cout_g, t.tm) / t.wm,
                            size_t(p.groups) * splits};
  const size_t local[3] = {size_t(t.tn / t.wn), size_t(t.tm / t.wm), 1};
  rt.launch(kernel, 3, global, local);
  if (splits > 1) {
    cl_kernel sum = rt.kernel("conv2d.cl", "conv2d_sum_splits", options);
    const int with_bias = bias != nullptr, hw_out = p.h_out * p.w_out, total = int(y_len);
    set_args(sum, parts.get(), bias, y, with_bias, splits, p.c_out, hw_out, total);
    const size_t sum_global[1] = {round_up(y_len, 256)};
    const size_t sum_local[1] = {256};
    rt.launch(sum, 1, sum_global, sum_local);
  }
}

// conv2d_gpu with OCLF_GPU_TILE's tile, else the layer's default (matmul_fast.hpp's GEMM).
inline void conv2d_gpu(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem w, cl_mem bias, cl_mem y) {
  GpuTile t;
  if (!tile_setting(&t)) t = default_gpu_tile(rt, p);
  conv2d_gpu(rt, p, x, w, bias, y, t);
}

}  // namespace fast
}  // namespace oclf
