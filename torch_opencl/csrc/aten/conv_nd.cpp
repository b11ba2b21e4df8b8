// Transposed convolutions (1-D, 2-D, 3-D) and 3-D convolutions on the opencl device, forward
// and backward, on the 2-D convolution's kernels (conv.cpp's forward, conv_backward.cpp's
// gradients). Three primitives of a convolution y = conv(x, w) serve all of them:
//   forward         y from x and w
//   input_grad      dx from dy and w (the input's size given)
//   weight_grad     dw from x and dy (the weight's size given)
// A transposed convolution's forward is the input gradient of the convolution whose weight it
// shares (its output is that convolution's input); its input gradient is that convolution's
// forward, and its weight gradient the convolution's weight gradient with x and dy in each
// other's places.
//
// 1-D runs as 2-D with a height of 1. 3-D runs as one 2-D convolution over (B·D_out) images of
// K_d·C_in channels: image (b, od) holds, for each group g and depth tap kd, the input's depth
// slice od·s_d + kd·d_d of that group's channels (a strided copy of the depth-padded input,
// (B·D_out, G·K_d·C_in/G, H, W)), and the weight (C_out, C_in/G, K_d, K_h, K_w) is reordered
// to (C_out, K_d·C_in/G, K_h, K_w). The input gradient adds each tap's slices back (K_d
// strided additions: within one tap the depths differ), the weight gradient reorders back.
#include <torch/library.h>

#include "conv.h"

