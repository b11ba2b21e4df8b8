// torch.optim's fused steps (Adam, AdamW, SGD with fused=True) on the opencl device,
// kernels/optim.cl: up to kSlots parameters per launch, where the foreach path launches
// several kernels per parameter. Parameters are sorted by size before being put in
// launches, so a launch's rows are of similar length. Cases the kernels do not take
// (other dtypes, non-contiguous tensors) go to the CPU fallback as a whole. The foreach ops
// of SGD's default path (_foreach_mul_, _foreach_add_ and _foreach_add with a list) take the
// same slots, so an unfused SGD step is a few launches too; elsewhere torch's loop.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <unordered_map>

#include "tensors.h"
#include "kernel_launch.h"
#include "dispatch.h"
#include "fallback.h"

namespace oclf::device {

namespace {

constexpr size_t kSlots = 8;  // TENSORS in optim.cl

bool servable(const at::Tensor& t, int64_t numel) {
  return is_device(t) && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == numel;
}

bool servable_scalar(const std::optional<at::Tensor>& t) {
  return !t || !t->defined() || (is_device(*t) && t->scalar_type() == at::kFloat && t->numel() == 1);
}

// Whether every list has one tensor per parameter (or is empty where `optional`), each a
// contiguous float32 device tensor of its parameter's size.
bool servable_lists(at::TensorList params, std::initializer_list<std::pair<at::TensorList, bool>> lists) {
  for (const auto& [list, optional] : lists) {
    if (list.empty() && optional) continue;
    if (list.size() != params.size()) return false;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!servable(params[i], params[i].numel())) return false;
    for (const auto& [list, optional] : lists) {
      if (!list.empty() && !servable(list[i], params[i].numel())) return false;
    }
  }
  return true;
}

// Parameter indices in launches of up to kSlots, largest first.
std::vector<std::vector<size_t>> launches(at::TensorList params) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < order.size(); i += kSlots) {
    out.emplace_back(order.begin() + i, order.begin() + std::min(order.size(), i + kSlots));
  }
  return out;
}

// optim.cl's kernel `name` with the given build options: CPUs give each work-item a
// contiguous run of elements.
cl_kernel optim_kernel(const char* name, const std::string& options = "") {
  const bool cpu = is_cpu();
  return device_kernel(
      "optim.cl", name, "-DTENSORS=" + std::to_string(kSlots) + " -DCONTIGUOUS=" + std::to_string(int(cpu)) + options);
}

bool given(const std::optional<at::Tensor>& t) { return t && t->defined(); }

// (items, kSlots): items per parameter row (the rows loop over the rest): on GPUs one per
// element up to 65536, on CPUs one per 1024 elements, up to 1024.
NDRange slots_range(int64_t largest) {
  const bool cpu = is_cpu();
  const size_t group = cpu ? 64 : 256;
  const size_t wanted = cpu ? size_t(std::max<int64_t>(largest, 1) + 1023) / 1024 : size_t(std::max<int64_t>(largest, 1));
  const size_t items = std::min(round_up(wanted, group), cpu ? size_t(1024) : size_t(65536));
  const size_t global[2] = {items, kSlots};
  const size_t local[2] = {group, 1};
  return NDRange(2, global, local);
}

TensorArg optional_arg(const std::optional<at::Tensor>& t) { return given(t) ? arg(*t) : TensorArg{}; }


void check_sizes(int64_t numel, const char* op) {
  DEVICE_CHECK(numel < (int64_t(1) << 31), "opencl: ", op, ": a parameter of ", numel,
              " elements is over the kernels' 2^31 limit");
}

