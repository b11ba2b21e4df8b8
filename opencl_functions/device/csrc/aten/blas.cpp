// Matrix products of the opencl device: mm, addmm, bmm, baddbmm, mv. On CPU devices 2-D
// products run on the library's own kernels (matmul_fast.cl: gemm_rows for B stored N×K, a
// linear layer's weight; gemm_cols for B stored K×N), which on PoCL ran several times
// CLBlast's GEMM and GEMV; elsewhere, and for batches, CLBlast. Transposed operands (a row
// or column stride of 1) go as strides or transpose flags, not copies; CLBlast runs
// products with one row as GEMV, which it does much faster than GEMM.
#include <clblast.h>
#include <torch/library.h>

#include "../../../fast_tuning.hpp"
#include "../../../runtime/settings.hpp"
#include "pointwise.h"

namespace oclf::device {

namespace {

using clblast::Layout;
using clblast::Transpose;

// A matrix as CLBlast takes it: row-major storage with leading dimension ld, transposed
// (stored as cols × rows) when `trans`.
struct Matrix {
  at::Tensor t;
  bool trans = false;
  size_t ld = 0;
};

// rows × cols are the last two dimensions of t.
Matrix as_matrix(const at::Tensor& t) {
  const int64_t nd = t.dim();
  const int64_t rows = t.size(nd - 2), cols = t.size(nd - 1);
  const int64_t s_row = t.stride(nd - 2), s_col = t.stride(nd - 1);
  if (s_col == 1 && s_row >= std::max<int64_t>(cols, 1)) return {t, false, size_t(s_row)};
  if (s_row == 1 && s_col >= std::max<int64_t>(rows, 1)) return {t, true, size_t(s_col)};
  const at::Tensor c = t.contiguous();
  return {c, false, size_t(std::max<int64_t>(cols, 1))};
}

Transpose flag(bool trans) { return trans ? Transpose::kYes : Transpose::kNo; }

// OCLF_DEVICE_MATMUL: "gpu" runs gpu_product's kernels on any device (so CPU machines test
// them), "clblast" leaves every product to CLBlast; else by device.
std::string product_mode() {
  const std::string mode = setting("DEVICE_MATMUL");
  TORCH_CHECK(mode.empty() || mode == "auto" || mode == "gpu" || mode == "clblast", "opencl: ",
              setting_variable("DEVICE_MATMUL"), " must be auto, gpu or clblast, got \"", mode, "\"");
  return mode.empty() ? "auto" : mode;
}

// c (m×n, contiguous) = the sum of `splits` partial products in parts (splits × m × n)
// + the bias row (when defined: n contiguous floats) + beta · c (c read only when beta ≠ 0).
// parts and c start at their buffers' first element (the kernel takes no offsets).
void sum_splits(const at::Tensor& parts, int splits, const at::Tensor& c, size_t m, size_t n, const at::Tensor& row,
                float beta) {
  const int total = int(m * n);
  const DeviceSpan sp = span(parts), sc = span(c), sr = row.defined() ? span(row) : sp;
  Launch sum(Device::get().library_kernel("matmul_fast.cl", "gemm_sum_splits", ""));
  sum.mem(sp.mem).mem(sc.mem).i32(splits).i32(total).i32(int(n)).mem(sr.mem).i32(sr.offset);
  sum.i32(row.defined()).f32(beta).run1(size_t(total));
}

// B stored K×N as a parameter (a Conv1D weight, a leaf that requires grad) is transposed
// once into N×K and kept (derived_from), so gemm_rows can read it; other operands as given.
Matrix rows_operand(const Matrix& A, const Matrix& B) {
  if (B.trans || A.trans || !B.t.is_leaf() || !B.t.requires_grad() || B.t.dim() != 2) return B;
  const int64_t kk = B.t.size(0), nn = B.t.size(1);
  Matrix b = B;
  b.t = derived_from(B.t, "transposed " + std::to_string(kk) + "x" + std::to_string(nn),
                     [&] { return B.t.detach().transpose(0, 1).contiguous(); });
  b.trans = true;
  b.ld = size_t(kk);
  return b;
}

// gemm_rows: c (m×n, contiguous, at its buffer's start) = A · Bᵀ (B stored N×K) + the bias
// row when defined (n contiguous floats); lx work-items share a row of B, ly row groups of
// rn rows per work-group (CPUs: lx = ly = 1, groups of rows from fast::cpu_work_group).
void launch_rows(const Matrix& A, const Matrix& B, const at::Tensor& c, size_t m, size_t n, size_t k,
                 const at::Tensor& row, int vw, int rn, int lx, int ly, bool fixed_k = false) {
  Device& dev = Device::get();
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c), sr = row.defined() ? span(row) : sb;
  std::string options = "-cl-mad-enable -DVW=" + std::to_string(vw) + " -DMR=" +
                        std::to_string(std::min<size_t>(m, 8)) + " -DRN=" + std::to_string(rn) +
                        " -DLX=" + std::to_string(lx) + " -DLY=" + std::to_string(ly);
  if (fixed_k) options += " -DKFIX=" + std::to_string(k);
  cl_kernel kernel = dev.library_kernel("matmul_fast.cl", "gemm_rows", options);
  Launch launch(kernel);
  launch.i32(int(m)).i32(int(n)).i32(int(k)).mem(sa.mem).i32(int(A.ld)).mem(sb.mem).i32(int(B.ld)).mem(sc.mem);
  launch.mem(sr.mem).i32(int(sr.offset)).i32(row.defined());
  const size_t row_groups = (n + rn - 1) / rn;
  const size_t global[2] = {size_t(lx), round_up(row_groups, ly)};
  size_t local[2] = {size_t(lx), size_t(ly)};
  // CPUs (one work-item per group of rows): enough work-groups for every core.
  if (lx * ly == 1) local[1] = fast::cpu_work_group(dev.info(), row_groups, 1, 1, kernel, dev.id());
  launch.run(2, global, local);
}

// c (m×n, contiguous) = op(A) · op(B) + row + beta · c for few rows (m ≤ 8: a linear layer
// on a few tokens) on GPUs, on matmul_fast.cl's kernels, float4 loads, neighbouring
// work-items on neighbouring elements:
//   gemm_rows for B stored N×K (nn.Linear's weight) and for K×N parameters (GPT-2's Conv1D
//     weights) over a transposed copy kept with them: one launch, the bias row added in the
//     kernel. 32–128 work-items share a row of B as the reference's GPU defaults
//     (matmul_fast.hpp: on the H100, GPT-2's one-token products 5.7–9.2 µs of kernel time
//     against 13.3–14.7 for gemm_cols with split K and its sum);
//   gemm_cols for other B stored K×N, K split over work-groups when N alone would not fill
//     the device twice, gemm_sum_splits adding the splits, the bias row and beta · c.
// CLBlast runs these products as GEMV or small GEMMs at a fraction of that speed (H100,
// GPT-2's one-token products: 21-89 against 85-308 GFLOP/s). False when the product does
// not fit the kernels (offsets, sizes, A stored transposed with B stored N×K).
bool gpu_product(const Matrix& A, const Matrix& B0, const at::Tensor& c, size_t m, size_t n, size_t k,
                 const at::Tensor& row, float beta) {
  Device& dev = Device::get();
  const std::string mode = product_mode();
  if (mode == "clblast" || (mode == "auto" && dev.is_cpu()) || m > 8) return false;
  const DeviceInfo& info = dev.info();
  constexpr int kVw = 4, kLx = 64, kLy = 4;
  if (info.max_work_group_size < size_t(kLx * kLy)) return false;
  const Matrix B = rows_operand(A, B0);
  if (B.trans && A.trans) return false;  // gemm_rows reads A's rows contiguous
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  if (sa.offset || sb.offset || sc.offset) return false;
  const int64_t limit = int64_t(1) << 31;
  if (A.t.numel() >= limit || B.t.numel() >= limit || int64_t(m * n) * 64 >= limit) return false;
  if (B.trans) {  // B stored N×K: gemm_rows, straight into c unless beta · c is added
    // The reference's GPU default (fast_tuning.hpp gpu_rows_default).
    const fast::RowsBlock b = fast::gpu_rows_default(int(m), int(n), int(k));
    if (beta == 0.0f) {
      launch_rows(A, B, c, m, n, k, row, kVw, b.rn, b.lx, b.ly, b.fixed_k);
    } else {
      const at::Tensor product = empty_device({int64_t(m), int64_t(n)}, at::kFloat);
      launch_rows(A, B, product, m, n, k, at::Tensor(), kVw, b.rn, b.lx, b.ly, b.fixed_k);
      sum_splits(product, 1, c, m, n, row, beta);
    }
    return true;
  }
  // B stored K×N: gemm_cols, A by its strides.
  const std::string options = "-cl-mad-enable -DVW=" + std::to_string(kVw) + " -DMR=" + std::to_string(m) +
                              " -DLX=" + std::to_string(kLx) + " -DLY=" + std::to_string(kLy);
  const size_t col_groups = (n + kVw * kLx - 1) / (kVw * kLx);
  const size_t wanted = 2 * size_t(info.compute_units);
  int splits = int(std::min<size_t>((wanted + col_groups - 1) / col_groups, std::max<size_t>(1, k / (8 * kLy))));
  splits = std::max(1, std::min(splits, 64));
  const int k_chunk = int((k + splits - 1) / splits);
  splits = int((k + k_chunk - 1) / k_chunk);
  const bool direct = splits == 1 && !row.defined() && beta == 0.0f;
  const at::Tensor parts = direct ? c : empty_device({int64_t(splits) * int64_t(m * n)}, at::kFloat);
  Launch launch(dev.library_kernel("matmul_fast.cl", "gemm_cols", options + " -DCPW=1"));
  launch.i32(int(m)).i32(int(n)).i32(int(k)).mem(sa.mem).i32(A.trans ? 1 : int(A.ld)).i32(A.trans ? int(A.ld) : 1);
  launch.mem(sb.mem).i32(int(B.ld)).mem(span(parts).mem).i32(k_chunk);
  const size_t global[3] = {col_groups * kLx, size_t(kLy), size_t(splits)};
  const size_t local[3] = {size_t(kLx), size_t(kLy), 1};
  launch.run(3, global, local);
  if (!direct) sum_splits(parts, splits, c, m, n, row, beta);
  return true;
}

// c (m×n, contiguous) = op(A) · op(B) + the bias row when defined, on matmul_fast.cl's
// kernels with the defaults the library derives for CPU devices (vectors of the device's
// preferred float width, up to 8 rows of A per block); false when the product does not fit
// them (offsets, sizes, an A whose rows are not contiguous for gemm_rows). A K×N parameter
// (a Conv1D weight) is read through its transposed copy: gemm_rows streams rows of B at
// about twice the speed gemm_cols streams its columns.
bool cpu_product(const Matrix& A, const Matrix& B, const at::Tensor& c, size_t m, size_t n, size_t k,
                 const at::Tensor& row = at::Tensor()) {
  Device& dev = Device::get();
  if (!dev.is_cpu()) return false;
  const Matrix b = rows_operand(A, B);
  if (b.trans && A.trans) return false;  // gemm_rows reads A's rows contiguous
  const DeviceSpan sa = span(A.t), sb = span(b.t), sc = span(c);
  if (sa.offset || sb.offset || sc.offset) return false;
  const int64_t limit = int64_t(1) << 31;
  if (A.t.numel() >= limit || b.t.numel() >= limit || c.numel() >= limit) return false;
  const DeviceInfo& info = dev.info();
  const unsigned width = std::max(info.preferred_vector_width_float, info.native_vector_width_float);
  const int vw = width >= 16 ? 16 : width >= 8 ? 8 : 4;
  const int mr = int(std::min<size_t>(m, 8));
  if (b.trans) {  // B stored N×K: gemm_rows, the bias row added in the kernel
    launch_rows(A, b, c, m, n, k, row, vw, mr <= 4 ? 4 : 2, 1, 1);
    return true;
  }
  // B stored K×N: gemm_cols, A by its strides; then the bias row as the product is copied.
  const at::Tensor product = row.defined() ? empty_device({int64_t(m), int64_t(n)}, at::kFloat) : c;
  const std::string options = "-cl-mad-enable -DVW=" + std::to_string(vw) + " -DMR=" + std::to_string(mr) +
                              " -DLX=1 -DLY=1 -DCPW=2";
  Launch launch(dev.library_kernel("matmul_fast.cl", "gemm_cols", options));
  launch.i32(int(m)).i32(int(n)).i32(int(k)).mem(sa.mem).i32(A.trans ? 1 : int(A.ld)).i32(A.trans ? int(A.ld) : 1);
  launch.mem(sb.mem).i32(int(b.ld)).mem(span(product).mem).i32(int(k));
  const size_t global[3] = {(n + size_t(vw) * 2 - 1) / (size_t(vw) * 2), 1, 1};
  launch.run(3, global, nullptr);
  if (row.defined()) sum_splits(product, 1, c, m, n, row, 0.0f);
  return true;
}

void check_matrix(const at::Tensor& t, int64_t dims, const char* op, const char* what) {
  check_float(t, what);
  TORCH_CHECK(t.dim() == dims, "opencl: ", op, ": ", what, " must be ", dims, "-D, got shape ", t.sizes());
}

// c (M×N, contiguous) = alpha · a (M×K) · b (K×N) + beta · c, or, with a bias row (N
// contiguous floats, beta 1), alpha · a · b + row added to every row (c is not read).
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
          const at::Tensor& row = at::Tensor()) {
  if (row.defined()) {
    const size_t m = a.size(0), k = a.size(1), n = b.size(1);
    if (alpha == 1.0f && m > 0 && n > 0 && k > 0) {
      const Matrix A = as_matrix(a), B = as_matrix(b);
      if (gpu_product(A, B, c, m, n, k, row, 0.0f)) return;
      if (cpu_product(A, B, c, m, n, k, row)) return;
    }
    c.copy_(row.expand({a.size(0), b.size(1)}));
    beta = 1.0f;
  }
  const size_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  // CLBlast's GEMV reads c even with beta = 0 (0 · NaN is NaN); its GEMM does not.
  if (beta == 0.0f && k == 0) c.zero_();
  if (k == 0) {
    if (beta != 1.0f) c.mul_(beta);
    return;
  }
  const Matrix A = as_matrix(a), B = as_matrix(b);
  if (alpha == 1.0f && gpu_product(A, B, c, m, n, k, at::Tensor(), beta)) return;
  if (alpha == 1.0f && beta == 0.0f) {
    if (cpu_product(A, B, c, m, n, k)) return;
  } else if (Device::get().is_cpu()) {
    const at::Tensor product = empty_device({int64_t(m), int64_t(n)}, at::kFloat);
    if (cpu_product(A, B, product, m, n, k)) {
      if (beta == 0.0f) {
        c.copy_(product);  // c's old values (NaN included) are not read
        if (alpha != 1.0f) c.mul_(alpha);
      } else {
        if (beta != 1.0f) c.mul_(beta);
        c.add_(product, alpha);
      }
      return;
    }
  }
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  if (m == 1) {
    // One row: c = op(B)ᵀ · a as a GEMV over B stored (K×N, or N×K when transposed).
    if (beta == 0.0f) c.zero_();
    const size_t rows = B.trans ? n : k, cols = B.trans ? k : n;
    const size_t inc = A.trans ? A.ld : 1;
    CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, B.trans ? Transpose::kNo : Transpose::kYes, rows, cols, alpha,
                                sb.mem, sb.offset, B.ld, sa.mem, sa.offset, inc, beta, sc.mem, sc.offset, 1,
                                dev.queue_ptr(), nullptr));
    return;
  }
  CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, flag(A.trans), flag(B.trans), m, n, k, alpha, sa.mem, sa.offset,
                              A.ld, sb.mem, sb.offset, B.ld, beta, sc.mem, sc.offset, n, dev.queue_ptr(), nullptr));
}

