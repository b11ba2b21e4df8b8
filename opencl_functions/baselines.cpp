// Baselines that the benchmark and the grader compare our conv2d with, run through the
// same runtime (queue, profiling events) so kernel times are comparable:
//   conv2d_from_file: a one-output-per-work-item kernel with conv2d_tiled's arguments,
//                     read from a .cl file given by path (the naive kernel);
//   convgemm:         CLBlast's Convgemm (im2col fused into a GEMM), groups = 1.
// Not part of the students' code.
#include "baselines.hpp"

#include <clblast.h>

#include <string>

#include "runtime/runtime.hpp"

namespace oclf::baselines {

void conv2d_from_file(const std::string& path, const std::string& name, const std::string& options,
                      const Conv2dArgs& p) {
  Runtime& rt = Runtime::get();
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * (p.c_in / p.groups) * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  Buffer x = Buffer::input(p.x, x_len * sizeof(float));
  Buffer w = Buffer::input(p.weight, w_len * sizeof(float));
  Buffer y = Buffer::output(p.y, y_len * sizeof(float));
  Buffer bias;
  if (p.bias) bias = Buffer::input(p.bias, p.c_out * sizeof(float));
  cl_kernel kernel = rt.kernel(path, name, options);  // an absolute path: read as it is
  const cl_mem bias_mem = bias.get();
  const int has_bias = p.bias != nullptr;
  set_args(kernel, x.get(), w.get(), bias_mem, y.get(), has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h,
                p.k_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out);
  // One work-item per output: dim 0 pixels of an image, dim 1 output channels, dim 2 batch.
  const size_t global[3] = {size_t(p.h_out) * p.w_out, size_t(p.c_out), size_t(p.batch)};
  rt.launch(kernel, 3, global, nullptr);
  y.read(p.y, y_len * sizeof(float));
}

void convgemm(const Conv2dArgs& p) {
  Runtime& rt = Runtime::get();
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * p.c_in * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  Buffer x = Buffer::input(p.x, x_len * sizeof(float));
  Buffer w = Buffer::input(p.weight, w_len * sizeof(float));
  Buffer y(y_len * sizeof(float), CL_MEM_READ_WRITE);  // a device buffer: CLBlast may read C too
  cl_event event = nullptr;
  cl_event start = rt.marker();  // Convgemm may run im2col before its GEMM: time both
  CLBLAST_CHECK(clblast::Convgemm<float>(clblast::KernelMode::kCrossCorrelation, p.c_in, p.h, p.w, p.k_h, p.k_w, 0,
                                         0, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.c_out, p.batch,
                                         x.get(), 0, w.get(), 0, y.get(), 0, rt.queue_ptr(), &event));
  rt.record(event, start);
  y.read(p.y, y_len * sizeof(float));
}

}  // namespace oclf::baselines