// Launches `kernel` once per batch of launches(params): slot k takes the N tensor arguments
// tensors(i) gives for its parameter i and the parameter's element count (slots past the
// batch: null buffers and 0); shared(kernel, &index) then sets the arguments after the slots.
template <size_t N, typename Tensors, typename Shared>
void launch_slots(cl_kernel kernel, at::TensorList params, const char* op, const Tensors& tensors,
                  const Shared& shared) {
  Stream& stream = Stream::get();
  for (const std::vector<size_t>& batch : launches(params)) {
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    cl_uint index = 0;
    for (size_t slot = 0; slot < kSlots; ++slot) {
      const bool used = slot < batch.size();
      const int64_t numel = used ? params[batch[slot]].numel() : 0;
      check_sizes(numel, op);
      const std::array<TensorArg, N> args = used ? tensors(batch[slot]) : std::array<TensorArg, N>{};
      for (const TensorArg& a : args) set_arg_at(kernel, &index, a);
      oclf::set_arg_at(kernel, &index, int(numel));
    }
    shared(kernel, &index);
    const NDRange range = slots_range(params[batch.front()].numel());
    stream.launch(kernel, range.dims, range.global, range.local);
  }
}

void adam_launches(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                   at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr, const TensorArg& lr_tensor,
                   double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                   bool decoupled, const std::optional<at::Tensor>& grad_scale,
                   const std::optional<at::Tensor>& found_inf) {
  cl_kernel kernel = optim_kernel("adam", " -DAMSGRAD=" + std::to_string(int(amsgrad)) +
                                                 " -DSCALED=" + std::to_string(int(given(grad_scale))));
  const auto tensors = [&](size_t i) {
    return std::array<TensorArg, 6>{arg(params[i]),      arg(grads[i]),
                                    arg(exp_avgs[i]),    arg(exp_avg_sqs[i]),
                                    amsgrad ? arg(max_exp_avg_sqs[i]) : TensorArg{}, arg(steps[i])};
  };
  launch_slots<6>(kernel, params, "_fused_adam_", tensors, [&](cl_kernel k, cl_uint* index) {
    oclf::set_arg_at(k, index, float(lr));
    set_arg_at(k, index, lr_tensor);
    oclf::set_arg_at(k, index, float(beta1));
    oclf::set_arg_at(k, index, float(beta2));
    oclf::set_arg_at(k, index, float(weight_decay));
    oclf::set_arg_at(k, index, float(eps));
    oclf::set_arg_at(k, index, int(maximize));
    oclf::set_arg_at(k, index, int(decoupled));
    set_arg_at(k, index, optional_arg(grad_scale));
    set_arg_at(k, index, optional_arg(found_inf));
  });
}

bool adam_servable(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                   at::TensorList max_exp_avg_sqs, at::TensorList steps, bool amsgrad,
                   const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  if (!servable_lists(params, {{grads, false}, {exp_avgs, false}, {exp_avg_sqs, false}, {max_exp_avg_sqs, !amsgrad}}))
    return false;
  if (steps.size() != params.size()) return false;
  for (const at::Tensor& s : steps) {
    if (!servable_scalar(s)) return false;
  }
  return servable_scalar(grad_scale) && servable_scalar(found_inf);
}

template <bool decoupled>
void fused_adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                double weight_decay, double eps, bool amsgrad, bool maximize,
                const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  if (!adam_servable(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad, grad_scale, found_inf)) {
    using Op = std::conditional_t<decoupled, at::_ops::_fused_adamw_, at::_ops::_fused_adam_>;
    return at::native::call_fallback_fn<&fallback_boxed, Op>::call(params, grads, exp_avgs, exp_avg_sqs,
                                                                 max_exp_avg_sqs, steps, lr, beta1, beta2,
                                                                 weight_decay, eps, amsgrad, maximize, grad_scale,
                                                                 found_inf);
  }
  adam_launches(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, TensorArg{}, beta1, beta2,
                weight_decay, eps, amsgrad, maximize, decoupled, grad_scale, found_inf);
}

template <bool decoupled>
void fused_adam_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps,
                          const at::Tensor& lr, double beta1, double beta2, double weight_decay, double eps,
                          bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf) {
  if (!servable_scalar(lr) ||
      !adam_servable(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad, grad_scale, found_inf)) {
    using Op = std::conditional_t<decoupled, at::_ops::_fused_adamw__tensor_lr, at::_ops::_fused_adam__tensor_lr>;
    return at::native::call_fallback_fn<&fallback_boxed, Op>::call(params, grads, exp_avgs, exp_avg_sqs,
                                                                 max_exp_avg_sqs, steps, lr, beta1, beta2,
                                                                 weight_decay, eps, amsgrad, maximize, grad_scale,
                                                                 found_inf);
  }
  adam_launches(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, 0.0, arg(lr), beta1, beta2,
                weight_decay, eps, amsgrad, maximize, decoupled, grad_scale, found_inf);
}

