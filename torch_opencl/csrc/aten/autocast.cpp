// torch.autocast("opencl", dtype=torch.float16 | torch.bfloat16): the cast policy of the
// AutocastPrivateUse1 dispatch key, with CUDA's op lists (torch's ATen/autocast_mode.h keeps
// them for every backend to share):
//   lower_precision_fp   products and convolutions (mm, addmm, bmm, baddbmm, matmul, linear,
//                        conv1d/2d/3d, attention, RNN cells, ...): inputs cast to the autocast
//                        dtype (float32 weights' casts cached for the region)
//   fp32                 ops that need range or precision (exp, log, pow, norms, losses,
//                        softmax, log_softmax, sum, cumsum, ...): inputs cast to float32, or
//                        the float32 dtype argument set
//   promote              ops of several inputs (addcmul, addcdiv, atan2, dot, index_put,
//                        scatter_add, ...): inputs cast to the widest of their dtypes (cat
//                        and stack promote by themselves)
// binary_cross_entropy is refused inside the region, as on CUDA. Every other operator passes
// through (a fallthrough) and runs on the dtypes it is given. The Python side
// (get_amp_supported_dtype) is in amp.py.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "../check.h"

namespace oclf::device {

namespace {

// The op lists' signatures name at's types unqualified (Tensor, Scalar, DimnameList, ...,
// which differ between torch releases): torch's own registrations expand them inside
// namespace at, these inside its names.
using namespace at;

Tensor binary_cross_entropy_refused(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  DEVICE_CHECK(false,
               "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast (their input, "
               "usually a sigmoid's float16 output, loses precision near 0 and 1): combine the sigmoid and the loss "
               "with torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which are "
               "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define AUTOCAST_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(AUTOCAST_LOWER_PRECISION_FP)
#undef AUTOCAST_LOWER_PRECISION_FP

#define AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(AUTOCAST_FP32)
#undef AUTOCAST_FP32

#define AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(AUTOCAST_FP32_SET_OPT_DTYPE)
#undef AUTOCAST_FP32_SET_OPT_DTYPE

  // norm's overloads without a dtype argument: redispatched with float32 appended.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(AUTOCAST_PROMOTE)
#undef AUTOCAST_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_refused));
}

}  // namespace

}  // namespace oclf::device
