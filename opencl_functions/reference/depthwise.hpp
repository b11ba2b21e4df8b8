// reference/depthwise.hpp: the reference's depthwise convolutions (C_in = C_out = groups),
// their configurations and launches (staff-only; conv2d.hpp picks them for the library and
// the opencl device). Kernels: depthwise.cl (v3) and conv2d_cpu.cl (v2).
//
// Configurations ("dw_rows VW=16 RY=4" and so on) and their defaults:
//   dw_rows   CPUs, kernels up to 7×7: RY output rows × VW columns per work-item. VW: the
//             device's vector width, or the smallest power of two (at least 4) that holds an
//             output row when rows are narrower (7×7 and 14×14 maps); RY = 8 (or H_out).
//   dw_tiled  GPUs, kernels up to 7×7: TX×TY×TZ work-items, RY rows each, over a tile of the
//             input in local memory. TX = 32 for rows of 32 outputs or more, else the row
//             rounded up to 8; TY rows of work-items, as many as the map needs up to 128
//             work-items, and TZ planes per work-group for the rest; RY = 4 on maps of 28
//             rows or more at stride 1, 2 at stride 2 from 56 rows, else 1.
//   v2 "depthwise_cpu" (a vector of 16 outputs of a row) and "depthwise" (one output per
//             work-item) serve larger kernels.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "../launch/launcher.hpp"
#include "conv2d_cpu.hpp"
#include "tuning.hpp"

