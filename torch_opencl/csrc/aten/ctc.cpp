// The CTC loss of the opencl device, forward and backward (kernels/ctc.cl): _ctc_loss and its
// backward with the lengths as lists or as tensors (so nn.CTCLoss and F.ctc_loss). float32
// and float64, as torch's CPU kernel.
#include <torch/library.h>

#include <climits>
#include <limits>

#include "dispatch.h"
#include "kernel_launch.h"

namespace oclf::device {

namespace {

size_t group_size() { return is_cpu() ? 64 : 256; }

// What the kernels take of one call: the lengths and the targets' offsets as device int64
// tensors, the longest target.
struct Sequences {
  at::Tensor targets, offsets, input_lengths, target_lengths;
  int64_t Tn = 0, N = 0, C = 0, max_target = 0;
};

at::Tensor device_longs(const std::vector<int64_t>& values) {
  return at::tensor(values, at::kLong).to(current_device());
}

// Checks what torch's CPU kernel checks, with its messages.
Sequences sequences(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef input_lengths,
                    at::IntArrayRef target_lengths, int64_t blank) {
  DEVICE_CHECK(log_probs.dim() == 3, "opencl: ctc_loss: log_probs must be (T, N, C), got ", log_probs.sizes());
  DEVICE_CHECK(targets.scalar_type() == at::kLong || targets.scalar_type() == at::kInt, "opencl: ctc_loss: targets ",
               "must be int64 or int32, got ", targets.scalar_type());
  DEVICE_CHECK(targets.dim() == 1 || targets.dim() == 2, "opencl: ctc_loss: targets must be 1-D (concatenated) or ",
               "2-D (N, S), got ", targets.sizes());
  Sequences q;
  q.Tn = log_probs.size(0);
  q.N = log_probs.size(1);
  q.C = log_probs.size(2);
  DEVICE_CHECK(0 <= blank && blank < q.C, "opencl: ctc_loss: blank must be in label range");
  DEVICE_CHECK(int64_t(input_lengths.size()) == q.N, "opencl: ctc_loss: input_lengths must be of size batch_size");
  DEVICE_CHECK(int64_t(target_lengths.size()) == q.N, "opencl: ctc_loss: target_lengths must be of size batch_size");
  std::vector<int64_t> offsets(q.N);
  int64_t position = 0;
  for (int64_t b = 0; b < q.N; ++b) {
    DEVICE_CHECK(target_lengths[b] >= 0, "opencl: ctc_loss: Expected target_lengths to have value at least 0, but ",
                 "got value ", target_lengths[b]);
    DEVICE_CHECK(input_lengths[b] >= 0 && input_lengths[b] <= q.Tn, "opencl: ctc_loss: Expected input_lengths to ",
                 "have value between 0 and ", q.Tn, ", but got value ", input_lengths[b]);
    offsets[b] = targets.dim() == 1 ? position : b * targets.size(1);
    position += target_lengths[b];
    q.max_target = std::max(q.max_target, target_lengths[b]);
  }
  if (targets.dim() == 1) {
    DEVICE_CHECK(targets.size(0) >= position, "opencl: ctc_loss: targets has ", targets.size(0), " labels, the ",
                 "target lengths add up to ", position);
  } else {
    DEVICE_CHECK(targets.size(0) == q.N && targets.size(1) >= q.max_target, "opencl: ctc_loss: Expected tensor to ",
                 "have size at least ", q.max_target, " at dimension 1, but got size ", targets.size(1),
                 " for targets of shape ", targets.sizes());
  }
  DEVICE_CHECK(log_probs.numel() <= INT_MAX && q.N * q.Tn * (2 * q.max_target + 1) <= INT_MAX,
               "opencl: ctc_loss: tensors over 2^31 elements are not supported");
  q.targets = contiguous(targets.to(current_device(), at::kLong));
  q.offsets = device_longs(offsets);
  q.input_lengths = device_longs(std::vector<int64_t>(input_lengths.begin(), input_lengths.end()));
  q.target_lengths = device_longs(std::vector<int64_t>(target_lengths.begin(), target_lengths.end()));
  return q;
}

std::string options(const at::Tensor& log_probs) {
  return std::string("-DT=") + cl_real_type(log_probs.scalar_type(), "ctc_loss log_probs") + " -DGROUP=" +
         std::to_string(group_size());
}

// One work-group per sequence.
NDRange per_sequence(int64_t N) {
  const size_t g = group_size();
  const size_t global[1] = {size_t(N) * g};
  const size_t local[1] = {g};
  return NDRange(1, global, local);
}

// (neg_log_likelihood (N), log_alpha (N, T, 2·max target + 1)).
std::tuple<at::Tensor, at::Tensor> ctc(const at::Tensor& log_probs, const at::Tensor& targets,
                                       at::IntArrayRef input_lengths, at::IntArrayRef target_lengths, int64_t blank,
                                       bool zero_infinity) {
  const std::string opts = options(log_probs);
  const Sequences q = sequences(log_probs, targets, input_lengths, target_lengths, blank);
  const at::Tensor lp = contiguous(log_probs);
  const int64_t smax = 2 * q.max_target + 1;
  at::Tensor alpha = empty_device({q.N, q.Tn, smax}, lp.scalar_type());
  alpha.fill_(-std::numeric_limits<double>::infinity());
  at::Tensor nll = empty_device({q.N}, lp.scalar_type());
  launch(device_kernel("ctc.cl", "ctc_alpha", opts), per_sequence(q.N), arg(lp), arg(q.targets),
         arg(q.offsets), arg(q.input_lengths), arg(q.target_lengths), int(q.Tn), int(q.N), int(q.C), int(smax),
         int(blank), arg(alpha), arg(nll));
  return {nll, alpha};
}

at::Tensor ctc_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                        at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                        const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                        bool zero_infinity) {
  const std::string opts = options(log_probs);
  const Sequences q = sequences(log_probs, targets, input_lengths, target_lengths, blank);
  const int64_t smax = 2 * q.max_target + 1;
  DEVICE_CHECK(log_alpha.sizes() == at::IntArrayRef({q.N, q.Tn, smax}) && neg_log_likelihood.numel() == q.N &&
                   grad.numel() == q.N,
               "opencl: ctc_loss_backward: log_alpha ", log_alpha.sizes(), ", neg_log_likelihood ",
               neg_log_likelihood.sizes(), " and grad ", grad.sizes(), " do not fit ", q.N, " sequences of ", q.Tn,
               " steps");
  const at::ScalarType type = log_probs.scalar_type();
  const at::Tensor lp = contiguous(log_probs);
  at::Tensor beta = empty_device({q.N, q.Tn, smax}, type);
  beta.fill_(-std::numeric_limits<double>::infinity());
  launch(device_kernel("ctc.cl", "ctc_beta", opts), per_sequence(q.N), arg(lp), arg(q.targets),
         arg(q.offsets), arg(q.input_lengths), arg(q.target_lengths), int(q.Tn), int(q.N), int(q.C), int(smax),
         int(blank), arg(beta));
  at::Tensor result = empty_device(lp.sizes(), type);
  launch(device_kernel("ctc.cl", "ctc_grad", opts), NDRange::linear(size_t(q.Tn * q.N)), arg(lp),
         arg(q.targets), arg(q.offsets), arg(q.input_lengths), arg(q.target_lengths), int(q.Tn), int(q.N), int(q.C),
         int(smax), int(blank), arg(contiguous(log_alpha.to(type))), arg(beta),
         arg(contiguous(neg_log_likelihood.to(type))), arg(contiguous(grad.to(type))), arg(result),
         int(zero_infinity));
  return result;
}

// The lengths as tensors (any device): read to the host.
std::vector<int64_t> host_lengths(const at::Tensor& lengths, const char* what) {
  DEVICE_CHECK(at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), "opencl: ctc_loss: ", what,
               " must be integral");
  const at::Tensor host = lengths.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

std::tuple<at::Tensor, at::Tensor> ctc_tensor(const at::Tensor& log_probs, const at::Tensor& targets,
                                              const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                              int64_t blank, bool zero_infinity) {
  return ctc(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
             host_lengths(target_lengths, "target_lengths"), blank, zero_infinity);
}

at::Tensor ctc_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                               const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                               const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                               bool zero_infinity) {
  return ctc_backward(grad, log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                      host_lengths(target_lengths, "target_lengths"), neg_log_likelihood, log_alpha, blank,
                      zero_infinity);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_ctc_loss", ctc);
  m.impl("_ctc_loss.Tensor", ctc_tensor);
  m.impl("_ctc_loss_backward", ctc_backward);
  m.impl("_ctc_loss_backward.Tensor", ctc_backward_tensor);
}

}  // namespace oclf::device
