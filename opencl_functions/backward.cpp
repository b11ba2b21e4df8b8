// Host code for the backward pass of conv2d: the operands in device buffers (Buffer), the
// launches of launch/gradients.hpp (which version of conv2d_backward.cl's kernels, how the
// weight gradient's pixel sum is split), and the gradient read back.
#include "backward.hpp"

#include "launch/runtime_launcher.hpp"
#include "runtime/runtime.hpp"

namespace oclf {

void conv2d_backward_input(const Conv2dGeometry& s, const float* grad_out, const float* weight, float* grad_input,
                           BackwardVariant variant) {
  Runtime& rt = Runtime::get();
  const size_t dy_len = size_t(s.batch) * s.c_out * s.h_out * s.w_out;
  const size_t w_len = size_t(s.c_out) * s.k_dim();
  const size_t dx_len = size_t(s.batch) * s.c_in * s.h * s.w;
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));
  Buffer w = Buffer::input(weight, w_len * sizeof(float));
  Buffer dx = Buffer::output(grad_input, dx_len * sizeof(float));
  RuntimeLauncher launcher(rt);
  gradients::input(launcher, s, dy.get(), w.get(), dx.get(), variant);
  dx.read(grad_input, dx_len * sizeof(float));
}

void conv2d_backward_weight(const Conv2dGeometry& s, const float* x, const float* grad_out, float* grad_weight,
                            BackwardVariant variant) {
  Runtime& rt = Runtime::get();
  const size_t x_len = size_t(s.batch) * s.c_in * s.h * s.w;
  const size_t dy_len = size_t(s.batch) * s.c_out * s.h_out * s.w_out;
  const size_t w_len = size_t(s.c_out) * s.k_dim();
  Buffer xb = Buffer::input(x, x_len * sizeof(float));
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));
  Buffer dw = Buffer::output(grad_weight, w_len * sizeof(float));
  RuntimeLauncher launcher(rt);
  gradients::weight(launcher, s, xb.get(), dy.get(), dw.get(), variant);
  dw.read(grad_weight, w_len * sizeof(float));
}

void conv2d_backward_bias(int batch, int c_out, int out_area, const float* grad_out, float* grad_bias) {
  Runtime& rt = Runtime::get();
  const size_t dy_len = size_t(batch) * c_out * out_area;
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));
  Buffer db = Buffer::output(grad_bias, size_t(c_out) * sizeof(float));
  RuntimeLauncher launcher(rt);
  gradients::bias(launcher, batch, c_out, out_area, dy.get(), db.get());
  db.read(grad_bias, size_t(c_out) * sizeof(float));
}

}  // namespace oclf
