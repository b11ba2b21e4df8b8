// matmul_fast.hpp: matrix products of our own beside CLBlast (staff-only; compiled into the
// host code's object through opencl-functions.cpp's staff region, so it calls only the
// course runtime). The student's matmul keeps CLBlast; this runs first and returns false
// to leave a product to it.
//
// C (M×N) = op(A) · op(B), as MatmulArgs describes. The kernels (matmul_fast.cl):
//   rows     gemm_rows, B stored N×K (a linear layer's weight): vectors along K. A resident
//            K×N B is transposed once into a buffer kept with it, so GPT-2's Conv1D weights
//            take this path too on CPUs (strided columns streamed at half the bandwidth);
//   cols     gemm_cols, B stored K×N: vectors along N;
//   conv     conv2d_gpu (conv2d_gpu_fast.hpp) as a 1×1 convolution: C = A·B is C_out = M
//            channels over N pixels of C_in = K input channels (GPUs, M ≥ 2);
//   clblast  the solution's CLBlast call.
// Per shape, fast_tuning.hpp picks among candidates derived from the device's description;
// the defaults, from measurements on PoCL (AVX-512) and the kernels' design on GPUs:
//   CPUs: rows (cols for a K×N B that is not resident) with VW = the preferred float vector
//         width, MR = min(M, 8) rows of A per block, RN = 4 rows of B per work-item (2 when
//         MR > 4), for every M: at M = 128–2048 it ran 50–77 GFLOP/s against CLBlast's 7–11
//         without a parameter file and 30–66 with PoCL's tuned one (CLBlast is measured too
//         when M > 16);
//   GPUs: M ≤ 8: rows (32–128 work-items share a row of B, float4; a resident K×N B over its
//         transposed copy) or cols (float4 columns, 4 work-items split K, K split over
//         work-groups until the device is filled twice); M > 8: conv where the operands are
//         plain row-major, else CLBlast.
// OCLF_MATMUL=clblast|rows|cols|conv forces a kernel where it applies, and a whole
// configuration ("rows VW=8 MR=3 RN=2 LX=1 LY=1") forces exactly that (tests use it).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <clblast.h>

#include "conv2d_gpu_fast.hpp"
#include "fast_tuning.hpp"
#include "opencl-functions.hpp"
#include "runtime/runtime.hpp"

