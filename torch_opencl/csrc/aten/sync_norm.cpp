// The pieces torch's SyncBatchNorm is made of (torch/nn/modules/_functions.py), which torch
// implements for CUDA only: per-process statistics, their combination over processes, the
// normalisation and the two halves of its backward pass. Composed of the device's own
// reductions and elementwise operators; torch.distributed (the "oclf" backend) exchanges the
// statistics between them.
#include <torch/library.h>

#include "tensors.h"
#include "dispatch.h"

namespace oclf::device {

namespace {

// Every dimension but the channels' (1): what batch norm reduces over.
std::vector<int64_t> reduced_dims(const at::Tensor& input) {
  DEVICE_CHECK(input.dim() >= 2, "opencl: batch norm: input must have at least 2 dimensions, got ", input.sizes());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against input: (1, C, 1, ...).
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return v.view(shape);
}

void check_channels(const at::Tensor& v, const at::Tensor& input, const char* what) {
  DEVICE_CHECK(v.dim() == 1 && v.size(0) == input.size(1), "opencl: batch norm: ", what, " must hold one value per channel (",
              input.size(1), "), got ", v.sizes());
}

// Mean and 1/sqrt(biased variance + eps) of each channel.
std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps) {
  check_float(input, "input");
  auto [var, mean] = at::var_mean(input, reduced_dims(input), /*correction=*/0, /*keepdim=*/false);
  return {mean, (var + eps).rsqrt()};
}

// The statistics of the whole batch from each process's mean, invstd and count (rows of
// mean and invstd), as the parallel variance formula combines them; running statistics
// updated with the unbiased variance.
std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  DEVICE_CHECK(mean.dim() == 2 && invstd.sizes() == mean.sizes() && counts.numel() == mean.size(0),
              "opencl: batch_norm_gather_stats_with_counts: mean and invstd must be (processes, channels) and counts "
              "one per process, got ", mean.sizes(), ", ", invstd.sizes(), ", ", counts.sizes());
  const at::Tensor n = counts.to(mean.scalar_type()).view({-1, 1});
  const at::Tensor total = n.sum();
  const at::Tensor global_mean = (mean * n).sum(0) / total;
  const at::Tensor var_each = invstd.pow(-2) - eps;
  const at::Tensor sum_sq = (n * (var_each + (mean - global_mean).pow(2))).sum(0);
  const at::Tensor var = sum_sq / total;
  if (running_mean && running_mean->defined()) {
    at::Tensor rm = *running_mean;
    rm.mul_(1 - momentum).add_(global_mean.to(rm.scalar_type()), momentum);
  }
  if (running_var && running_var->defined()) {
    at::Tensor rv = *running_var;
    const at::Tensor unbiased = sum_sq / (total - 1).clamp_min(1);
    rv.mul_(1 - momentum).add_(unbiased.to(rv.scalar_type()), momentum);
  }
  return {global_mean, (var + eps).rsqrt()};
}

at::Tensor batch_norm_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double eps) {
  reduced_dims(input);
  check_channels(mean, input, "mean");
  check_channels(invstd, input, "invstd");
  at::Tensor scale = invstd;
  if (weight && weight->defined()) scale = scale * *weight;
  at::Tensor out = (input - per_channel(mean, input)) * per_channel(scale, input);
  if (bias && bias->defined()) out.add_(per_channel(*bias, input));
  return out;
}

// Per channel: sum(dy), sum(dy·(x - mean)), and the weight's and bias's gradients.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  const std::vector<int64_t> dims = reduced_dims(input);
  DEVICE_CHECK(grad_out.sizes() == input.sizes(), "opencl: batch_norm_backward_reduce: grad_out ", grad_out.sizes(),
              " and input ", input.sizes(), " differ in shape");
  check_channels(mean, input, "mean");
  const at::Tensor sum_dy = grad_out.sum(dims);
  const at::Tensor sum_dy_xmu = (grad_out * (input - per_channel(mean, input))).sum(dims);
  at::Tensor grad_weight, grad_bias;
  if (weight_g) grad_weight = sum_dy_xmu * invstd;
  if (bias_g) grad_bias = sum_dy;
  if (!input_g) return {at::Tensor(), at::Tensor(), grad_weight, grad_bias};
  return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
}

// The input's gradient from the whole batch's sums (all-reduced over processes) and the
// element count of each process.
at::Tensor batch_norm_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  reduced_dims(input);
  check_channels(sum_dy, input, "sum_dy");
  check_channels(sum_dy_xmu, input, "sum_dy_xmu");
  const at::Tensor total = count.to(mean.scalar_type()).sum();
  const at::Tensor mean_dy = sum_dy / total;
  const at::Tensor proj = sum_dy_xmu / total * invstd.pow(2);
  at::Tensor scale = invstd;
  if (weight && weight->defined()) scale = scale * *weight;
  const at::Tensor xmu = input - per_channel(mean, input);
  return (grad_out - per_channel(mean_dy, input) - xmu * per_channel(proj, input)) * per_channel(scale, input);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("batch_norm_stats", batch_norm_stats);
  m.impl("batch_norm_gather_stats_with_counts", batch_norm_gather_stats_with_counts);
  m.impl("batch_norm_elemt", batch_norm_elemt);
  m.impl("batch_norm_backward_reduce", batch_norm_backward_reduce);
  m.impl("batch_norm_backward_elemt", batch_norm_backward_elemt);
}

}  // namespace oclf::device