void sgd_launches(at::TensorList params, at::TensorList grads, at::TensorList buffers, double weight_decay,
                  double momentum, double lr, const TensorArg& lr_tensor, double dampening, bool nesterov,
                  bool maximize, bool first_step, const std::optional<at::Tensor>& grad_scale,
                  const std::optional<at::Tensor>& found_inf) {
  const bool has_buffers = momentum != 0.0;
  cl_kernel kernel = optim_kernel("sgd", " -DMOMENTUM=" + std::to_string(int(has_buffers)) +
                                             " -DSCALED=" + std::to_string(int(given(grad_scale))));
  const auto tensors = [&](size_t i) {
    return std::array<TensorArg, 3>{arg(params[i]), arg(grads[i]), has_buffers ? arg(buffers[i]) : TensorArg{}};
  };
  launch_slots<3>(kernel, params, "_fused_sgd_", tensors, [&](cl_kernel k, cl_uint* index) {
    oclf::set_arg_at(k, index, float(lr));
    set_arg_at(k, index, lr_tensor);
    oclf::set_arg_at(k, index, float(weight_decay));
    oclf::set_arg_at(k, index, float(momentum));
    oclf::set_arg_at(k, index, float(dampening));
    oclf::set_arg_at(k, index, int(nesterov));
    oclf::set_arg_at(k, index, int(maximize));
    oclf::set_arg_at(k, index, int(first_step));
    set_arg_at(k, index, optional_arg(grad_scale));
    set_arg_at(k, index, optional_arg(found_inf));
  });
}

bool sgd_servable(at::TensorList params, at::TensorList grads, at::TensorList buffers, double momentum,
                  const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  return servable_lists(params, {{grads, false}, {buffers, momentum == 0.0}}) && servable_scalar(grad_scale) &&
         servable_scalar(found_inf);
}

void fused_sgd(at::TensorList params, at::TensorList grads, at::TensorList buffers, double weight_decay,
               double momentum, double lr, double dampening, bool nesterov, bool maximize, bool first_step,
               const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  if (!sgd_servable(params, grads, buffers, momentum, grad_scale, found_inf)) {
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::_fused_sgd_>::call(
        params, grads, buffers, weight_decay, momentum, lr, dampening, nesterov, maximize, first_step, grad_scale,
        found_inf);
  }
  sgd_launches(params, grads, buffers, weight_decay, momentum, lr, TensorArg{}, dampening, nesterov, maximize,
               first_step, grad_scale, found_inf);
}

void fused_sgd_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList buffers, double weight_decay,
                         double momentum, const at::Tensor& lr, double dampening, bool nesterov, bool maximize,
                         bool first_step, const std::optional<at::Tensor>& grad_scale,
                         const std::optional<at::Tensor>& found_inf) {
  if (!servable_scalar(lr) || !sgd_servable(params, grads, buffers, momentum, grad_scale, found_inf)) {
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::_fused_sgd__tensor_lr>::call(
        params, grads, buffers, weight_decay, momentum, lr, dampening, nesterov, maximize, first_step, grad_scale,
        found_inf);
  }
  sgd_launches(params, grads, buffers, weight_decay, momentum, 0.0, arg(lr), dampening, nesterov, maximize,
               first_step, grad_scale, found_inf);
}

// Whether every tensor is a contiguous float32 device tensor the slot kernels take.
bool all_servable(at::TensorList tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return servable(t, t.numel()) && t.numel() < (int64_t(1) << 31);
  });
}

// torch._foreach_add_(tensors, number): one launch per kSlots float32 tensors (the fused
// optimizers' step counts); other dtypes and layouts one operator per tensor, as torch does.
void foreach_add_scalar(at::TensorList tensors, const at::Scalar& value) {
  if (tensors.empty() || !all_servable(tensors))
    return at::native::foreach_tensor_add_scalar_kernel_slow_(tensors, value);
  launch_slots<1>(optim_kernel("foreach_add"), tensors, "_foreach_add_",
                  [&](size_t i) { return std::array<TensorArg, 1>{arg(tensors[i])}; },
                  [&](cl_kernel k, cl_uint* index) { oclf::set_arg_at(k, index, float(value.toDouble())); });
}

