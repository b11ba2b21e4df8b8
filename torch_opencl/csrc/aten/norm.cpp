// Batch norm (training and eval, forward and backward) and layer norm (forward and
// backward) on the opencl device, kernels/norm.cl. Inputs are made contiguous (N, C, ...).
#include <ATen/native/layer_norm.h>
#include <torch/library.h>

#include "derived.h"
#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

size_t group_size() { return is_cpu() ? 64 : 256; }

size_t chunk() { return is_cpu() ? 16 : 1; }

std::string options() { return "-DGROUP=" + std::to_string(group_size()) + " -DCHUNK=" + std::to_string(chunk()); }

cl_kernel norm_kernel(const char* name) { return device_kernel("norm.cl", name, options()); }

// An optional tensor as a kernel argument: itself, or `stand_in` when absent (unread).
const at::Tensor& or_else(const std::optional<at::Tensor>& t, const at::Tensor& stand_in) {
  return t && t->defined() ? *t : stand_in;
}

bool given(const std::optional<at::Tensor>& t) { return t && t->defined(); }

// NDRange (ceil(HW / chunk), planes) for the per-pixel batch norm kernels: work-groups of
// up to 64 along a plane, a power of two (few sizes to compile).
NDRange planes_range(int HW, int64_t planes) {
  const size_t items = (size_t(HW) + chunk() - 1) / chunk();
  size_t group = 1;
  while (group < items && group < 64) group *= 2;
  const size_t global[2] = {round_up(items, group), size_t(planes)};
  const size_t local[2] = {group, 1};
  return NDRange(2, global, local);
}

// Whether a GPU reads and writes these (N, C, HW) tensors as whole float4s: one flat range
// of float4s (as many bytes in flight with a quarter of the work-items), each in one plane.
bool float4_planes(int HW, std::initializer_list<at::Tensor> tensors) {
  if (is_cpu() || HW % 4 != 0) return false;
  for (const at::Tensor& t : tensors)
    if (t.numel() > INT_MAX || span(t).offset % 4 != 0) return false;
  return true;
}

// One work-group per channel or row.
NDRange groups_range(size_t groups) {
  const size_t g = group_size();
  const size_t global[1] = {groups * g};
  const size_t local[1] = {g};
  return NDRange(1, global, local);
}

// ---- batch norm ---------------------------------------------------------------------------

// Slices per channel for the statistics and gradient sums: one work-group per channel
// leaves a GPU mostly idle when the channels are few and long (64 channels of 16·112·112
// values at the start of a ResNet), so each channel is split until there are about four
// work-groups per compute unit, each with at least 4·GROUP values. 1: one kernel.
int channel_slices(int C, int64_t n) {
  if (C == 0) return 1;
  const int64_t wanted = 4 * int64_t(Runtime::get().info().compute_units);
  const int64_t by_device = (wanted + C - 1) / C;
  const int64_t by_length = n / (4 * int64_t(group_size()));
  return int(std::max<int64_t>(1, std::min<int64_t>({by_device, by_length, 64})));
}

// NDRange (GROUP·S, C): work-group (s, c) for slice s of channel c.
NDRange slices_range(int C, int S) {
  const size_t g = group_size();
  const size_t global[2] = {size_t(S) * g, size_t(C)};
  const size_t local[2] = {g, 1};
  return NDRange(2, global, local);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& input,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const std::optional<at::Tensor>& running_mean,
                                                          const std::optional<at::Tensor>& running_var,
                                                          bool training, double momentum, double eps);

