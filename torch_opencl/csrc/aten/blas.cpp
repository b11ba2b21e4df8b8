// Matrix products of the opencl device: mm, addmm, bmm, baddbmm, mv (and dot, vdot: a product
// and a sum). 2-D products run on the reference's own kernels (reference/matmul.cl:
// gemm_rows for B stored N×K, a linear layer's weight; gemm_cols for B stored K×N) where
// the library's rules pick them for the device and shape (reference/matmul_plan.hpp; on
// PoCL they ran several times CLBlast's GEMM and GEMV), launched by the same functions;
// otherwise, and for batches, CLBlast. Transposed operands
// (a row or column stride of 1) go as strides or transpose flags, not copies; CLBlast runs
// products with one row as GEMV, which it does much faster than GEMM.
#include <clblast.h>
#include <torch/library.h>

#include "opencl_functions/reference/matmul_plan.hpp"
#include "opencl_functions/runtime/settings.hpp"
#include "activations.h"
#include "dispatch.h"
#include "device_launcher.h"
#include "gemm16_mma.h"
#include "plans.h"
#include "pointwise.h"
#include "split_k.h"
#include "tensors.h"

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

// OCLF_DEVICE_MATMUL: "gpu" plans products as on a GPU on any device (so CPU machines run the
// GPUs' configurations), "clblast" leaves every product to CLBlast; else by device.
std::string product_mode() {
  const std::string mode = setting("DEVICE_MATMUL");
  DEVICE_CHECK(mode.empty() || mode == "auto" || mode == "gpu" || mode == "clblast", "opencl: ",
              setting_variable("DEVICE_MATMUL"), " must be auto, gpu or clblast, got \"", mode, "\"");
  return mode.empty() ? "auto" : mode;
}

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
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  if (m == 1) {
    // One row: c = op(B)ᵀ · a as a GEMV over B stored (K×N, or N×K when transposed).
    if (beta == 0.0f) c.zero_();
    const size_t rows = B.trans ? n : k, cols = B.trans ? k : n;
    const size_t inc = A.trans ? A.ld : 1;
    const Transpose t = B.trans ? Transpose::kNo : Transpose::kYes;
    const size_t ldb = B.ld;
    dev.run_enqueuing([=, &dev] {
      CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, t, rows, cols, alpha, sb.mem, sb.offset, ldb, sa.mem, sa.offset,
                                  inc, beta, sc.mem, sc.offset, 1, dev.queue_ptr(), nullptr));
    });
    return;
  }
  const Transpose ta = flag(A.trans), tb = flag(B.trans);
  const size_t lda = A.ld, ldb = B.ld;
  dev.run_enqueuing([=, &dev] {
    CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, ta, tb, m, n, k, alpha, sa.mem, sa.offset, lda, sb.mem, sb.offset,
                                ldb, beta, sc.mem, sc.offset, n, dev.queue_ptr(), nullptr));
  });
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
                  const at::Tensor& row, float beta, Activation act = Activation::kNone) {
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
    DeviceInfo info = Device::get().info();
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

void check_matrix(const at::Tensor& t, int64_t dims, const char* op, const char* what) {
  check_float(t, what);
  DEVICE_CHECK(t.dim() == dims, "opencl: ", op, ": ", what, " must be ", dims, "-D, got shape ", t.sizes());
}

// c (M×N, contiguous) = alpha · a (M×K) · b (K×N) + beta · c, or, with a bias row (N
// contiguous floats, beta 1), alpha · a · b + row added to every row (c is not read).
void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
          const at::Tensor& row = at::Tensor()) {
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
  if (alpha != 1.0f && Device::get().is_cpu()) {
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
  const size_t stride_a = size_t(A.t.stride(0)), stride_b = size_t(B.t.stride(0));
  if (split_k_product({A.t, A.trans, A.ld, stride_a}, {B.t, B.trans, B.ld, stride_b}, c, batch, m, n, k, alpha, beta))
    return;
  const DeviceSpan sa = span(A.t), sb = span(B.t), sc = span(c);
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  const Transpose ta = flag(A.trans), tb = flag(B.trans);
  const size_t lda = A.ld, ldb = B.ld;
  dev.run_enqueuing([=, &dev] {
    CLBLAST_CHECK(clblast::GemmStridedBatched(Layout::kRowMajor, ta, tb, m, n, k, alpha, sa.mem, sa.offset, lda,
                                              stride_a, sb.mem, sb.offset, ldb, stride_b, beta, sc.mem, sc.offset, n,
                                              m * n, batch, dev.queue_ptr(), nullptr));
  });
}

// ---- 16-bit products (kernels/gemm16.cl) ----------------------------------------------------
// float16 and bfloat16 operands are read as stored and multiplied in float32 (no float32
// copies of activations or weights); the result is stored in their dtype.

// Whether every tensor is a device tensor of one 16-bit dtype (the route of gemm16).
bool all_16bit(std::initializer_list<const at::Tensor*> tensors) {
  const at::ScalarType type = (*tensors.begin())->scalar_type();
  for (const at::Tensor* t : tensors)
    if (!is_16bit_float(t->scalar_type()) || t->scalar_type() != type || !is_device(*t)) return false;
  return true;
}

// Whether a and b are `dims`-D (2: matrices, 3: batches of them) and multiply: what
// check_mm and check_bmm require of their shapes.
bool multipliable(const at::Tensor& a, const at::Tensor& b, int64_t dims) {
  return a.dim() == dims && b.dim() == dims && a.size(-1) == b.size(-2) && (dims == 2 || a.size(0) == b.size(0));
}

// Whether addmm's bias goes to the product's kernels as a row added to every row of out
// (n contiguous elements, beta 1, not out itself) rather than into out first.
bool bias_row(const at::Tensor& bias, const at::Tensor& out, float beta, int64_t n) {
  return beta == 1.0f && !bias.is_same(out) && bias.dim() >= 1 && bias.size(-1) == n && bias.numel() == n &&
         bias.stride(-1) == 1;
}

// c = alpha · a · b + beta · c (+ row, n contiguous elements), a, b and c 2-D (one product)
// or 3-D (a batch); c's columns contiguous. One launch: for up to 8 rows on GPUs gemm16_rows_kc
// (B's columns contiguous and aligned) or gemm16_rows_nc (B's rows so), else gemm16_rows;
// for more rows gemm16_mma (tensor cores: gemm16_mma.cpp) where the device takes it, else
// gemm16_tiled.
void gemm16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
            const at::Tensor& row = at::Tensor(), Activation act = Activation::kNone) {
  const bool batched = a.dim() == 3;
  const int64_t batch = batched ? a.size(0) : 1, m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (batch == 0 || m == 0 || n == 0) return;
  DEVICE_CHECK(c.stride(-1) == 1 || n == 1, "opencl: a 16-bit product writes a result with contiguous columns");
  const int64_t limit = int64_t(1) << 31;
  for (const at::Tensor* t : {&a, &b, &c}) {
    int64_t reach = 0;
    for (int64_t d = 0; d < t->dim(); ++d) reach += (t->size(d) - 1) * std::abs(t->stride(d));
    DEVICE_CHECK(reach < limit && t->storage_offset() < limit, "opencl: 16-bit products over 2^31 elements ",
                 "are not supported");
  }
  const TensorArg ta = arg(a), tb = arg(b), tc = arg(c), tr = row.defined() ? arg(row) : tc;
  const cl_int a_rs = cl_int(a.stride(-2)), a_cs = cl_int(a.stride(-1)), b_rs = cl_int(b.stride(-2)),
               b_cs = cl_int(b.stride(-1)), c_rs = cl_int(c.stride(-2));
  const cl_long a_bs = batched ? a.stride(0) : 0, b_bs = batched ? b.stride(0) : 0, c_bs = batched ? c.stride(0) : 0;
  const bool rows = m <= 8;  // MAX_ROWS of gemm16_rows
  if (!rows && gemm16_mma(a, b, c, alpha, beta, row, act)) return;
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  std::string options = std::string("-DT=") + cl_storage_type(a.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                        activation_option(act);
  const char* name = rows ? "gemm16_rows" : "gemm16_tiled";
  size_t global[3], local[3];
  // CPUs: one work-item per few columns (OCLF_DEVICE_MATMUL=gpu: as on a GPU anywhere).
  const bool cpu = Device::get().is_cpu() && product_mode() != "gpu";
  // An operand read 16 bytes at a time along its contiguous dimension: the stride between
  // those runs, its offset and its batch stride are whole multiples of 8 elements.
  auto aligned = [&](int64_t stride, int offset, int64_t batch_stride) {
    return stride % 8 == 0 && offset % 8 == 0 && (!batched || batch_stride % 8 == 0);
  };
  const bool few_on_gpu = rows && !cpu;
  // B's columns contiguous in k and aligned (a linear layer's weight): gemm16_rows_kc, 16-byte
  // loads side by side along k (A's rows too where they are aligned alike).
  if (few_on_gpu && b_rs == 1 && aligned(b_cs, tb.offset, b_bs)) {
    const size_t cy = 8;
    name = "gemm16_rows_kc";
    const bool a_vec = a_cs == 1 && aligned(a_rs, ta.offset, a_bs);
    options += " -DCY=" + std::to_string(cy) + (a_vec ? " -DA_VEC" : "");
    global[0] = 32, global[1] = round_up(size_t(n), cy), global[2] = size_t(batch);
    local[0] = 32, local[1] = cy, local[2] = 1;
  } else if (few_on_gpu && b_cs == 1 && aligned(b_rs, tb.offset, b_bs) &&
             Device::get().info().max_work_group_size >= 256) {
    // B's rows contiguous and aligned (a k×n weight, transformers' Conv1D): gemm16_rows_nc, 8
    // columns per work-item, 256 slices of k per group of 8 columns.
    const size_t ks = 256;
    name = "gemm16_rows_nc";
    options += " -DKS=" + std::to_string(ks) + " -DLN=1";
    global[0] = ks, global[1] = size_t((n + 7) / 8), global[2] = size_t(batch);
    local[0] = ks, local[1] = 1, local[2] = 1;
  } else if (rows) {
    // Columns side by side where B's rows are contiguous, k shared where its columns are.
    // On GPUs: 16 neighbouring columns (32-byte rows) × 32 slices of k for a k×n matrix, so
    // that even n = 768 makes 48 groups; 4 columns × 64 slices along k for an n×k one.
    const size_t cx = cpu ? 16 : b_cs == 1 ? 16 : 4, ks = cpu ? 1 : b_cs == 1 ? 32 : 64;
    options += " -DCX=" + std::to_string(cx) + " -DKS=" + std::to_string(ks);
    global[0] = round_up(size_t(n), cx), global[1] = ks, global[2] = size_t(batch);
    local[0] = cx, local[1] = ks, local[2] = 1;
  } else {
    global[0] = size_t((n + 63) / 64) * 16, global[1] = size_t((m + 63) / 64) * 16, global[2] = size_t(batch);
    local[0] = 16, local[1] = 16, local[2] = 1;
  }
  const cl_kernel kernel = Device::get().kernel("gemm16.cl", name, options);
  launch(kernel, NDRange(3, global, local), ta, tb, tc, tr, cl_int(m), cl_int(n), cl_int(k), a_rs, a_cs, a_bs, b_rs,
         b_cs, b_bs, c_rs, c_bs, alpha, beta, cl_int(row.defined()));
}

// out (2-D or 3-D, any strides) = act(alpha · a · b + beta · bias (broadcast)), all of one
// 16-bit dtype; a bias that is one row with beta 1 goes to the kernel, others are copied first.
void product16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const at::Tensor& bias, float alpha,
               float beta, Activation act = Activation::kNone) {
  const bool direct = out.stride(-1) == 1 || out.size(-1) == 1;
  const at::Tensor result = direct ? out : empty_device(out.sizes(), out.scalar_type());
  const int64_t n = out.size(-1);
  if (bias.defined() && bias_row(bias, out, beta, n)) {
    gemm16(a, b, result, alpha, 0.0f, bias.reshape({n}), act);
  } else {
    if (bias.defined() && beta != 0.0f && !bias.is_same(result)) result.copy_(bias.expand(out.sizes()));
    gemm16(a, b, result, alpha, bias.defined() ? beta : 0.0f, at::Tensor(), act);
  }
  if (!result.is_same(out)) out.copy_(result);
}

