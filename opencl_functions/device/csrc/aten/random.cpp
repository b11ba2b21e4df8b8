// Random numbers on the opencl device: dropout (forward and backward), uniform_, normal_
// (so rand, randn and the initialisations) and bernoulli_. Each launch takes a seed drawn
// from the generator given (an opencl or a CPU one), else from the device's default
// generator, which torch.manual_seed seeds (runtime/generator.h). Kernels:
// kernels/index.cl, kernels/gather.cl.
#include <torch/library.h>

#include <mutex>

#include "../runtime/generator.h"
#include "dispatch.h"
#include "kernel_launch.h"
#include "pointwise.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// Dropout with a seed drawn from the device's default generator.
std::tuple<at::Tensor, at::Tensor> dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  check_float(input, "input");
  const at::Tensor x = contiguous(input);
  at::Tensor y = empty_device(x.sizes(), at::kFloat), mask = empty_device(x.sizes(), at::kBool);
  if (!train.value_or(true) || p == 0) {
    y.copy_(x);
    mask.fill_(true);
    return {y, mask};
  }
  const uint64_t seed = draw_seed(std::nullopt);
  const cl_uint lo = cl_uint(seed), hi = cl_uint(seed >> 32);
  const float scale = p >= 1 ? 0.0f : float(1.0 / (1.0 - p));
  launch(Device::get().kernel("index.cl", "dropout", ""), NDRange::linear(size_t(x.numel())), arg(x), arg(y),
         arg(mask), lo, hi, float(p), scale, int(x.numel()));
  return {y, mask};
}

at::Tensor dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  return apply("dropout_backward", Out::Same, {grad_output, mask}, scale);
}

// Fills self (float) from a seed drawn from `gen` or the device's default generator.
at::Tensor& random_fill(at::Tensor& self, int mode, double a, double b, const std::optional<at::Generator>& gen) {
  check_float(self, "self");
  if (self.numel() == 0) return self;
  const uint64_t seed = draw_seed(gen);
  at::Tensor y = self.is_contiguous() ? self : empty_device(self.sizes(), at::kFloat);
  const cl_uint lo = cl_uint(seed), hi = cl_uint(seed >> 32);
  launch(Device::get().kernel("gather.cl", "random_fill", ""), NDRange::linear(size_t(y.numel())), arg(y), lo, hi,
         int(mode), float(a), float(b), int(y.numel()));
  if (!y.is_same(self)) self.copy_(y);
  return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return random_fill(self, 0, from, to, gen);
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return random_fill(self, 1, mean, std, gen);
}

at::Tensor& bernoulli_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return random_fill(self, 2, p, 0, gen);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("native_dropout", dropout);
  m.impl("native_dropout_backward", dropout_backward);
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("bernoulli_.float", bernoulli_);
}

}  // namespace oclf::device