// batch_norm of a 16-bit input on float32 copies: the output back in the input's dtype (the
// saved mean and invstd stay float32, as CUDA keeps them), updated running statistics copied
// back into the caller's.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_widened(const at::Tensor& input,
                                                                  const std::optional<at::Tensor>& weight,
                                                                  const std::optional<at::Tensor>& bias,
                                                                  const std::optional<at::Tensor>& running_mean,
                                                                  const std::optional<at::Tensor>& running_var,
                                                                  bool training, double momentum, double eps) {
  const auto wide = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!given(t)) return std::nullopt;
    return float32_copy(*t);
  };
  const auto stats = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!given(t)) return std::nullopt;
    return t->to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  };
  const std::optional<at::Tensor> rm = stats(running_mean), rv = stats(running_var);
  auto [y, mean, invstd] =
      batch_norm(float32_copy(input), wide(weight), wide(bias), rm, rv, training, momentum, eps);
  if (training && rm && rv) {
    running_mean->copy_(*rm);
    running_var->copy_(*rv);
  }
  return {y.to(input.scalar_type()), mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& input,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const std::optional<at::Tensor>& running_mean,
                                                          const std::optional<at::Tensor>& running_var,
                                                          bool training, double momentum, double eps) {
  // Float32; float16/bfloat16 in eval mode with statistics, weight and bias each of the
  // input's dtype or float32 are read directly (bn_apply's 16-bit builds). Other 16-bit calls
  // (training) run on float32 copies here, the running statistics written back: the
  // operator's schema does not mark them written, so the dtype wrapper would not.
  std::string types;
  if (is_16bit_float(input.scalar_type())) {
    check_device(input, "input");
    const auto fits = [&](const std::optional<at::Tensor>& t) {
      return !given(t) || t->scalar_type() == at::kFloat || t->scalar_type() == input.scalar_type();
    };
    const auto dtype = [](const std::optional<at::Tensor>& t) { return t->scalar_type(); };
    const bool same_stats = !given(running_mean) || !given(running_var) || dtype(running_mean) == dtype(running_var);
    const bool same_affine = !given(weight) || !given(bias) || dtype(weight) == dtype(bias);
    if (training || !fits(running_mean) || !fits(running_var) || !fits(weight) || !fits(bias) || !same_stats ||
        !same_affine)
      return batch_norm_widened(input, weight, bias, running_mean, running_var, training, momentum, eps);
    const auto type = [&](const std::optional<at::Tensor>& t) {
      return std::string(given(t) ? cl_storage_type(t->scalar_type()) : "float");
    };
    types = " -DT=" + std::string(cl_storage_type(input.scalar_type())) + " -DTS=" + type(running_mean) +
            " -DTW=" + type(given(weight) ? weight : bias);
  } else {
    check_float(input, "input");
  }
  DEVICE_CHECK(input.dim() >= 2, "opencl: batch_norm: input must have at least 2 dimensions, got ", input.sizes());
  const at::Tensor x = contiguous(input);
  const int N = int(x.size(0)), C = int(x.size(1));
  const int HW = N * C == 0 ? 0 : int(x.numel() / (int64_t(N) * C));
  at::Tensor y = empty_device(x.sizes(), x.scalar_type());
  at::Tensor mean = empty_device({training ? C : 0}, at::kFloat);
  at::Tensor invstd = empty_device({training ? C : 0}, at::kFloat);
  if (x.numel() == 0) return {y, mean, invstd};
  const bool running = given(running_mean) && given(running_var);
  DEVICE_CHECK(training || running, "opencl: batch_norm in eval mode needs running_mean and running_var");
  if (training) {
    const int S = channel_slices(C, int64_t(N) * HW);
    const TensorArg run_m = arg(or_else(running_mean, mean)), run_v = arg(or_else(running_var, invstd));
    if (S == 1) {
      launch(norm_kernel("bn_stats"), groups_range(size_t(C)), arg(x), arg(mean), arg(invstd), run_m, run_v,
             int(running), N, C, HW, float(eps), float(momentum));
    } else {
      const at::Tensor part = empty_device({C, S, 2}, at::kFloat);
      launch(norm_kernel("bn_stats_part"), slices_range(C, S), arg(x), arg(part), N, C, HW, S);
      launch(norm_kernel("bn_stats_combine"), NDRange::linear(size_t(C)), arg(part), arg(mean), arg(invstd), run_m,
             run_v, int(running), N, C, HW, S, float(eps), float(momentum));
    }
  }
  const at::Tensor& m = training ? mean : *running_mean;
  const at::Tensor& s = training ? invstd : *running_var;
  const bool by4 = float4_planes(HW, {x, y});
  const cl_kernel apply = device_kernel("norm.cl", by4 ? "bn_apply4" : "bn_apply", options() + types);
  const TensorArg w = arg(or_else(weight, x)), b = arg(or_else(bias, x));
  if (by4) {
    launch(apply, NDRange::linear(size_t(x.numel() / 4)), arg(x), arg(y), arg(m), arg(s), w, b,
           int(given(weight)), int(given(bias)), int(!training), C, HW, float(eps), int(x.numel() / 4));
  } else {
    launch(apply, planes_range(HW, int64_t(N) * C), arg(x), arg(y), arg(m), arg(s), w, b, int(given(weight)),
           int(given(bias)), int(!training), C, HW, float(eps));
  }
  return {y, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask) {
  check_float(input, "input");
  check_float(grad_out, "grad_out");
  const at::Tensor x = contiguous(input), dy = contiguous(grad_out);
  const int N = int(x.size(0)), C = int(x.size(1));
  const int HW = N * C == 0 ? 0 : int(x.numel() / (int64_t(N) * C));
  // Training uses the batch's statistics, eval the running ones (a variance: use_var).
  const at::Tensor& m = train ? *save_mean : *running_mean;
  const at::Tensor& s = train ? *save_invstd : *running_var;
  const bool use_var = !train;
  at::Tensor sum_dy = empty_device({C}, at::kFloat), sum_dy_xhat = empty_device({C}, at::kFloat);
  if (x.numel() == 0) {
    sum_dy.zero_();
    sum_dy_xhat.zero_();
  } else if (train || output_mask[1] || output_mask[2]) {
    const int S = channel_slices(C, int64_t(N) * HW);
    if (S == 1) {
      launch(norm_kernel("bn_backward_reduce"), groups_range(size_t(C)), arg(dy), arg(x), arg(m), arg(s),
             arg(sum_dy), arg(sum_dy_xhat), int(use_var), N, C, HW, float(eps));
    } else {
      const at::Tensor part = empty_device({C, S, 2}, at::kFloat);
      launch(norm_kernel("bn_backward_part"), slices_range(C, S), arg(dy), arg(x), arg(m), arg(s),
             arg(part), int(use_var), N, C, HW, S, float(eps));
      launch(norm_kernel("bn_backward_combine"), NDRange::linear(size_t(C)), arg(part), arg(sum_dy),
             arg(sum_dy_xhat), C, S);
    }
  }
  at::Tensor dx;
  if (output_mask[0]) {
    dx = empty_device(x.sizes(), at::kFloat);
    const bool by4 = float4_planes(HW, {x, dy, dx});
    const cl_kernel input = device_kernel("norm.cl", by4 ? "bn_backward_input4" : "bn_backward_input", options());
    if (by4) {
      launch(input, NDRange::linear(size_t(x.numel() / 4)), arg(dy), arg(x), arg(m), arg(s), arg(or_else(weight, x)),
             arg(sum_dy), arg(sum_dy_xhat), arg(dx), int(given(weight)), int(train), int(use_var), N, C, HW,
             float(eps), int(x.numel() / 4));
    } else {
      launch(input, planes_range(HW, int64_t(N) * C), arg(dy), arg(x), arg(m), arg(s), arg(or_else(weight, x)),
             arg(sum_dy), arg(sum_dy_xhat), arg(dx), int(given(weight)), int(train), int(use_var), N, C, HW,
             float(eps));
    }
  }
  return {dx, output_mask[1] ? sum_dy_xhat : at::Tensor(), output_mask[2] ? sum_dy : at::Tensor()};
}

// ---- layer norm ---------------------------------------------------------------------------

// Rows M and row length D of a layer norm over the last `normalized` dimensions.
std::pair<int64_t, int64_t> rows(const at::Tensor& x, at::IntArrayRef normalized) {
  const int64_t axis = x.dim() - int64_t(normalized.size());
  DEVICE_CHECK(axis >= 0 && x.sizes().slice(axis).equals(normalized), "opencl: layer_norm: normalized_shape ",
              normalized, " does not match the input's trailing dimensions ", x.sizes());
  int64_t d = 1;
  for (int64_t s : normalized) d *= s;
  return {d == 0 ? 0 : x.numel() / d, d};
}

// mean and rstd have the input's leading dimensions followed by ones, as torch returns them.
std::vector<int64_t> stat_shape(const at::Tensor& x, size_t normalized) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (size_t k = 0; k < normalized; ++k) shape[shape.size() - 1 - k] = 1;
  return shape;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(const at::Tensor& input, c10::SymIntArrayRef shape,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias, double eps) {
  // x, y, w and b in float32, float16 or bfloat16 (read directly); mean and rstd in float32.
  check_device(input, "input");
  const auto readable = [](const at::Tensor& t) {
    const at::ScalarType type = t.scalar_type();
    return type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  };
  DEVICE_DTYPE_CHECK(readable(input), "opencl: layer_norm: input must be float32, float16 or bfloat16, got ",
                   input.scalar_type());
  const at::IntArrayRef normalized = C10_AS_INTARRAYREF_SLOW(shape);
  // torch's own checks of the shapes (its messages and exception types)
  at::native::_check_layer_norm_inputs(input, normalized, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()));
  const at::Tensor x = contiguous(input);
  const auto [M, D] = rows(x, normalized);
  at::Tensor y = empty_device(x.sizes(), x.scalar_type());
  at::Tensor mean = empty_device(stat_shape(x, normalized.size()), at::kFloat);
  at::Tensor rstd = empty_device(stat_shape(x, normalized.size()), at::kFloat);
  if (M == 0 || D == 0) return {y, mean, rstd};
  const at::Tensor w = given(weight) ? contiguous(*weight) : x, b = given(bias) ? contiguous(*bias) : w;
  DEVICE_DTYPE_CHECK(is_device(w) && is_device(b) && readable(w) && w.scalar_type() == b.scalar_type(),
                   "opencl: layer_norm: weight and bias must be device tensors of one floating dtype");
  const std::string types =
      std::string(" -DT=") + cl_storage_type(x.scalar_type()) + " -DTW=" + cl_storage_type(w.scalar_type());
  launch(device_kernel("norm.cl", "ln_forward", options() + types), groups_range(size_t(M)), arg(x), arg(y),
         arg(w), arg(b), arg(mean), arg(rstd), int(given(weight)), int(given(bias)), int(D), float(eps));
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> output_mask) {
  check_float(input, "input");
  check_float(grad_out, "grad_out");
  const at::IntArrayRef normalized = C10_AS_INTARRAYREF_SLOW(shape);
  const at::Tensor x = contiguous(input), dy = contiguous(grad_out);
  const at::Tensor m = contiguous(mean), r = contiguous(rstd);
  const auto [M, D] = rows(x, normalized);
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    dx = empty_device(x.sizes(), at::kFloat);
    if (M > 0 && D > 0) {
      const at::Tensor w = given(weight) ? contiguous(*weight) : x;
      launch(norm_kernel("ln_backward_input"), groups_range(size_t(M)), arg(dy), arg(x), arg(m), arg(r), arg(w),
             arg(dx), int(given(weight)), int(D));
    }
  }
  if (output_mask[1]) dw = empty_device(normalized, at::kFloat);
  if (output_mask[2]) db = empty_device(normalized, at::kFloat);
  if ((output_mask[1] || output_mask[2]) && D > 0) {
    launch(device_kernel("norm.cl", "ln_backward_params", options()), NDRange::linear(size_t(D)), arg(dy),
           arg(x), arg(m), arg(r), arg(dw.defined() ? dw : x), arg(db.defined() ? db : x), int(dw.defined()),
           int(db.defined()), int(M), int(D));
  }
  return {dx, dw, db};
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("native_batch_norm", batch_norm);
  m.impl("native_batch_norm_backward", batch_norm_backward);
  m.impl("native_layer_norm", layer_norm);
  m.impl("native_layer_norm_backward", layer_norm_backward);
}

}  // namespace oclf::device