void check_mm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 2, op, "self");
  check_matrix(b, 2, op, "mat2");
  DEVICE_CHECK(a.size(1) == b.size(0), "opencl: ", op, ": shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied");
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (all_16bit({&self, &mat2, &out}) && multipliable(self, mat2, 2)) {
    at::native::resize_output(out, {self.size(0), mat2.size(1)});
    product16(self, mat2, out, at::Tensor(), 1.0f, 0.0f);
    return out;
  }
  check_mm(self, mat2, "mm");
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  const bool half = all_16bit({&self, &mat2});
  at::Tensor out = empty_device({self.size(0), mat2.size(1)}, half ? self.scalar_type() : at::kFloat);
  return mm_out(self, mat2, out);
}

at::Tensor& addmm_out(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (all_16bit({&bias, &mat1, &mat2, &out}) && multipliable(mat1, mat2, 2)) {
    const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: addmm: self of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::native::resize_output(out, shape);
    product16(mat1, mat2, out, bias, float(alpha.toDouble()), float(beta.toDouble()));
    return out;
  }
  check_mm(mat1, mat2, "addmm");
  check_float(bias, "self");
  const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
  const bool aliased = out.is_same(bias);
  at::native::resize_output(out, shape);
  at::Tensor result = out.is_contiguous() ? out : empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  // A bias row (a linear layer's) goes to the product's kernels, not through a copy into
  // the output first.
  if (bias_row(bias, out, b, shape[1])) {
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
  const bool half = all_16bit({&bias, &mat1, &mat2});
  at::Tensor out = empty_device({mat1.size(0), mat2.size(1)}, half ? mat1.scalar_type() : at::kFloat);
  return addmm_out(bias, mat1, mat2, beta, alpha, out);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  return addmm_out(self, mat1, mat2, beta, alpha, self);
}

// torch.ops.oclf.addmm_act(bias, mat1, mat2, activation): act(addmm(bias, mat1, mat2)), what a
// compiled graph's product and the activation after it become (compile/passes.py). Float32
// products with a bias row that run on the reference's kernels, and 16-bit products
// (gemm16.cl), apply the activation as they store C: one kernel where the product and the
// activation took two; any other product (CLBlast's, another device's) runs addmm and then
// the activation, which gives the same values.
at::Tensor addmm_act_separately(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                                c10::string_view activation) {
  return activated(at::addmm(bias, mat1, mat2), activation_named(activation, "addmm_act"));
}

at::Tensor addmm_act(const at::Tensor& bias, const at::Tensor& mat1, const at::Tensor& mat2,
                     c10::string_view activation) {
  const Activation act = activation_named(activation, "addmm_act");
  if (all_16bit({&bias, &mat1, &mat2}) && multipliable(mat1, mat2, 2)) {
    const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: addmm_act: bias of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::Tensor out = empty_device(shape, mat1.scalar_type());
    product16(mat1, mat2, out, bias, 1.0f, 1.0f, act);
    return out;
  }
  if (mat1.scalar_type() == at::kFloat && mat2.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
      multipliable(mat1, mat2, 2) && is_device(bias) && is_device(mat1) && is_device(mat2)) {
    const int64_t m = mat1.size(0), k = mat1.size(1), n = mat2.size(1);
    at::Tensor out = empty_device({m, n}, at::kFloat);
    if (m > 0 && n > 0 && k > 0 && bias_row(bias, out, 1.0f, n) &&
        fast_product(as_matrix(mat1), as_matrix(mat2), out, size_t(m), size_t(n), size_t(k), bias.reshape({n}), 0.0f,
                     act))
      return out;
  }
  return addmm_act_separately(bias, mat1, mat2, activation);
}

void check_bmm(const at::Tensor& a, const at::Tensor& b, const char* op) {
  check_matrix(a, 3, op, "self");
  check_matrix(b, 3, op, "mat2");
  DEVICE_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "opencl: ", op, ": shapes ", a.sizes(), " and ",
              b.sizes(), " cannot be multiplied");
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (all_16bit({&self, &mat2, &out}) && multipliable(self, mat2, 3)) {
    at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
    product16(self, mat2, out, at::Tensor(), 1.0f, 0.0f);
    return out;
  }
  check_bmm(self, mat2, "bmm");
  at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
  at::Tensor result = out.is_contiguous() ? out : empty_device(out.sizes(), at::kFloat);
  gemm_batched(self, mat2, result, 1.0f, 0.0f);
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  const bool half = all_16bit({&self, &mat2});
  at::Tensor out = empty_device({self.size(0), self.size(1), mat2.size(2)}, half ? self.scalar_type() : at::kFloat);
  return bmm_out(self, mat2, out);
}

