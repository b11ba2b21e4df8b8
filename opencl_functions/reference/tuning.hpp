// reference/tuning.hpp: how the reference's kernels pick a configuration per shape (staff-only),
// for the library (compiled into the host code's object through opencl-functions.cpp's staff
// region) and the opencl device alike: configuration texts, choose(), and the blocks and
// tiles that the CPU and GPU kernels share.
//
// A configuration is a short text ("rows VW=16 MR=1 RN=4", "cpu COV=16 PX=8"). choose()
// takes the candidates for one shape, the device-derived default first, and returns, in
// this order of precedence:
//   the cached choice for the shape (runtime/tuning.hpp; keyed by device, driver and the
//   kernel source's hash), when it is still one of the candidates: origin "cache: first
//   use" or "cache: sweep";
//   the fastest candidate by measurement, when the runtime allows measuring now (OCLF_TUNE,
//   its budget) and the shape is worth it: origin "tuned now", and the winner is cached; a
//   budget that runs out midway leaves the rest of the shape's candidates unmeasured;
//   the default: origin "defaults".
// Candidates that fail (a build error, too much local memory) are skipped.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../launch/launcher.hpp"

namespace oclf::reference {

struct Choice {
  std::string config, origin;
};

// One shape's decision. `quick` are the candidates of first-use tuning (default first),
// `sweep` those of a sweep (make tune); run(config) enqueues the operation with that
// configuration on `l`. `worth_measuring`: false for shapes too small to repay a measurement.
inline Choice choose(Launcher& l, const std::string& key, const std::string& source_hash,
                     const std::vector<std::string>& quick, const std::vector<std::string>& sweep,
                     const std::function<void(const std::string&)>& run, bool worth_measuring, int reps = 3) {
  Tuning& tuning = l.tuning();
  const bool sweeping = Tuning::mode() == Tuning::Mode::sweep;
  const std::vector<std::string>& candidates = sweeping ? sweep : quick;
  if (const Tuning::Entry* cached = tuning.find(key, source_hash)) {
    for (const std::string& c : sweep)
      if (c == cached->choice) return {c, "cache: " + cached->origin};
    for (const std::string& c : quick)
      if (c == cached->choice) return {c, "cache: " + cached->origin};
  }
  if (candidates.size() < 2 || !(worth_measuring || sweeping) || !tuning.may_measure()) return {quick[0], "defaults"};
  // A sweep has time for more runs per candidate: their fastest is steadier on a busy machine.
  const int runs = sweeping ? 3 * reps : reps;
  double best_ns = std::numeric_limits<double>::infinity();
  std::string best = quick[0];
  for (const std::string& c : candidates) {
    // Once the budget is spent the candidates not yet measured are left out (the default, first,
    // always runs): where each candidate is a program build (a second on PoCL) a shape's list
    // alone took three times the budget.
    if (c != candidates.front() && !tuning.may_measure()) break;
    try {
      const double ns = tuning.measure([&] {
        run(c);
        l.trial_done();
      }, runs);
      if (ns < best_ns) best_ns = ns, best = c;
    } catch (const Error&) {
      continue;  // this candidate does not build or launch on this device
    }
  }
  tuning.remember(key, source_hash, best);
  return {best, "tuned now"};
}

// The vector width of the CPU kernels: the device's preferred float width (AVX-512 reports
// 16, AVX2 8, SSE 4; never less than 4).
inline int cpu_vector_width(const DeviceInfo& info) {
  const unsigned w = std::max(info.preferred_vector_width_float, info.native_vector_width_float);
  return w >= 16 ? 16 : w >= 8 ? 8 : 4;
}

// The tuning key of a convolution: the kernel family and every size that changes the best
// configuration (h and w of the padded input); the library and the opencl device share it.
inline std::string conv_key(const std::string& family, int batch, int c_in, int h, int w, int c_out, int k_h,
                            int k_w, int stride_h, int stride_w, int dilation_h, int dilation_w, int groups) {
  char key[256];
  std::snprintf(key, sizeof(key), "conv.v1 %s B=%d Cin=%d H=%d W=%d Cout=%d K=%dx%d S=%dx%d D=%dx%d G=%d",
                family.c_str(), batch, c_in, h, w, c_out, k_h, k_w, stride_h, stride_w, dilation_h, dilation_w,
                groups);
  return key;
}

// conv2d_cpu's configuration text; kc > 0 adds the channel chunks (conv2d_cpu.cl's KC, NS).
inline std::string cpu_config(int cov, int px, int kc = 0, int ns = 1) {
  return "cpu COV=" + std::to_string(cov) + " PX=" + std::to_string(px) +
         (kc > 0 ? " KC=" + std::to_string(kc) + " NS=" + std::to_string(ns) : "");
}

// Block candidates of conv2d_cpu (the default first). COV twice the device's vector width where
// OpenCL C has such a vector (AVX2's 8 → 16: two registers a tap, so a tap's PX broadcast loads
// feed 2·PX multiply-adds instead of PX), PX = 4 for 1×1 kernels (their taps stream the
// weights) and 6 for larger ones; then the other PX and COV = the width itself. Measured on a
// 2-core Zen 3 (AVX2), ResNet-50's layers at batch 1 against the earlier default COV=8 PX=8:
// 1×1 layers 1.04–1.75× faster at COV=16 PX=4, 3×3 ones 1.25–1.34× at COV=16 PX=6 (one at
// PX=3), conv1 (7×7) 1.36× at PX=4.
inline std::vector<std::string> cpu_candidates(const DeviceInfo& info, bool full, bool pointwise) {
  const int vw = cpu_vector_width(info), vw2 = std::min(2 * vw, 16);
  std::vector<std::string> out;
  if (vw2 > vw) {
    const int order[3] = {pointwise ? 4 : 6, pointwise ? 6 : 3, pointwise ? 3 : 4};
    for (int px : order) out.push_back(cpu_config(vw2, px));
    out.push_back(cpu_config(vw, 8));
    if (full)
      for (int px : {4, 12}) out.push_back(cpu_config(vw, px));
  } else {
    out = {cpu_config(vw, 8), cpu_config(vw, 4), cpu_config(vw, 12)};
  }
  if (full) {
    for (int px : {6, 16}) out.push_back(cpu_config(vw, px));
    if (vw > 4) out.push_back(cpu_config(vw / 2, 8)), out.push_back(cpu_config(vw / 2, 16));
    // Input channels in chunks of 64 (conv2d_cpu.cl's KC): on the Zen 3 within noise of the
    // plain blocks on most layers (ahead on some 3×3 ones), so only the sweep measures them.
    out.push_back(cpu_config(vw2, 6, 64, 6));
    out.push_back(cpu_config(vw2, 4, 64, 8));
  }
  return out;
}

// Work-groups of a CPU launch, (d, 1, 1) along a dimension of `units` work-items (`others`
// groups' worth along the rest): the divisor d of `units` that gives the busiest core the
// fewest work-items (ties: the larger d) among those that leave at least `per_cu` work-groups
// per compute unit. Neighbouring work-items then run back to back on one core and the cores
// get equal shares. Left to choose, PoCL takes the largest group that divides the range and
// splits it only down to one group per core, and not at all when the grain does not divide:
// conv2d_cpu's 128-channel 28×28 layers of ResNet-50 (channel blocks the units; per_cu 8,
// so that groups of unequal cost balance too) ran at half the speed of their neighbours on
// 2 cores, and on a 16-core Xeon gemm_rows over 768 rows of B (192 work-items; per_cu 1)
// ran on 2–3 of them: GPT-2's products 0.31× torch, 0.58× with these groups. `kernel` and
// `device` bound the group by the kernel's own limit (CL_KERNEL_WORK_GROUP_SIZE).
inline size_t cpu_work_group(const DeviceInfo& info, size_t units, size_t others, size_t per_cu, cl_kernel kernel,
                             cl_device_id device) {
  const size_t cus = std::max(info.compute_units, 1u);
  size_t largest = std::max<size_t>(info.max_work_group_size, 1);
  size_t kernel_limit = 0;
  if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kernel_limit), &kernel_limit,
                               nullptr) == CL_SUCCESS && kernel_limit > 0)
    largest = std::min(largest, kernel_limit);
  size_t best = 1, best_load = std::numeric_limits<size_t>::max();
  for (size_t d = 1; d <= std::min(units, largest); ++d) {
    if (units % d != 0) continue;
    const size_t groups = units / d * std::max<size_t>(others, 1);
    if (d > 1 && groups < per_cu * cus) continue;
    const size_t load = (groups + cus - 1) / cus * d;  // work-items of the busiest core
    if (load <= best_load) best = d, best_load = load;
  }
  return best;
}

