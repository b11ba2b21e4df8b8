// Hostile submission for the grader's tests: prints 100 MB on its first conv2d call, then computes correctly.
// Host code for the two operations, the part of the C++ that students write:
//   matmul: C = op(A) · op(B) through CLBlast's SGEMM.
//   conv2d: the tiled kernel of conv2d.cl, launched over the output.
// The interface is in opencl-functions.hpp; ocl_runtime.hpp gives the context, queue,
// buffers, kernel cache and error checks.
#include "opencl-functions.hpp"

#include <clblast.h>

#include "ocl_runtime.hpp"
#include <cstdio>
#include <string>

namespace oclf {

static size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

void matmul(const MatmulArgs& p) {
  ocl::Runtime& rt = ocl::Runtime::get();
  ocl::Buffer a(p.a_len * sizeof(float), CL_MEM_READ_ONLY);
  ocl::Buffer b(p.b_len * sizeof(float), CL_MEM_READ_ONLY);
  ocl::Buffer c(p.m * p.n * sizeof(float), CL_MEM_READ_WRITE);
  a.write(p.a, p.a_len * sizeof(float));
  b.write(p.b, p.b_len * sizeof(float));

  using clblast::Transpose;
  cl_event event = nullptr;
  CLBLAST_CHECK(clblast::Gemm(clblast::Layout::kRowMajor, p.a_trans ? Transpose::kYes : Transpose::kNo,
                              p.b_trans ? Transpose::kYes : Transpose::kNo, p.m, p.n, p.k, 1.0f, a.get(), 0,
                              p.lda, b.get(), 0, p.ldb, 0.0f, c.get(), 0, p.n, rt.queue_ptr(), &event));
  rt.record(event);
  c.read(p.c, p.m * p.n * sizeof(float));
}

void conv2d(const Conv2dArgs& p) {
  ocl::Runtime& rt = ocl::Runtime::get();
  static bool printed = false;
  if (!printed) {
    printed = true;
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 100; ++i) std::fwrite(chunk.data(), 1, chunk.size(), stdout);
    std::fflush(stdout);
  }
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * (p.c_in / p.groups) * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  ocl::Buffer x(x_len * sizeof(float), CL_MEM_READ_ONLY);
  ocl::Buffer w(w_len * sizeof(float), CL_MEM_READ_ONLY);
  ocl::Buffer y(y_len * sizeof(float), CL_MEM_WRITE_ONLY);
  ocl::Buffer bias;
  x.write(p.x, x_len * sizeof(float));
  w.write(p.weight, w_len * sizeof(float));
  if (p.bias) {
    bias = ocl::Buffer(p.c_out * sizeof(float), CL_MEM_READ_ONLY);
    bias.write(p.bias, p.c_out * sizeof(float));
  }

  // A TILE×TILE work-group computes TILE output channels × TILE output pixels.
  const size_t tile = rt.info().max_work_group_size >= 256 ? 16 : 8;
  cl_kernel kernel = rt.kernel("conv2d.cl", "conv2d_tiled", "-DTILE=" + std::to_string(tile));
  const cl_mem bias_mem = bias.get();
  const int has_bias = p.bias != nullptr;
  ocl::set_args(kernel, x.get(), w.get(), bias_mem, y.get(), has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h,
                p.k_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out);
  const size_t pixels = size_t(p.batch) * p.h_out * p.w_out;
  const size_t global[3] = {round_up(pixels, tile), round_up(p.c_out / p.groups, tile), size_t(p.groups)};
  const size_t local[3] = {tile, tile, 1};
  rt.launch(kernel, 3, global, local);
  y.read(p.y, y_len * sizeof(float));
}

}  // namespace oclf