namespace oclf::reference {

inline const char* kDepthwiseFile = "reference/depthwise.cl";

// Whether depthwise.cl's kernels take this layer (the taps are compiled in, up to 7×7).
inline bool depthwise_v3_fits(const Conv2dGeometry& p) { return p.k_h <= 7 && p.k_w <= 7; }

inline std::string depthwise_shape_options(const Conv2dGeometry& p) {
  return "-cl-mad-enable -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w) +
         " -DSH=" + std::to_string(p.stride_h) + " -DSW=" + std::to_string(p.stride_w) +
         " -DDH=" + std::to_string(p.dilation_h) + " -DDW=" + std::to_string(p.dilation_w);
}

// v2 (conv2d.cl): on CPUs a vector of 16 outputs along a row per work-item, else one output.
inline void depthwise_v2(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, bool cpu) {
  const int cov = cpu ? 16 : 1;
  cl_kernel kernel = l.kernel(kCpuFile, cpu ? "conv2d_depthwise_cpu" : "conv2d_depthwise",
                               "-cl-mad-enable -DCOV=16 -DPX=8" + o.epilogue.options());
  const int has_bias = o.bias != nullptr;
  set_conv_args(kernel, std::make_tuple(o.x, o.w, o.bias, o.y, has_bias), p, o.epilogue);
  const size_t global[3] = {size_t(p.w_out + cov - 1) / cov, size_t(p.h_out), size_t(p.batch) * p.c_out};
  l.launch(kernel, 3, global, nullptr);
}

inline void depthwise_rows(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o,
                           const std::string& config) {
  const int vw = config_value(config, "VW", 16), ry = config_value(config, "RY", 4);
  const std::string options =
      depthwise_shape_options(p) + " -DVW=" + std::to_string(vw) + " -DRY=" + std::to_string(ry);
  cl_kernel kernel = l.kernel(kDepthwiseFile, "conv2d_depthwise_rows", options + o.epilogue.options());
  const int has_bias = o.bias != nullptr;
  set_args(kernel, o.x, o.w, o.bias, o.y, has_bias, p.batch, p.c_out, p.h, p.w, p.h_out, p.w_out, o.epilogue);
  const size_t global[3] = {size_t(p.w_out + vw - 1) / vw, size_t(p.h_out + ry - 1) / ry,
                            size_t(p.batch) * p.c_out};
  l.launch(kernel, 3, global, nullptr);
}

inline void depthwise_tiled(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o,
                            const std::string& config) {
  const int tx = config_value(config, "TX", 16), ty = config_value(config, "TY", 8);
  const int tz = config_value(config, "TZ", 1), ry = config_value(config, "RY", 2);
  const std::string options = depthwise_shape_options(p) + " -DTX=" + std::to_string(tx) + " -DTY=" +
                              std::to_string(ty) + " -DTZ=" + std::to_string(tz) + " -DRY=" + std::to_string(ry);
  cl_kernel kernel = l.kernel(kDepthwiseFile, "conv2d_depthwise_tiled", options + o.epilogue.options());
  const int has_bias = o.bias != nullptr;
  set_args(kernel, o.x, o.w, o.bias, o.y, has_bias, p.batch, p.c_out, p.h, p.w, p.h_out, p.w_out, o.epilogue);
  const size_t planes = size_t(p.batch) * p.c_out;
  const size_t global[3] = {size_t(p.w_out + tx - 1) / tx * tx, size_t(p.h_out + ty * ry - 1) / (ty * ry) * ty,
                            (planes + tz - 1) / tz * tz};
  const size_t local[3] = {size_t(tx), size_t(ty), size_t(tz)};
  l.launch(kernel, 3, global, local);
}

inline void depthwise_run(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o,
                          const std::string& config) {
  const std::string kind = config_kind(config);
  if (kind == "dw_rows") {
    depthwise_rows(l, p, o, config);
  } else if (kind == "dw_tiled") {
    depthwise_tiled(l, p, o, config);
  } else {
    depthwise_v2(l, p, o, kind == "depthwise_cpu");
  }
}

inline std::string dw_rows_config(int vw, int ry) {
  return "dw_rows VW=" + std::to_string(vw) + " RY=" + std::to_string(ry);
}

inline std::string dw_tiled_config(int tx, int ty, int tz, int ry) {
  return "dw_tiled TX=" + std::to_string(tx) + " TY=" + std::to_string(ty) + " TZ=" + std::to_string(tz) +
         " RY=" + std::to_string(ry);
}

// Candidates for one depthwise layer on this device (the default first); `full`: a sweep's.
inline std::vector<std::string> depthwise_candidates(const DeviceInfo& info, const Conv2dGeometry& p, bool full) {
  std::vector<std::string> out;
  const bool cpu = info.type == "CPU";
  if (!depthwise_v3_fits(p)) return {cpu ? "depthwise_cpu" : "depthwise"};
  if (cpu) {
    const int widest = cpu_vector_width(info);
    int vw = 4;
    while (vw < widest && vw < p.w_out) vw *= 2;
    // RY: 8 rows (all of a 7×7 map); the sweep over MobileNetV2 and EfficientNet picked 7 or 8
    // for 10 of 14 layers on PoCL.
    const int ry = std::min(8, p.h_out);
    for (int r : {ry, 4, 2}) out.push_back(dw_rows_config(vw, r));
    if (vw > 4) out.push_back(dw_rows_config(vw / 2, ry));
    if (full) {
      out.push_back(dw_rows_config(vw, 1));
      out.push_back(dw_rows_config(vw, 16));
      out.push_back("depthwise_cpu");
    }
  } else {
    // A work-group of about 128 work-items: TX columns, enough rows of RY outputs for the
    // map's height, and TZ planes to fill the rest. RY from a probe of every configuration
    // over MobileNetV2's and EfficientNet's layers on the H100: 4 rows per work-item on maps
    // of 28 rows or more at stride 1 (2 at stride 2 from 56 rows), one row on smaller maps,
    // where the work-group spans the map's height instead and more work-groups fill the GPU.
    const int group = int(std::min<size_t>(128, info.max_work_group_size));
    const int tx = p.w_out >= 32 ? 32 : std::max(8, (p.w_out + 7) / 8 * 8);
    auto tiled = [&](int ry) {
      const int ty = std::max(1, std::min(group / tx, (p.h_out + ry - 1) / ry));
      return dw_tiled_config(tx, ty, std::max(1, group / (tx * ty)), ry);
    };
    const bool unit_stride = p.stride_h == 1;
    const int ry = unit_stride ? (p.h_out >= 28 ? 4 : 1) : (p.h_out >= 56 ? 2 : 1);
    for (int r : {ry, 2, 4, 1}) out.push_back(tiled(r));
    out.push_back("depthwise");
    if (full) {
      out.push_back(dw_tiled_config(16, 8, 1, 2));
      out.push_back(dw_tiled_config(32, 8, 1, 1));
      out.push_back(dw_tiled_config(64, 4, 1, 2));
    }
  }
  std::vector<std::string> unique;
  for (const std::string& c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  return unique;
}

}  // namespace oclf::reference
