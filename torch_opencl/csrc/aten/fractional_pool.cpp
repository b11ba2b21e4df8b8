// Fractional max pooling of the opencl device (2-D and 3-D): the forward on kernels/pool.cl's
// fractional_max_forward (windows from the random samples, as torch's CPU kernel places
// them), the backward as the device's scatter_add of the gradients at the stored indices,
// plane by plane. float32 and float64; 16-bit tensors through float32 copies.
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "pool.h"

namespace oclf::device {

namespace {

// Sizes of one pooling, (D, H, W) order (2-D: D = 1): input, output, window.
struct Pooling {
  int64_t planes = 1, batch = 1, channels = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  std::vector<int64_t> out_shape;
};

// dims = 2 or 3. Checks what torch checks, with its messages.
Pooling pooling(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef output_size, int dims,
                const char* op) {
  DEVICE_CHECK(int64_t(kernel_size.size()) == dims, "opencl: ", op, ": kernel_size must either be a single Int or ",
               "tuple of ", dims, " Ints");
  DEVICE_CHECK(int64_t(output_size.size()) == dims, "opencl: ", op, ": output_size must either be a single Int or ",
               "tuple of ", dims, " Ints");
  const int64_t nd = self.dim();
  DEVICE_CHECK(nd == dims + 1 || nd == dims + 2, "opencl: ", op, ": Expected ", dims + 1, "D or ", dims + 2,
               "D tensor, but got: ", self.sizes());
  for (int64_t d = 1; d < nd; ++d) {
    DEVICE_CHECK(self.size(d) > 0, "opencl: ", op, ": Expected input to have non-zero size for non-batch ",
                 "dimensions, but got", self.sizes(), " with dimension ", d, " being empty.");
  }
  Pooling p;
  p.batch = nd == dims + 2 ? self.size(0) : 1;
  p.channels = self.size(nd - dims - 1);
  p.planes = p.batch * p.channels;
  p.out_shape.assign(self.sizes().begin(), self.sizes().end());
  static const char* const names[3] = {"time", "height", "width"};
  for (int a = 0; a < dims; ++a) {
    const int axis = 3 - dims + a;
    const int64_t dim = nd - dims + a;
    p.in[axis] = self.size(dim);
    p.out[axis] = output_size[a];
    p.k[axis] = kernel_size[a];
    // 2-D pooling takes out + k - 1 <= in, 3-D out + k - 1 < in (as torch).
    const bool fits = dims == 2 ? p.out[axis] + p.k[axis] - 1 <= p.in[axis] : p.out[axis] + p.k[axis] - 1 < p.in[axis];
    DEVICE_CHECK(fits && p.k[axis] > 0 && p.out[axis] > 0, "opencl: ", op, ": pool ", names[axis], " ", p.k[axis],
                 " too large relative to input ", names[axis], " ", p.in[axis]);
    p.out_shape[dim] = p.out[axis];
  }
  DEVICE_CHECK(self.numel() <= INT_MAX && p.planes * p.out[0] * p.out[1] * p.out[2] <= INT_MAX, "opencl: ", op,
               ": tensors over 2^31 elements are not supported");
  return p;
}

// alpha of an axis in the input's type, as torch computes it: (n - k) / (o - 1).
double alpha(const Pooling& p, int axis, at::ScalarType type) {
  if (p.out[axis] <= 1) return 0.0;
  if (type == at::kFloat) return double(float(p.in[axis] - p.k[axis]) / float(p.out[axis] - 1));
  return double(p.in[axis] - p.k[axis]) / double(p.out[axis] - 1);
}

template <int dims>
std::tuple<at::Tensor&, at::Tensor&> fractional_out(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                    at::IntArrayRef output_size, const at::Tensor& random_samples,
                                                    at::Tensor& output, at::Tensor& indices) {
  const char* op = dims == 2 ? "fractional_max_pool2d" : "fractional_max_pool3d";
  const Pooling p = pooling(self, kernel_size, output_size, dims, op);
  const at::ScalarType type = self.scalar_type();
  const std::string options = std::string(" -DT=") + cl_real_type(type, op);
  DEVICE_CHECK(random_samples.scalar_type() == type, "opencl: ", op, ": Expect _random_samples to have the same ",
               "dtype as input");
  DEVICE_CHECK(random_samples.dim() == 3 && random_samples.size(0) >= p.batch &&
                   random_samples.size(1) == p.channels && random_samples.size(2) == dims,
               "opencl: ", op, ": _random_samples must be (N, C, ", dims, ") with N at least the batch ", p.batch,
               " and C = ", p.channels, " channels, got ", random_samples.sizes());
  DEVICE_CHECK(output.scalar_type() == type && indices.scalar_type() == at::kLong, "opencl: ", op, ": output must be ",
               type, " and indices int64");
  at::Tensor y = pooling::writable(output, p.out_shape, type);
  at::Tensor idx = pooling::writable(indices, p.out_shape, at::kLong);
  // Sample slots per axis (D, H, W): 3-D takes (0, 1, 2), 2-D (H, W) = (1, 0).
  const int slot[3] = {dims == 3 ? 0 : -1, 1, dims == 3 ? 2 : 0};
  const int total = int(y.numel());
  launch(pooling::kernel("fractional_max_forward", dims, options), NDRange::linear(size_t(total)),
         arg(contiguous(self)), arg(contiguous(random_samples)), arg(y), arg(idx), int(p.in[0]), int(p.in[1]),
         int(p.in[2]), int(p.out[0]), int(p.out[1]), int(p.out[2]), int(p.k[0]), int(p.k[1]), int(p.k[2]),
         ScalarArg(alpha(p, 0, type), type), ScalarArg(alpha(p, 1, type), type), ScalarArg(alpha(p, 2, type), type),
         int(dims), slot[0], slot[1], slot[2], total);
  pooling::store(output, y);
  pooling::store(indices, idx);
  return {output, indices};
}

template <int dims>
std::tuple<at::Tensor, at::Tensor> fractional(const at::Tensor& self, at::IntArrayRef kernel_size,
                                              at::IntArrayRef output_size, const at::Tensor& random_samples) {
  at::Tensor output = empty_device({0}, self.scalar_type()), indices = empty_device({0}, at::kLong);
  fractional_out<dims>(self, kernel_size, output_size, random_samples, output, indices);
  return {output, indices};
}

// grad_input's plane p gets grad_output's plane p added at the indices.
template <int dims>
at::Tensor& fractional_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                    const at::Tensor& indices, at::Tensor& grad_input) {
  const char* op = dims == 2 ? "fractional_max_pool2d_backward" : "fractional_max_pool3d_backward";
  const Pooling p = pooling(self, kernel_size, output_size, dims, op);
  DEVICE_CHECK(grad_output.sizes() == at::IntArrayRef(p.out_shape) && indices.sizes() == grad_output.sizes(), "opencl: ",
               op, ": grad_output ", grad_output.sizes(), " and indices ", indices.sizes(), " must be ",
               p.out_shape);
  cl_real_type(self.scalar_type(), op);
  at::native::resize_output(grad_input, self.sizes());
  const int64_t plane_in = p.in[0] * p.in[1] * p.in[2], plane_out = p.out[0] * p.out[1] * p.out[2];
  at::Tensor dx = at::zeros({p.planes, plane_in}, grad_input.options());
  dx.scatter_add_(1, indices.reshape({p.planes, plane_out}),
                  grad_output.reshape({p.planes, plane_out}).to(grad_input.scalar_type()));
  return grad_input.copy_(dx.view(self.sizes()));
}

template <int dims>
at::Tensor fractional_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                               at::IntArrayRef output_size, const at::Tensor& indices) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return fractional_backward_out<dims>(grad_output, self, kernel_size, output_size, indices, grad_input);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("fractional_max_pool2d", fractional<2>);
  m.impl("fractional_max_pool2d.output", fractional_out<2>);
  m.impl("fractional_max_pool2d_backward", fractional_backward<2>);
  m.impl("fractional_max_pool2d_backward.grad_input", fractional_backward_out<2>);
  m.impl("fractional_max_pool3d", fractional<3>);
  m.impl("fractional_max_pool3d.output", fractional_out<3>);
  m.impl("fractional_max_pool3d_backward", fractional_backward<3>);
  m.impl("fractional_max_pool3d_backward.grad_input", fractional_backward_out<3>);
}

}  // namespace oclf::device
