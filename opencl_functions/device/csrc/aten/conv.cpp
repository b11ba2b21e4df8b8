// Convolution on the opencl device: the dispatch to the library's kernels, kept in this
// one file so it can move. Forward launches conv2d.cl (conv2d_gpu with split-K on GPUs,
// conv2d_cpu on packed weights on CPUs, conv2d_depthwise(_cpu) for depthwise layers);
// backward launches conv2d_backward.cl. Those kernels take an already padded input, so
// padding is applied here (a zeroed tensor with the input copied into its interior), and
// the input gradient is computed for the padded input and its interior taken.
// conv1d (3-D input) runs as conv2d with a height of 1; transposed convolutions fall back.
#include <torch/library.h>

#include "../../../runtime/settings.hpp"
#include "common.h"

namespace oclf::device {

namespace {

// One convolution's shapes, in the order the kernels take them.
struct Shape {
  int batch, c_in, h, w;  // the padded input
  int c_out, k_h, k_w;
  int stride_h, stride_w, dilation_h, dilation_w, groups;
  int h_out, w_out;
};

const char* kForward = "conv2d.cl";
const char* kBackward = "conv2d_backward.cl";

Launch& shape_args(Launch& launch, const Shape& s) {
  return launch.i32(s.batch).i32(s.c_in).i32(s.h).i32(s.w).i32(s.c_out).i32(s.k_h).i32(s.k_w).i32(s.stride_h)
      .i32(s.stride_w).i32(s.dilation_h).i32(s.dilation_w).i32(s.groups).i32(s.h_out).i32(s.w_out);
}

// The library's kernels take whole buffers: a tensor with an offset is copied first.
at::Tensor whole(const at::Tensor& t) {
  const at::Tensor c = contiguous(t);
  if (span(c).offset == 0) return c;
  return c.clone();
}

// x (B, C, H, W), any strides, zero-padded by (ph, pw) on each side: contiguous, at offset 0.
at::Tensor padded(const at::Tensor& x, int64_t ph, int64_t pw) {
  if (ph == 0 && pw == 0) return whole(x);
  at::Tensor out = empty_device({x.size(0), x.size(1), x.size(2) + 2 * ph, x.size(3) + 2 * pw}, at::kFloat);
  if (out.numel() == 0) return out;
  Launch launch(Device::get().kernel("index.cl", "pad2d", "-DT=float"));
  launch.tensor(x).tensor(out).i32(int(x.size(1))).i32(int(x.size(2))).i32(int(x.size(3))).i32(int(ph)).i32(int(pw));
  launch.i32(int(x.stride(0))).i32(int(x.stride(1))).i32(int(x.stride(2))).i32(int(x.stride(3)));
  launch.i32(int(out.numel())).run1(size_t(out.numel()));
  return out;
}

// OCLF_DEVICE_CONV: "gpu" runs the GPU paths on any device (so CPU machines test them),
// "direct" computes gradients with the direct and tiled backward kernels; else by device.
enum class ConvMode { kAuto, kGpu, kDirect };
ConvMode conv_mode() {
  const std::string mode = setting("DEVICE_CONV");
  if (mode == "gpu") return ConvMode::kGpu;
  if (mode == "direct") return ConvMode::kDirect;
  TORCH_CHECK(mode.empty() || mode == "auto", "opencl: ", setting_variable("DEVICE_CONV"),
              " must be auto, gpu or direct, got \"", mode, "\"");
  return ConvMode::kAuto;
}
bool cpu_kernels() { return conv_mode() != ConvMode::kGpu && Device::get().is_cpu(); }

size_t tile_size() { return Device::get().info().max_work_group_size >= 256 ? 16 : 8; }

// ---- forward ------------------------------------------------------------------------------

// max_splits: the most slices K may be split into when the output tiles fill the device
// less than once (the weight gradient, a small output over a long K, takes many).
// swapped: x, w and y have their first two dimensions swapped (NC_SWAPPED in conv2d.cl).
void forward_gpu(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                 const at::Tensor& y, int max_splits = 16, bool swapped = false) {
  Device& dev = Device::get();
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int hw_out = p.h_out * p.w_out;
  const size_t pixels = size_t(p.batch) * hw_out;
  const bool pointwise = !swapped && hw_out % 4 == 0 && p.k_h == 1 && p.k_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                         p.h == p.h_out && p.w == p.w_out;
  // Tiles as the library picks them (opencl-functions.cpp): 64×64 with 4×4 per work-item;
  // 32×32 for 1×1 convolutions over large images; 64×32 when K is not a multiple of 4.
  int tm = 64, tn = 64;
  const size_t cus = dev.info().compute_units;
  const size_t tiles32 = round_up(cout_g, 32) / 32 * (round_up(pixels, 32) / 32) * p.groups;
  if (pointwise && hw_out >= 28 * 28 && tiles32 >= cus) {
    tm = tn = 32;
  } else if (k_dim % 4 != 0) {
    tn = 32;
  }
  const int wm = 4, wn = 4, tk = 16;
  const std::string options = "-cl-mad-enable -DGTM=" + std::to_string(tm) + " -DGTN=" + std::to_string(tn) +
                              " -DGWM=4 -DGWN=4 -DGTK=16";
  std::string conv_options = options;
  if (p.k_h <= 7 && p.k_w <= 7) conv_options += " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w);
  if (k_dim % 4 == 0 && (!swapped || (p.k_h * p.k_w) % 4 == 0)) conv_options += " -DVEC_W";
  if (swapped) conv_options += " -DNC_SWAPPED";
  if (hw_out % 4 == 0) conv_options += " -DVEC_OUT";
  if (pointwise) conv_options += " -DPOINTWISE";
  // Split K when the output tiles fill the device less than once.
  const size_t tiles = round_up(cout_g, tm) / tm * (round_up(pixels, tn) / tn) * p.groups;
  int splits = 1;
  if (tiles < cus)
    splits = int(std::min<size_t>({(2 * cus + tiles - 1) / tiles, size_t(k_dim / (4 * tk)), size_t(max_splits)}));
  splits = std::max(splits, 1);
  const int k_chunk = int(round_up((k_dim + splits - 1) / splits, tk));
  splits = (k_dim + k_chunk - 1) / k_chunk;

  const bool has_bias = bias.defined();
  at::Tensor parts = splits > 1 ? empty_device({splits, y.numel()}, at::kFloat) : y;
  {
    Launch launch(dev.library_kernel(kForward, "conv2d_gpu", conv_options));
    launch.mem(span(x).mem).mem(span(w).mem).mem(has_bias ? span(bias).mem : nullptr).mem(span(parts).mem);
    launch.i32(has_bias && splits == 1);
    shape_args(launch, p).i32(splits).i32(k_chunk);
    const size_t global[3] = {round_up(pixels, tn) / wn, round_up(cout_g, tm) / wm, size_t(p.groups) * splits};
    const size_t local[3] = {size_t(tn / wn), size_t(tm / wm), 1};
    launch.run(3, global, local);
  }
  if (splits > 1) {
    Launch sum(dev.library_kernel(kForward, "conv2d_sum_splits", options));
    sum.mem(span(parts).mem).mem(has_bias ? span(bias).mem : nullptr).mem(span(y).mem);
    sum.i32(has_bias).i32(splits).i32(p.c_out).i32(hw_out).i32(static_cast<int>(y.numel()));
    const size_t global[1] = {round_up(y.numel(), 256)};
    const size_t local[1] = {256};
    sum.run(1, global, local);
  }
}

void forward_cpu(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                 const at::Tensor& y) {
  Device& dev = Device::get();
  const int cov = 16, px = 8;  // output channels (the vector width) × pixels per work-item
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int co_blocks = (cout_g + cov - 1) / cov;
  const std::string options = "-cl-mad-enable -DCOV=16 -DPX=8";
  const bool fixed = p.k_h == p.k_w && (p.k_h == 1 || p.k_h == 3 || p.k_h == 5 || p.k_h == 7);
  const std::string conv_options =
      fixed ? options + " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w) : options;
  // The weights packed for conv2d_cpu, once per weight (and version).
  const std::string layout = "conv2d_cpu " + options + " " + std::to_string(k_dim) + "x" + std::to_string(cout_g) +
                             "x" + std::to_string(p.groups);
  const at::Tensor packed = derived_from(w, layout, [&] {
    at::Tensor out = empty_device({int64_t(p.groups) * co_blocks * cov * k_dim}, at::kFloat);
    Launch pack(dev.library_kernel(kForward, "conv2d_pack_weights", options));
    pack.mem(span(w).mem).mem(span(out).mem).i32(k_dim).i32(cout_g).i32(co_blocks);
    const size_t global[3] = {size_t(k_dim), size_t(co_blocks) * cov, size_t(p.groups)};
    pack.run(3, global, nullptr);
    return out;
  });
  const bool has_bias = bias.defined();
  Launch launch(dev.library_kernel(kForward, "conv2d_cpu", conv_options));
  launch.mem(span(x).mem).mem(span(packed).mem).mem(has_bias ? span(bias).mem : nullptr).mem(span(y).mem);
  shape_args(launch.i32(has_bias), p);
  const size_t global[3] = {size_t(co_blocks), size_t(p.h_out * p.w_out + px - 1) / px, size_t(p.batch) * p.groups};
  launch.run(3, global, nullptr);
}

void forward_depthwise(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                       const at::Tensor& y) {
  Device& dev = Device::get();
  const bool cpu = dev.is_cpu();
  const int cov = cpu ? 16 : 1;
  const bool has_bias = bias.defined();
  Launch launch(dev.library_kernel(kForward, cpu ? "conv2d_depthwise_cpu" : "conv2d_depthwise",
                                   "-cl-mad-enable -DCOV=16 -DPX=8"));
  launch.mem(span(x).mem).mem(span(w).mem).mem(has_bias ? span(bias).mem : nullptr).mem(span(y).mem);
  shape_args(launch.i32(has_bias), p);
  const size_t global[3] = {size_t(p.w_out + cov - 1) / cov, size_t(p.h_out), size_t(p.batch) * p.c_out};
  launch.run(3, global, nullptr);
}

// A forward convolution without bias on the device's kernel for its shape (the backward
// pass's convolutions: temporary weights, so CPU packing is not kept).
void forward_any(const Shape& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                 int max_splits = 16) {
  if (s.c_in == s.groups && s.c_out == s.groups) {
    forward_depthwise(s, x, w, at::Tensor(), y);
  } else if (cpu_kernels()) {
    forward_cpu(s, x, w, at::Tensor(), y);
  } else {
    forward_gpu(s, x, w, at::Tensor(), y, max_splits);
  }
}

// The shapes of a 2-D convolution of x (unpadded) with weight; the padded size in s.h, s.w.
Shape conv_shape(const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation, int64_t groups) {
  Shape s{};
  s.batch = int(x.size(0));
  s.c_in = int(x.size(1));
  s.h = int(x.size(2) + 2 * padding[0]);
  s.w = int(x.size(3) + 2 * padding[1]);
  s.c_out = int(weight.size(0));
  s.k_h = int(weight.size(2));
  s.k_w = int(weight.size(3));
  s.stride_h = int(stride[0]);
  s.stride_w = int(stride[1]);
  s.dilation_h = int(dilation[0]);
  s.dilation_w = int(dilation[1]);
  s.groups = int(groups);
  s.h_out = (s.h - s.dilation_h * (s.k_h - 1) - 1) / s.stride_h + 1;
  s.w_out = (s.w - s.dilation_w * (s.k_w - 1) - 1) / s.stride_w + 1;
  return s;
}

// Arguments as 2-D: conv1d's (B, C, L) become (B, C, 1, L) and its lists get a leading 1/0.
struct Args2d {
  at::Tensor x, weight;
  std::vector<int64_t> stride, padding, dilation;
  bool one_d = false;
};

Args2d as_2d(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
             at::IntArrayRef dilation, bool transposed, int64_t groups) {
  TORCH_CHECK_NOT_IMPLEMENTED(!transposed, "opencl: transposed convolutions have no OpenCL kernel");
  TORCH_CHECK_NOT_IMPLEMENTED(input.dim() == 4 || input.dim() == 3, "opencl: convolution of a ", input.dim(),
                              "-D input has no OpenCL kernel (conv1d and conv2d do)");
  check_float(input, "input");
  check_float(weight, "weight");
  Args2d a;
  a.one_d = input.dim() == 3;
  a.x = a.one_d ? input.unsqueeze(2) : input;
  a.weight = a.one_d ? weight.unsqueeze(2) : weight;
  auto pair = [&](at::IntArrayRef v, int64_t fill) {
    return a.one_d ? std::vector<int64_t>{fill, v[0]} : std::vector<int64_t>{v[0], v[1]};
  };
  a.stride = pair(stride, 1);
  a.padding = pair(padding, 0);
  a.dilation = pair(dilation, 1);
  TORCH_CHECK(a.x.size(1) == a.weight.size(1) * groups, "opencl: convolution: input has ", a.x.size(1),
              " channels, weight expects ", a.weight.size(1) * groups, " (", a.weight.size(1), " × groups ", groups,
              ")");
  return a;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                       bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const int64_t g = groups.expect_int();
  const Args2d a = as_2d(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                         C10_AS_INTARRAYREF_SLOW(dilation), transposed, g);
  const Shape s = conv_shape(a.x, a.weight, a.stride, a.padding, a.dilation, g);
  TORCH_CHECK(s.h_out > 0 && s.w_out > 0, "opencl: convolution: the kernel is larger than the padded input");
  at::Tensor y = empty_device({s.batch, s.c_out, s.h_out, s.w_out}, at::kFloat);
  if (y.numel() > 0) {
    const at::Tensor x = padded(a.x, a.padding[0], a.padding[1]);
    const at::Tensor w = whole(a.weight);
    const at::Tensor b = bias && bias->defined() ? whole(*bias) : at::Tensor();
    const bool depthwise = s.c_in == s.groups && s.c_out == s.groups;
    if (depthwise) {
      forward_depthwise(s, x, w, b, y);
    } else if (cpu_kernels()) {
      forward_cpu(s, x, w, b, y);
    } else {
      forward_gpu(s, x, w, b, y);
    }
  }
  return a.one_d ? y.squeeze(2) : y;
}

// ---- backward -----------------------------------------------------------------------------

// A tile is worth it when the GEMM's rows (channels per group) fill at least half of it.
bool use_tiled(size_t rows, size_t cols) { return rows >= tile_size() / 2 && cols >= tile_size() / 2; }

std::string backward_options() { return "-DTILE=" + std::to_string(tile_size()); }

// The input gradient as a forward convolution, on the device's fastest kernel: dy spread
// out by the stride (zeros between its rows and columns) with d·(K-1) - p around it,
// convolved at stride 1 with the weights flipped and each group's input and output
// channels swapped. It multiplies stride² - 1 zeros for each value, so larger strides
// (patch embeddings) keep the direct kernel.
bool grad_input_as_forward(const Shape& s) {
  return conv_mode() != ConvMode::kDirect && s.stride_h * s.stride_w <= 4;
}

at::Tensor grad_input_forward(const Shape& s, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                              const at::Tensor& dy, const at::Tensor& w) {
  Device& dev = Device::get();
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  const int ext_h = s.dilation_h * (s.k_h - 1), ext_w = s.dilation_w * (s.k_w - 1);
  const int lh = int(height) + ext_h, lw = int(width) + ext_w;
  const bool as_is = s.stride_h == 1 && s.stride_w == 1 && ext_h == pad_h && ext_w == pad_w;  // e.g. 1×1, no padding
  at::Tensor spread = dy;
  if (!as_is) {
    spread = empty_device({s.batch, s.c_out, lh, lw}, at::kFloat);
    Launch launch(dev.kernel("index.cl", "spread2d", "-DT=float"));
    launch.mem(span(dy).mem).mem(span(spread).mem).i32(s.h_out).i32(s.w_out).i32(lh).i32(lw);
    launch.i32(ext_h - int(pad_h)).i32(ext_w - int(pad_w)).i32(s.stride_h).i32(s.stride_w);
    launch.i32(int(spread.numel())).run1(size_t(spread.numel()));
  }
  at::Tensor flipped = empty_device({s.c_in, cout_g, s.k_h, s.k_w}, at::kFloat);
  {
    Launch launch(dev.kernel("index.cl", "flip_swap_weights", "-DT=float"));
    launch.mem(span(w).mem).mem(span(flipped).mem).i32(s.groups).i32(cin_g).i32(cout_g).i32(s.k_h).i32(s.k_w);
    launch.i32(int(flipped.numel())).run1(size_t(flipped.numel()));
  }
  Shape t = s;
  t.c_in = s.c_out;
  t.c_out = s.c_in;
  t.h = lh;
  t.w = lw;
  t.stride_h = t.stride_w = 1;
  t.h_out = int(height);
  t.w_out = int(width);
  at::Tensor dx = empty_device({s.batch, s.c_in, height, width}, at::kFloat);
  forward_any(t, spread, flipped, dx);
  return dx;
}

// The weight gradient as a forward convolution on a GPU: with images and channels swapped,
// x as (C_in, B, H, W) convolved with dy as (C_out, B, H_out, W_out) weights, the
// convolution's dilation as the stride and its stride as the dilation, gives dW as
// (C_in, C_out, K_h, K_w): a small output over a long K (B·H_out·W_out), split many ways.
// conv2d_gpu reads and writes the swapped layouts in place (NC_SWAPPED): no copies.
at::Tensor grad_weight_forward(const Shape& s, const at::Tensor& x_padded, const at::Tensor& dy) {
  Shape t{};
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
  at::Tensor dw = empty_device({s.c_out, s.c_in, s.k_h, s.k_w}, at::kFloat);
  forward_gpu(t, x_padded, dy, at::Tensor(), dw, 128, true);
  return dw;
}

// Gradient with respect to the padded input (the direct and tiled kernels).
at::Tensor grad_input_padded(const Shape& s, const at::Tensor& dy, const at::Tensor& w) {
  Device& dev = Device::get();
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  at::Tensor dx = empty_device({s.batch, s.c_in, s.h, s.w}, at::kFloat);
  const bool gaps = s.stride_h > 1 || s.stride_w > 1;
  const bool tiled = !gaps && !dev.is_cpu() && use_tiled(cin_g, size_t(cout_g) * s.k_h * s.k_w);
  const size_t tile = tile_size();
  Launch launch(dev.library_kernel(kBackward, tiled ? "conv2d_grad_input_tiled" : "conv2d_grad_input_direct",
                                   backward_options()));
  shape_args(launch.mem(span(dy).mem).mem(span(w).mem).mem(span(dx).mem), s);
  if (tiled) {
    const size_t global[3] = {round_up(size_t(s.batch) * s.h * s.w, tile), round_up(cin_g, tile), size_t(s.groups)};
    const size_t local[3] = {tile, tile, 1};
    launch.run(3, global, local);
  } else {
    const size_t global[1] = {round_up(dx.numel(), 64)};
    launch.run(1, global, nullptr);
  }
  return dx;
}

at::Tensor grad_weight(const Shape& s, const at::Tensor& x, const at::Tensor& dy) {
  Device& dev = Device::get();
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  const size_t k_dim = size_t(cin_g) * s.k_h * s.k_w, w_len = size_t(s.c_out) * k_dim;
  const size_t pixels = size_t(s.batch) * s.h_out * s.w_out;
  const size_t target = size_t(dev.info().compute_units) * 4096, tile = tile_size();
  const bool tiled = use_tiled(cout_g, k_dim);
  // Split the sum over output pixels into slices so that enough work-items run.
  const size_t base = tiled ? round_up(k_dim, tile) * round_up(cout_g, tile) * s.groups : w_len;
  const size_t min_chunk = tiled ? 4 * tile : 64, align = tiled ? tile : 1;
  size_t want = std::max<size_t>(1, (target + base - 1) / base);
  want = std::min<size_t>({want, std::max<size_t>(1, pixels / min_chunk), 256});
  const int chunk = int(round_up((pixels + want - 1) / want, align));
  const int splits = int((pixels + chunk - 1) / chunk);
  at::Tensor partial = empty_device({int64_t(splits) * int64_t(w_len)}, at::kFloat);
  {
    Launch launch(dev.library_kernel(kBackward, tiled ? "conv2d_grad_weight_tiled" : "conv2d_grad_weight_direct",
                                     backward_options()));
    shape_args(launch.mem(span(x).mem).mem(span(dy).mem).mem(span(partial).mem), s).i32(chunk);
    if (tiled) {
      const size_t global[3] = {round_up(k_dim, tile), round_up(cout_g, tile), size_t(s.groups) * splits};
      const size_t local[3] = {tile, tile, 1};
      launch.run(3, global, local);
    } else {
      const size_t global[2] = {round_up(w_len, 64), size_t(splits)};
      launch.run(2, global, nullptr);
    }
  }
  if (splits == 1) return partial;
  at::Tensor dw = empty_device({int64_t(w_len)}, at::kFloat);
  Launch sum(dev.library_kernel(kBackward, "conv2d_sum_splits", backward_options()));
  sum.mem(span(partial).mem).mem(span(dw).mem).i32(int(w_len)).i32(splits);
  const size_t global[1] = {round_up(w_len, 64)};
  sum.run(1, global, nullptr);
  return dw;
}

at::Tensor grad_bias(const Shape& s, const at::Tensor& dy) {
  at::Tensor db = empty_device({s.c_out}, at::kFloat);
  const size_t group = 64;  // BIAS_GROUP in conv2d_backward.cl
  Launch launch(Device::get().library_kernel(kBackward, "conv2d_grad_bias", backward_options()));
  launch.mem(span(dy).mem).mem(span(db).mem).i32(s.batch).i32(s.c_out).i32(s.h_out * s.w_out);
  const size_t global[1] = {size_t(s.c_out) * group};
  const size_t local[1] = {group};
  launch.run(1, global, local);
  return db;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  const int64_t g = groups.expect_int();
  const Args2d a = as_2d(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                         C10_AS_INTARRAYREF_SLOW(dilation), transposed, g);
  check_float(grad_output, "grad_output");
  const Shape s = conv_shape(a.x, a.weight, a.stride, a.padding, a.dilation, g);
  const at::Tensor dy = whole(a.one_d ? grad_output.unsqueeze(2) : grad_output);
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    if (grad_input_as_forward(s)) {
      dx = grad_input_forward(s, a.x.size(2), a.x.size(3), a.padding[0], a.padding[1], dy, whole(a.weight));
    } else {
      const at::Tensor dx_padded = grad_input_padded(s, dy, whole(a.weight));
      dx = dx_padded.narrow(2, a.padding[0], a.x.size(2)).narrow(3, a.padding[1], a.x.size(3)).contiguous();
    }
    if (a.one_d) dx = dx.squeeze(2);
  }
  if (output_mask[1]) {
    const at::Tensor x_padded = padded(a.x, a.padding[0], a.padding[1]);
    const bool as_forward = conv_mode() != ConvMode::kDirect && !cpu_kernels() && s.groups == 1;
    dw = (as_forward ? grad_weight_forward(s, x_padded, dy) : grad_weight(s, x_padded, dy)).view(weight.sizes());
  }
  if (output_mask[2]) db = grad_bias(s, dy);
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

}  // namespace oclf::device
