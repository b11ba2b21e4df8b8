// The gradients of conv2d on conv2d_backward.cl's kernels, launched for the library's
// backward pass (backward.cpp) and the opencl device's (device/csrc/aten/conv_backward.cpp)
// alike: which version runs (direct or tiled), how the weight gradient's pixel sum is split,
// and the NDRanges. Operands are whole buffers in the layouts conv2d_backward.cl describes;
// dx is the gradient of the padded input.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "geometry.hpp"
#include "launcher.hpp"

namespace oclf::gradients {

using ndrange::round_up;

inline const char* kFile = "conv2d_backward.cl";
inline const size_t kBiasGroup = 64;  // BIAS_GROUP in conv2d_backward.cl

// Which kernel version runs: kAuto picks by the channel counts and the device; kDirect (v1)
// and kTiled (v2) force one (tests and benchmarks).
enum class Variant { kAuto, kDirect, kTiled };

inline Variant parse_variant(const std::string& name) {
  if (name == "auto") return Variant::kAuto;
  if (name == "direct") return Variant::kDirect;
  if (name == "tiled") return Variant::kTiled;
  throw std::invalid_argument("variant must be 'auto', 'direct' or 'tiled', got '" + name + "'");
}

inline size_t tile_size(const DeviceInfo& info) { return info.max_work_group_size >= 256 ? 16 : 8; }

inline std::string options(const DeviceInfo& info) { return "-DTILE=" + std::to_string(tile_size(info)); }

// A tile is worth it when the GEMM's rows (channels per group) fill at least half of it.
inline bool use_tiled(const DeviceInfo& info, Variant variant, size_t rows, size_t cols) {
  if (variant != Variant::kAuto) return variant == Variant::kTiled;
  const size_t half = tile_size(info) / 2;
  return rows >= half && cols >= half;
}

// dx (B, C_in, H, W) from dy (B, C_out, H_out, W_out) and w. The tiled version gathers mostly
// zeros when the stride leaves gaps, and on CPUs the direct one measured faster at every
// shape (PoCL): kAuto keeps the tile for GPUs without gaps.
inline void input(Launcher& l, const Conv2dGeometry& s, cl_mem dy, cl_mem w, cl_mem dx, Variant variant) {
  const bool gaps = s.stride_h > 1 || s.stride_w > 1;
  const bool gpu = l.info().type == "GPU";
  const Variant pick = variant == Variant::kAuto && (gaps || !gpu) ? Variant::kDirect : variant;
  const size_t tile = tile_size(l.info());
  if (use_tiled(l.info(), pick, s.cin_g(), size_t(s.cout_g()) * s.k_h * s.k_w)) {
    cl_kernel kernel = l.kernel(kFile, "conv2d_grad_input_tiled", options(l.info()));
    set_conv_args(kernel, std::make_tuple(dy, w, dx), s);
    const size_t global[3] = {round_up(size_t(s.batch) * s.h * s.w, tile), round_up(s.cin_g(), tile),
                              size_t(s.groups)};
    const size_t local[3] = {tile, tile, 1};
    l.launch(kernel, 3, global, local);
  } else {
    cl_kernel kernel = l.kernel(kFile, "conv2d_grad_input_direct", options(l.info()));
    set_conv_args(kernel, std::make_tuple(dy, w, dx), s);
    const size_t global[1] = {round_up(size_t(s.batch) * s.c_in * s.h * s.w, 64)};
    l.launch(kernel, 1, global, nullptr);
  }
}

// How many slices the weight gradient's sum over `pixels` output pixels is cut into, so
// that `base_items` work-items become about `target_items`, each slice at least `min_chunk`
// pixels long. Returns the chunk length (a multiple of `align`) and sets *splits.
inline int split_pixels(size_t pixels, size_t base_items, size_t target_items, size_t min_chunk, size_t align,
                        int* splits) {
  size_t want = std::max<size_t>(1, (target_items + base_items - 1) / base_items);
  want = std::min<size_t>({want, std::max<size_t>(1, pixels / min_chunk), 256});
  const size_t chunk = round_up((pixels + want - 1) / want, align);
  *splits = static_cast<int>((pixels + chunk - 1) / chunk);
  return static_cast<int>(chunk);
}

// dw (C_out, C_in/groups, K_h, K_w) from x and dy: the sum over output pixels split into
// slices until the work-items fill the device several times over; more than one slice
// writes partial sums into scratch memory that conv2d_sum_splits adds into dw.
inline void weight(Launcher& l, const Conv2dGeometry& s, cl_mem x, cl_mem dy, cl_mem dw, Variant variant) {
  const size_t k_dim = s.k_dim(), w_len = size_t(s.c_out) * k_dim;
  const size_t target_items = size_t(l.info().compute_units) * 4096;
  const size_t tile = tile_size(l.info());
  const bool tiled = use_tiled(l.info(), variant, s.cout_g(), k_dim);
  int splits = 1;
  const int chunk = tiled ? split_pixels(s.pixels(), round_up(k_dim, tile) * round_up(s.cout_g(), tile) * s.groups,
                                         target_items, 4 * tile, tile, &splits)
                          : split_pixels(s.pixels(), w_len, target_items, 64, 1, &splits);
  Scratch partial;
  if (splits > 1) partial = l.scratch(size_t(splits) * w_len * sizeof(float));
  const cl_mem out = splits > 1 ? partial.get() : dw;
  cl_kernel kernel = l.kernel(kFile, tiled ? "conv2d_grad_weight_tiled" : "conv2d_grad_weight_direct",
                              options(l.info()));
  set_conv_args(kernel, std::make_tuple(x, dy, out), s, chunk);
  if (tiled) {
    const size_t global[3] = {round_up(k_dim, tile), round_up(s.cout_g(), tile), size_t(s.groups) * splits};
    const size_t local[3] = {tile, tile, 1};
    l.launch(kernel, 3, global, local);
  } else {
    const size_t global[2] = {round_up(w_len, 64), size_t(splits)};
    l.launch(kernel, 2, global, nullptr);
  }
  if (splits == 1) return;
  cl_kernel sum = l.kernel(kFile, "conv2d_sum_splits", options(l.info()));
  set_args(sum, partial.get(), dw, int(w_len), splits);
  const size_t global[1] = {round_up(w_len, 64)};
  l.launch(sum, 1, global, nullptr);
}

// db (C_out) = dy (batch, C_out, out_area) summed over images and pixels: one work-group of
// kBiasGroup work-items per output channel.
inline void bias(Launcher& l, int batch, int c_out, int out_area, cl_mem dy, cl_mem db) {
  cl_kernel kernel = l.kernel(kFile, "conv2d_grad_bias", options(l.info()));
  set_args(kernel, dy, db, batch, c_out, out_area);
  const size_t global[1] = {size_t(c_out) * kBiasGroup};
  const size_t local[1] = {kBiasGroup};
  l.launch(kernel, 1, global, local);
}

}  // namespace oclf::gradients