// gemm_rows on GPUs (matmul.cl): LX work-items share a row of B, about 6–12 float4s each
// (the H100 probe over GPT-2's products: LX = 32 for K = 768, and 128 for one row of A or 64
// for several with K = 3072).
inline int gpu_rows_lx(int m, int k) {
  int lx = 32;
  while (lx < (m > 1 ? 64 : 128) && k / (4 * 2 * lx) >= 6) lx *= 2;
  return lx;
}

// gemm_rows's default block on GPUs for M rows of A (up to 8) and B stored N×K: RN rows of B
// per work-item, LX work-items per row, LY row groups per work-group, K compiled in where a
// work-item's loop is at most 64 float4s. From 64-work-item groups, a sweep on the H100
// timed by kernel events (GPT-2, K = 768) preferred for a short K twice the work-items per
// row for few rows of B (N ≤ 1024: 11.7 → 9.1 µs for 8 tokens), 16 work-items per row in
// groups of 4 rows for many rows and several of A (15.8 → 12.0), two rows of B per
// work-item for one row of A (9.2 → 8.1–8.6): the first GPU candidate of matmul_plan.hpp.
struct RowsBlock {
  int rn, lx, ly;
  bool fixed_k;
};
inline RowsBlock gpu_rows_default(int m, int n, int k) {
  int rn = m > 1 ? 2 : 1, lx = gpu_rows_lx(m, k);
  int ly = std::max(1, 64 / lx);
  if (lx <= 32 && n <= 1024) {
    rn = 1, lx *= 2, ly = 2;
  } else if (lx <= 32 && m > 1) {
    lx /= 2, ly = 4;
  } else if (lx <= 32) {
    rn = 2;
  }
  return {rn, lx, ly, k / (4 * lx) <= 64};
}

