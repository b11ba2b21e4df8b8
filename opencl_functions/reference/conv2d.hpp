// reference/conv2d.hpp: which of the reference's conv2d kernels runs for a layer, on which
// configuration, for the library (library.hpp) and the opencl device (device/csrc/aten/conv.cpp)
// alike (staff-only). The kernels' launches: conv2d_cpu.hpp, conv2d_gpu.hpp, depthwise.hpp,
// winograd.hpp.
//
// Kernel choice (OCLF_CONV_KERNEL forces one where it applies: tiled, cpu, gpu, the depthwise
// kinds of depthwise.hpp, or a whole configuration such as "cpu COV=8 PX=12"):
//   depthwise convs (one input and one output channel per group): depthwise.hpp;
//   CPU devices: conv2d_cpu (v2) on weights packed by conv2d_pack_weights, COV output
//     channels (the device's float vector width: 16 with AVX-512, 8 with AVX2) × PX = 8
//     pixels per work-item; OCLF_CPU_BLOCK="COV,PX" overrides;
//   other devices: conv2d_gpu (v4), with split-K when the output alone gives too few
//     work-groups; tiles by layer shape (default_gpu_tile), OCLF_GPU_TILE="TM,TN,WM,WN,TK"
//     overrides; OCLF_GPU_SPLIT_TARGET sets split-K's aim. Stride-1 3×3 convs also try
//     Winograd F(2×2, 3×3) (winograd.cl; "wino", its products through conv2d_gpu) when tuned.
// Each layer shape may be tuned at first use among a few candidates (tuning.hpp).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "../launch/launcher.hpp"
#include "conv2d_cpu.hpp"
#include "conv2d_gpu.hpp"
#include "depthwise.hpp"
#include "tuning.hpp"
#include "winograd.hpp"

