// The activations the device's kernels apply as they store a result (reference/epilogue.h),
// by the names the fused operators take (conv2d_fused, addmm_act), and the same activation
// as separate torch operations, for the paths that do not fold it.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "opencl_functions/launch/launcher.hpp"
#include "../check.h"

namespace oclf::device {

inline Activation activation_named(c10::string_view name, const char* op) {
  static const std::pair<const char*, Activation> names[] = {
      {"none", Activation::kNone},        {"relu", Activation::kRelu},       {"relu6", Activation::kRelu6},
      {"silu", Activation::kSilu},        {"gelu", Activation::kGelu},       {"hardswish", Activation::kHardswish},
      {"gelu_tanh", Activation::kGeluTanh}, {"sigmoid", Activation::kSigmoid}, {"tanh", Activation::kTanh}};
  for (const auto& [text, act] : names)
    if (name == text) return act;
  DEVICE_CHECK(false, op, ": activation must be none, relu, relu6, silu, gelu, hardswish, gelu_tanh, sigmoid or tanh, ",
               "got \"", std::string(name), "\"");
  return Activation::kNone;
}

// act(y) as torch computes it.
inline at::Tensor activated(const at::Tensor& y, Activation act) {
  switch (act) {
    case Activation::kNone: return y;
    case Activation::kRelu: return at::relu(y);
    case Activation::kRelu6: return at::hardtanh(y, 0, 6);
    case Activation::kSilu: return at::silu(y);
    case Activation::kGelu: return at::gelu(y);
    case Activation::kHardswish: return at::hardswish(y);
    case Activation::kGeluTanh: return at::gelu(y, "tanh");
    case Activation::kSigmoid: return at::sigmoid(y);
    case Activation::kTanh: return at::tanh(y);
  }
  return y;
}

}  // namespace oclf::device
