// reference/matmul.hpp: the launches of the reference's own matrix products (matmul.cl, and
// conv2d_gpu as a GEMM) for the library (library.hpp) and the opencl device
// (device/csrc/aten/blas.cpp) alike (staff-only); matmul_plan.hpp picks the configuration.
//
// C (M×N, row-major) = op(A) · op(B) (+ a bias row, + beta · C). The kernels:
//   rows     gemm_rows, B stored N×K (a linear layer's weight): vectors along K; a K×N weight
//            is transposed once into a buffer kept with it (transposed());
//   cols     gemm_cols, B stored K×N: vectors along N, K split over work-groups on GPUs;
//   conv     conv2d_gpu (conv2d_gpu.hpp) as a 1×1 convolution: C = A·B is C_out = M channels
//            over N pixels of C_in = K input channels (GPUs, M ≥ 2).
// A configuration text ("rows VW=16 MR=1 RN=4 LX=1 LY=1") gives the build options and the
// NDRange (matmul_plan.hpp lists them per device and shape).
#pragma once

#include <algorithm>
#include <string>

#include "../launch/launcher.hpp"
#include "conv2d_gpu.hpp"
#include "tuning.hpp"

namespace oclf::reference {

inline const char* kMatmulFile = "reference/matmul.cl";

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

// What is added as C is written: a row of n floats at row[row_offset] to every row (a
// linear layer's bias), and beta · C's old values (C is read only when beta is not 0); then
// an activation applied to each value stored (the opencl device's products folded with the
// activation after them; reference/epilogue.h).
struct Epilogue {
  cl_mem row = nullptr;
  int row_offset = 0;
  float beta = 0.0f;
  Activation act = Activation::kNone;
  bool any() const { return row != nullptr || beta != 0.0f; }
};

inline std::string options_of(const std::string& config) {
  std::string out = "-cl-mad-enable";
  for (const char* name : {"VW", "MR", "RN", "CPW", "LX", "LY"}) {
    const int v = config_value(config, name, 0);
    if (v > 0) out += std::string(" -D") + name + "=" + std::to_string(v);
  }
  return out;
}

// c = the sum of `splits` partial products (splits × m × n in parts) + e's row + beta · c.
inline void launch_sum(Launcher& l, cl_mem parts, int splits, const Operands& o, const Epilogue& e) {
  cl_kernel sum = l.kernel(kMatmulFile, "gemm_sum_splits", activation_option(e.act));
  const int total = o.m * o.n, has_row = e.row != nullptr;
  set_args(sum, parts, o.c, splits, total, o.n, e.row ? e.row : parts, e.row_offset, has_row, e.beta);
  const size_t global[1] = {size_t(total)};
  l.launch(sum, 1, global, nullptr);
}

// gemm_rows: the row and the activation applied in the kernel; beta · C through a product in
// scratch memory and gemm_sum_splits (which then applies both).
inline void launch_rows(Launcher& l, const std::string& config, const Operands& o, const Epilogue& e = {}) {
  const int rn = config_value(config, "RN", 4), lx = config_value(config, "LX", 1), ly = config_value(config, "LY", 1);
  std::string options = options_of(config);
  if (config_value(config, "KF", 0)) options += " -DKFIX=" + std::to_string(o.k);
  if (e.beta == 0.0f) options += activation_option(e.act);
  Scratch product;
  if (e.beta != 0.0f) product = l.scratch(size_t(o.m) * o.n * sizeof(float));
  const cl_mem out = e.beta != 0.0f ? product.get() : o.c;
  const cl_mem row = e.beta != 0.0f ? nullptr : e.row;
  const int has_row = row != nullptr;
  cl_kernel kernel = l.kernel(kMatmulFile, "gemm_rows", options);
  set_args(kernel, o.m, o.n, o.k, o.a, o.sam, o.b, o.ldb, out, row ? row : o.b, row ? e.row_offset : 0, has_row);
  const size_t row_groups = (size_t(o.n) + rn - 1) / rn;
  const size_t global[2] = {size_t(lx), round_up(row_groups, ly)};
  size_t local[2] = {size_t(lx), size_t(ly)};
  // CPUs (one work-item per group of rows): enough work-groups for every core.
  if (lx * ly == 1) local[1] = cpu_work_group(l.info(), row_groups, 1, 1, kernel, l.device());
  l.launch(kernel, 2, global, local);
  if (e.beta != 0.0f) launch_sum(l, product.get(), 1, o, e);
}

// gemm_cols, with K split over KS work-groups when the columns alone would not fill the
// device twice (GPUs; at least 8 values of K per work-item); the partial products, the row
// and beta · C are added, and the activation applied, by gemm_sum_splits.
inline void launch_cols(Launcher& l, const std::string& config, const Operands& o, const Epilogue& e = {}) {
  const int vw = config_value(config, "VW", 4), cpw = config_value(config, "CPW", 1);
  const int lx = config_value(config, "LX", 1), ly = config_value(config, "LY", 1);
  const size_t col_groups = (size_t(o.n) + size_t(vw) * cpw * lx - 1) / (size_t(vw) * cpw * lx);
  int splits = 1;
  if (lx * ly > 1) {
    const size_t wanted = 2 * size_t(l.info().compute_units);
    splits = int(std::min<size_t>((wanted + col_groups - 1) / col_groups, std::max(1, o.k / (8 * ly))));
    splits = std::max(1, std::min(splits, 64));
  }
  const int k_chunk = (o.k + splits - 1) / splits;
  splits = (o.k + k_chunk - 1) / k_chunk;
  const bool summed = splits > 1 || e.any();
  Scratch parts;
  if (summed) parts = l.scratch(size_t(splits) * o.m * o.n * sizeof(float));
  // Stored as it is computed: the activation in gemm_cols; else in gemm_sum_splits.
  cl_kernel kernel = l.kernel(kMatmulFile, "gemm_cols", options_of(config) + (summed ? "" : activation_option(e.act)));
  set_args(kernel, o.m, o.n, o.k, o.a, o.sam, o.sak, o.b, o.ldb, summed ? parts.get() : o.c, k_chunk);
  const size_t global[3] = {col_groups * lx, size_t(ly), size_t(splits)};
  size_t local[3] = {size_t(lx), size_t(ly), 1};
  // CPUs (one work-item per vector of columns): enough work-groups for every core.
  if (lx * ly == 1) local[0] = cpu_work_group(l.info(), col_groups, size_t(splits), 1, kernel, l.device());
  l.launch(kernel, 3, global, local);
  if (summed) launch_sum(l, parts.get(), splits, o, e);
}

// C = A · B as conv2d_gpu's 1×1 convolution: x = B (K×N, ld N), w = A (M×K, ld K), y = C.
// config "conv" takes the layer's default tile (or OCLF_GPU_TILE's), "conv TM=.. TN=.. WM=..
// WN=.. TK=.. ST=.." that tile with split-K aiming at ST work-groups per compute unit.
inline void launch_gemm(Launcher& l, const std::string& config, const Operands& o) {
  Conv2dGeometry q{};
  q.batch = 1, q.c_in = o.k, q.h = 1, q.w = o.n, q.c_out = o.m, q.k_h = 1, q.k_w = 1;
  q.stride_h = q.stride_w = q.dilation_h = q.dilation_w = q.groups = 1;
  q.h_out = 1, q.w_out = o.n;
  const ConvOperands operands{o.b, o.a, nullptr, o.c};
  if (config.find("TM=") == std::string::npos) {
    conv2d_gpu(l, q, operands, gpu_tile(l.info(), q));
  } else {
    GpuLaunch how;
    how.split_target = config_value(config, "ST", 0);
    conv2d_gpu(l, q, operands, GpuTile::of(config), how);
  }
}

// B (stored rows × cols, leading dimension ld) transposed into a cols × rows buffer, kept
// with the weight where the launcher keeps derived buffers, else in *scratch.
inline cl_mem transposed(Launcher& l, cl_mem b, int rows, int cols, int ld, Scratch* scratch) {
  const std::string tag = "matmul-transposed " + std::to_string(rows) + "x" + std::to_string(cols) + " ld " +
                          std::to_string(ld);
  return l.derived(tag, size_t(rows) * cols * sizeof(float), [&](cl_mem t) {
    cl_kernel kernel = l.kernel(kMatmulFile, "transpose", "");
    set_args(kernel, b, t, rows, cols, ld);
    const size_t global[2] = {round_up(cols, 16), round_up(rows, 16)};
    const size_t local[2] = {16, 16};
    l.launch(kernel, 2, global, local);
  }, scratch);
}

// Runs a product on configuration `config` (rows, cols or conv; not clblast): B is
// transposed first where the kernel reads the other layout (a kept weight's copy).
inline void run_product(Launcher& l, const std::string& config, Operands o, const Epilogue& e = {}) {
  const std::string kind = config_kind(config);
  Scratch copy;
  if (kind == "rows") {
    if (!o.b_rows) o.b = transposed(l, o.b, o.k, o.n, o.ldb, &copy), o.ldb = o.k, o.b_rows = true;
    launch_rows(l, config, o, e);
  } else if (kind == "cols") {
    launch_cols(l, config, o, e);
  } else {
    if (e.any() || e.act != Activation::kNone)
      throw Error("the conv products add no bias row, beta or activation", CL_INVALID_VALUE);
    if (o.b_rows) o.b = transposed(l, o.b, o.n, o.k, o.ldb, &copy), o.ldb = o.n, o.b_rows = false;
    launch_gemm(l, config, o);
  }
}

}  // namespace oclf::reference
