// Float32 matrix products of the opencl device (products.h): the reference's own kernels
// (reference/matmul.cl: gemm_rows for B stored N×K, a linear layer's weight; gemm_cols for B
// stored K×N) where the library's rules pick them for the device and shape
// (reference/matmul_plan.hpp; on PoCL they ran several times CLBlast's GEMM and GEMV),
// launched by the same functions; otherwise, and for batches, CLBlast. Transposed operands
// (a row or column stride of 1) go as strides or transpose flags, not copies; CLBlast runs
// products with one row as GEMV, which it does much faster than GEMM.
#include <clblast.h>

#include "opencl_functions/reference/matmul_plan.hpp"
#include "opencl_functions/runtime/settings.hpp"
#include "device_launcher.h"
#include "plans.h"
#include "products.h"
#include "split_k.h"
#include "tensors.h"

namespace oclf::device::products {

namespace {

using clblast::Layout;
using clblast::Transpose;

Transpose flag(bool trans) { return trans ? Transpose::kYes : Transpose::kNo; }

// Whether t is (a view of) a parameter, a leaf that requires grad: the tuning key names it
// as the library names a resident weight.
bool is_parameter(const at::Tensor& t) {
  if (t.is_view()) return t._base().is_leaf() && t._base().requires_grad();
  return t.is_leaf() && t.requires_grad();
}

// The CLBlast product c = alpha · op(A) · op(B) + beta · c (GEMV for one row; a long K in
// partial products, split_k.h).
void clblast_product(const Matrix& A, const Matrix& B, const at::Tensor& c, size_t m, size_t n, size_t k,
                     float alpha, float beta) {
  if (split_k_product({A.t, A.trans, A.ld, 0}, {B.t, B.trans, B.ld, 0}, c, 1, m, n, k, alpha, beta)) return;
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  Stream& stream = Stream::get();
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  if (m == 1) {
    // One row: c = op(B)ᵀ · a as a GEMV over B stored (K×N, or N×K when transposed).
    if (beta == 0.0f) c.zero_();
    const size_t rows = B.trans ? n : k, cols = B.trans ? k : n;
    const size_t inc = A.trans ? A.ld : 1;
    const Transpose t = B.trans ? Transpose::kNo : Transpose::kYes;
    const size_t ldb = B.ld;
    stream.run_enqueuing([=, &stream] {
      CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, t, rows, cols, alpha, sb.mem, sb.offset, ldb, sa.mem, sa.offset,
                                  inc, beta, sc.mem, sc.offset, 1, stream.queue_ptr(), nullptr));
    });
    return;
  }
  const Transpose ta = flag(A.trans), tb = flag(B.trans);
  const size_t lda = A.ld, ldb = B.ld;
  stream.run_enqueuing([=, &stream] {
    CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, ta, tb, m, n, k, alpha, sa.mem, sa.offset, lda, sb.mem, sb.offset,
                                ldb, beta, sc.mem, sc.offset, n, stream.queue_ptr(), nullptr));
  });
}

}  // namespace

Matrix as_matrix(const at::Tensor& t) {
  const int64_t nd = t.dim();
  const int64_t rows = t.size(nd - 2), cols = t.size(nd - 1);
  const int64_t s_row = t.stride(nd - 2), s_col = t.stride(nd - 1);
  if (s_col == 1 && s_row >= std::max<int64_t>(cols, 1)) return {t, false, size_t(s_row)};
  if (s_row == 1 && s_col >= std::max<int64_t>(rows, 1)) return {t, true, size_t(s_col)};
  const at::Tensor c = t.contiguous();
  return {c, false, size_t(std::max<int64_t>(cols, 1))};
}

std::string product_mode() {
  const std::string mode = setting("DEVICE_MATMUL");
  DEVICE_CHECK(mode.empty() || mode == "auto" || mode == "gpu" || mode == "clblast", "opencl: ",
              setting_variable("DEVICE_MATMUL"), " must be auto, gpu or clblast, got \"", mode, "\"");
  return mode.empty() ? "auto" : mode;
}

