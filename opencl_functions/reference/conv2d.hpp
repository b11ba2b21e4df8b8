// conv2d_fast.hpp: the reference's own conv2d kernels per device and shape (staff-only).
// Included from a staff region of opencl-functions.cpp, so it compiles into the host code's
// object and calls only the course runtime; the handout has neither the include nor this file.
// The kernels are in conv2d.cl (staff regions), depthwise.cl and winograd.cl; the GPU kernel's
// host code is in conv2d_gpu_fast.hpp, Winograd's in winograd_fast.hpp, depthwise convs' in
// depthwise_fast.hpp; matmul_fast.hpp reuses conv2d_gpu as a GEMM.
//
// Kernel choice (OCLF_CONV_KERNEL forces one where it applies: tiled, cpu, gpu, the depthwise
// kinds of depthwise_fast.hpp, or a whole configuration such as "cpu COV=8 PX=12"):
//   depthwise convs (one input and one output channel per group): depthwise_fast.hpp;
//   CPU devices: conv2d_cpu (v2) on weights packed by conv2d_pack_weights, COV output
//     channels (the device's float vector width: 16 with AVX-512, 8 with AVX2) × PX = 8
//     pixels per work-item; OCLF_CPU_BLOCK="COV,PX" overrides;
//   other devices: conv2d_gpu (v4), with split-K when the output alone gives too few
//     work-groups; tiles by layer shape (default_gpu_tile), OCLF_GPU_TILE="TM,TN,WM,WN,TK"
//     overrides; OCLF_GPU_SPLIT_TARGET sets split-K's aim. Stride-1 3×3 convs also try
//     Winograd F(2×2, 3×3) (winograd.cl; "wino", its products through conv2d_gpu) when tuned.
// Each layer shape may be tuned at first use among a few candidates (fast_tuning.hpp).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "conv2d_gpu_fast.hpp"
#include "depthwise_fast.hpp"
#include "fast_tuning.hpp"
#include "opencl-functions.hpp"
#include "runtime/runtime.hpp"
#include "winograd_fast.hpp"

