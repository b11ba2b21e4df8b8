// reference/matmul_plan.hpp: which of the reference's products runs, on which configuration,
// for the library (library.hpp) and the opencl device (device/csrc/aten/blas.cpp) alike
// (staff-only); matmul.hpp launches them.
//
// Per shape, tuning.hpp picks among candidates derived from the device's description; the
// defaults, from measurements on PoCL (AVX-512) and the kernels' design on GPUs:
//   CPUs: rows (cols for a K×N B that is not a kept weight) with VW = the preferred float
//         vector width, MR = min(M, 8) rows of A per block, RN = 4 rows of B per work-item
//         (2 when MR > 4), for every M: at M = 128–2048 it ran 50–77 GFLOP/s against
//         CLBlast's 7–11 without a parameter file and 30–66 with PoCL's tuned one (CLBlast is
//         measured too when M > 16);
//   GPUs: M ≤ 8: rows (32–128 work-items share a row of B, float4; a kept K×N B over its
//         transposed copy) or cols (float4 columns, 4 work-items split K, K split over
//         work-groups until the device is filled twice); M > 8: conv where the operands are
//         plain row-major, else CLBlast.
// OCLF_MATMUL=clblast|rows|cols|conv forces a kernel where it applies, and a whole
// configuration ("rows VW=8 MR=3 RN=2 LX=1 LY=1") forces exactly that (tests use it).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "../launch/launcher.hpp"
#include "conv2d_gpu.hpp"
#include "matmul.hpp"
#include "tuning.hpp"

