// Random numbers on the opencl device: dropout (forward and backward), uniform_, normal_
// (so rand, randn and the initialisations), bernoulli_ (with one probability or a tensor of
// them), random_ (randint, integer draws), exponential_, log_normal_, cauchy_, geometric_ and
// normal with tensors of means or standard deviations, randperm. Each launch takes the (seed,
// offset) of the generator given (an opencl one; a CPU one gives a seed), else of the
// device's default generator, which torch.manual_seed seeds, and moves its offset past the
// numbers it draws (runtime/generator.h). Kernels: kernels/random.cl.
#include <torch/library.h>

#include <limits>
#include <mutex>
#include <string>

#include "../runtime/generator.h"
#include "dispatch.h"
#include "kernel_launch.h"
#include "pointwise.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// Work-items of a random kernel drawing n numbers at rng's offset, `per` numbers a block
// (kernels/random.cl): one for each block from the offset's to the last number's.
NDRange blocks(const PhiloxInputs& rng, int64_t n, uint64_t per) {
  return NDRange::linear(size_t((rng.offset % per + uint64_t(n) + per - 1) / per));
}

// Dropout with the numbers of the device's default generator.
std::tuple<at::Tensor, at::Tensor> dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  check_float(input, "input");
  const at::Tensor x = contiguous(input);
  at::Tensor y = empty_device(x.sizes(), at::kFloat), mask = empty_device(x.sizes(), at::kBool);
  if (!train.value_or(true) || p == 0) {
    y.copy_(x);
    mask.fill_(true);
    return {y, mask};
  }
  const PhiloxInputs rng = draw_philox(std::nullopt, uint64_t(x.numel()));
  const float scale = p >= 1 ? 0.0f : float(1.0 / (1.0 - p));
  launch(device_kernel("random.cl", "dropout", ""), blocks(rng, x.numel(), 4), arg(x), arg(y),
         arg(mask), cl_ulong(rng.seed), cl_ulong(rng.offset), float(p), scale, int(x.numel()));
  return {y, mask};
}

// Integer and bool gradients take torch's formula, grad · (mask · scale): float32, as on the CPU
// (in their own type they were truncated).
at::Tensor dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  if (!at::isFloatingType(grad_output.scalar_type())) return grad_output * (mask.to(grad_output.scalar_type()) * scale);
  return apply("dropout_backward", Out::Same, {grad_output, mask}, scale);
}

// Fills self (float) with numbers of `gen` or the device's default generator.
at::Tensor& random_fill(at::Tensor& self, int mode, double a, double b, const std::optional<at::Generator>& gen) {
  check_float(self, "self");
  if (self.numel() == 0) return self;
  const PhiloxInputs rng = draw_philox(gen, uint64_t(self.numel()));
  at::Tensor y = self.is_contiguous() ? self : empty_device(self.sizes(), at::kFloat);
  launch(device_kernel("random.cl", "random_fill", ""), blocks(rng, y.numel(), 4), arg(y),
         cl_ulong(rng.seed), cl_ulong(rng.offset), int(mode), float(a), float(b), int(y.numel()));
  if (!y.is_same(self)) self.copy_(y);
  return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  DEVICE_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  return random_fill(self, 0, from, to, gen);
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  DEVICE_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return random_fill(self, 1, mean, std, gen);
}

at::Tensor& bernoulli_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return random_fill(self, 2, p, 0, gen);
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  DEVICE_CHECK(lambd > 0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return random_fill(self, 3, lambd, 0, gen);
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  DEVICE_CHECK(std > 0, "log_normal_ expects std > 0.0, but found std=", std);
  return random_fill(self, 4, mean, std, gen);
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  DEVICE_CHECK(sigma > 0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  return random_fill(self, 5, median, sigma, gen);
}

at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  DEVICE_CHECK(p > 0 && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  return random_fill(self, 6, p, 0, gen);
}

// Float32 draws of `sizes`: uniform in [0, 1) (mode 0) or standard normal (mode 1). The
// operators below that take a probability, a mean or a standard deviation per element apply
// them to these with the device's own elementwise kernels.
at::Tensor draws(at::IntArrayRef sizes, int mode, const std::optional<at::Generator>& gen) {
  at::Tensor z = empty_device(sizes, at::kFloat);
  random_fill(z, mode, 0, 1, gen);
  return z;
}

at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  self.copy_(at::lt(draws(self.sizes(), 0, gen), p.to(self.device())));
  return self;
}

at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  DEVICE_CHECK(std >= 0, "normal expects std >= 0.0, but found std ", std);
  return (draws(mean.sizes(), 1, gen) * std + mean).to(mean.scalar_type());
}

at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return (draws(std.sizes(), 1, gen) * std + mean).to(std.scalar_type());
}

