// Group norm's backward on the opencl device (the forward is torch's composition of batch
// norm, which runs natively; float16 and bfloat16 in float32): kernels/group_norm.cl sums dy and dy·x per channel, the
// device's small operators turn those (N, C) sums into the gradients of the weight and
// bias and into dx's coefficients per channel and group, and one kernel applies them.
// float32 and float64; 16-bit tensors through float32 copies. The forward is torch's own
// composition on a contiguous copy of a non-contiguous input (torch's views a channels-last
// input and refuses it).
#include <ATen/ops/native_group_norm_native.h>
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "kernel_launch.h"

namespace oclf::device {

namespace {

size_t group_size() { return is_cpu() ? 64 : 256; }

// grad_out and input are (N, C, HxW) (any trailing shape), mean and rstd (N, group), weight
// (C) or undefined. Returns (dx, dgamma, dbeta), each undefined where output_mask says so.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_, int64_t group,
    std::array<bool, 3> output_mask) {
  const int64_t N = N_.expect_int(), C = C_.expect_int(), HxW = HxW_.expect_int();
  const at::ScalarType type = input.scalar_type();
  const std::string options =
      std::string("-DT=") + cl_real_type(type, "native_group_norm_backward input") + " -DGROUP=" +
      std::to_string(group_size());
  DEVICE_CHECK(group > 0 && C % group == 0, "opencl: native_group_norm_backward: ", C, " channels in ", group,
               " groups");
  DEVICE_CHECK(input.numel() == N * C * HxW && grad_out.sizes() == input.sizes(),
               "opencl: native_group_norm_backward: input ", input.sizes(), " and grad_out ", grad_out.sizes(),
               " are not (N, C, HxW) = (", N, ", ", C, ", ", HxW, ")");
  DEVICE_CHECK(mean.numel() == N * group && rstd.numel() == N * group, "opencl: native_group_norm_backward: ",
               "mean and rstd must have N·group = ", N * group, " elements");
  DEVICE_CHECK(input.numel() <= INT_MAX, "opencl: native_group_norm_backward: tensors over 2^31 elements are not ",
               "supported");
  const bool has_w = weight && weight->defined();
  DEVICE_CHECK(!has_w || weight->numel() == C, "opencl: native_group_norm_backward: weight has ", weight->numel(),
               " elements for ", C, " channels");
  const int64_t D = C / group;
  const at::Tensor x = contiguous(input), dy = contiguous(grad_out.to(type));
  const at::Tensor m = mean.reshape({N, group, 1}).to(type), r = rstd.reshape({N, group, 1}).to(type);

  // ds[n, c] = Σ dy·x and db[n, c] = Σ dy over the channel's HxW values.
  at::Tensor ds = empty_device({N, C}, type), db = empty_device({N, C}, type);
  if (HxW == 0) {
    ds.zero_();
    db.zero_();
  } else {
    const size_t g = group_size();
    const size_t global[1] = {size_t(N * C) * g};
    const size_t local[1] = {g};
    launch(device_kernel("group_norm.cl", "gn_channel_sums", options), NDRange(1, global, local), arg(dy),
           arg(x), arg(ds), arg(db), int(HxW));
  }
  at::Tensor dx, dgamma, dbeta;
  if (output_mask[0]) {
    // Per group, with s = 1/(D·HxW): b = (Σ db·γ · mean - Σ ds·γ)·rstd³·s and
    // e = -b·mean - Σ db·γ · rstd·s; per channel a = rstd·γ.
    const at::Tensor gamma = has_w ? weight->reshape({1, group, D}).to(type) : at::Tensor();
    const at::Tensor ds3 = ds.view({N, group, D}), db3 = db.view({N, group, D});
    const at::Tensor ds_g = (has_w ? ds3 * gamma : ds3).sum(2, true);
    const at::Tensor db_g = (has_w ? db3 * gamma : db3).sum(2, true);
    const double s = 1.0 / double(std::max<int64_t>(D * HxW, 1));
    const at::Tensor b = (db_g * m - ds_g) * r * r * r * s;
    const at::Tensor e = -b * m - db_g * r * s;
    const at::Tensor a = has_w ? (r * gamma).contiguous() : r.expand({N, group, D}).contiguous();
    dx = empty_device(input.sizes(), type);
    launch(device_kernel("group_norm.cl", "gn_backward_input", options), NDRange::linear(size_t(x.numel())),
           arg(dy), arg(x), arg(a), arg(b.contiguous()), arg(e.contiguous()), arg(dx), int(C), int(D), int(HxW),
           int(x.numel()));
  }
  if (output_mask[1]) {
    // dgamma[c] = Σ_n (ds - db·mean)·rstd.
    dgamma = ((ds.view({N, group, D}) - db.view({N, group, D}) * m) * r).sum(0).reshape({C});
    if (has_w) dgamma = dgamma.to(weight->scalar_type());
  }
  if (output_mask[2]) {
    dbeta = db.sum(0);
    if (has_w) dbeta = dbeta.to(weight->scalar_type());
  }
  return {dx, dgamma, dbeta};
}

// torch's composition (batch norm over (1, N·group, ...) views), on a contiguous input. In
// float16 and bfloat16 it would round the normalized values, then the affine's result: torch's
// CPU and CUDA kernels round once (0.0 where the CPU gives 0.0315 in bfloat16), so 16-bit
// tensors are computed in float32 (the registration's float32 copies) and rounded at the end.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm(const at::Tensor& input,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias, c10::SymInt N,
                                                          c10::SymInt C, c10::SymInt HxW, int64_t group, double eps) {
  const auto narrow = [](const std::optional<at::Tensor>& t) {
    return t && t->defined() && (t->scalar_type() == at::kHalf || t->scalar_type() == at::kBFloat16);
  };
  DEVICE_DTYPE_CHECK(!narrow(input) && !narrow(weight) && !narrow(bias),
                     "opencl: native_group_norm computes float16 and bfloat16 in float32");
  return at::native::math_group_norm(input.contiguous(), weight, bias, N.expect_int(), C.expect_int(),
                                     HxW.expect_int(), group, eps);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("native_group_norm", group_norm);
  m.impl("native_group_norm_backward", group_norm_backward);
}

}  // namespace oclf::device