// c (batch×M×N, contiguous) = alpha · a (batch×M×K) · b (batch×K×N) + beta · c.
void gemm_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta) {
  const size_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  if (beta == 0.0f && k == 0) c.zero_();
  if (k == 0) {
    if (beta != 1.0f) c.mul_(beta);
    return;
  }
  if (batch == 1) {
    gemm(a[0], b[0], c[0], alpha, beta);
    return;
  }
  const Matrix A = as_matrix(a), B = as_matrix(b);
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  CLBLAST_CHECK(clblast::GemmStridedBatched(Layout::kRowMajor, flag(A.trans), flag(B.trans), m, n, k, alpha, sa.mem,
                                            sa.offset, A.ld, size_t(A.t.stride(0)), sb.mem, sb.offset, B.ld,
                                            size_t(B.t.stride(0)), beta, sc.mem, sc.offset, n, m * n, batch,
                                            dev.queue_ptr(), nullptr));
}

void check_mm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 2, op, "self");
  check_matrix(b, 2, op, "mat2");
  TORCH_CHECK(a.size(1) == b.size(0), "opencl: ", op, ": shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied");
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_mm(self, mat2, "mm");
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor out = empty_device({self.size(0), mat2.size(1)}, at::kFloat);
  return mm_out(self, mat2, out);
}

