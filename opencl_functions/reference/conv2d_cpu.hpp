// reference/conv2d_cpu.hpp: conv2d_cpu (v2, conv2d_cpu.cl), the reference's convolution for
// CPUs, on weights packed into blocks of COV output channels (staff-only; conv2d.hpp picks it
// for the library and the opencl device).
#pragma once

#include <cstdio>
#include <string>

#include "../launch/launcher.hpp"
#include "tuning.hpp"

namespace oclf::reference {

inline const char* kCpuFile = "reference/conv2d_cpu.cl";

// conv2d_cpu's weights packed into blocks of COV output channels, (groups, co_blocks,
// C_in/groups, K_h, K_w, COV): kept with the weight where the launcher keeps derived
// buffers, else made in *scratch.
inline cl_mem packed_weights(Launcher& l, const Conv2dGeometry& p, cl_mem w, int cov, Scratch* scratch) {
  const int co_blocks = (p.cout_g() + cov - 1) / cov;
  const size_t bytes = size_t(p.groups) * co_blocks * cov * p.k_dim() * sizeof(float);
  return l.derived("cpu-packed COV=" + std::to_string(cov), bytes, [&](cl_mem packed) {
    cl_kernel pack = l.kernel(kCpuFile, "conv2d_pack_weights", "-cl-mad-enable -DCOV=" + std::to_string(cov));
    set_args(pack, w, packed, p.k_dim(), p.cout_g(), co_blocks);
    const size_t global[3] = {size_t(p.k_dim()), size_t(co_blocks) * cov, size_t(p.groups)};
    l.launch(pack, 3, global, nullptr);
  }, scratch);
}

// conv2d_cpu: COV output channels × PX consecutive pixels per work-item, on packed weights;
// with kc > 0, the input channels in chunks of kc over ns blocks of PX pixels (conv2d_cpu.cl's KC).
inline void conv2d_cpu(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, cl_mem packed, int cov,
                       int px, int kc = 0, int ns = 1) {
  const int co_blocks = (p.cout_g() + cov - 1) / cov;
  std::string options = "-cl-mad-enable -DCOV=" + std::to_string(cov) + " -DPX=" + std::to_string(px);
  if (kc > 0) {
    ns = std::max(ns, 1);
    options += " -DKC=" + std::to_string(kc) + " -DNS=" + std::to_string(ns);
  } else {
    ns = 1;
  }
  px *= ns;  // the pixels of a work-item
  // COV wider than the device's vectors (16 floats with AVX2): PoCL's compiler warns that such
  // vectors change the calling convention of its built-ins (inlined here) and prints "N warnings
  // generated." on the program's stderr at each first build; -w keeps users' output clean.
  if (cov > cpu_vector_width(l.info())) options += " -w";
  // Common square kernels get a build of their own, with the tap loops unrolled.
  if (p.k_h == p.k_w && (p.k_h == 1 || p.k_h == 3 || p.k_h == 5 || p.k_h == 7))
    options += " -DKH=" + std::to_string(p.k_h) + " -DKW=" + std::to_string(p.k_w);
  cl_kernel kernel = l.kernel(kCpuFile, "conv2d_cpu", options + o.epilogue.options());
  const int has_bias = o.bias != nullptr;
  set_conv_args(kernel, std::make_tuple(o.x, packed, o.bias, o.y, has_bias), p, o.epilogue);
  const size_t global[3] = {size_t(co_blocks), size_t(p.h_out * p.w_out + px - 1) / px, size_t(p.batch) * p.groups};
  const size_t local[3] = {cpu_work_group(l.info(), global[0], global[1] * global[2], 8, kernel, l.device()), 1, 1};
  l.launch(kernel, 3, global, local);
}

// conv2d_cpu with a configuration's block ("cpu COV=16 PX=4", "cpu COV=16 PX=4 KC=64 NS=8"), on
// the weights packed for its COV (kept, or for this call).
inline void conv2d_cpu(Launcher& l, const Conv2dGeometry& p, const ConvOperands& o, const std::string& config) {
  const int cov = config_value(config, "COV", 16);
  Scratch scratch;
  const cl_mem packed = packed_weights(l, p, o.w, cov, &scratch);
  conv2d_cpu(l, p, o, packed, cov, config_value(config, "PX", 8), config_value(config, "KC", 0),
             config_value(config, "NS", 1));
}

// OCLF_CPU_BLOCK="COV,PX" as a configuration, or "" when unset.
inline std::string cpu_block_setting() {
  const std::string env = setting("CPU_BLOCK");
  if (env.empty()) return "";
  int cov = 0, px = 0;
  int kc = 0, ns = 1;
  const int n = std::sscanf(env.c_str(), "%d,%d,%d,%d", &cov, &px, &kc, &ns);
  if ((n != 2 && n != 4) || (cov != 4 && cov != 8 && cov != 16) || px < 1 || kc < 0 || ns < 1)
    throw Error("OCLF_CPU_BLOCK must be COV,PX or COV,PX,KC,NS with COV 4, 8 or 16, PX and NS at least 1, got " +
                env, CL_INVALID_VALUE);
  return cpu_config(cov, px, kc, ns);
}

}  // namespace oclf::reference