at::Tensor baddbmm(const at::Tensor& bias, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  if (all_16bit({&bias, &b1, &b2}) && multipliable(b1, b2, 3)) {
    const std::vector<int64_t> shape = {b1.size(0), b1.size(1), b2.size(2)};
    DEVICE_CHECK(at::is_expandable_to(bias.sizes(), shape), "opencl: baddbmm: self of shape ", bias.sizes(),
                 " does not broadcast to ", at::IntArrayRef(shape));
    at::Tensor out = empty_device(shape, b1.scalar_type());
    product16(b1, b2, out, bias, float(alpha.toDouble()), float(beta.toDouble()));
    return out;
  }
  check_bmm(b1, b2, "baddbmm");
  const std::vector<int64_t> shape = {b1.size(0), b1.size(1), b2.size(2)};
  at::Tensor out = empty_device(shape, at::kFloat);
  const float b = static_cast<float>(beta.toDouble());
  if (b != 0.0f) out.copy_(bias.expand(shape));
  gemm_batched(b1, b2, out, static_cast<float>(alpha.toDouble()), b);
  return out;
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  DEVICE_CHECK(vec.dim() == 1, "opencl: mv: vec must be 1-D, got shape ", vec.sizes());
  return oclf::device::mm(self, vec.unsqueeze(1)).squeeze(1);
}