at::Tensor& addmm_out(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  check_mm(mat1, mat2, "addmm");
  check_float(bias, "self");
  const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
  const bool aliased = out.is_same(bias);
  at::native::resize_output(out, shape);
  at::Tensor result = out.is_contiguous() ? out : empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  // A bias row (a linear layer's) goes to the product's kernels, not through a copy into
  // the output first.
  const bool row = b == 1.0f && !aliased && bias.dim() >= 1 && bias.size(-1) == shape[1] &&
                   bias.numel() == shape[1] && bias.stride(-1) == 1;
  if (row) {
    gemm(mat1, mat2, result, static_cast<float>(alpha.toDouble()), b, bias.reshape({shape[1]}));
  } else {
    if (b != 0.0f && !(aliased && result.is_same(out))) result.copy_(bias.expand(shape));
    gemm(mat1, mat2, result, static_cast<float>(alpha.toDouble()), b);
  }
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor addmm(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  at::Tensor out = empty_device({mat1.size(0), mat2.size(1)}, at::kFloat);
  return addmm_out(bias, mat1, mat2, beta, alpha, out);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  return addmm_out(self, mat1, mat2, beta, alpha, self);
}

void check_bmm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 3, op, "self");
  check_matrix(b, 3, op, "mat2");
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "opencl: ", op, ": shapes ", a.sizes(), " and ",
              b.sizes(), " cannot be multiplied");
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_bmm(self, mat2, "bmm");
  at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm_batched(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor out = empty_device({self.size(0), self.size(1), mat2.size(2)}, at::kFloat);
  return bmm_out(self, mat2, out);
}

at::Tensor baddbmm(const at::Tensor& bias, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  check_bmm(b1, b2, "baddbmm");
  const std::vector<int64_t> shape = {b1.size(0), b1.size(1), b2.size(2)};
  at::Tensor out = empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  if (b != 0.0f) out.copy_(bias.expand(shape));
  gemm_batched(b1, b2, out, static_cast<float>(alpha.toDouble()), b);
  return out;
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  TORCH_CHECK(vec.dim() == 1, "opencl: mv: vec must be 1-D, got shape ", vec.sizes());
  return oclf::device::mm(self, vec.unsqueeze(1)).squeeze(1);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("baddbmm", baddbmm);
  m.impl("mv", mv);
}

}  // namespace oclf::device
