// Convolution on the opencl device, forward: the dispatch to the library's kernels of
// conv2d.cl (conv2d_gpu with split-K on GPUs, conv2d_cpu on packed weights on CPUs,
// conv2d_depthwise(_cpu) for depthwise layers). Those kernels take an already padded input,
// so padding is applied here (a zeroed tensor with the input copied into its interior).
// conv1d (3-D input) runs as conv2d with a height of 1; transposed convolutions fall back.
// The gradients: conv_backward.cpp.
#include <torch/library.h>

#include <limits>

#include "../../../fast_tuning.hpp"
#include "../../../runtime/settings.hpp"
#include "conv.h"

namespace oclf::device::conv {

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
                 const at::Tensor& y, int max_splits, bool swapped) {
  Device& dev = Device::get();
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int hw_out = p.h_out * p.w_out;
  const size_t pixels = size_t(p.batch) * hw_out;
  const bool pointwise = !swapped && hw_out % 4 == 0 && p.k_h == 1 && p.k_w == 1 && p.stride_h == 1 &&
                         p.stride_w == 1 &&
                         p.h == p.h_out && p.w == p.w_out;
  // Tiles as the library picks them (fast_tuning.hpp default_tile), K steps of 16 for the
  // weight gradient's swapped layouts.
  const size_t cus = dev.info().compute_units;
  fast::GpuTile tile;
  if (!fast::tile_setting(&tile))  // OCLF_GPU_TILE, as for the library's conv2d_gpu
    tile = fast::default_tile(dev.info(), cout_g, k_dim, pixels, p.groups, pointwise, !swapped);
  const int tm = tile.tm, tn = tile.tn, wm = tile.wm, wn = tile.wn, tk = tile.tk;
  const std::string options = "-cl-mad-enable -DGTM=" + std::to_string(tm) + " -DGTN=" + std::to_string(tn) +
                              " -DGWM=" + std::to_string(wm) + " -DGWN=" + std::to_string(wn) +
                              " -DGTK=" + std::to_string(tk);
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

// conv2d_cpu with COV output channels (a vector) × PX pixels per work-item, on the weights
// packed for COV (once per weight, version and COV).
void run_cpu(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& y,
             int cov, int px) {
  Device& dev = Device::get();
  const int cout_g = p.c_out / p.groups;
  const int k_dim = (p.c_in / p.groups) * p.k_h * p.k_w;
  const int co_blocks = (cout_g + cov - 1) / cov;
  const std::string pack_options = "-cl-mad-enable -DCOV=" + std::to_string(cov);
  const std::string options = pack_options + " -DPX=" + std::to_string(px);
  const bool fixed = p.k_h == p.k_w && (p.k_h == 1 || p.k_h == 3 || p.k_h == 5 || p.k_h == 7);
  const std::string conv_options =
      fixed ? options + " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w) : options;
  const std::string layout = "conv2d_cpu COV=" + std::to_string(cov) + " " + std::to_string(k_dim) + "x" +
                             std::to_string(cout_g) + "x" + std::to_string(p.groups);
  const at::Tensor packed = derived_from(w, layout, [&] {
    at::Tensor out = empty_device({int64_t(p.groups) * co_blocks * cov * k_dim}, at::kFloat);
    Launch pack(dev.library_kernel(kForward, "conv2d_pack_weights", pack_options));
    pack.mem(span(w).mem).mem(span(out).mem).i32(k_dim).i32(cout_g).i32(co_blocks);
    const size_t global[3] = {size_t(k_dim), size_t(co_blocks) * cov, size_t(p.groups)};
    pack.run(3, global, nullptr);
    return out;
  });
  const bool has_bias = bias.defined();
  const cl_kernel kernel = dev.library_kernel(kForward, "conv2d_cpu", conv_options);
  Launch launch(kernel);
  launch.mem(span(x).mem).mem(span(packed).mem).mem(has_bias ? span(bias).mem : nullptr).mem(span(y).mem);
  shape_args(launch.i32(has_bias), p);
  const size_t global[3] = {size_t(co_blocks), size_t(p.h_out * p.w_out + px - 1) / px, size_t(p.batch) * p.groups};
  const size_t local[3] = {fast::cpu_work_group(dev.info(), global[0], global[1] * global[2], 8, kernel, dev.id()), 1,
                           1};
  launch.run(3, global, local);
}

// conv2d_cpu's block for a layer shape, as the reference picks it (fast_tuning.hpp) and in
// the same tuning cache (same kernel, same device, same key): the cached choice (a
// first-use measurement or a sweep, by the device or by the reference's patched layers or
// benchmark); else, when OCLF_TUNE allows measuring now and the layer is worth it, the
// fastest of the reference's first-use candidates, timed on the device and cached; else
// the first of them (COV = the device's vector width, PX = 8).
std::pair<int, int> cpu_block(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                              const at::Tensor& y) {
  Runtime& rt = Runtime::get();
  Device& dev = Device::get();
  std::lock_guard<std::recursive_mutex> lock(dev.mutex());
  const std::vector<std::string> candidates = fast::cpu_candidates(rt.info(), false);
  auto block = [](const std::string& c) {
    return std::pair<int, int>{fast::config_value(c, "COV", 16), fast::config_value(c, "PX", 8)};
  };
  const std::string key = fast::conv_key("cpu", p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h,
                                         p.stride_w, p.dilation_h, p.dilation_w, p.groups);
  const std::string hash = dev.library_source_hash(kForward);
  const std::string cached = fast::cached_choice(rt, key, hash);
  const auto [c, px] = block(cached);
  if (fast::config_kind(cached) == "cpu" && (c == 4 || c == 8 || c == 16) && px >= 1 && px <= 32) return {c, px};
  const double macs = double(p.batch) * p.c_out * p.h_out * p.w_out * (p.c_in / p.groups) * p.k_h * p.k_w;
  Tuning& tuning = rt.tuning();
  if (Tuning::mode() != Tuning::Mode::on || macs < double(1 << 20) || !tuning.may_measure())
    return block(candidates.front());
  double best_ns = std::numeric_limits<double>::infinity();
  std::string best = candidates.front();
  for (const std::string& candidate : candidates) {
    try {
      const auto [cov, px_] = block(candidate);
      // The device's queue is not the runtime's: each run waits for its own kernels.
      const double ns = tuning.measure([&] {
        run_cpu(p, x, w, bias, y, cov, px_);
        dev.synchronize();
      }, 3);
      if (ns < best_ns) best_ns = ns, best = candidate;
    } catch (const Error&) {
      continue;  // this block does not build or launch on this device
    }
  }
  tuning.remember(key, hash, best);
  return block(best);
}

void forward_cpu(const Shape& p, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                 const at::Tensor& y) {
  const auto [cov, px] = cpu_block(p, x, w, bias, y);
  run_cpu(p, x, w, bias, y, cov, px);
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
void forward_any(const Shape& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, int max_splits) {
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

}  // namespace oclf::device::conv

namespace oclf::device {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", conv::convolution);
}

}  // namespace oclf::device