namespace oclf {
namespace fast {

inline std::string forced_kernel() { return setting("CONV_KERNEL"); }

// conv2d_cpu's weights packed into blocks of COV output channels: kept with a resident
// weight (keep), else in `scratch` (made per call, or per candidate while tuning).
inline cl_mem packed_weights(Runtime& rt, const Conv2dArgs& p, cl_mem w, int cov, bool keep, Buffer& scratch) {
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int co_blocks = (cout_g + cov - 1) / cov;
  const size_t bytes = size_t(p.groups) * co_blocks * cov * k_dim * sizeof(float);
  const std::string tag = "cpu-packed COV=" + std::to_string(cov);
  cl_mem packed = keep ? rt.derived(p.weight_dev, tag) : nullptr;
  if (packed) return packed;
  if (keep) {
    packed = rt.keep_derived(p.weight_dev, tag, bytes);
  } else {
    scratch = Buffer(bytes, CL_MEM_READ_WRITE);
    packed = scratch.get();
  }
  cl_kernel pack = rt.kernel("conv2d.cl", "conv2d_pack_weights", "-cl-mad-enable -DCOV=" + std::to_string(cov));
  set_args(pack, w, packed, k_dim, cout_g, co_blocks);
  const size_t pack_global[3] = {size_t(k_dim), size_t(co_blocks) * cov, size_t(p.groups)};
  rt.launch(pack, 3, pack_global, nullptr);
  return packed;
}

// conv2d_cpu: COV output channels × PX consecutive pixels per work-item, on packed weights.
inline void conv2d_cpu(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem packed, cl_mem bias, cl_mem y, int cov,
                       int px) {
  const int cout_g = p.c_out / p.groups;
  const int co_blocks = (cout_g + cov - 1) / cov;
  std::string options = "-cl-mad-enable -DCOV=" + std::to_string(cov) + " -DPX=" + std::to_string(px);
  // Common square kernels get a build of their own, with the tap loops unrolled.
  if (p.k_h == p.k_w && (p.k_h == 1 || p.k_h == 3 || p.k_h == 5 || p.k_h == 7))
    options += " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w);
  cl_kernel kernel = rt.kernel("conv2d.cl", "conv2d_cpu", options);
  const int has_bias = bias != nullptr;
  set_args(kernel, x, packed, bias, y, has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h,
           p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out);
  const size_t global[3] = {size_t(co_blocks), size_t(p.h_out * p.w_out + px - 1) / px, size_t(p.batch) * p.groups};
  const size_t local[3] = {cpu_work_group(rt.info(), global[0], global[1] * global[2], 8, kernel, rt.device()), 1, 1};
  rt.launch(kernel, 3, global, local);
}

// OCLF_CPU_BLOCK="COV,PX" as a configuration, or "" when unset.
inline std::string cpu_block_setting() {
  const std::string env = setting("CPU_BLOCK");
  if (env.empty()) return "";
  int cov = 0, px = 0;
  if (std::sscanf(env.c_str(), "%d,%d", &cov, &px) != 2 || (cov != 4 && cov != 8 && cov != 16) || px < 1)
    throw Error("OCLF_CPU_BLOCK must be COV,PX with COV 4, 8 or 16, got " + env, CL_INVALID_VALUE);
  return cpu_config(cov, px);
}

// The tuning key of a layer (fast_tuning.hpp).
inline std::string conv_key(const std::string& family, const Conv2dArgs& p) {
  return conv_key(family, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h, p.stride_w, p.dilation_h,
                  p.dilation_w, p.groups);
}

// Layers smaller than this many multiply-adds are not worth a measurement.
inline bool conv_worth_tuning(const Conv2dArgs& p) {
  const double macs = double(p.batch) * p.c_out * p.h_out * p.w_out * (p.c_in / p.groups) * p.k_h * p.k_w;
  return macs >= double(1 << 20);
}

// The configuration for a layer: a forced one (OCLF_CONV_KERNEL with a space), a block
// setting (OCLF_CPU_BLOCK, OCLF_GPU_TILE), else choose() among the candidates (a forced kind
// without sizes only picks the family). Notes it for the benchmark.
inline std::string conv_config(Runtime& rt, const Conv2dArgs& p, const std::string& family, const std::string& forced,
                               const std::string& block_setting, const std::vector<std::string>& quick,
                               const std::vector<std::string>& full, const std::string& source_hash,
                               const std::function<void(const std::string&)>& run) {
  Choice choice;
  if (forced.find(' ') != std::string::npos) {
    choice = {forced, "setting"};
  } else if (!block_setting.empty()) {
    choice = {block_setting, "setting"};
  } else {
    choice = choose(rt, conv_key(family, p), source_hash, quick, full, run, conv_worth_tuning(p));
    if (!forced.empty() && choice.origin == "defaults") choice.origin = "setting";
  }
  rt.tuning().note(choice.config, choice.origin);
  return choice.config;
}

// The reference's own kernels for the layer's shape and device: depthwise_fast.hpp for
// depthwise convs, conv2d_cpu on CPU devices, conv2d_gpu elsewhere. Returns false when
// OCLF_CONV_KERNEL=tiled asks for the students' kernel instead.
inline bool conv2d_fast(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem w, cl_mem bias, cl_mem y) {
  const std::string forced = forced_kernel();
  if (forced == "tiled") return false;
  const std::string forced_kind = config_kind(forced);
  const bool depthwise = p.c_in == p.groups && p.c_out == p.groups;
  const bool cpu = rt.info().type == "CPU";
  const bool dw_forced = forced_kind.rfind("depthwise", 0) == 0 || forced_kind.rfind("dw_", 0) == 0;
  if (depthwise && (forced.empty() || dw_forced)) {
    std::vector<std::string> quick = depthwise_candidates(rt.info(), p, false);
    std::vector<std::string> full = depthwise_candidates(rt.info(), p, true);
    if (!forced.empty() && forced.find(' ') == std::string::npos) {
      // A forced kind keeps that kind's candidates (the v2 kinds have no others).
      auto other = [&](const std::string& c) { return config_kind(c) != forced; };
      quick.erase(std::remove_if(quick.begin(), quick.end(), other), quick.end());
      full.erase(std::remove_if(full.begin(), full.end(), other), full.end());
      if (quick.empty()) quick = full = {forced};
    }
    auto run = [&](const std::string& c) { depthwise_run(rt, p, x, w, bias, y, c); };
    const std::string hash = rt.programs().source_hash("depthwise.cl") + rt.programs().source_hash("conv2d.cl");
    depthwise_run(rt, p, x, w, bias, y, conv_config(rt, p, "depthwise", forced, "", quick, full, hash, run));
  } else if (forced_kind == "cpu" || (forced_kind != "gpu" && forced_kind != "wino" && cpu)) {
    // While tuning, each candidate packs into a scratch buffer; the winner's packing is kept.
    std::map<int, Buffer> scratch;
    auto run = [&](const std::string& c) {
      const int cov = config_value(c, "COV", 16);
      cl_mem packed = scratch.count(cov) ? scratch[cov].get() : packed_weights(rt, p, w, cov, false, scratch[cov]);
      conv2d_cpu(rt, p, x, packed, bias, y, cov, config_value(c, "PX", 8));
    };
    const std::string config = conv_config(rt, p, "cpu", forced_kind == "cpu" ? forced : "", cpu_block_setting(),
                                           cpu_candidates(rt.info(), false), cpu_candidates(rt.info(), true),
                                           rt.programs().source_hash("conv2d.cl"), run);
    const int cov = config_value(config, "COV", 16);
    Buffer per_call;
    cl_mem packed = packed_weights(rt, p, w, cov, p.weight_dev != nullptr, per_call);
    conv2d_cpu(rt, p, x, packed, bias, y, cov, config_value(config, "PX", 8));
  } else {
    GpuTile set;
    const std::string block = tile_setting(&set) ? set.text() : "";
    auto run = [&](const std::string& c) {
      if (config_kind(c) == "wino")
        conv2d_winograd(rt, p, x, w, bias, y, GpuTile::of(c));
      else
        conv2d_gpu(rt, p, x, w, bias, y, GpuTile::of(c));
    };
    std::vector<std::string> quick = gpu_candidates(rt, p, false), full = gpu_candidates(rt, p, true);
    std::string hash = rt.programs().source_hash("conv2d.cl");
    if (winograd_fits(p)) {
      // Winograd with its products' default tile, measured against the direct kernel.
      const std::string wino = "wino" + default_gpu_tile(rt, winograd_gemm(p)).text().substr(3);
      quick.push_back(wino);
      full.push_back(wino);
      hash += rt.programs().source_hash("winograd.cl");
    }
    const bool gpu_forced = forced_kind == "gpu" || (forced_kind == "wino" && winograd_fits(p));
    if (forced == "wino" && winograd_fits(p)) quick = full = {quick.back()};
    const std::string config = conv_config(rt, p, "gpu", gpu_forced ? forced : "", block, quick, full, hash, run);
    run(config);
  }
  return true;
}

}  // namespace fast
}  // namespace oclf
