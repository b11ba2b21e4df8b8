// 16-bit products on NVIDIA tensor cores (kernels/gemm16_mma.cl), for blas.cpp's gemm16.
#pragma once

#include <ATen/ATen.h>

#include "activations.h"

namespace oclf::device {

// c = act(alpha · a · b + beta · c (+ row, n contiguous elements)) on tensor cores, a, b and c
// 2-D (one product) or 3-D (a batch) of one 16-bit dtype, c's columns contiguous: where
// OCLF_MMA allows it and the device takes it (NVIDIA, compute capability 8.0 and later, its
// compiler building the kernel), or emulated (OCLF_MMA=emulate). False: nothing was launched,
// and the caller runs its portable kernel.
// Where the tensor-core kernels (gemm16_mma.cl, flash_attention.cl) run: nowhere (OCLF_MMA=0, or
// the current device has no tensor cores its compiler reaches), on the hardware, or emulated
// (OCLF_MMA=emulate).
enum class TensorCores { off, hardware, emulated };
TensorCores tensor_cores();

bool gemm16_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
                const at::Tensor& row, Activation act);

}  // namespace oclf::device
