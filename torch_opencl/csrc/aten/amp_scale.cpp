// The gradient scaler's operators on the opencl device (torch.amp.GradScaler("opencl")),
// over kernels/amp.cl:
//   _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
//       grads *= inv_scale[0] in place, found_inf[0] = 1 where any element is inf or NaN:
//       one launch per kSlots gradients of one dtype (float32, float16, bfloat16; float64
//       where the device has cl_khr_fp64, else the CPU fallback)
//   _amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
//                      growth_interval)
//       the scale's backoff or growth, one work-item
// found_inf, inv_scale, the scale and growth_tracker are 1-element device tensors that stay
// on the device: a step enqueues these kernels and reads nothing back. The arguments are
// checked as torch's CPU kernels check them, with the same messages.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

constexpr size_t kSlots = 8;  // TENSORS in amp.cl

cl_kernel amp_kernel(const char* name, const std::string& options) {
  const bool cpu = is_cpu();
  return device_kernel("amp.cl", name,
                              "-DTENSORS=" + std::to_string(kSlots) + " -DCONTIGUOUS=" + std::to_string(int(cpu)) +
                                  options);
}

// A 1-element device tensor of `dtype` named `what`, as torch's kernels require (`kind`: "a
// float", "an int").
void check_scalar(const at::Tensor& t, const char* what, at::ScalarType dtype, const char* kind) {
  check_device(t, what);
  DEVICE_CHECK(t.numel() == 1, what, " must be a 1-element tensor.");
  DEVICE_CHECK(t.scalar_type() == dtype, what, " must be ", kind, " tensor.");
}

// (items, kSlots) for gradients of up to `largest` elements: on GPUs one work-item per
// element up to 65536 per row, on CPUs one per 1024 elements up to 1024.
NDRange slots_range(int64_t largest) {
  const bool cpu = is_cpu();
  const size_t group = cpu ? 64 : 256;
  const size_t wanted = cpu ? size_t(largest + 1023) / 1024 : size_t(largest);
  const size_t items = std::min(round_up(std::max<size_t>(wanted, 1), group), cpu ? size_t(1024) : size_t(65536));
  const size_t global[2] = {items, kSlots};
  const size_t local[2] = {group, 1};
  return NDRange(2, global, local);
}

// unscale over `grads`, dense tensors of one dtype, up to kSlots per launch (largest first,
// so a launch's rows are of similar length).
void unscale_launches(std::vector<at::Tensor> grads, const at::Tensor& found_inf, const at::Tensor& inv_scale) {
  const at::ScalarType dtype = grads.front().scalar_type();
  const char* type = cl_storage_type(dtype, "_amp_foreach_non_finite_check_and_unscale_: a gradient");
  const std::string compute = dtype == at::kDouble ? "double" : "float";
  cl_kernel kernel = amp_kernel("unscale", std::string(" -DT=") + type + " -DCOMPUTE=" + compute);
  std::stable_sort(grads.begin(), grads.end(),
                   [](const at::Tensor& a, const at::Tensor& b) { return a.numel() > b.numel(); });
  Stream& stream = Stream::get();
  for (size_t first = 0; first < grads.size(); first += kSlots) {
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    cl_uint index = 0;
    for (size_t slot = 0; slot < kSlots; ++slot) {
      const bool used = first + slot < grads.size();
      set_arg_at(kernel, &index, used ? arg(grads[first + slot]) : TensorArg{});
      oclf::set_arg_at(kernel, &index, used ? int(grads[first + slot].numel()) : 0);
    }
    set_arg_at(kernel, &index, arg(found_inf));
    set_arg_at(kernel, &index, arg(inv_scale));
    const NDRange range = slots_range(grads[first].numel());
    stream.launch(kernel, range.dims, range.global, range.local);
  }
}

void non_finite_check_and_unscale(at::TensorList scaled_grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (scaled_grads.empty()) return;
  check_scalar(inv_scale, "inv_scale", at::kFloat, "a float");
  check_scalar(found_inf, "found_inf", at::kFloat, "a float");
  // Dense gradients go to the kernel as they lie, grouped by dtype; others (rare: a
  // gradient that is a strided view) through a contiguous copy, written back after.
  std::map<at::ScalarType, std::vector<at::Tensor>> dense;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (gradient, its contiguous copy)
  for (const at::Tensor& t : scaled_grads) {
    check_device(t, "_amp_foreach_non_finite_check_and_unscale_: one of scaled_grads");
    DEVICE_CHECK(t.layout() == at::kStrided, "one of scaled_grads was not a strided tensor.");
    DEVICE_CHECK(at::isFloatingType(t.scalar_type()), "_amp_foreach_non_finite_check_and_unscale_: ",
                 "gradients must be floating point, got ", t.scalar_type());
    DEVICE_CHECK(t.numel() < (int64_t(1) << 31), "opencl: _amp_foreach_non_finite_check_and_unscale_: a gradient of ",
                 t.numel(), " elements is over the kernel's 2^31 limit");
    if (t.numel() == 0) continue;
    if (t.is_non_overlapping_and_dense()) {
      dense[t.scalar_type()].push_back(t);
    } else {
      copies.emplace_back(t, t.contiguous());
      dense[t.scalar_type()].push_back(copies.back().second);
    }
  }
  // Every dtype's kernel is found before anything is enqueued (a DtypeError sends the whole
  // call to the CPU fallback with nothing changed).
  for (const auto& [dtype, grads] : dense) cl_storage_type(dtype, "_amp_foreach_non_finite_check_and_unscale_: a gradient");
  for (const auto& [dtype, grads] : dense) unscale_launches(grads, found_inf, inv_scale);
  for (auto& [grad, copy] : copies) grad.copy_(copy);
}

at::Tensor& update_scale(at::Tensor& current_scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_scalar(growth_tracker, "growth_tracker", at::kInt, "an int");
  check_scalar(current_scale, "current_scale", at::kFloat, "a float");
  check_scalar(found_inf, "found_inf", at::kFloat, "a float");
  cl_kernel kernel = amp_kernel("update_scale", "");
  Stream& stream = Stream::get();
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  cl_uint index = 0;
  set_arg_at(kernel, &index, arg(current_scale));
  set_arg_at(kernel, &index, arg(growth_tracker));
  set_arg_at(kernel, &index, arg(found_inf));
  // The factors as amp.cl's factor_t: double where the device has it.
  if (has_fp64()) {
    oclf::set_arg_at(kernel, &index, growth_factor);
    oclf::set_arg_at(kernel, &index, backoff_factor);
  } else {
    oclf::set_arg_at(kernel, &index, float(growth_factor));
    oclf::set_arg_at(kernel, &index, float(backoff_factor));
  }
  oclf::set_arg_at(kernel, &index, cl_long(growth_interval));
  const size_t one = 1;
  stream.launch(kernel, 1, &one, &one);
  return current_scale;
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", non_finite_check_and_unscale);
  m.impl("_amp_update_scale_", update_scale);
}

}  // namespace oclf::device
