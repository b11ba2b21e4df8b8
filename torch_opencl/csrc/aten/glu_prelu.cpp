// The gated and the parametric activation of the opencl device: GLU (a·σ(b) over the two
// halves a, b of one dimension) and PReLU (x > 0 ? x : w·x, w broadcast), forward and
// backward, as OP_<name>s of kernels/elementwise_nn.h on views of their tensors (no copies).
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "dispatch.h"
#include "pointwise.h"

namespace oclf::device {

namespace {

// ---- GLU: self is (..., 2h, ...) along dim; out (..., h, ...) = first · σ(second) ------------

// The two halves of self along dim, as views.
std::pair<at::Tensor, at::Tensor> halves(const at::Tensor& self, int64_t dim, const char* op) {
  DEVICE_CHECK(self.dim() > 0, "opencl: ", op, ": glu does not support scalars because halving size must be even");
  DEVICE_DTYPE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: ", op, ": not implemented for ",
                     self.scalar_type());
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(d);
  DEVICE_CHECK(n % 2 == 0, "opencl: ", op, ": Halving dimension must be even, but dimension ", d, " is size ", n);
  return {self.narrow(d, 0, n / 2), self.narrow(d, n / 2, n / 2)};
}

at::Tensor& glu_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const auto [first, second] = halves(self, dim, "glu");
  return apply_out("glu", Out::Same, out, {first, second});
}

at::Tensor glu(const at::Tensor& self, int64_t dim) {
  const auto [first, second] = halves(self, dim, "glu");
  return apply("glu", Out::Same, {first, second});
}

// grad_input's first half: grad_output · σ(second); its second half:
// grad_output · first · σ(second) · (1 - σ(second)).
at::Tensor& glu_backward_out(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim,
                             at::Tensor& grad_input) {
  const auto [first, second] = halves(self, dim, "glu_backward");
  at::native::resize_output(grad_input, self.sizes());
  auto [grad_first, grad_second] = halves(grad_input, dim, "glu_backward");
  DEVICE_CHECK(grad_output.sizes() == first.sizes(), "opencl: glu_backward: grad_output has shape ",
               grad_output.sizes(), ", the output ", first.sizes());
  apply_out("glu", Out::Same, grad_first, {grad_output, second});
  apply_out("glu_backward_b", Out::Same, grad_second, {grad_output, first, second});
  return grad_input;
}

at::Tensor glu_backward(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return glu_backward_out(grad_output, self, dim, grad_input);
}

// ---- PReLU: weight broadcasts against self (torch's prelu reshapes it so) --------------------

at::Tensor prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  DEVICE_DTYPE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: prelu: not implemented for ",
                     self.scalar_type());
  return apply("prelu", Out::Same, {self, weight});
}

// (grad_self, grad_weight), both of the broadcast shape, as torch's kernel gives them (autograd
// sums grad_weight to the weight's shape).
std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                         const at::Tensor& weight) {
  DEVICE_DTYPE_CHECK(at::isFloatingType(self.scalar_type()), "opencl: prelu backward: not implemented for ",
                     self.scalar_type());
  const std::vector<int64_t> shape = broadcast_shape({self, weight});
  at::Tensor grad_self = empty_device(shape, self.scalar_type());
  at::Tensor grad_weight = empty_device(shape, weight.scalar_type());
  const at::ScalarType compute = promoted({grad_output, self, weight});
  elementwise("prelu_backward_input", grad_self, {grad_output, self, weight}, compute);
  elementwise("prelu_backward_weight", grad_weight, {grad_output, self}, compute);
  return {grad_self, grad_weight};
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("glu", glu);
  m.impl("glu.out", glu_out);
  m.impl("glu_backward", glu_backward);
  m.impl("glu_backward.grad_input", glu_backward_out);
  m.impl("_prelu_kernel", prelu_kernel);
  m.impl("_prelu_kernel_backward", prelu_kernel_backward);
}

}  // namespace oclf::device
