// Convolution on the opencl device, forward: tensors into buffers for the reference's
// convolutions (opencl_functions/reference/conv2d.hpp picks and launches the kernel as it
// does for the library: conv2d_gpu with split-K on GPUs, conv2d_cpu on packed weights on
// CPUs, the depthwise kernels for depthwise layers). Those kernels take an already padded
// input, so padding is applied here (a zeroed tensor with the input copied into its interior).
// conv1d (3-D input) runs as conv2d with a height of 1; transposed and 3-D convolutions:
// conv_nd.cpp.
// The gradients: conv_backward.cpp.
#include <torch/library.h>

#include "opencl_functions/reference/conv2d.hpp"
#include "opencl_functions/runtime/settings.hpp"
#include "activations.h"
#include "conv.h"
#include "derived.h"
#include "dispatch.h"
#include "kernel_launch.h"
#include "device_launcher.h"
#include "plans.h"
#include "tensors.h"

namespace oclf::device::conv {

// The library's kernels take whole buffers: a tensor with an offset is copied first.
at::Tensor whole(const at::Tensor& t) {
  const at::Tensor c = contiguous(t);
  if (span(c).offset == 0) return c;
  return c.clone();
}

// Rows of a (rows, width) output, row_chunk() values of a row per work-item. Work-groups
// span up to 64 work-items of a row and, on GPUs, enough rows for 256 work-items (groups of
// one short row, 16 work-items at 14×14, ran pad2d at half its speed on the H100).
int row_chunk() { return is_cpu() ? 16 : 1; }

NDRange row_chunks(int64_t rows, int64_t width) {
  const size_t items = size_t((width + row_chunk() - 1) / row_chunk());
  size_t group = 1;
  while (group < items && group < 64) group *= 2;
  const size_t most = std::min<size_t>(256, Runtime::get().info().max_work_group_size);
  const size_t group_rows = is_cpu() ? 1 : std::max<size_t>(most / group, 1);
  const size_t global[2] = {round_up(items, group), round_up(size_t(rows), group_rows)};
  const size_t local[2] = {group, group_rows};
  return NDRange(2, global, local);
}

// x (B, C, H, W), float32 or 16-bit, any strides, zero-padded by (ph, pw) on each side:
// contiguous, at offset 0.
at::Tensor padded(const at::Tensor& x, int64_t ph, int64_t pw) {
  if (ph == 0 && pw == 0) return whole(x);
  at::Tensor out = empty_device({x.size(0), x.size(1), x.size(2) + 2 * ph, x.size(3) + 2 * pw}, x.scalar_type());
  if (out.numel() == 0) return out;
  // By rows (a division per element was 13 % of a ResNet-50 forward on PoCL). 16-bit values
  // move as their bits (zero bits are +0 in float16 and bfloat16 alike).
  const int64_t rows = out.size(0) * out.size(1) * out.size(2);
  const std::string type = x.element_size() == 2 ? "ushort" : "float";
  launch(device_kernel("index.cl", "pad2d", "-DT=" + type + " -DCHUNK=" + std::to_string(row_chunk())),
         row_chunks(rows, out.size(3)), arg(x), arg(out), int(x.size(1)), int(x.size(2)), int(x.size(3)), int(ph),
         int(pw), int(x.stride(0)), int(x.stride(1)), int(x.stride(2)), int(x.stride(3)), int(rows));
  return out;
}

// OCLF_DEVICE_CONV: "gpu" runs the GPU paths on any device (so CPU machines test them),
// "direct" computes gradients with the direct and tiled backward kernels; else by device.
ConvMode conv_mode() {
  const std::string mode = setting("DEVICE_CONV");
  if (mode == "gpu") return ConvMode::kGpu;
  if (mode == "direct") return ConvMode::kDirect;
  DEVICE_CHECK(mode.empty() || mode == "auto", "opencl: ", setting_variable("DEVICE_CONV"),
              " must be auto, gpu or direct, got \"", mode, "\"");
  return ConvMode::kAuto;
}
bool cpu_kernels() { return conv_mode() != ConvMode::kGpu && is_cpu(); }

// ---- forward ----------------------------------------------------------------------------

namespace {

// The reference's choice for the layer, with the library's settings: OCLF_CONV_KERNEL forces a
// kernel (except tiled: the device runs the reference's kernels only), OCLF_DEVICE_CONV=gpu
// plans as on a GPU.
reference::ConvRequest request() {
  reference::ConvRequest r;
  if (r.forced == "tiled") r.forced.clear();
  r.gpu_paths = conv_mode() == ConvMode::kGpu;
  return r;
}

// The plan key of a convolution's geometry under `op`.
plans::Key geometry_key(const char* op, const Conv2dGeometry& s) {
  plans::Key key(op);
  key << s.batch << s.c_in << s.h << s.w << s.c_out << s.k_h << s.k_w << s.stride_h << s.stride_w << s.dilation_h
      << s.dilation_w << s.groups;
  return key;
}

}  // namespace

void forward(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
             const at::Tensor& y, bool keep, const Epilogue& epilogue) {
  DeviceLauncher launcher(keep ? w : at::Tensor());
  ConvOperands o{whole_buffer(x, "input"), whole_buffer(w, "weight"),
                 bias.defined() ? whole_buffer(bias, "bias") : nullptr, whole_buffer(y, "output"), epilogue};
  o.io = cl_storage_type(x.scalar_type(), "input");
  const reference::ConvRequest r = request();
  plans::Key key = geometry_key("conv2d", s);
  key << int64_t(r.gpu_paths) << r.forced << setting("CPU_BLOCK") << setting("GPU_TILE") << setting("MMA") << o.io;
  const plans::Plan plan = plans::remembered(key, [&] {
    const reference::ConvPlan p = reference::plan_conv2d(launcher, s, o, r);
    return plans::Plan{p.config, p.origin, p.depthwise};
  });
  launcher.tuning().note(plan.config, plan.origin);
  reference::run_conv2d(launcher, s, o, {plan.depthwise, plan.config, plan.origin});
}

void forward_any(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y) {
  forward(s, x, w, at::Tensor(), y, false);
}

void forward_gpu_swapped(const Conv2dGeometry& s, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y) {
  DeviceLauncher launcher;
  const ConvOperands o{whole_buffer(x, "input"), whole_buffer(w, "weight"), nullptr, whole_buffer(y, "output")};
  plans::Key key = geometry_key("conv2d_swapped", s);
  key << setting("CONV_KERNEL") << setting("GPU_TILE");
  const plans::Plan plan = plans::remembered(key, [&] {
    const reference::Choice c = reference::plan_gpu_swapped(launcher, s, o);
    return plans::Plan{c.config, c.origin};
  });
  launcher.tuning().note(plan.config, plan.origin);
  reference::run_gpu_swapped(launcher, s, o, plan.config);
}

// The geometry of a 2-D convolution of x (unpadded) with weight; the padded size in s.h, s.w
// (Conv2dGeometry::of, the one place an output size is computed).
Conv2dGeometry conv_shape(const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  try {
    return Conv2dGeometry::of(int(x.size(0)), int(x.size(1)), int(x.size(2) + 2 * padding[0]),
                              int(x.size(3) + 2 * padding[1]), int(weight.size(0)), int(weight.size(1)),
                              int(weight.size(2)), int(weight.size(3)), int(stride[0]), int(stride[1]),
                              int(dilation[0]), int(dilation[1]), int(groups));
  } catch (const std::invalid_argument& err) {
    DEVICE_CHECK(false, "opencl: ", err.what());
    throw;
  }
}

Args2d as_2d(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
             at::IntArrayRef dilation, bool transposed, int64_t groups, bool any_float) {
  DEVICE_CHECK_NOT_IMPLEMENTED(!transposed, "opencl: transposed convolutions have no OpenCL kernel");
  DEVICE_CHECK_NOT_IMPLEMENTED(input.dim() == 4 || input.dim() == 3, "opencl: convolution of a ", input.dim(),
                              "-D input has no OpenCL kernel (conv1d, conv2d and conv3d do)");
  if (any_float && is_16bit_float(input.scalar_type())) {
    check_device(input, "input");
    check_device(weight, "weight");
    DEVICE_DTYPE_CHECK(weight.scalar_type() == input.scalar_type(), "opencl: convolution: weight is ",
                       weight.scalar_type(), ", input ", input.scalar_type());
  } else {
    check_float(input, "input");
    check_float(weight, "weight");
  }
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
  DEVICE_CHECK(a.x.size(1) == a.weight.size(1) * groups, "opencl: convolution: input has ", a.x.size(1),
              " channels, weight expects ", a.weight.size(1) * groups, " (", a.weight.size(1), " × groups ", groups,
              ")");
  return a;
}

// The geometry of a's convolution, checked to have an output.
Conv2dGeometry checked_shape(const Args2d& a, int64_t groups, const char* op) {
  const Conv2dGeometry s = conv_shape(a.x, a.weight, a.stride, a.padding, a.dilation, groups);
  DEVICE_CHECK(s.h_out > 0 && s.w_out > 0, "opencl: ", op, ": the kernel is larger than the padded input");
  return s;
}

// Whether a's weight keeps its derived copies (conv2d_cpu's packed weights) from call to call.
// Not for conv1d: torch hands it over as a 2-D convolution of height 1 through views made
// below autograd, which count versions of their own (always 0), so a kept copy would not see
// the weight change (an optimizer step).
bool keeps_weight(const Args2d& a) { return !a.one_d && !(a.x.size(2) == 1 && a.weight.size(2) == 1); }

// A new output (B, C_out, H_out, W_out) of a's convolution with bias (optional) and epilogue,
// of a's dtype. 16-bit convolutions run conv2d_gpu on their own values where it runs the layer
// (a GPU's, or OCLF_DEVICE_CONV=gpu's, other than depthwise); the CPU and depthwise kernels
// compute on float32 copies (the weight's kept while it is unchanged), converted back.
at::Tensor forward_new(const Args2d& a, const Conv2dGeometry& s, const std::optional<at::Tensor>& bias,
                       const Epilogue& epilogue) {
  const at::ScalarType dtype = a.x.scalar_type();
  at::Tensor b = bias && bias->defined() ? whole(*bias) : at::Tensor();
  if (dtype != at::kFloat && (cpu_kernels() || s.depthwise())) {
    Args2d wide = a;
    wide.x = float32_copy(a.x);
    wide.weight = float32_copy(a.weight);
    return forward_new(wide, s, b.defined() ? std::optional<at::Tensor>(float32_copy(b)) : std::nullopt, epilogue)
        .to(dtype);
  }
  at::Tensor y = empty_device({s.batch, s.c_out, s.h_out, s.w_out}, dtype);
  if (y.numel() > 0) {
    if (b.defined() && b.scalar_type() != dtype) b = b.to(dtype);
    forward(s, padded(a.x, a.padding[0], a.padding[1]), whole(a.weight), b, y, keeps_weight(a), epilogue);
  }
  return y;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                       bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const int64_t g = groups.expect_int();
  if (transposed || input.dim() == 5) {
    return convolution_nd(input, weight, bias, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                          C10_AS_INTARRAYREF_SLOW(dilation), transposed, C10_AS_INTARRAYREF_SLOW(output_padding), g);
  }
  const Args2d a = as_2d(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                         C10_AS_INTARRAYREF_SLOW(dilation), transposed, g, true);
  const Conv2dGeometry s = checked_shape(a, g, "convolution");
  const at::Tensor y = forward_new(a, s, bias, {});
  return a.one_d ? y.squeeze(2) : y;
}

// ---- fused: torch.ops.oclf.conv2d_fused -------------------------------------------------
// act(conv2d(input, weight, bias) + residual), the convolution of torch_opencl.fuse()'s
// inference models: one kernel where the separate operations take three or four (a folded
// batch norm is in weight and bias already). Float32 operands with a residual of the output's
// shape run in one kernel with an epilogue (reference/epilogue.h); anything else, on this or
// another device, runs as the separate operations, which give the same values.

namespace {

void check_fused_args(at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  DEVICE_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "conv2d_fused: stride, padding and dilation take two values each");
}

// The separate operations, on any device and dtype.
at::Tensor conv2d_fused_separately(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& residual,
                                   at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                   int64_t groups, c10::string_view activation) {
  const Activation act = activation_named(activation, "conv2d_fused");
  check_fused_args(stride, padding, dilation);
  at::Tensor y = at::convolution(input, weight, bias, stride, padding, dilation, false, {0, 0}, groups);
  if (residual && residual->defined()) y = y + *residual;
  return activated(y, act);
}

at::Tensor conv2d_fused(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& residual, at::IntArrayRef stride, at::IntArrayRef padding,
                        at::IntArrayRef dilation, int64_t groups, c10::string_view activation) {
  const Activation act = activation_named(activation, "conv2d_fused");
  check_fused_args(stride, padding, dilation);
  const bool has_bias = bias && bias->defined(), has_residual = residual && residual->defined();
  auto on_device_float = [](const at::Tensor& t) { return t.device().is_privateuseone() && t.scalar_type() == at::kFloat; };
  if (input.dim() == 4 && on_device_float(input) && on_device_float(weight) && (!has_bias || on_device_float(*bias)) &&
      (!has_residual || on_device_float(*residual))) {
    const Args2d a = as_2d(input, weight, stride, padding, dilation, false, groups);
    const Conv2dGeometry s = checked_shape(a, groups, "conv2d_fused");
    // A residual that broadcasts rather than matches takes the separate path.
    if (!has_residual || residual->sizes() == at::IntArrayRef{s.batch, s.c_out, s.h_out, s.w_out}) {
      const at::Tensor r = has_residual ? whole(*residual) : at::Tensor();
      Epilogue e;
      e.act = act;
      e.residual = has_residual ? whole_buffer(r, "residual") : nullptr;
      return forward_new(a, s, bias, e);
    }
  }
  return conv2d_fused_separately(input, weight, bias, residual, stride, padding, dilation, groups, activation);
}

}  // namespace

}  // namespace oclf::device::conv

namespace oclf::device {

REGISTER_DEVICE_OPS(m) {
  m.impl("convolution_overrideable", conv::convolution);
}

TORCH_LIBRARY_FRAGMENT(oclf, m) {
  m.def("conv2d_fused(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, int[2] stride=1, "
        "int[2] padding=0, int[2] dilation=1, int groups=1, str activation=\"none\") -> Tensor");
}

TORCH_LIBRARY_IMPL(oclf, PrivateUse1, m) {
  m.impl("conv2d_fused", conv::conv2d_fused);
}

TORCH_LIBRARY_IMPL(oclf, CompositeExplicitAutograd, m) {
  m.impl("conv2d_fused", conv::conv2d_fused_separately);
}

}  // namespace oclf::device