namespace oclf::reference {

// GEMM tiles for products of many rows on GPUs (the first is the default, then the layer
// default of a 1×1 conv, "conv"): on the H100, GPT-2's products of 64 tokens ran 15-25 %
// faster than on the conv default with smaller tiles and K split until the device is filled
// 4-8 times: 32×64 tiles with K steps of 32 for wide products of a short K (c_attn, c_fc),
// 32×32 for narrow ones or a long K (attention and MLP projections), 64×128 for the LM head
// (50257 columns).
inline std::vector<std::string> conv_configs(const DeviceInfo& info, int n, int k, bool full) {
  std::vector<std::string> out;
  auto add = [&](const GpuTile& t, int target) {
    if (valid_tile(t) && fits_device(t, info)) out.push_back("conv TM=" + std::to_string(t.tm) + " TN=" +
                                                             std::to_string(t.tn) + " WM=" + std::to_string(t.wm) +
                                                             " WN=" + std::to_string(t.wn) + " TK=" +
                                                             std::to_string(t.tk) + " ST=" + std::to_string(target));
  };
  // The same sweep (64 tokens): 64×128 tiles with split K aiming at 2 work-groups per
  // compute unit for wide products of a short K (c_attn 25.1 → 20.1 µs), 32×64 with K steps
  // of 32 for narrow ones of a long K (mlp.c_proj 23.6 → 21.7).
  if (n >= 16384) add({64, 128, 4, 8, 16}, 4);
  if (n > 1024 && k < 2048) add({64, 128, 4, 8, 16}, 2), add({32, 64, 4, 4, 32}, 4);
  if (n <= 1024 && k >= 2048) add({32, 64, 4, 4, 32}, 4);
  add({32, 32, 4, 4, 16}, 8);
  out.push_back("conv");
  add({32, 64, 4, 4, 32}, 4);
  if (full) {
    add({32, 64, 4, 4, 32}, 2);
    add({32, 32, 4, 4, 16}, 4);
    add({64, 64, 4, 4, 16}, 4);
    add({64, 128, 4, 8, 16}, 2);
  }
  std::vector<std::string> unique;
  for (const std::string& c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  return unique;
}


// M's bucket in tuning keys: exact up to 8, then the next power of two.
inline int m_bucket(int m) {
  if (m <= 8) return m;
  int b = 16;
  while (b < m) b *= 2;
  return b;
}

// Candidate configurations of gemm_rows / gemm_cols for M rows on this device; the first
// is the default. `full`: the sweep's longer list.
inline std::vector<std::string> rows_configs(const DeviceInfo& info, int m, int n, int k, bool full) {
  std::vector<std::string> out;
  auto add = [&](int vw, int mr, int rn, int lx, int ly, bool kf = false) {
    out.push_back("rows VW=" + std::to_string(vw) + " MR=" + std::to_string(mr) + " RN=" + std::to_string(rn) +
                  " LX=" + std::to_string(lx) + " LY=" + std::to_string(ly) + (kf ? " KF=1" : ""));
  };
  if (info.type == "CPU") {
    const int vw = cpu_vector_width(info);
    const int mr = std::min(m, 8);
    if (mr <= 4) {
      for (int rn : {4, 2, 8}) add(vw, mr, rn, 1, 1);
    } else {
      for (int rn : {2, 1, 4}) add(vw, mr, rn, 1, 1);
    }
    if (m > 8) add(vw, 4, 4, 1, 1);
    if (full) {
      for (int rn : {1, 2, 4}) add(vw / 2 >= 4 ? vw / 2 : vw, mr, rn, 1, 1);
      if (m > 8) add(vw, 2, 4, 1, 1);
    }
  } else {
    // GPUs: float4 loads, LX work-items sharing a row of B (gpu_rows_lx), LY row groups per
    // work-group, two rows of B per work-item once A has several rows. K fixed at build time
    // (KF=1, the loop over K unrolled) was 5-35 % faster still (eight rows of 768×768: 13.4 →
    // 8.8 µs), and the best work-group sizes were 64-128: the default (gpu_rows_default)
    // first, then the probe's other winners, and the runtime-K kernel last.
    const int mr = std::min(m, 8);
    const int rn = m > 1 ? 2 : 1, group = m > 1 ? 128 : 256;
    const int lx = gpu_rows_lx(m, k);
    auto add_fitting = [&](int vw, int mr_, int rn_, int lx_, int ly_, bool kf = false) {
      if (lx_ < 16 || size_t(lx_) * ly_ > info.max_work_group_size) return;
      // Unrolled K only where the loop is short (at most 64 vectors per work-item).
      if (kf && k / (4 * lx_) > 64) return;
      add(vw, mr_, rn_, lx_, ly_, kf);
    };
    const RowsBlock first = gpu_rows_default(m, n, k);
    add_fitting(4, mr, first.rn, first.lx, first.ly, true);  // skipped where K is too long to unroll
    add_fitting(4, mr, rn, lx, std::max(1, 64 / lx), true);
    add_fitting(4, mr, rn, lx, std::max(1, 128 / lx), true);
    add_fitting(4, mr, 3 - rn, lx, std::max(1, 128 / lx), true);
    add_fitting(4, mr, rn, 2 * lx, std::max(1, 64 / (2 * lx)), true);
    add_fitting(4, mr, 1, 2 * lx, 2, true);
    add_fitting(4, mr, rn, lx / 2, 4, true);
    add_fitting(4, mr, rn, lx, std::max(1, group / lx));
    if (full) {
      add_fitting(4, mr, 3 - rn, lx, std::max(1, group / lx));
      for (int other : {32, 64, 128})
        if (other != lx) add_fitting(4, mr, rn, other, std::max(1, group / other));
      add_fitting(4, mr, 4, lx, std::max(1, 64 / lx), true);
      add_fitting(4, mr, 2, lx, std::max(1, 512 / lx), true);
      add_fitting(4, mr, 1, 64, 4);
      add_fitting(4, mr, 1, 256, 1);
      add_fitting(4, mr, 2, 64, 2);
    }
  }
  std::vector<std::string> unique;
  for (const std::string& c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  out = unique;
  return out;
}

inline std::vector<std::string> cols_configs(const DeviceInfo& info, int m, bool full) {
  std::vector<std::string> out;
  auto add = [&](int vw, int mr, int cpw, int lx, int ly) {
    out.push_back("cols VW=" + std::to_string(vw) + " MR=" + std::to_string(mr) + " CPW=" + std::to_string(cpw) +
                  " LX=" + std::to_string(lx) + " LY=" + std::to_string(ly));
  };
  const int mr = std::min(m, 8);
  if (info.type == "CPU") {
    const int vw = cpu_vector_width(info);
    for (int cpw : {2, 1, 4}) add(vw, mr, cpw, 1, 1);
    if (full && mr > 4) add(vw, 4, 2, 1, 1);
  } else {
    // Two float4 columns per work-item measured fastest for products of several rows over
    // many columns (GPT-2's LM head at 8 tokens: 83 µs against 139 with one, H100).
    if (m > 1 && 128 <= info.max_work_group_size) add(4, mr, 2, 32, 4);
    for (int ly : {4, 8})
      if (size_t(ly) * 64 <= info.max_work_group_size) add(4, mr, 1, 64, ly);
    if (full && m == 1) add(4, mr, 2, 32, 4);
  }
  return out;
}

// Which kernels can compute a product: rows needs A's rows contiguous and B stored N×K or
// resident (transposed once); cols needs B stored K×N; conv needs A row-major with ld K, M ≥ 2,
// and B stored K×N with ld N or resident (transposed once).
struct Paths {
  bool rows = false, cols = false, conv = false;
};

// The candidates for one product: `quick` for first-use tuning (the device's default first),
// `full` for a sweep. A forced kind (OCLF_MATMUL=rows, ...) keeps that kind's candidates,
// a forced configuration is the only candidate; both where the product allows them, on any
// device (so PoCL can run the GPU configurations in tests).
inline void candidates(const DeviceInfo& info, int m, int n, int k, const Paths& can, const std::string& forced,
                       std::vector<std::string>& quick, std::vector<std::string>& full) {
  const bool cpu = info.type == "CPU";
  auto append = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  if (forced.find(' ') != std::string::npos) {
    const std::string kind = config_kind(forced);
    if ((kind == "rows" && can.rows) || (kind == "cols" && can.cols) || (kind == "conv" && can.conv))
      quick = full = {forced};
    return;
  }
  if (!forced.empty()) {
    if (forced == "rows" && can.rows) quick = rows_configs(info, m, n, k, false), full = rows_configs(info, m, n, k, true);
    if (forced == "cols" && can.cols) quick = cols_configs(info, m, false), full = cols_configs(info, m, true);
    if (forced == "conv" && can.conv) quick = conv_configs(info, n, k, false), full = conv_configs(info, n, k, true);
    return;
  }
  // The device's own choices: rows for N×K weights and resident K×N ones (over a transposed
  // copy kept with the weight: on the H100 one launch of gemm_rows beat gemm_cols's split K
  // and its sum for every GPT-2 product of 1 token, 13.3 → 7.5 µs for c_attn), cols for
  // other K×N, conv on GPUs; on GPUs a blocked GEMM (conv, else CLBlast) first for M > 8.
  const bool rows = can.rows && (cpu || !can.cols || m <= 8);
  const bool conv = can.conv && !cpu;
  const bool gemm_first = !cpu && m > 8;
  if (gemm_first) {
    if (conv) append(quick, conv_configs(info, n, k, false));
    else quick.push_back("clblast");
  }
  // GPUs, a few rows over many columns of a K×N operand: cols first (GPT-2's LM head as a
  // K×N product of 8 tokens on the H100, two float4 columns per work-item: 81 µs, where rows
  // over the transposed copy took 147, a sweep's pick).
  const bool cols_first = !cpu && can.cols && m > 1 && m <= 8 && n >= 16384;
  if (cols_first) append(quick, cols_configs(info, m, false));
  if (rows) append(quick, rows_configs(info, m, n, k, false));
  // A sweep on a GPU also tries rows over a transposed copy of a resident K×N weight.
  if (can.rows) append(full, rows_configs(info, m, n, k, true));
  // On CPUs cols runs only where rows cannot: streaming K×N columns from memory measured half
  // the bandwidth of rows over the transposed copy (lm_head, 154 MB: 7-8 against 13-26 GB/s),
  // which repeated trial runs on cache-resident weights do not show.
  if (can.cols) {
    if (!(cpu && rows) && !cols_first) append(quick, cols_configs(info, m, false));
    append(full, cols_configs(info, m, true));
  }
  if (conv) {
    if (!gemm_first) quick.push_back("conv");
    append(full, conv_configs(info, n, k, true));
  }
  // CLBlast is measured too, except for skinny products on CPUs (its GEMV and small GEMMs
  // measured 10-50x slower there, and building its kernels takes seconds).
  if ((!cpu || m > 16) && (quick.empty() || quick.front() != "clblast")) quick.push_back("clblast");
  full.push_back("clblast");
}


// One product's shape and what its operands allow, as the tuning key names them.
struct Product {
  int m, n, k;
  bool b_rows;     // B stored N×K
  bool kept;       // B is a weight whose derived buffers are kept (a resident parameter)
  bool a_strided;  // A's rows are not contiguous
  Paths can;
};

// The tuning key of a product.
inline std::string product_key(const Product& p) {
  return "matmul.v1 B=" + std::string(p.b_rows ? "NxK" : "KxN") + (p.kept ? " resident" : "") +
         (p.a_strided ? " A=strided" : "") + " M=" + std::to_string(m_bucket(p.m)) + " K=" + std::to_string(p.k) +
         " N=" + std::to_string(p.n);
}

// The configuration for a product among `quick` and `full` (candidates()): the cached one,
// a measurement's (run(config) runs it) or the default; "clblast" leaves it to CLBlast.
// Notes it for the benchmark.
inline std::string choose_product(Launcher& l, const Product& p, const std::vector<std::string>& quick,
                                  const std::vector<std::string>& full, const std::string& forced,
                                  const std::function<void(const std::string&)>& run) {
  std::string hash = l.source_hash(kMatmulFile);
  const bool conv_candidate =
      std::any_of(full.begin(), full.end(), [](const std::string& c) { return config_kind(c) == "conv"; });
  if (conv_candidate) hash += l.source_hash(kGpuFile);
  const bool worth = double(p.m) * p.n * p.k >= double(1 << 18);
  const Choice choice = choose(l, product_key(p), hash, quick, full, run, worth);
  l.tuning().note(choice.config, forced.empty() ? choice.origin : "setting");
  return choice.config;
}

}  // namespace oclf::reference
