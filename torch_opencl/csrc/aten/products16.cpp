// 16-bit matrix products of the opencl device (products.h, kernels/gemm16.cl): float16 and
// bfloat16 operands are read as stored and multiplied in float32 (no float32 copies of
// activations or weights); the result is stored in their dtype.
#include "activations.h"
#include "gemm16_mma.h"
#include "kernel_launch.h"
#include "pointwise.h"
#include "products.h"
#include "tensors.h"

namespace oclf::device::products {

bool all_16bit(std::initializer_list<const at::Tensor*> tensors) {
  const at::ScalarType type = (*tensors.begin())->scalar_type();
  for (const at::Tensor* t : tensors)
    if (!is_16bit_float(t->scalar_type()) || t->scalar_type() != type || !is_device(*t)) return false;
  return true;
}

bool multipliable(const at::Tensor& a, const at::Tensor& b, int64_t dims) {
  return a.dim() == dims && b.dim() == dims && a.size(-1) == b.size(-2) && (dims == 2 || a.size(0) == b.size(0));
}

bool bias_row(const at::Tensor& bias, const at::Tensor& out, float beta, int64_t n) {
  return beta == 1.0f && !bias.is_same(out) && bias.dim() >= 1 && bias.size(-1) == n && bias.numel() == n &&
         bias.stride(-1) == 1;
}

namespace {

// c = alpha · a · b + beta · c (+ row, n contiguous elements), a, b and c 2-D (one product)
// or 3-D (a batch); c's columns contiguous. One launch: for up to 8 rows on GPUs gemm16_rows_kc
// (B's columns contiguous and aligned) or gemm16_rows_nc (B's rows so), else gemm16_rows;
// for more rows gemm16_mma (tensor cores: gemm16_mma.cpp) where the device takes it, else
// gemm16_tiled.
// Whether every element t reaches, and its offset, can be indexed with an int.
bool int_indexed(const at::Tensor& t) {
  const int64_t limit = int64_t(1) << 31;
  int64_t reach = 0;
  for (int64_t d = 0; d < t.dim(); ++d) reach += (t.size(d) - 1) * std::abs(t.stride(d));
  return reach < limit && t.storage_offset() < limit;
}

// around: gemm16_rows_nc's options (product16_rows_around); where they are given and the
// product does not take that kernel, false and nothing launched.
bool gemm16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
            const at::Tensor& row, Activation act, const RowsAround& around = {}) {
  const bool batched = a.dim() == 3;
  const int64_t batch = batched ? a.size(0) : 1, m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (batch == 0 || m == 0 || n == 0) return true;
  DEVICE_CHECK(c.stride(-1) == 1 || n == 1, "opencl: a 16-bit product writes a result with contiguous columns");
  for (const at::Tensor* t : {&a, &b, &c})
    DEVICE_CHECK(int_indexed(*t), "opencl: 16-bit products over 2^31 elements are not supported");
  const TensorArg ta = arg(a), tb = arg(b), tc = arg(c), tr = row.defined() ? arg(row) : tc;
  const cl_int a_rs = cl_int(a.stride(-2)), a_cs = cl_int(a.stride(-1)), b_rs = cl_int(b.stride(-2)),
               b_cs = cl_int(b.stride(-1)), c_rs = cl_int(c.stride(-2));
  const cl_long a_bs = batched ? a.stride(0) : 0, b_bs = batched ? b.stride(0) : 0, c_bs = batched ? c.stride(0) : 0;
  const bool rows = m <= 8;  // MAX_ROWS of gemm16_rows
  // CPUs: one work-item per few columns (OCLF_DEVICE_MATMUL=gpu: as on a GPU anywhere).
  const bool cpu = is_cpu() && product_mode() != "gpu";
  // An operand read 16 bytes at a time along its contiguous dimension: the stride between
  // those runs, its offset and its batch stride are whole multiples of 8 elements.
  auto aligned = [&](int64_t stride, int offset, int64_t batch_stride) {
    return stride % 8 == 0 && offset % 8 == 0 && (!batched || batch_stride % 8 == 0);
  };
  const bool few_on_gpu = rows && !cpu;
  const bool kc = few_on_gpu && b_rs == 1 && aligned(b_cs, tb.offset, b_bs);
  const bool nc = !kc && few_on_gpu && b_cs == 1 && aligned(b_rs, tb.offset, b_bs) &&
                  Runtime::get().info().max_work_group_size >= 256;
  if ((around.norm_weight.defined() || around.residual.defined()) && !nc) return false;
  if (!rows && gemm16_mma(a, b, c, alpha, beta, row, act)) return true;
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  std::string options = std::string("-DT=") + cl_storage_type(a.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                        activation_option(act);
  const char* name = rows ? "gemm16_rows" : "gemm16_tiled";
  size_t global[3], local[3];
  // B's columns contiguous in k and aligned (a linear layer's weight): gemm16_rows_kc, 16-byte
  // loads side by side along k (A's rows too where they are aligned alike).
  if (kc) {
    const size_t cy = 8;
    name = "gemm16_rows_kc";
    const bool a_vec = a_cs == 1 && aligned(a_rs, ta.offset, a_bs);
    options += " -DCY=" + std::to_string(cy) + (a_vec ? " -DA_VEC" : "");
    global[0] = 32, global[1] = round_up(size_t(n), cy), global[2] = size_t(batch);
    local[0] = 32, local[1] = cy, local[2] = 1;
  } else if (nc) {
    // B's rows contiguous and aligned (a k×n weight, transformers' Conv1D): gemm16_rows_nc, 8
    // columns per work-item, 256 slices of k per group of 8 columns.
    const size_t ks = 256;
    name = "gemm16_rows_nc";
    options += " -DKS=" + std::to_string(ks) + " -DLN=1" + (around.norm_weight.defined() ? " -DLAYER_NORM" : "") +
               (around.residual.defined() ? " -DRESIDUAL" : "");
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
  const cl_kernel kernel = device_kernel("gemm16.cl", name, options);
  const NDRange range(3, global, local);
  if (nc) {
    const bool norm = around.norm_weight.defined(), residual = around.residual.defined();
    const TensorArg tw = norm ? arg(around.norm_weight) : ta, tbias = norm ? arg(around.norm_bias) : ta;
    const TensorArg tres = residual ? arg(around.residual) : ta;
    launch(kernel, range, ta, tb, tc, tr, cl_int(m), cl_int(n), cl_int(k), a_rs, a_cs, a_bs, b_rs, b_cs, b_bs, c_rs,
           c_bs, alpha, beta, cl_int(row.defined()), tw, tbias, cl_float(around.norm_eps), tres,
           cl_int(residual ? around.residual.stride(0) : 0));
  } else {
    launch(kernel, range, ta, tb, tc, tr, cl_int(m), cl_int(n), cl_int(k), a_rs, a_cs, a_bs, b_rs, b_cs, b_bs, c_rs,
           c_bs, alpha, beta, cl_int(row.defined()));
  }
  return true;
}

}  // namespace

void product16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const at::Tensor& bias, float alpha,
               float beta, Activation act) {
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

bool product16_rows_around(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const at::Tensor& bias,
                           Activation act, const RowsAround& around) {
  if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2 || !multipliable(a, b, 2) || a.size(0) == 0 ||
      a.size(1) == 0 || b.size(1) == 0 || !out.is_contiguous() || out.size(0) != a.size(0) || out.size(1) != b.size(1))
    return false;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (!all_16bit({&a, &b, &out, &bias}) || !bias_row(bias, out, 1.0f, n)) return false;
  if (around.norm_weight.defined()) {
    for (const at::Tensor* t : {&around.norm_weight, &around.norm_bias})
      if (!t->defined() || !all_16bit({&a, t}) || t->dim() != 1 || t->size(0) != k) return false;
  }
  if (around.residual.defined()) {
    const at::Tensor& r = around.residual;
    if (!all_16bit({&a, &r}) || r.dim() != 2 || r.size(0) != m || r.size(1) != n || r.stride(1) != 1 ||
        !int_indexed(r))
      return false;
  }
  // gemm16 takes it where the product runs on gemm16_rows_nc (few rows, as on a GPU, b's rows
  // contiguous and 16-byte aligned).
  return gemm16(a, b, out, 1.0f, 0.0f, bias.reshape({n}), act, around);
}

bool product16_group(const at::Tensor& a, const std::vector<at::Tensor>& bs, std::vector<at::Tensor>& outs,
                     const GroupOptions& opt) {
  if (bs.empty() || bs.size() > 3 || a.dim() != 2 || a.size(0) == 0 || a.size(0) > 8 || a.size(1) == 0) return false;
  if (is_cpu() && product_mode() != "gpu") return false;  // (CPUs run few-row products otherwise)
  const int64_t m = a.size(0), k = a.size(1), b_cs = bs[0].stride(1);
  for (const at::Tensor& b : bs) {
    if (!all_16bit({&a, &b}) || !multipliable(a, b, 2) || b.size(1) == 0 || b.stride(0) != 1 || b.stride(1) != b_cs ||
        b_cs % 8 != 0 || arg(b).offset % 8 != 0 || b_cs * b.size(1) >= (int64_t(1) << 31))
      return false;
  }
  if (a.numel() >= (int64_t(1) << 31)) return false;
  const TensorArg ta = arg(a);
  const bool a_vec = a.stride(1) == 1 && a.stride(0) % 8 == 0 && ta.offset % 8 == 0;
  const bool rms = opt.rms_weight.defined(), residual = opt.residual.defined();
  if (rms) {  // the gain read 8 at a time, A's rows too
    const at::Tensor& w = opt.rms_weight;
    if (!a_vec || k % 8 != 0 || !all_16bit({&a, &w}) || w.dim() != 1 || w.size(0) != k || w.stride(0) != 1 ||
        arg(w).offset % 8 != 0)
      return false;
  }
  if (opt.gated && (bs.size() != 2 || bs[0].size(1) != bs[1].size(1))) return false;
  if (residual) {
    const at::Tensor& r = opt.residual;
    if (bs.size() != 1 || opt.gated || !all_16bit({&a, &r}) || r.dim() != 2 || r.size(0) != m ||
        r.size(1) != bs[0].size(1) || r.stride(1) != 1 || r.stride(0) >= (int64_t(1) << 31))
      return false;
  }
  const size_t products = opt.gated ? 1 : bs.size();
  int64_t n[3] = {0, 0, 0};
  TensorArg tb[3], tc[3];
  outs.clear();
  for (size_t g = 0; g < bs.size(); ++g) {
    n[g] = bs[g].size(1);
    tb[g] = arg(bs[g]);
    if (g < products) {
      outs.push_back(empty_device({m, n[g]}, a.scalar_type()));
      tc[g] = arg(outs[g]);
    }
  }
  for (size_t g = bs.size(); g < 3; ++g) tb[g] = tb[0];  // (n_g = 0: never read)
  for (size_t g = products; g < 3; ++g) tc[g] = tc[0];   // (never written)
  const size_t cy = 8, columns = size_t(opt.gated ? n[0] : n[0] + n[1] + n[2]);
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  const std::string options = std::string("-DT=") + cl_storage_type(a.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                              " -DGROUP -DCY=" + std::to_string(cy) + (a_vec ? " -DA_VEC" : "") +
                              (rms ? " -DRMS" : "") + (opt.gated ? " -DGLU" + activation_option(opt.glu) : "") +
                              (residual ? " -DRESIDUAL" : "");
  const size_t global[3] = {32, round_up(columns, cy), 1}, local[3] = {32, cy, 1};
  const TensorArg tw = rms ? arg(opt.rms_weight) : ta, tr = residual ? arg(opt.residual) : ta;
  launch(device_kernel("gemm16.cl", "gemm16_rows_kc_group", options), NDRange(3, global, local), ta,
         cl_int(a.stride(0)), cl_int(a.stride(1)), cl_int(m), cl_int(k), tb[0], tb[1], tb[2], cl_int(b_cs), tc[0],
         tc[1], tc[2], cl_int(n[0]), cl_int(n[1]), cl_int(n[2]), tw, cl_float(opt.rms_eps), tr,
         cl_int(residual ? opt.residual.stride(0) : 0));
  return true;
}

}  // namespace oclf::device::products