// ---- dot and vdot: Σ self·other over two vectors, as the device's product and sum -------------
// (vdot conjugates self: the same for real dtypes; complex ones run on the CPU).

at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  DEVICE_CHECK(self.dim() == 1 && other.dim() == 1, "opencl: dot: 1D tensors expected, but got ", self.dim(), "D and ",
               other.dim(), "D tensors");
  DEVICE_CHECK(self.scalar_type() == other.scalar_type(), "opencl: dot: expected both vectors to have same dtype, ",
               "but found ", self.scalar_type(), " and ", other.scalar_type());
  DEVICE_CHECK(self.numel() == other.numel(), "opencl: dot: inconsistent tensor size, expected tensor [",
               self.numel(), "] and src [", other.numel(), "] to have the same number of elements, but got ",
               self.numel(), " and ", other.numel(), " elements respectively");
  DEVICE_DTYPE_CHECK(!at::isComplexType(self.scalar_type()), "opencl: dot: complex vectors run on the CPU");
  return at::mul(self, other).sum().to(self.scalar_type());
}

at::Tensor& dot_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  const at::Tensor result = oclf::device::dot(self, other);
  at::native::resize_output(out, {});
  return out.copy_(result);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("baddbmm", baddbmm);
  m.impl("mv", mv);
  m.impl("dot", dot);
  m.impl("dot.out", dot_out);
  m.impl("vdot", dot);
  m.impl("vdot.out", dot_out);
}

TORCH_LIBRARY_FRAGMENT(oclf, m) {
  m.def("addmm_act(Tensor bias, Tensor mat1, Tensor mat2, str activation) -> Tensor");
}

TORCH_LIBRARY_IMPL(oclf, PrivateUse1, m) {
  m.impl("addmm_act", addmm_act);
}

TORCH_LIBRARY_IMPL(oclf, CompositeExplicitAutograd, m) {
  m.impl("addmm_act", addmm_act_separately);
}

}  // namespace oclf::device
