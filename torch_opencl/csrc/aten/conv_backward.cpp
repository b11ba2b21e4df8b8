// Convolution on the opencl device, backward: the input gradient as forward convolutions
// of dy with flipped, swapped weights (strided layers: one stride-1 convolution per phase of
// input positions, with the taps that reach it; strided 1×1 layers: at the strided positions
// only; strided and dilated ones: of dy spread out by the stride); the weight gradient
// (groups = 1) as a forward convolution with images and channels swapped (conv2d_gpu with NC_SWAPPED; on CPUs
// conv2d_cpu over swapped copies: a ResNet-50 training step at batch 16 on PoCL, 2 cores,
// 38.4 s with the tiled kernel, 4.3 s so); elsewhere the direct and tiled kernels of
// conv2d_backward.cl, which compute the gradient of the padded input (its interior is
// taken).
// docs/device/internals.md ("Convolution gradients") explains the two formulations.
#include <torch/library.h>

#include "opencl_functions/launch/gradients.hpp"
#include "conv.h"
#include "dispatch.h"
#include "kernel_launch.h"
#include "device_launcher.h"
#include "tensors.h"

namespace oclf::device::conv {

namespace {

// The input gradient as forward convolutions, on the device's fastest kernel: dy with
// d·(K-1) - p zeros around it (strided and dilated: zeros between its rows and columns too)
// convolved at stride 1 with the weights flipped and each group's input and output
// channels swapped; strided layers by phases (grad_input_phases). Strides above 2×2 (patch
// embeddings: many phases, or stride² - 1 zeros per value) keep the direct kernel.
bool grad_input_as_forward(const Conv2dGeometry& s) {
  return conv_mode() != ConvMode::kDirect && s.stride_h * s.stride_w <= 4;
}

// The weights flipped and each group's input and output channels swapped: (C_in, C_out/groups,
// nh, nw), taps (h0 + hs·jh, w0 + ws·jw) of the flipped kernel (all of them by default): the
// input gradient's forward weights.
at::Tensor flipped_weights(const Conv2dGeometry& s, const at::Tensor& w, int h0 = 0, int hs = 1, int nh = 0,
                           int w0 = 0, int ws = 1, int nw = 0) {
  nh = nh > 0 ? nh : s.k_h;
  nw = nw > 0 ? nw : s.k_w;
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  at::Tensor flipped = empty_device({s.c_in, cout_g, nh, nw}, at::kFloat);
  // CPUs reverse a channel pair's taps per work-item (a division per element was the cost there).
  const bool per_pair = is_cpu();
  const int items = per_pair ? s.c_in * cout_g : int(flipped.numel());
  launch(device_kernel("index.cl", "flip_swap_weights", per_pair ? "-DT=float -DPER_PAIR" : "-DT=float"),
         NDRange::linear(size_t(items)), span(w).mem, span(flipped).mem, s.groups, cin_g, cout_g, s.k_h, s.k_w, h0,
         hs, nh, w0, ws, nw, items);
  return flipped;
}

// The elements of t (B, C, H, W) that a 1×1 convolution of shape s reads: rows and columns
// 0, stride, 2·stride, ... (H_out and W_out of them), as a view.
at::Tensor at_strides(const at::Tensor& t, const Conv2dGeometry& s) {
  return t.slice(2, 0, int64_t(s.h_out - 1) * s.stride_h + 1, s.stride_h)
      .slice(3, 0, int64_t(s.w_out - 1) * s.stride_w + 1, s.stride_w);
}

// The forward convolution that gives an input gradient: dy's C_out channels in, the
// input's C_in out, at stride 1 (s's dilation and groups), an h × w input and a k_h × k_w
// kernel giving h_out × w_out.
Conv2dGeometry input_gradient_shape(const Conv2dGeometry& s, int h, int w, int k_h, int k_w, int h_out, int w_out) {
  Conv2dGeometry t = s;
  t.c_in = s.c_out;
  t.c_out = s.c_in;
  t.h = h;
  t.w = w;
  t.k_h = k_h;
  t.k_w = k_w;
  t.stride_h = t.stride_w = 1;
  t.h_out = h_out;
  t.w_out = w_out;
  return t;
}

// y (B, C, LH, LW) = dy (B, C, H_out, W_out) placed at rows top + h·sh, columns left + w·sw
// (top, left may be negative), zeros elsewhere: spread2d by rows.
void spread(const at::Tensor& dy, const at::Tensor& y, int top, int left, int sh, int sw) {
  const int64_t rows = y.size(0) * y.size(1) * y.size(2);
  launch(device_kernel("index.cl", "spread2d", "-DT=float -DCHUNK=" + std::to_string(row_chunk())),
         row_chunks(rows, y.size(3)), span(dy).mem, span(y).mem, int(dy.size(2)), int(dy.size(3)), int(y.size(2)),
         int(y.size(3)), top, left, sh, sw, int(rows));
}

// The taps of one axis that reach the input positions phase, phase + stride, ...: those k
// with (phase + pad - k) a multiple of the stride (dilation 1), ascending.
std::vector<int> phase_taps(int phase, int pad, int stride, int k) {
  std::vector<int> taps;
  for (int tap = 0; tap < k; ++tap)
    if (((phase + pad - tap) % stride + stride) % stride == 0) taps.push_back(tap);
  return taps;
}

// The input gradient of a strided convolution (dilation 1, stride_h·stride_w <= 4) by
// phases: the input positions (rh + i·stride_h, rw + j·stride_w) take only the taps whose
// offset the stride divides, so each phase is a stride-1 forward convolution of dy (shifted,
// with a zero border) with those taps of the flipped weights, and unphase2d interleaves the
// phases into dx. No product with the zeros of a spread dy: a quarter of the work at stride 2.
at::Tensor grad_input_phases(const Conv2dGeometry& s, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                             const at::Tensor& dy, const at::Tensor& w) {
  std::vector<at::Tensor> parts;  // phase rh·stride_w + rw: (B, C_in, ⌈(H - rh)/s_h⌉, ⌈(W - rw)/s_w⌉)
  for (int rh = 0; rh < s.stride_h; ++rh) {
    for (int rw = 0; rw < s.stride_w; ++rw) {
      const int out_h = int((height - rh + s.stride_h - 1) / s.stride_h);
      const int out_w = int((width - rw + s.stride_w - 1) / s.stride_w);
      at::Tensor part = empty_device({s.batch, s.c_in, std::max(out_h, 0), std::max(out_w, 0)}, at::kFloat);
      parts.push_back(part);
      const std::vector<int> th = phase_taps(rh, int(pad_h), s.stride_h, s.k_h);
      const std::vector<int> tw = phase_taps(rw, int(pad_w), s.stride_w, s.k_w);
      if (part.numel() == 0) continue;
      if (th.empty() || tw.empty()) {
        part.zero_();
        continue;
      }
      // Output row i of the phase reads dy rows i + t_min .. i + t_min + taps - 1, t_min the
      // offset of its last tap: dy shifted by -t_min into a zero buffer of the rows it needs.
      const int taps_h = int(th.size()), taps_w = int(tw.size());
      const int t_min_h = (rh + int(pad_h) - th.back()) / s.stride_h;
      const int t_min_w = (rw + int(pad_w) - tw.back()) / s.stride_w;
      const int lh = out_h + taps_h - 1, lw = out_w + taps_w - 1;
      at::Tensor shifted = dy;
      if (t_min_h != 0 || t_min_w != 0 || lh != s.h_out || lw != s.w_out) {
        shifted = empty_device({s.batch, s.c_out, lh, lw}, at::kFloat);
        spread(dy, shifted, -t_min_h, -t_min_w, 1, 1);
      }
      // The phase's taps of the flipped weights: from K - 1 - (last tap), every stride-th.
      const at::Tensor taps = flipped_weights(s, w, s.k_h - 1 - th.back(), s.stride_h, taps_h,
                                              s.k_w - 1 - tw.back(), s.stride_w, taps_w);
      forward_any(input_gradient_shape(s, lh, lw, taps_h, taps_w, out_h, out_w), shifted, taps, part);
    }
  }
  // The phases' outputs interleaved into dx in one launch.
  at::Tensor dx = empty_device({s.batch, s.c_in, height, width}, at::kFloat);
  if (dx.numel() == 0) return dx;
  const int64_t rows = int64_t(s.batch) * s.c_in * height;
  // Phases past the strides' count, or without positions (fewer rows than the stride), are
  // never read: phase 0 (never empty here) stands in for them.
  auto part = [&](size_t k) { return span(k < parts.size() && parts[k].numel() > 0 ? parts[k] : parts[0]).mem; };
  launch(device_kernel("index.cl", "unphase2d", "-DT=float -DCHUNK=" + std::to_string(row_chunk())),
         row_chunks(rows, width), part(0), part(1), part(2), part(3), span(dx).mem, int(height), int(width),
         s.stride_h, s.stride_w, int(rows));
  return dx;
}

at::Tensor grad_input_forward(const Conv2dGeometry& s, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                              const at::Tensor& dy, const at::Tensor& w) {
  const int ext_h = s.dilation_h * (s.k_h - 1), ext_w = s.dilation_w * (s.k_w - 1);
  const int lh = int(height) + ext_h, lw = int(width) + ext_w;
  const bool as_is = s.stride_h == 1 && s.stride_w == 1 && ext_h == pad_h && ext_w == pad_w;  // e.g. 1×1, no padding
  if (s.k_h == 1 && s.k_w == 1 && !as_is && pad_h == 0 && pad_w == 0) {
    // 1×1 with a stride (downsampling): the products at the strided positions only, then
    // put in place among zeros, rather than a convolution of the spread dy (stride² times
    // the work).
    const Conv2dGeometry t = input_gradient_shape(s, s.h_out, s.w_out, 1, 1, s.h_out, s.w_out);
    at::Tensor products = empty_device({s.batch, s.c_in, s.h_out, s.w_out}, at::kFloat);
    forward_any(t, dy, flipped_weights(s, w), products);
    at::Tensor dx = empty_device({s.batch, s.c_in, height, width}, at::kFloat);
    dx.zero_();
    at_strides(dx, s).copy_(products);
    return dx;
  }
  if ((s.stride_h > 1 || s.stride_w > 1) && s.dilation_h == 1 && s.dilation_w == 1)
    return grad_input_phases(s, height, width, pad_h, pad_w, dy, w);
  at::Tensor spread_dy = dy;
  if (!as_is) {
    spread_dy = empty_device({s.batch, s.c_out, lh, lw}, at::kFloat);
    spread(dy, spread_dy, ext_h - int(pad_h), ext_w - int(pad_w), s.stride_h, s.stride_w);
  }
  const Conv2dGeometry t = input_gradient_shape(s, lh, lw, s.k_h, s.k_w, int(height), int(width));
  at::Tensor dx = empty_device({s.batch, s.c_in, height, width}, at::kFloat);
  forward_any(t, spread_dy, flipped_weights(s, w), dx);
  return dx;
}

// The weight gradient as a forward convolution: with images and channels swapped, x as
// (C_in, B, H, W) convolved with dy as (C_out, B, H_out, W_out) weights, the convolution's
// dilation as the stride and its stride as the dilation, gives dW as (C_in, C_out, K_h,
// K_w): a small output over a long K (B·H_out·W_out), split many ways. conv2d_gpu reads and
// writes the swapped layouts in place (NC_SWAPPED); conv2d_cpu takes copies, and a 1×1
// layer's dW there as a product (below).
at::Tensor grad_weight_forward(const Conv2dGeometry& s, const at::Tensor& x_padded, const at::Tensor& dy) {
  if (cpu_kernels() && s.k_h == 1 && s.k_w == 1) {
    // CPUs, 1×1: dW (C_out × C_in) = dy (C_out × B·HW) · x (B·HW × C_in) as a 1×1
    // conv2d_cpu over C_in "pixels" (the form below would have one pixel per output).
    const at::Tensor x_rows = at_strides(x_padded, s).permute({0, 2, 3, 1}).contiguous();  // B·H_out·W_out × C_in
    const at::Tensor dy_rows = dy.transpose(0, 1).contiguous();                             // C_out × B·H_out·W_out
    Conv2dGeometry g{};
    g.batch = 1;
    g.c_in = s.batch * s.h_out * s.w_out;
    g.h = g.h_out = 1;
    g.w = g.w_out = s.c_in;
    g.c_out = s.c_out;
    g.k_h = g.k_w = g.stride_h = g.stride_w = g.dilation_h = g.dilation_w = g.groups = 1;
    at::Tensor dw = empty_device({s.c_out, s.c_in, 1, 1}, at::kFloat);
    forward_any(g, x_rows, dy_rows, dw);
    return dw;
  }
  Conv2dGeometry t{};
  t.batch = s.c_in;
  t.c_in = s.batch;
  t.h = s.h;
  t.w = s.w;
  t.c_out = s.c_out;
  t.k_h = s.h_out;
  t.k_w = s.w_out;
  t.stride_h = s.dilation_h;
  t.stride_w = s.dilation_w;
  t.dilation_h = s.stride_h;
  t.dilation_w = s.stride_w;
  t.groups = 1;
  t.h_out = s.k_h;
  t.w_out = s.k_w;
  if (cpu_kernels()) {
    // conv2d_cpu reads plain layouts: x and dy copied with their first two dimensions
    // swapped, and dW back from (C_in, C_out, K_h, K_w).
    const at::Tensor x_swapped = x_padded.transpose(0, 1).contiguous();
    const at::Tensor dy_swapped = dy.transpose(0, 1).contiguous();
    at::Tensor dw_swapped = empty_device({s.c_in, s.c_out, s.k_h, s.k_w}, at::kFloat);
    forward_any(t, x_swapped, dy_swapped, dw_swapped);
    return dw_swapped.transpose(0, 1).contiguous();
  }
  at::Tensor dw = empty_device({s.c_out, s.c_in, s.k_h, s.k_w}, at::kFloat);
  forward_gpu_swapped(t, x_padded, dy, dw);
  return dw;
}

// The gradients on conv2d_backward.cl's kernels (launch/gradients.hpp), as the library's
// backward pass runs them: with respect to the padded input, the weights and the bias.
at::Tensor grad_input_padded(const Conv2dGeometry& s, const at::Tensor& dy, const at::Tensor& w) {
  at::Tensor dx = empty_device({s.batch, s.c_in, s.h, s.w}, at::kFloat);
  DeviceLauncher launcher;
  gradients::input(launcher, s, whole_buffer(dy, "grad_output"), whole_buffer(w, "weight"),
                   whole_buffer(dx, "grad_input"), gradients::Variant::kAuto);
  return dx;
}

at::Tensor grad_weight(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& dy) {
  at::Tensor dw = empty_device({s.c_out, s.cin_g(), s.k_h, s.k_w}, at::kFloat);
  DeviceLauncher launcher;
  gradients::weight(launcher, s, whole_buffer(x, "input"), whole_buffer(dy, "grad_output"),
                    whole_buffer(dw, "grad_weight"), gradients::Variant::kAuto);
  return dw;
}

at::Tensor grad_bias(const Conv2dGeometry& s, const at::Tensor& dy) {
  at::Tensor db = empty_device({s.c_out}, at::kFloat);
  DeviceLauncher launcher;
  gradients::bias(launcher, s.batch, s.c_out, s.h_out * s.w_out, whole_buffer(dy, "grad_output"),
                  whole_buffer(db, "grad_bias"));
  return db;
}

}  // namespace

at::Tensor input_gradient(const Conv2dGeometry& s, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                          const at::Tensor& dy, const at::Tensor& w) {
  if (grad_input_as_forward(s)) return grad_input_forward(s, height, width, pad_h, pad_w, dy, w);
  const at::Tensor dx_padded = grad_input_padded(s, dy, w);
  return dx_padded.narrow(2, pad_h, height).narrow(3, pad_w, width).contiguous();
}

at::Tensor weight_gradient(const Conv2dGeometry& s, const at::Tensor& x_padded, const at::Tensor& dy) {
  const bool as_forward = conv_mode() != ConvMode::kDirect && s.groups == 1;
  return as_forward ? grad_weight_forward(s, x_padded, dy) : grad_weight(s, x_padded, dy);
}

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  if (transposed || input.dim() == 5) {
    return convolution_nd_backward(grad_output, input, weight, C10_AS_INTARRAYREF_SLOW(stride),
                                   C10_AS_INTARRAYREF_SLOW(padding), C10_AS_INTARRAYREF_SLOW(dilation), transposed,
                                   C10_AS_INTARRAYREF_SLOW(output_padding), groups.expect_int(), output_mask);
  }
  const int64_t g = groups.expect_int();
  const Args2d a = as_2d(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                         C10_AS_INTARRAYREF_SLOW(dilation), transposed, g);
  check_float(grad_output, "grad_output");
  const Conv2dGeometry s = conv_shape(a.x, a.weight, a.stride, a.padding, a.dilation, g);
  const at::Tensor dy = whole(a.one_d ? grad_output.unsqueeze(2) : grad_output);
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    dx = input_gradient(s, a.x.size(2), a.x.size(3), a.padding[0], a.padding[1], dy, whole(a.weight));
    if (a.one_d) dx = dx.squeeze(2);
  }
  if (output_mask[1]) dw = weight_gradient(s, padded(a.x, a.padding[0], a.padding[1]), dy).view(weight.sizes());
  if (output_mask[2]) db = grad_bias(s, dy);
  return {dx, dw, db};
}

}  // namespace

}  // namespace oclf::device::conv

namespace oclf::device {

REGISTER_DEVICE_OPS(m) {
  m.impl("convolution_backward_overrideable", conv::convolution_backward);
}

}  // namespace oclf::device