namespace oclf::reference {

// What a caller asks of one convolution beyond its shape and buffers.
struct ConvRequest {
  // A kernel kind or a whole configuration to force (OCLF_CONV_KERNEL); "" for the rules.
  std::string forced = setting("CONV_KERNEL");
  // Plan as on a GPU whatever the device (the opencl device's OCLF_DEVICE_CONV=gpu), so CPU
  // machines run the GPU paths.
  bool gpu_paths = false;
};

// The tuning key of a layer (tuning.hpp).
inline std::string conv_key(const std::string& family, const Conv2dGeometry& p) {
  return conv_key(family, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h, p.stride_w, p.dilation_h,
                  p.dilation_w, p.groups);
}

// Layers smaller than this many multiply-adds are not worth a measurement.
inline bool conv_worth_tuning(const Conv2dGeometry& p) { return p.macs() >= double(1 << 20); }

// The configuration for a layer: a forced one (OCLF_CONV_KERNEL with a space), a block
// setting (OCLF_CPU_BLOCK, OCLF_GPU_TILE), else choose() among the candidates (a forced kind
// without sizes only picks the family). Notes it for the benchmark.
inline Choice conv_config(Launcher& l, const Conv2dGeometry& p, const std::string& family,
                               const std::string& forced, const std::string& block_setting,
                               const std::vector<std::string>& quick, const std::vector<std::string>& full,
                               const std::string& source_hash, const std::function<void(const std::string&)>& run) {
  Choice choice;
  if (forced.find(' ') != std::string::npos) {
    choice = {forced, "setting"};
  } else if (!block_setting.empty()) {
    choice = {block_setting, "setting"};
  } else {
    choice = choose(l, conv_key(family, p), source_hash, quick, full, run, conv_worth_tuning(p));
    if (!forced.empty() && choice.origin == "defaults") choice.origin = "setting";
  }
  l.tuning().note(choice.config, choice.origin);
  return choice;
}

// A layer's plan: which kernel family and configuration runs it (plan_conv2d), so that a
// caller that sees the same layer again (the opencl device) can run it without planning.
struct ConvPlan {
  bool depthwise = false;  // depthwise.hpp's kernels (config names which), else by config's kind
  std::string config;      // "cpu COV=8 PX=8", "gpu TM=..", "wino TM=..", "dw_rows VW=4 RY=2", ...
  std::string origin;      // where the configuration came from (tuning.hpp)
};

// Runs a layer on its plan.
inline void run_conv2d(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const ConvPlan& plan) {
  const std::string kind = config_kind(plan.config);
  if (plan.depthwise)
    depthwise_run(l, p, o, plan.config);
  else if (kind == "cpu")
    conv2d_cpu(l, p, o, plan.config);
  else if (kind == "wino")
    conv2d_winograd(l, p, o, GpuTile::of(plan.config));
  else
    conv2d_gpu(l, p, o, GpuTile::of(plan.config));
}

// The depthwise kernels: a forced kind keeps that kind's candidates (the v2 kinds have no others).
inline ConvPlan plan_depthwise(Launcher& l, const DeviceInfo& info, const Conv2dGeometry& p, const ConvOperands& o,
                               const std::string& forced) {
  std::vector<std::string> quick = depthwise_candidates(info, p, false);
  std::vector<std::string> full = depthwise_candidates(info, p, true);
  if (!forced.empty() && forced.find(' ') == std::string::npos) {
    auto other = [&](const std::string& c) { return config_kind(c) != forced; };
    quick.erase(std::remove_if(quick.begin(), quick.end(), other), quick.end());
    full.erase(std::remove_if(full.begin(), full.end(), other), full.end());
    if (quick.empty()) quick = full = {forced};
  }
  auto run = [&](const std::string& c) { depthwise_run(l, p, o, c); };
  const std::string hash = l.source_hash(kDepthwiseFile) + l.source_hash(kCpuFile);
  const Choice c = conv_config(l, p, "depthwise", forced, "", quick, full, hash, run);
  return {true, c.config, c.origin};
}

// conv2d_cpu with the block OCLF_CPU_BLOCK sets, the cache holds or a measurement picks.
inline ConvPlan plan_cpu(Launcher& l, const DeviceInfo& info, const Conv2dGeometry& p, const ConvOperands& o,
                         const std::string& forced) {
  auto run = [&](const std::string& c) {
    conv2d_cpu(l, p, o, c);
  };
  const bool pointwise = p.k_h == 1 && p.k_w == 1;
  const Choice c = conv_config(l, p, "cpu", forced, cpu_block_setting(), cpu_candidates(info, false, pointwise),
                               cpu_candidates(info, true, pointwise), l.source_hash(kCpuFile), run);
  return {false, c.config, c.origin};
}

// conv2d_gpu with the tile OCLF_GPU_TILE sets, the cache holds or a measurement picks; stride-1
// 3×3 layers measure Winograd against it. 16-bit operands are tuned apart (family gpu_half,
// gpu_bfloat).
inline ConvPlan plan_gpu(Launcher& l, const DeviceInfo& info, const Conv2dGeometry& p, const ConvOperands& o,
                         const std::string& forced) {
  const bool mma = mma_available(l, o);
  GpuTile set;
  std::string block;
  if (tile_setting(&set)) {
    set.mma = mma && (set.mma = true, mma_warps_m(set) != 0);  // OCLF_GPU_TILE's tile on tensor cores if it can
    block = set.text();
  }
  auto run = [&](const std::string& c) { run_conv2d(l, p, o, {false, c, ""}); };
  std::vector<std::string> quick = gpu_candidates(info, p, false), full = gpu_candidates(info, p, true);
  if (mma) {
    // Tensor cores: the MMA builds of the tiles that take it come first, 64×64 with K steps
    // of 32 the default (on the H200 over ResNet-50's layers at batch 16 in float16: the
    // fastest of nine MMA tiles, 64×64 to 128×128 with K steps of 16 to 64, on 4 of 8 layers
    // and within 15 % of the fastest on all but one; 1.6–2.1× the plain kernel's speed); the
    // plain tiles stay candidates.
    for (std::vector<std::string>* list : {&quick, &full}) {
      std::vector<std::string> mma = {GpuTile{64, 64, 4, 4, 32, true}.text()};
      for (const std::string& c : *list) {
        GpuTile t = GpuTile::of(c);
        t.mma = true;
        if (mma_warps_m(t) && std::find(mma.begin(), mma.end(), t.text()) == mma.end()) mma.push_back(t.text());
      }
      list->insert(list->begin(), mma.begin(), mma.end());
    }
  }
  std::string hash = l.source_hash(kGpuFile);
  if (winograd_fits(p)) {
    // Winograd with its products' default tile, measured against the direct kernel.
    const std::string wino = "wino" + default_gpu_tile(info, winograd_gemm(p)).text().substr(3);
    quick.push_back(wino);
    full.push_back(wino);
    hash += l.source_hash(kWinogradFile);
  }
  if (forced == "wino" && winograd_fits(p)) quick = full = {quick.back()};
  const std::string family = o.is_float() ? "gpu" : "gpu_" + o.io;
  const Choice c = conv_config(l, p, family, forced, block, quick, full, hash, run);
  return {false, c.config, c.origin};
}

// conv2d_gpu over swapped layouts (the opencl device's weight gradients, NC_SWAPPED) on a
// configuration of swapped_candidates.
inline void run_gpu_swapped(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const std::string& config) {
  GpuLaunch how;
  how.max_splits = 128;
  how.swapped = true;
  how.one_wave = config_value(config, "WAVE", 0) != 0;
  how.splits = config_value(config, "SPLITS", 0);
  conv2d_gpu(l, p, o, GpuTile::of(config), how);
}

// The swapped layouts' configuration: the tile OCLF_GPU_TILE sets, else the one the cache
// holds or a measurement picks among swapped_candidates, keyed by the swapped geometry.
inline Choice plan_gpu_swapped(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o) {
  auto run = [&](const std::string& c) { run_gpu_swapped(l, p, o, c); };
  GpuTile set;
  const std::string block = tile_setting(&set) ? set.text() : "";
  // A whole gpu configuration in OCLF_CONV_KERNEL applies here too ("gpu TM=... SPLITS=4").
  const std::string requested = ConvRequest().forced;
  const std::string forced = config_kind(requested) == "gpu" ? requested : "";
  const std::vector<std::string> candidates = swapped_candidates(l.info(), p);
  return conv_config(l, p, "gpu_swapped", forced, block, candidates, candidates, l.source_hash(kGpuFile), run);
}

inline void conv2d_gpu_swapped(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o) {
  run_gpu_swapped(l, p, o, plan_gpu_swapped(l, p, o).config);
}

// The plan of the reference's own kernels for the layer's shape and device: depthwise.hpp for
// depthwise convs, conv2d_cpu on CPU devices, conv2d_gpu elsewhere; first-use tuning runs the
// candidates on o. Not for OCLF_CONV_KERNEL=tiled (the students' kernel: conv2d() says so).
// 16-bit operands (o.io) run conv2d_gpu or Winograd, whatever the device: the caller keeps
// depthwise layers and CPU devices' layers in float32.
inline ConvPlan plan_conv2d(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const ConvRequest& r = {}) {
  const std::string& forced = r.forced;
  DeviceInfo info = l.info();
  if (r.gpu_paths) info.type = "GPU";
  const std::string kind = config_kind(forced);
  if (!o.is_float()) return plan_gpu(l, info, p, o, kind == "gpu" || kind == "wino" ? forced : "");
  const bool cpu = info.type == "CPU";
  const bool dw_forced = kind.rfind("depthwise", 0) == 0 || kind.rfind("dw_", 0) == 0;
  if (p.depthwise() && (forced.empty() || dw_forced)) return plan_depthwise(l, info, p, o, forced);
  if (kind == "cpu" || (kind != "gpu" && kind != "wino" && cpu)) return plan_cpu(l, info, p, o, kind == "cpu" ? forced : "");
  const bool gpu_forced = kind == "gpu" || (kind == "wino" && winograd_fits(p));
  return plan_gpu(l, info, p, o, gpu_forced ? forced : "");
}

// The layer planned and run. Returns false when OCLF_CONV_KERNEL=tiled asks for the students'
// kernel instead.
inline bool conv2d(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const ConvRequest& r = {}) {
  if (r.forced == "tiled") return false;
  run_conv2d(l, p, o, plan_conv2d(l, p, o, r));
  return true;
}

}  // namespace oclf::reference
