// Reflection and replication padding of the opencl device (1-D, 2-D and 3-D, forward and
// backward) on kernels/pad.cl: a copy per output element forward (any dtype), a fixed-order
// gather per input element backward (float32 and float64; 16-bit through float32 copies).
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "kernel_launch.h"

namespace oclf::device {

namespace {

enum class Mode { Reflect, Replicate };

// The input as planes (P, D, H, W) and the output (P, OD, OH, OW); before: each axis's
// padding at its start (D, H, W), `shape` the output's full shape.
struct Geometry {
  int64_t P = 1;
  int64_t size[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t before[3] = {0, 0, 0};
  std::vector<int64_t> shape;
};

const char* const kAxis[3] = {"D", "H", "W"};

// padding: (left, right[, top, bottom[, front, back]]) for the last `dims` dimensions of self,
// the last first, as torch takes it. Checks what torch checks, with its messages.
Geometry geometry(const at::Tensor& self, at::IntArrayRef padding, int64_t dims, Mode mode, const char* op) {
  DEVICE_CHECK(int64_t(padding.size()) == 2 * dims, "opencl: ", op, ": padding size is expected to be ", 2 * dims,
               ", but got: ", int64_t(padding.size()));
  const int64_t nd = self.dim();
  bool valid = nd == dims + 1 || nd == dims + 2;
  for (int64_t d = nd == dims + 2 ? 1 : 0; d < nd && valid; ++d) valid = self.size(d) != 0;
  DEVICE_CHECK(valid, "opencl: ", op, ": Expected ", dims + 1, "D or ", dims + 2, "D (batch mode) tensor with ",
               "possibly 0 batch size and other non-zero dimensions for input, but got: ", self.sizes());
  Geometry g;
  g.shape.assign(self.sizes().begin(), self.sizes().end());
  for (int64_t k = 0; k < dims; ++k) {
    const int axis = int(2 - k);  // W, then H, then D
    const int64_t dim = nd - 1 - k, n = self.size(dim);
    const int64_t before = padding[2 * k], after = padding[2 * k + 1];
    DEVICE_CHECK(mode == Mode::Replicate || (before < n && after < n), "opencl: ", op, ": Argument #4: Padding ",
                 "size should be less than the corresponding input dimension, but got: padding (", before, ", ", after,
                 ") at dimension ", dim, " of input ", self.sizes());
    const int64_t out = n + before + after;
    DEVICE_CHECK(out >= 1, "opencl: ", op, ": input (", kAxis[axis], ": ", n, ") is too small. Calculated output ",
                 kAxis[axis], ": ", out);
    g.size[axis] = n;
    g.out[axis] = out;
    g.before[axis] = before;
    g.shape[dim] = out;
  }
  g.P = self.numel() / (g.size[0] * g.size[1] * g.size[2]);
  const int64_t total = g.P * g.out[0] * g.out[1] * g.out[2];
  DEVICE_CHECK(total <= INT_MAX && self.numel() <= INT_MAX, "opencl: ", op, ": tensors over 2^31 elements are not ",
               "supported");
  return g;
}

std::string mode_option(Mode mode) { return mode == Mode::Reflect ? " -DREFLECT" : " -DREPLICATE"; }

template <Mode mode, int dims>
const char* op_name(bool backward) {
  static const std::string forward = std::string(mode == Mode::Reflect ? "reflection" : "replication") + "_pad" +
                                     std::to_string(dims) + "d";
  static const std::string back = forward + "_backward";
  return backward ? back.c_str() : forward.c_str();
}

template <Mode mode, int dims>
at::Tensor& pad_out(const at::Tensor& self, at::IntArrayRef padding, at::Tensor& out) {
  const char* op = op_name<mode, dims>(false);
  const Geometry g = geometry(self, padding, dims, mode, op);
  check_device(self, "input");
  const std::string options = std::string("-DT=") + cl_move_type(self.scalar_type(), "input") + mode_option(mode);
  at::native::resize_output(out, g.shape);
  DEVICE_CHECK(out.scalar_type() == self.scalar_type(), "opencl: ", op, ": out has dtype ", out.scalar_type(),
               ", the input ", self.scalar_type());
  at::Tensor y = out.is_contiguous() ? out : empty_device(g.shape, self.scalar_type());
  const int total = int(y.numel());
  launch(device_kernel("pad.cl", "pad_forward", options), NDRange::linear(size_t(total)), arg(contiguous(self)),
         arg(y), int(g.size[0]), int(g.size[1]), int(g.size[2]), int(g.out[0]), int(g.out[1]), int(g.out[2]),
         int(g.before[0]), int(g.before[1]), int(g.before[2]), total);
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

template <Mode mode, int dims>
at::Tensor pad(const at::Tensor& self, at::IntArrayRef padding) {
  at::Tensor out = empty_device({0}, self.scalar_type());
  return pad_out<mode, dims>(self, padding, out);
}

template <Mode mode, int dims>
at::Tensor& pad_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding,
                             at::Tensor& grad_input) {
  const char* op = op_name<mode, dims>(true);
  const Geometry g = geometry(self, padding, dims, mode, op);
  const std::string options = std::string("-DT=") + cl_real_type(self.scalar_type(), op) + mode_option(mode);
  DEVICE_CHECK(grad_output.sizes() == at::IntArrayRef(g.shape), "opencl: ", op, ": grad_output has shape ",
               grad_output.sizes(), ", expected ", g.shape);
  at::native::resize_output(grad_input, self.sizes());
  at::Tensor dx = grad_input.is_contiguous() ? grad_input : empty_device(self.sizes(), self.scalar_type());
  const int total = int(self.numel());
  launch(device_kernel("pad.cl", "pad_backward", options), NDRange::linear(size_t(total)),
         arg(contiguous(grad_output.to(self.scalar_type()))), arg(dx), int(g.size[0]), int(g.size[1]), int(g.size[2]),
         int(g.out[0]), int(g.out[1]), int(g.out[2]), int(g.before[0]), int(g.before[1]), int(g.before[2]), total);
  if (!dx.is_same(grad_input)) grad_input.copy_(dx);
  return grad_input;
}

template <Mode mode, int dims>
at::Tensor pad_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  at::Tensor grad_input = empty_device(self.sizes(), self.scalar_type());
  return pad_backward_out<mode, dims>(grad_output, self, padding, grad_input);
}

constexpr Mode kReflect = Mode::Reflect;
constexpr Mode kReplicate = Mode::Replicate;

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("reflection_pad1d", pad<kReflect, 1>);
  m.impl("reflection_pad1d.out", pad_out<kReflect, 1>);
  m.impl("reflection_pad1d_backward", pad_backward<kReflect, 1>);
  m.impl("reflection_pad1d_backward.grad_input", pad_backward_out<kReflect, 1>);
  m.impl("reflection_pad2d", pad<kReflect, 2>);
  m.impl("reflection_pad2d.out", pad_out<kReflect, 2>);
  m.impl("reflection_pad2d_backward", pad_backward<kReflect, 2>);
  m.impl("reflection_pad2d_backward.grad_input", pad_backward_out<kReflect, 2>);
  m.impl("reflection_pad3d", pad<kReflect, 3>);
  m.impl("reflection_pad3d.out", pad_out<kReflect, 3>);
  m.impl("reflection_pad3d_backward", pad_backward<kReflect, 3>);
  m.impl("reflection_pad3d_backward.grad_input", pad_backward_out<kReflect, 3>);
  m.impl("replication_pad1d", pad<kReplicate, 1>);
  m.impl("replication_pad1d.out", pad_out<kReplicate, 1>);
  m.impl("replication_pad1d_backward", pad_backward<kReplicate, 1>);
  m.impl("replication_pad1d_backward.grad_input", pad_backward_out<kReplicate, 1>);
  m.impl("replication_pad2d", pad<kReplicate, 2>);
  m.impl("replication_pad2d.out", pad_out<kReplicate, 2>);
  m.impl("replication_pad2d_backward", pad_backward<kReplicate, 2>);
  m.impl("replication_pad2d_backward.grad_input", pad_backward_out<kReplicate, 2>);
  m.impl("replication_pad3d", pad<kReplicate, 3>);
  m.impl("replication_pad3d.out", pad_out<kReplicate, 3>);
  m.impl("replication_pad3d_backward", pad_backward<kReplicate, 3>);
  m.impl("replication_pad3d_backward.grad_input", pad_backward_out<kReplicate, 3>);
}

}  // namespace oclf::device