at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return (draws(at::infer_size(mean.sizes(), std.sizes()), 1, gen) * std + mean)
      .to(at::promote_types(mean.scalar_type(), std.scalar_type()));
}

// The largest value random_ draws for a dtype when no upper end is given (torch's rule: every
// value of an integer type from `from` up; floats up to 2^digits, so each is exact).
int64_t random_top(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBool: return 1;
    case at::kByte: return 255;
    case at::kChar: return 127;
    case at::kShort: return 32767;
    case at::kInt: return 2147483647;
    case at::kLong: return std::numeric_limits<int64_t>::max();
    case at::kHalf: return int64_t(1) << 11;
    case at::kBFloat16: return int64_t(1) << 8;
    case at::kFloat: return int64_t(1) << 24;
    case at::kDouble: return int64_t(1) << 53;
    default: break;
  }
  DEVICE_DTYPE_CHECK(false, "opencl: random_ does not take dtype ", dtype);
  return 0;
}

// Fills self with integers in [from, from + range) (range 0: 2^64), numbers of `gen` or the
// device's default generator: a 32-bit word each for ranges up to 2^16, else 64 bits. Float16, bfloat16 and float64 are filled through
// a float32 or int64 tensor, which holds each of their draws exactly.
at::Tensor& random_range(at::Tensor& self, int64_t from, uint64_t range, const std::optional<at::Generator>& gen) {
  if (self.numel() == 0) return self;
  const at::ScalarType dtype = self.scalar_type();
  const at::ScalarType fill = dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat
                              : dtype == at::kDouble                      ? at::kLong
                                                                          : dtype;
  at::Tensor y = self.is_contiguous() && fill == dtype ? self : empty_device(self.sizes(), fill);
  const PhiloxInputs rng = draw_philox(gen, uint64_t(y.numel()));
  const std::string type = std::string("-DT=") + cl_type(fill, "self");
  if (range != 0 && range <= (uint64_t(1) << 16)) {  // one 32-bit word an element
    launch(device_kernel("random.cl", "random_range32", type), blocks(rng, y.numel(), 4), arg(y),
           cl_ulong(rng.seed), cl_ulong(rng.offset), cl_long(from), cl_uint(range), int(y.numel()));
  } else {
    launch(device_kernel("random.cl", "random_range64", type), blocks(rng, y.numel(), 2), arg(y),
           cl_ulong(rng.seed), cl_ulong(rng.offset), cl_long(from), cl_ulong(range), int(y.numel()));
  }
  if (!y.is_same(self)) self.copy_(y);
  return self;
}

// random_(from, to): torch's checks, then [from, to), or [from, top of the dtype] without `to`.
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  const at::ScalarType dtype = self.scalar_type();
  const int64_t top = random_top(dtype);
  if (at::isIntegralType(dtype, /*includeBool=*/true)) {  // floats take any range (torch warns)
    const int64_t bottom = dtype == at::kBool || dtype == at::kByte ? 0 : -top - 1;
    DEVICE_CHECK(from >= bottom && from <= top, "from is out of bounds for ", dtype);
    DEVICE_CHECK(!to || (*to - 1 >= bottom && *to - 1 <= top), "to - 1 is out of bounds for ", dtype);
  }
  if (to) {
    DEVICE_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
    return random_range(self, from, uint64_t(*to) - uint64_t(from), gen);
  }
  DEVICE_CHECK(from <= top, "random_ expects 'from' to be at most ", top, " for dtype ", self.scalar_type(),
               ", but got from=", from);
  return random_range(self, from, uint64_t(top) - uint64_t(from) + 1, gen);
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}

at::Tensor& random_all(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_range(self, 0, uint64_t(random_top(self.scalar_type())) + 1, gen);
}

// randperm: the order that sorts n random 64-bit keys (ties have probability ~n²/2^65).
at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  DEVICE_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  at::Tensor keys = empty_device({n}, at::kLong);
  random_range(keys, std::numeric_limits<int64_t>::min(), 0, gen);
  out.copy_(std::get<1>(keys.sort(/*stable=*/true, 0, false)));
  return out;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("randperm.generator_out", randperm_out);
  m.impl("random_.from", random_from);
  m.impl("random_.to", random_to);
  m.impl("random_", random_all);
  m.impl("native_dropout", dropout);
  m.impl("native_dropout_backward", dropout_backward);
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("bernoulli_.float", bernoulli_);
  m.impl("bernoulli_.Tensor", bernoulli_tensor_);
  m.impl("exponential_", exponential_);
  m.impl("log_normal_", log_normal_);
  m.impl("cauchy_", cauchy_);
  m.impl("geometric_", geometric_);
  m.impl("normal.Tensor_float", normal_tensor_float);
  m.impl("normal.float_Tensor", normal_float_tensor);
  m.impl("normal.Tensor_Tensor", normal_tensor_tensor);
}

}  // namespace oclf::device