// Whether x += alpha·y per pair may run as one launch per kSlots pairs of float32 tensors:
// torch adds pair by pair, so an `other` that is another pair's target (which must see that
// pair's result) keeps torch's loop.
bool pairs_servable(at::TensorList tensors, at::TensorList others, bool in_place) {
  bool ok = !tensors.empty() && others.size() == tensors.size() && all_servable(tensors) && all_servable(others);
  std::unordered_map<const void*, size_t> target;
  for (size_t i = 0; ok && in_place && i < tensors.size(); ++i)
    ok = target.emplace(tensors[i].storage().data(), i).second;
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    const auto found = target.find(others[i].storage().data());
    ok = others[i].numel() == tensors[i].numel() && (found == target.end() || found->second == i);
  }
  return ok;
}

// z = a·x + b·y over slots of (z, x, y) (y absent: HAS_Y 0).
void axpby_launches(at::TensorList z, at::TensorList x, at::TensorList y, float a, float b, const char* op) {
  launch_slots<3>(optim_kernel("foreach_axpby", y.empty() ? " -DHAS_Y=0" : " -DHAS_Y=1"), x, op,
                  [&](size_t i) {
                    return std::array<TensorArg, 3>{arg(z[i]), arg(x[i]), y.empty() ? TensorArg{} : arg(y[i])};
                  },
                  [&](cl_kernel k, cl_uint* index) {
                    oclf::set_arg_at(k, index, a);
                    oclf::set_arg_at(k, index, b);
                  });
}

// torch._foreach_add_(tensors, others, alpha=...): one launch per kSlots pairs (SGD's foreach
// step: momentum buffers, then parameters); anything else torch's loop of one operator per
// tensor.
void foreach_add_list_(at::TensorList tensors, at::TensorList others, const at::Scalar& alpha) {
  if (!pairs_servable(tensors, others, true))
    return at::native::foreach_tensor_add_list_kernel_slow_(tensors, others, alpha);
  axpby_launches(tensors, tensors, others, 1.0f, float(alpha.toDouble()), "_foreach_add_");
}

// torch._foreach_add(tensors, others, alpha=...): the same into new tensors (SGD's weight
// decay and Nesterov terms).
std::vector<at::Tensor> foreach_add_list(at::TensorList tensors, at::TensorList others, const at::Scalar& alpha) {
  if (!pairs_servable(tensors, others, false))
    return at::native::foreach_tensor_add_list_kernel_slow(tensors, others, alpha);
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(at::empty_like(t));
  axpby_launches(out, tensors, others, 1.0f, float(alpha.toDouble()), "_foreach_add");
  return out;
}

// torch._foreach_mul_(tensors, number): x *= number, one launch per kSlots tensors.
void foreach_mul_scalar_(at::TensorList tensors, const at::Scalar& value) {
  if (tensors.empty() || !all_servable(tensors))
    return at::native::foreach_tensor_mul_scalar_kernel_slow_(tensors, value);
  axpby_launches(tensors, tensors, {}, float(value.toDouble()), 0.0f, "_foreach_mul_");
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_fused_adam_", fused_adam<false>);
  m.impl("_fused_adam_.tensor_lr", fused_adam_tensor_lr<false>);
  m.impl("_fused_adamw_", fused_adam<true>);
  m.impl("_fused_adamw_.tensor_lr", fused_adam_tensor_lr<true>);
  m.impl("_fused_sgd_", fused_sgd);
  m.impl("_fused_sgd_.tensor_lr", fused_sgd_tensor_lr);
  m.impl("_foreach_add_.Scalar", foreach_add_scalar);
  m.impl("_foreach_add_.List", foreach_add_list_);
  m.impl("_foreach_add.List", foreach_add_list);
  m.impl("_foreach_mul_.Scalar", foreach_mul_scalar_);
}

}  // namespace oclf::device