// c (m×n, contiguous) = op(A) · op(B) + the bias row (when defined: n contiguous floats) +
// beta · c on the reference's own products (matmul.cl), chosen as the library chooses them
// (reference/matmul_plan.hpp: gemm_rows for B stored N×K and for K×N parameters over a
// transposed copy kept with them, gemm_cols for other K×N, by device and shape, tuned at
// first use) with the library's settings: OCLF_MATMUL forces a kind or a configuration,
// OCLF_DEVICE_MATMUL=gpu plans as on a GPU (so CPU machines run the GPU configurations) and
// =clblast leaves every product to CLBlast. The device does not run products as conv2d_gpu
// GEMMs: where the library would, CLBlast does. False leaves the product to CLBlast (the
// plan's choice, or operands the kernels do not take: offsets, sizes, both transposed).
bool fast_product(const Matrix& A, const Matrix& B, const at::Tensor& c, size_t m, size_t n, size_t k,
                  const at::Tensor& row, float beta, Activation act) {
  const std::string mode = product_mode(), forced = setting("MATMUL");
  if (mode == "clblast" || forced == "clblast") return false;
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c), sr = row.defined() ? span(row) : DeviceSpan{};
  if (sa.offset || sb.offset || sc.offset) return false;
  const int64_t limit = int64_t(1) << 31;
  if (A.t.numel() >= limit || B.t.numel() >= limit || int64_t(m * n) * 64 >= limit || int64_t(k) >= limit)
    return false;
  const bool transposable = !B.trans && !A.trans && B.t.dim() == 2 && B.t.is_leaf() && B.t.requires_grad();
  const bool parameter = is_parameter(B.t);

  DeviceLauncher launcher(transposable ? B.t : at::Tensor());
  const reference::Operands o{int(m), int(n), int(k), sa.mem, A.trans ? 1 : int(A.ld), A.trans ? int(A.ld) : 1,
                              sb.mem, int(B.ld), B.trans, sc.mem};
  plans::Key key("matmul");
  key << int64_t(m) << int64_t(n) << int64_t(k) << int64_t(A.trans) << int64_t(B.trans) << int64_t(transposable)
      << int64_t(parameter) << mode << forced;
  const plans::Plan plan = plans::remembered(key, [&] {
    DeviceInfo info = Runtime::get().info();
    if (mode == "gpu") info.type = "GPU";
    reference::Paths can;
    can.rows = !A.trans && (B.trans || transposable);
    can.cols = !B.trans;
    std::vector<std::string> quick, full;
    reference::candidates(info, int(m), int(n), int(k), can, forced, quick, full);
    if (quick.empty()) return plans::Plan{"clblast", ""};  // no kernel of ours takes these operands
    // Trial runs write a scratch output (the real one may be read: beta · c).
    at::Tensor trial;
    auto run = [&](const std::string& config) {
      if (!trial.defined()) trial = empty_device({int64_t(m), int64_t(n)}, at::kFloat);
      if (reference::config_kind(config) == "clblast") {
        clblast_product(A, B, trial, m, n, k, 1.0f, 0.0f);
      } else {
        reference::Operands to = o;
        to.c = whole_buffer(trial, "a trial product");
        reference::run_product(launcher, config, to);
      }
    };
    const reference::Product product{int(m), int(n), int(k), B.trans, parameter, A.trans, can};
    const std::string config = reference::choose_product(launcher, product, quick, full, forced, run);
    return plans::Plan{config, launcher.tuning().last_origin()};
  });
  if (!plan.origin.empty()) launcher.tuning().note(plan.config, plan.origin);
  if (reference::config_kind(plan.config) == "clblast") return false;
  reference::run_product(launcher, plan.config, o, reference::Epilogue{sr.mem, sr.offset, beta, act});
  return true;
}

void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
          const at::Tensor& row) {
  if (row.defined()) {
    const size_t m = a.size(0), k = a.size(1), n = b.size(1);
    if (alpha == 1.0f && m > 0 && n > 0 && k > 0) {
      const Matrix A = as_matrix(a), B = as_matrix(b);
      if (fast_product(A, B, c, m, n, k, row, 0.0f)) return;
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
  if (alpha == 1.0f && fast_product(A, B, c, m, n, k, at::Tensor(), beta)) return;
  if (alpha != 1.0f && is_cpu()) {
    const at::Tensor product = empty_device({int64_t(m), int64_t(n)}, at::kFloat);
    if (fast_product(A, B, product, m, n, k, at::Tensor(), 0.0f)) {
      if (beta == 0.0f) {
        c.copy_(product);  // c's old values (NaN included) are not read
        c.mul_(alpha);
      } else {
        if (beta != 1.0f) c.mul_(beta);
        c.add_(product, alpha);
      }
      return;
    }
  }
  clblast_product(A, B, c, m, n, k, alpha, beta);
}

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
  const size_t stride_a = size_t(A.t.stride(0)), stride_b = size_t(B.t.stride(0));
  if (split_k_product({A.t, A.trans, A.ld, stride_a}, {B.t, B.trans, B.ld, stride_b}, c, batch, m, n, k, alpha, beta))
    return;
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  Stream& stream = Stream::get();
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  const Transpose ta = flag(A.trans), tb = flag(B.trans);
  const size_t lda = A.ld, ldb = B.ld;
  stream.run_enqueuing([=, &stream] {
    CLBLAST_CHECK(clblast::GemmStridedBatched(Layout::kRowMajor, ta, tb, m, n, k, alpha, sa.mem, sa.offset, lda,
                                              stride_a, sb.mem, sb.offset, ldb, stride_b, beta, sc.mem, sc.offset, n,
                                              m * n, batch, stream.queue_ptr(), nullptr));
  });
}

}  // namespace oclf::device::products