namespace oclf::device::conv {

namespace {

// Stride, padding and dilation of one convolution, one value per spatial dimension.
struct Params {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

// The geometry of the 2-D convolution of an input (B, C_in, H, W) with a weight of `w`'s
// sizes (C_out, C_in/groups, K_h, K_w) under p (two values each), outputs (h_out, w_out).
Conv2dGeometry geometry(at::IntArrayRef x, at::IntArrayRef w, const Params& p, int64_t h_out, int64_t w_out) {
  Conv2dGeometry s{};
  s.batch = int(x[0]);
  s.c_in = int(x[1]);
  s.h = int(x[2] + 2 * p.padding[0]);
  s.w = int(x[3] + 2 * p.padding[1]);
  s.c_out = int(w[0]);
  s.k_h = int(w[2]);
  s.k_w = int(w[3]);
  s.stride_h = int(p.stride[0]);
  s.stride_w = int(p.stride[1]);
  s.dilation_h = int(p.dilation[0]);
  s.dilation_w = int(p.dilation[1]);
  s.groups = int(p.groups);
  s.h_out = int(h_out);
  s.w_out = int(w_out);
  return s;
}

// The output size of a convolution along one axis (Conv2dGeometry's formula).
int64_t out_size(int64_t in, int64_t k, const Params& p, size_t axis) {
  return Conv2dGeometry::out_size(int(in + 2 * p.padding[axis]), int(k), int(p.stride[axis]), int(p.dilation[axis]));
}

// ---- 2-D primitives (x, w, dy 4-D) --------------------------------------------------------

at::Tensor forward_2d(const at::Tensor& x, const at::Tensor& w, const Params& p) {
  const int64_t h_out = out_size(x.size(2), w.size(2), p, 0), w_out = out_size(x.size(3), w.size(3), p, 1);
  DEVICE_CHECK(h_out > 0 && w_out > 0, "opencl: convolution: the kernel is larger than the padded input");
  const Conv2dGeometry s = geometry(x.sizes(), w.sizes(), p, h_out, w_out);
  at::Tensor y = empty_device({s.batch, s.c_out, s.h_out, s.w_out}, at::kFloat);
  if (y.numel() > 0) forward_any(s, padded(x, p.padding[0], p.padding[1]), whole(w), y);
  return y;
}

at::Tensor input_grad_2d(const at::Tensor& dy, const at::Tensor& w, at::IntArrayRef x_sizes, const Params& p) {
  const Conv2dGeometry s = geometry(x_sizes, w.sizes(), p, dy.size(2), dy.size(3));
  if (dy.numel() == 0 || w.numel() == 0) return at::zeros(x_sizes, dy.options());
  return input_gradient(s, x_sizes[2], x_sizes[3], p.padding[0], p.padding[1], whole(dy), whole(w));
}

at::Tensor weight_grad_2d(const at::Tensor& x, const at::Tensor& dy, at::IntArrayRef w_sizes, const Params& p) {
  const Conv2dGeometry s = geometry(x.sizes(), w_sizes, p, dy.size(2), dy.size(3));
  if (dy.numel() == 0 || x.numel() == 0) return at::zeros(w_sizes, dy.options());
  return weight_gradient(s, padded(x, p.padding[0], p.padding[1]), whole(dy)).view(w_sizes);
}

// ---- 3-D as 2-D over (B·D_out) images of K_d·C_in channels --------------------------------

// The 2-D parameters of a 3-D convolution (its height and width values).
Params inner(const Params& p) {
  return {{p.stride[1], p.stride[2]}, {p.padding[1], p.padding[2]}, {p.dilation[1], p.dilation[2]}, p.groups};
}

// The depth taps' view of a (B, C, D_p, H, W) contiguous tensor t (depth already padded):
// (B, D_out, G, [K_d,] C/G, H, W), element (b, od, g, kd, c, h, w) at depth od·s_d + kd·d_d
// of channel g·C/G + c; without K_d (with_taps false), tap `tap`'s slices.
at::Tensor depth_taps(const at::Tensor& t, int64_t d_out, int64_t k_d, const Params& p, bool with_taps, int64_t tap) {
  const int64_t B = t.size(0), C = t.size(1), H = t.size(3), W = t.size(4), G = p.groups;
  const int64_t sd = t.stride(2), sc = t.stride(1);
  if (with_taps) {
    return t.as_strided({B, d_out, G, k_d, C / G, H, W},
                        {t.stride(0), p.stride[0] * sd, (C / G) * sc, p.dilation[0] * sd, sc, W, 1},
                        t.storage_offset());
  }
  return t.as_strided({B, d_out, G, C / G, H, W}, {t.stride(0), p.stride[0] * sd, (C / G) * sc, sc, W, 1},
                      t.storage_offset() + tap * p.dilation[0] * sd);
}

// x (B, C, D, H, W) depth-padded by p's depth padding, contiguous.
at::Tensor depth_padded(const at::Tensor& x, int64_t pad) {
  if (pad == 0) return x.contiguous();
  at::Tensor out = at::zeros({x.size(0), x.size(1), x.size(2) + 2 * pad, x.size(3), x.size(4)}, x.options());
  out.narrow(2, pad, x.size(2)).copy_(x);
  return out;
}

// x's depth taps as 2-D images: (B·D_out, K_d·C, H, W).
at::Tensor images(const at::Tensor& x, int64_t d_out, int64_t k_d, const Params& p) {
  const at::Tensor taps = depth_taps(depth_padded(x, p.padding[0]), d_out, k_d, p, true, 0);
  return taps.contiguous().view({x.size(0) * d_out, k_d * x.size(1), x.size(3), x.size(4)});
}

// w (C_out, C/G, K_d, K_h, K_w) as (C_out, K_d·C/G, K_h, K_w), and back.
at::Tensor weight_2d(const at::Tensor& w) {
  return w.permute({0, 2, 1, 3, 4}).contiguous().view({w.size(0), w.size(2) * w.size(1), w.size(3), w.size(4)});
}
at::Tensor weight_3d(const at::Tensor& w2, at::IntArrayRef w_sizes) {
  return w2.view({w_sizes[0], w_sizes[2], w_sizes[1], w_sizes[3], w_sizes[4]}).permute({0, 2, 1, 3, 4}).contiguous();
}

// y (B, C, D, H, W) from (B·D, C, H, W) and back.
at::Tensor from_images(const at::Tensor& y2, int64_t B) {
  return y2.view({B, y2.size(0) / B, y2.size(1), y2.size(2), y2.size(3)}).permute({0, 2, 1, 3, 4}).contiguous();
}
at::Tensor to_images(const at::Tensor& y) {
  return y.permute({0, 2, 1, 3, 4}).contiguous().view({y.size(0) * y.size(2), y.size(1), y.size(3), y.size(4)});
}

at::Tensor forward_3d(const at::Tensor& x, const at::Tensor& w, const Params& p) {
  const int64_t d_out = out_size(x.size(2), w.size(2), p, 0);
  DEVICE_CHECK(d_out > 0, "opencl: convolution: the kernel is deeper than the padded input");
  const at::Tensor y2 = forward_2d(images(x, d_out, w.size(2), p), weight_2d(w), inner(p));
  return from_images(y2, x.size(0));
}

at::Tensor input_grad_3d(const at::Tensor& dy, const at::Tensor& w, at::IntArrayRef x_sizes, const Params& p) {
  const int64_t B = x_sizes[0], C = x_sizes[1], k_d = w.size(2), d_out = dy.size(2);
  const std::vector<int64_t> image_sizes{B * d_out, k_d * C, x_sizes[3], x_sizes[4]};
  const at::Tensor dx2 = input_grad_2d(to_images(dy), weight_2d(w), image_sizes, inner(p));
  // (B, D_out, G, K_d, C/G, H, W): each tap's part added into its depth slices.
  const at::Tensor parts = dx2.view({B, d_out, p.groups, k_d, C / p.groups, x_sizes[3], x_sizes[4]});
  at::Tensor dx = at::zeros({B, C, x_sizes[2] + 2 * p.padding[0], x_sizes[3], x_sizes[4]}, dy.options());
  for (int64_t kd = 0; kd < k_d; ++kd) depth_taps(dx, d_out, k_d, p, false, kd).add_(parts.select(3, kd));
  return p.padding[0] == 0 ? dx : dx.narrow(2, p.padding[0], x_sizes[2]).contiguous();
}

at::Tensor weight_grad_3d(const at::Tensor& x, const at::Tensor& dy, at::IntArrayRef w_sizes, const Params& p) {
  const int64_t k_d = w_sizes[2];
  const std::vector<int64_t> w2_sizes{w_sizes[0], k_d * w_sizes[1], w_sizes[3], w_sizes[4]};
  const at::Tensor dw2 = weight_grad_2d(images(x, dy.size(2), k_d, p), to_images(dy), w2_sizes, inner(p));
  return weight_3d(dw2, w_sizes);
}

// ---- any dimension: 1-D as 2-D of height 1 ------------------------------------------------

std::vector<int64_t> with_height(at::IntArrayRef sizes) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  out.insert(out.begin() + 2, 1);
  return out;
}

Params params_2d(const Params& p) { return {{1, p.stride[0]}, {0, p.padding[0]}, {1, p.dilation[0]}, p.groups}; }

at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const Params& p) {
  if (x.dim() == 5) return forward_3d(x, w, p);
  if (x.dim() == 4) return forward_2d(x, w, p);
  return forward_2d(x.unsqueeze(2), w.unsqueeze(2), params_2d(p)).squeeze(2);
}

at::Tensor input_grad(const at::Tensor& dy, const at::Tensor& w, at::IntArrayRef x_sizes, const Params& p) {
  if (dy.dim() == 5) return input_grad_3d(dy, w, x_sizes, p);
  if (dy.dim() == 4) return input_grad_2d(dy, w, x_sizes, p);
  return input_grad_2d(dy.unsqueeze(2), w.unsqueeze(2), with_height(x_sizes), params_2d(p)).squeeze(2);
}

at::Tensor weight_grad(const at::Tensor& x, const at::Tensor& dy, at::IntArrayRef w_sizes, const Params& p) {
  if (x.dim() == 5) return weight_grad_3d(x, dy, w_sizes, p);
  if (x.dim() == 4) return weight_grad_2d(x, dy, w_sizes, p);
  return weight_grad_2d(x.unsqueeze(2), dy.unsqueeze(2), with_height(w_sizes), params_2d(p)).view(w_sizes);
}

// ---- the operators ------------------------------------------------------------------------

Params checked(const char* op, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
               at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
               int64_t groups) {
  check_float(input, "input");
  check_float(weight, "weight");
  const int64_t n = input.dim() - 2;
  DEVICE_CHECK_NOT_IMPLEMENTED(n >= 1 && n <= 3, "opencl: ", op, ": a ", input.dim(),
                              "-D input has no OpenCL kernel (1-D, 2-D and 3-D convolutions do)");
  DEVICE_CHECK(weight.dim() == input.dim(), "opencl: ", op, ": weight ", weight.sizes(), " for input ",
              input.sizes());
  auto full = [&](at::IntArrayRef v, const char* what) {
    DEVICE_CHECK(int64_t(v.size()) == n || v.size() == 1, "opencl: ", op, ": ", what, " has ", v.size(),
                " values for ", n, " spatial dimensions");
    return v.size() == 1 ? std::vector<int64_t>(size_t(n), v[0]) : v.vec();
  };
  Params p{full(stride, "stride"), full(padding, "padding"), full(dilation, "dilation"), groups};
  DEVICE_CHECK(groups > 0 && input.size(1) % groups == 0, "opencl: ", op, ": ", input.size(1),
              " input channels in ", groups, " groups");
  const int64_t channels = transposed ? weight.size(0) : weight.size(1) * groups;
  DEVICE_CHECK(input.size(1) == channels, "opencl: ", op, ": input has ", input.size(1), " channels, weight ",
              weight.sizes(), " expects ", channels);
  if (transposed) {
    const std::vector<int64_t> extra = full(output_padding, "output_padding");
    for (size_t i = 0; i < extra.size(); ++i) {
      DEVICE_CHECK(extra[i] >= 0 && (extra[i] < p.stride[i] || extra[i] < p.dilation[i]), "opencl: ", op,
                  ": output_padding must be smaller than the stride or the dilation, got ", output_padding);
    }
  }
  return p;
}

// A transposed convolution's output size: (in - 1)·s - 2p + d·(k - 1) + output_padding + 1.
std::vector<int64_t> transposed_sizes(const at::Tensor& input, const at::Tensor& weight, const Params& p,
                                      at::IntArrayRef output_padding) {
  std::vector<int64_t> sizes{input.size(0), weight.size(1) * p.groups};
  for (int64_t i = 2; i < input.dim(); ++i) {
    const size_t a = size_t(i - 2);
    const int64_t extra = output_padding.size() == 1 ? output_padding[0] : output_padding[a];
    const int64_t n = (input.size(i) - 1) * p.stride[a] - 2 * p.padding[a] + p.dilation[a] * (weight.size(i) - 1) +
                      extra + 1;
    DEVICE_CHECK(n > 0, "opencl: conv_transpose: output size ", n, " for input ", input.sizes());
    sizes.push_back(n);
  }
  return sizes;
}

// bias (C) added over dimension 1 of y.
void add_bias(at::Tensor& y, const std::optional<at::Tensor>& bias) {
  if (!bias || !bias->defined()) return;
  std::vector<int64_t> shape(size_t(y.dim()), 1);
  shape[1] = bias->numel();
  y.add_(bias->view(shape));
}

}  // namespace