// "NAME=value" from a configuration text ("rows VW=16 RN=4"), or `otherwise`.
inline int config_value(const std::string& config, const std::string& name, int otherwise) {
  const std::string needle = " " + name + "=";
  const size_t at = (" " + config).find(needle);
  if (at == std::string::npos) return otherwise;
  return std::atoi(config.c_str() + at + needle.size() - 1);
}

// The first word of a configuration text: which kernel ("rows", "cols", "clblast", ...).
inline std::string config_kind(const std::string& config) { return config.substr(0, config.find(' ')); }

// conv2d_gpu's tile (conv2d_gpu.cl): TM×TN outputs per work-group, WM×WN per work-item, K in
// steps of TK (conv2d_gpu.hpp; the GEMMs of matmul.hpp and winograd.hpp).
// `mma`: the products on tensor cores (16-bit operands on NVIDIA; conv2d_gpu.cl's MMA build).
struct GpuTile {
  int tm = 64, tn = 64, wm = 4, wn = 4, tk = 16;
  bool mma = false;
  std::string text() const {
    return "gpu TM=" + std::to_string(tm) + " TN=" + std::to_string(tn) + " WM=" + std::to_string(wm) +
           " WN=" + std::to_string(wn) + " TK=" + std::to_string(tk) + (mma ? " MMA=1" : "");
  }
  static GpuTile of(const std::string& config) {
    return GpuTile{config_value(config, "TM", 64), config_value(config, "TN", 64), config_value(config, "WM", 4),
                   config_value(config, "WN", 4), config_value(config, "TK", 16), config_value(config, "MMA", 0) != 0};
  }
};

// The warps along m of an MMA tile (conv2d_gpu.cl's MMA_WM): of the splits of its warps into
// blocks of whole 16×8 pieces, the one that issues the fewest fragment loads per product (one
// ldmatrix a piece row of A, one a pair of B's piece columns); 0 when none fits (or TK is not
// a multiple of 16, or the work-group is not whole warps).
inline int mma_warps_m(const GpuTile& t) {
  const int threads = (t.tm / t.wm) * (t.tn / t.wn);
  if (threads % 32 || t.tk % 16) return 0;
  const int warps = threads / 32;
  int best = 0;
  double best_cost = 0;
  for (int wm = 1; wm <= warps; wm *= 2) {
    if (warps % wm || t.tm % (16 * wm) || t.tn % (8 * (warps / wm))) continue;
    const int pm = t.tm / wm / 16, pn = t.tn / (warps / wm) / 8;
    const double cost = double(pm + (pn + 1) / 2) / (pm * pn);
    if (best == 0 || cost < best_cost) best = wm, best_cost = cost;
  }
  return best;
}