namespace oclf {
namespace fast {

// A product as the kernels see it.
struct Operands {
  int m, n, k;
  cl_mem a;
  int sam, sak;  // A (m, k) at a[m·sam + k·sak]
  cl_mem b;
  int ldb;
  bool b_rows;  // B stored N×K (element (k, n) at b[n·ldb + k]), else K×N (b[k·ldb + n])
  cl_mem c;     // C (m × n), row-major
};

inline std::string options_of(const std::string& config) {
  std::string out = "-cl-mad-enable";
  for (const char* name : {"VW", "MR", "RN", "CPW", "LX", "LY"}) {
    const int v = config_value(config, name, 0);
    if (v > 0) out += std::string(" -D") + name + "=" + std::to_string(v);
  }
  return out;
}

inline void launch_rows(Runtime& rt, const std::string& config, const Operands& o) {
  const int rn = config_value(config, "RN", 4), lx = config_value(config, "LX", 1), ly = config_value(config, "LY", 1);
  std::string options = options_of(config);
  if (config_value(config, "KF", 0)) options += " -DKFIX=" + std::to_string(o.k);
  cl_kernel kernel = rt.kernel("matmul_fast.cl", "gemm_rows", options);
  set_args(kernel, o.m, o.n, o.k, o.a, o.sam, o.b, o.ldb, o.c, o.b, 0, 0);
  const size_t row_groups = (size_t(o.n) + rn - 1) / rn;
  const size_t global[2] = {size_t(lx), round_up(row_groups, ly)};
  size_t local[2] = {size_t(lx), size_t(ly)};
  // CPUs (one work-item per group of rows): enough work-groups for every core.
  if (lx * ly == 1) local[1] = cpu_work_group(rt.info(), row_groups, 1, 1, kernel, rt.device());
  rt.launch(kernel, 2, global, local);
}

// gemm_cols, with K split over KS work-groups when the columns alone would not fill the
// device twice (GPUs; at least 8 values of K per work-item; the partial products are added
// by gemm_sum_splits).
inline void launch_cols(Runtime& rt, const std::string& config, const Operands& o) {
  const int vw = config_value(config, "VW", 4), cpw = config_value(config, "CPW", 1);
  const int lx = config_value(config, "LX", 1), ly = config_value(config, "LY", 1);
  const size_t col_groups = (size_t(o.n) + size_t(vw) * cpw * lx - 1) / (size_t(vw) * cpw * lx);
  int splits = 1;
  if (lx * ly > 1) {
    const size_t wanted = 2 * size_t(rt.info().compute_units);
    splits = int(std::min<size_t>((wanted + col_groups - 1) / col_groups, std::max(1, o.k / (8 * ly))));
    splits = std::max(1, std::min(splits, 64));
  }
  const int k_chunk = (o.k + splits - 1) / splits;
  splits = (o.k + k_chunk - 1) / k_chunk;
  Buffer parts;
  if (splits > 1) parts = Buffer(size_t(splits) * o.m * o.n * sizeof(float), CL_MEM_READ_WRITE);
  const std::string options = options_of(config);
  cl_kernel kernel = rt.kernel("matmul_fast.cl", "gemm_cols", options);
  set_args(kernel, o.m, o.n, o.k, o.a, o.sam, o.sak, o.b, o.ldb, splits > 1 ? parts.get() : o.c, k_chunk);
  const size_t global[3] = {col_groups * lx, size_t(ly), size_t(splits)};
  size_t local[3] = {size_t(lx), size_t(ly), 1};
  // CPUs (one work-item per vector of columns): enough work-groups for every core.
  if (lx * ly == 1) local[0] = cpu_work_group(rt.info(), col_groups, size_t(splits), 1, kernel, rt.device());
  rt.launch(kernel, 3, global, local);
  if (splits > 1) {
    cl_kernel sum = rt.kernel("matmul_fast.cl", "gemm_sum_splits", options);
    const int total = o.m * o.n;
    set_args(sum, parts.get(), o.c, splits, total, o.n, parts.get(), 0, 0, 0.0f);
    const size_t sum_global[1] = {size_t(total)};
    rt.launch(sum, 1, sum_global, nullptr);
  }
}

// C = A · B as conv2d_gpu's 1×1 convolution: x = B (K×N, ld N), w = A (M×K, ld K), y = C.
// config "conv" takes the layer's default tile (or OCLF_GPU_TILE's), "conv TM=.. TN=.. WM=..
// WN=.. TK=.. ST=.." that tile with split-K aiming at ST work-groups per compute unit.
inline void launch_conv(Runtime& rt, const Operands& o, const std::string& config) {
  Conv2dArgs q{};
  q.batch = 1, q.c_in = o.k, q.h = 1, q.w = o.n, q.c_out = o.m, q.k_h = 1, q.k_w = 1;
  q.stride_h = q.stride_w = q.dilation_h = q.dilation_w = q.groups = 1;
  q.h_out = 1, q.w_out = o.n;
  if (config.find("TM=") == std::string::npos) {
    conv2d_gpu(rt, q, o.b, o.a, nullptr, o.c);
  } else {
    conv2d_gpu(rt, q, o.b, o.a, nullptr, o.c, GpuTile::of(config), config_value(config, "ST", 0));
  }
}

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

// The resident B (stored rows × cols, leading dimension ld) transposed into a cols × rows
// buffer kept with it (made on first use).
inline cl_mem transposed(Runtime& rt, cl_mem resident, int rows, int cols, int ld) {
  const std::string tag = "matmul-transposed " + std::to_string(rows) + "x" + std::to_string(cols) + " ld " +
                          std::to_string(ld);
  if (cl_mem kept = rt.derived(resident, tag)) return kept;
  cl_mem t = rt.keep_derived(resident, tag, size_t(rows) * cols * sizeof(float));
  cl_kernel kernel = rt.kernel("matmul_fast.cl", "transpose", "");
  set_args(kernel, resident, t, rows, cols, ld);
  const size_t global[2] = {round_up(cols, 16), round_up(rows, 16)};
  const size_t local[2] = {16, 16};
  rt.launch(kernel, 2, global, local);
  return t;
}

// The solution's CLBlast call (c must start at zero for its GEMV), for measuring it.
inline void run_clblast(Runtime& rt, const MatmulArgs& p, cl_mem a, cl_mem b, Buffer& c) {
  using clblast::Layout;
  using clblast::Transpose;
  cl_event event = nullptr;
  const cl_event start = rt.marker();  // CLBlast returns its last kernel's event only
  if (p.m == 1) {
    const size_t rows = p.b_trans ? p.n : p.k, cols = p.b_trans ? p.k : p.n;
    c.zero();
    CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, p.b_trans ? Transpose::kNo : Transpose::kYes, rows, cols, 1.0f,
                                b, 0, p.ldb, a, 0, p.a_trans ? p.lda : 1, 0.0f, c.get(), 0, 1, rt.queue_ptr(),
                                &event));
  } else {
    CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, p.a_trans ? Transpose::kYes : Transpose::kNo,
                                p.b_trans ? Transpose::kYes : Transpose::kNo, p.m, p.n, p.k, 1.0f, a, 0, p.lda, b, 0,
                                p.ldb, 0.0f, c.get(), 0, p.n, rt.queue_ptr(), &event));
  }
  rt.record(event, start);
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