at::Tensor convolution_nd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                          at::IntArrayRef output_padding, int64_t groups) {
  const Params p = checked("convolution", input, weight, stride, padding, dilation, transposed, output_padding, groups);
  at::Tensor y = transposed ? input_grad(input, weight, transposed_sizes(input, weight, p, output_padding), p)
                            : forward(input, weight, p);
  add_bias(y, bias);
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_nd_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const Params p =
      checked("convolution_backward", input, weight, stride, padding, dilation, transposed, output_padding, groups);
  check_float(grad_output, "grad_output");
  const at::Tensor dy = grad_output.contiguous();
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    if (transposed) {
      // The convolution of dy; an output_padding can make it longer than the input.
      dx = forward(dy, weight, p);
      for (int64_t i = 2; i < input.dim(); ++i) dx = dx.narrow(i, 0, input.size(i));
      dx = dx.contiguous();
    } else {
      dx = input_grad(dy, weight, input.sizes(), p);
    }
  }
  if (output_mask[1]) {
    dw = transposed ? weight_grad(dy, input.contiguous(), weight.sizes(), p)
                    : weight_grad(input.contiguous(), dy, weight.sizes(), p);
  }
  if (output_mask[2]) {
    std::vector<int64_t> dims{0};
    for (int64_t i = 2; i < dy.dim(); ++i) dims.push_back(i);
    db = dy.sum(dims);
  }
  return {dx, dw, db};
}

}  // namespace oclf::device::conv