// The v4 kernel needs WM, WN and TK multiples of 4, and its loads must split evenly over
// the work-items: TM·TK/4 and TK·TN/4 multiples of the work-group size, which TN and TK
// divide.
inline bool valid_tile(const GpuTile& t) {
  if (t.tm <= 0 || t.tn <= 0 || t.wm <= 0 || t.wn <= 0 || t.tk <= 0) return false;
  if (t.wm % 4 || t.wn % 4 || t.tm % t.wm || t.tn % t.wn || t.tk % 4) return false;
  const int threads = (t.tm / t.wm) * (t.tn / t.wn);
  return threads <= 1024 && (t.tm * t.tk / 4) % threads == 0 && (t.tk * t.tn / 4) % threads == 0 &&
         threads % (t.tn / 4) == 0 && threads % t.tn == 0 && threads % t.tk == 0;
}

// Whether a tile's work-group and local buffers fit the device (As and Bs, two of each).
inline bool fits_device(const GpuTile& t, const DeviceInfo& info) {
  const size_t threads = size_t(t.tm / t.wm) * (t.tn / t.wn);
  const size_t local_bytes = 2 * size_t(t.tk) * (t.tm + 4 + t.tn + 4) * sizeof(float);  // rows padded by a quad
  return threads <= info.max_work_group_size && local_bytes <= info.local_mem_size;
}

// OCLF_GPU_TILE="TM,TN,WM,WN,TK" into *t; false when it is unset (for measurements).
inline bool tile_setting(GpuTile* t) {
  const std::string env = setting("GPU_TILE");
  if (env.empty()) return false;
  if (std::sscanf(env.c_str(), "%d,%d,%d,%d,%d", &t->tm, &t->tn, &t->wm, &t->wn, &t->tk) != 5 || !valid_tile(*t))
    throw Error(setting_variable("GPU_TILE") + " must be TM,TN,WM,WN,TK with WM, WN multiples of 4 and loads that "
                "split evenly over the work-group, got " + env, CL_INVALID_VALUE);
  return true;
}

// The default tile of a layer: cout_g output channels per group, K = k_dim, `pixels` outputs
// per channel (all images), `pointwise` for a 1×1 stride-1 conv with whole float4s of
// pixels. Sweeps on the H100 (bench.tune): 64×64 tiles with 4×4 outputs per work-item had
// the best geometric mean over ResNet-50's convs among 32×32 to 128×128, with K steps of 32
// (a later sweep timed by kernel events: 4–10 % faster than steps of 16 on 8 of the 15
// layers on 64×64 tiles; `k_steps_32` false keeps 16, as the device's weight gradient does);
// two kinds of layers do better with smaller tiles: 1×1 stride-1 convs whose 32×32 tiles
// fill the device without split-K (1.2–1.6× faster over large images, 1.3× on the
// 256→1024-channel 14×14 one), and weights whose K is not a multiple of 4 (the 7×7 first
// layer, 1.2× faster with 64×32).
inline GpuTile default_tile(const DeviceInfo& info, int cout_g, int k_dim, size_t pixels, int groups,
                            bool pointwise, bool k_steps_32 = true) {
  const size_t tiles32 = (size_t(cout_g) + 31) / 32 * ((pixels + 31) / 32) * size_t(groups);
  GpuTile t{64, 64, 4, 4, k_steps_32 ? 32 : 16};
  if (!fits_device(t, info)) t = GpuTile{64, 64, 4, 4, 16};
  if (pointwise && tiles32 >= info.compute_units) t = GpuTile{32, 32, 4, 4, 16};
  if (k_dim % 4 != 0) t = GpuTile{64, 32, 4, 4, 16};
  // Devices with small work-groups or little local memory start from 32×32 (64 work-items).
  return fits_device(t, info) ? t : GpuTile{32, 32, 4, 4, 16};
}

}  // namespace oclf::reference