inline bool matmul_fast(Runtime& rt, const MatmulArgs& p) {
  const std::string forced = setting("MATMUL");
  if (forced == "clblast") return false;
  const size_t int_limit = size_t(1) << 31;
  if (p.a_len >= int_limit || p.b_len >= int_limit || p.m * p.n >= int_limit || p.k >= int_limit) return false;
  const DeviceInfo& info = rt.info();
  const int m = int(p.m), n = int(p.n), k = int(p.k);

  // A one-row A stored as a column (K values lda apart) is gathered into a contiguous row.
  std::vector<float> a_row;
  const float* a_host = p.a;
  size_t a_len = p.a_len;
  int sam = p.a_trans ? 1 : int(p.lda), sak = p.a_trans ? int(p.lda) : 1;
  if (m == 1 && sak != 1) {
    a_row.resize(p.k);
    for (size_t i = 0; i < p.k; ++i) a_row[i] = p.a[i * p.lda];
    a_host = a_row.data(), a_len = p.k, sam = k, sak = 1;
  }
  const bool a_plain = sak == 1 && sam == k;  // row-major, ld K
  const bool resident = p.b_dev != nullptr;
  const bool b_rows = p.b_trans;

  // Which kernels can compute this product (on any device; the candidates follow the device).
  Paths can;
  can.rows = sak == 1 && (b_rows || resident);
  can.cols = !b_rows;
  can.conv = m >= 2 && a_plain && (b_rows ? resident : int(p.ldb) == n);
  std::vector<std::string> quick, full;
  candidates(info, m, n, k, can, forced, quick, full);
  if (quick.empty()) return false;

  // The gathered row is copied into a device buffer now: the product runs after this
  // function returns (read_async below), when a_row is gone.
  Buffer a;
  if (a_host == p.a) {
    a = Buffer::input(p.a, a_len * sizeof(float));
  } else {
    a = Buffer(a_len * sizeof(float), CL_MEM_READ_ONLY);
    a.write(a_host, a_len * sizeof(float));
  }
  Buffer a_given;  // CLBlast reads A as given (strided or not)
  if (a_host != p.a) a_given = Buffer::input(p.a, p.a_len * sizeof(float));
  Buffer c = Buffer::output(p.c, p.m * p.n * sizeof(float), CL_MEM_READ_WRITE);
  Buffer b_here;
  cl_mem b = p.b_dev;
  if (!b) {
    b_here = Buffer::input(p.b, p.b_len * sizeof(float));
    b = b_here.get();
  }
  const Operands given{m, n, k, a.get(), sam, sak, b, int(p.ldb), b_rows, c.get()};
  auto run = [&](const std::string& config) {
    const std::string kind = config_kind(config);
    Operands o = given;
    if (kind == "clblast") {
      run_clblast(rt, p, a_given.get() ? a_given.get() : a.get(), b, c);
    } else if (kind == "rows") {
      if (!b_rows) o.b = transposed(rt, p.b_dev, k, n, int(p.ldb)), o.ldb = k;
      launch_rows(rt, config, o);
    } else if (kind == "cols") {
      launch_cols(rt, config, o);
    } else {
      if (b_rows) o.b = transposed(rt, p.b_dev, n, k, int(p.ldb)), o.ldb = n;
      launch_conv(rt, o, config);
    }
  };

  std::string hash = rt.programs().source_hash("matmul_fast.cl");
  const bool conv_candidate =
      std::any_of(full.begin(), full.end(), [](const std::string& c) { return config_kind(c) == "conv"; });
  if (conv_candidate) hash += rt.programs().source_hash("conv2d.cl");
  const std::string key = "matmul.v1 B=" + std::string(b_rows ? "NxK" : "KxN") + (resident ? " resident" : "") +
                          (sak == 1 ? "" : " A=strided") + " M=" + std::to_string(m_bucket(m)) +
                          " K=" + std::to_string(k) + " N=" + std::to_string(n);
  const bool worth = double(m) * n * k >= double(1 << 18);
  const Choice choice = choose(rt, key, hash, quick, full, run, worth);
  rt.tuning().note(choice.config, forced.empty() ? choice.origin : "setting");
  if (config_kind(choice.config) == "clblast") return false;
  run(choice.config);
  c.read_async(p.c, p.m * p.n * sizeof(float));
  return true;
}

}  // namespace fast
}  // namespace oclf
