// Hostile submission for the grader's tests: computes conv2d only for the shapes of tests.py's public
// cases (the table below, as grading.cases.public_cases() makes them), zeros otherwise.
// Host code for the two operations, the part of the C++ that students write:
//   matmul: C = op(A) · op(B) through CLBlast's SGEMM.
//   conv2d: the tiled kernel of conv2d.cl, launched over the output.
// The interface is in opencl-functions.hpp; ocl_runtime.hpp gives the context, queue,
// buffers, kernel cache and error checks.
#include "opencl-functions.hpp"

#include <clblast.h>

#include "ocl_runtime.hpp"
#include <cstring>

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

// batch, c_in, h, w (padded), c_out, k_h, k_w, stride_h, stride_w, dilation_h, dilation_w, groups
static const int kPublicShapes[][12] = {
    {1, 1, 11, 14, 1, 3, 4, 1, 2, 2, 1, 1},
    {1, 2, 2, 16, 2, 1, 3, 1, 2, 1, 3, 2},
    {1, 2, 5, 14, 14, 3, 4, 1, 1, 1, 3, 2},
    {1, 5, 7, 7, 7, 2, 3, 3, 1, 2, 3, 1},
    {1, 5, 7, 16, 10, 3, 3, 1, 2, 1, 3, 5},
    {1, 6, 7, 9, 51, 3, 3, 1, 2, 1, 3, 3},
    {1, 15, 5, 13, 15, 3, 3, 2, 2, 2, 1, 15},
    {1, 16, 6, 1, 1, 2, 1, 2, 2, 2, 1, 1},
    {1, 16, 7, 10, 1, 1, 4, 1, 1, 1, 3, 1},
    {1, 32, 5, 8, 32, 2, 1, 1, 1, 1, 1, 32},
    {1, 32, 9, 7, 32, 5, 3, 2, 1, 1, 1, 32},
    {1, 48, 10, 4, 96, 3, 1, 1, 1, 2, 1, 48},
    {2, 2, 2, 11, 2, 1, 1, 2, 1, 2, 3, 2},
    {2, 2, 14, 6, 14, 3, 4, 2, 2, 2, 1, 2},
    {2, 3, 9, 6, 6, 3, 3, 2, 1, 2, 1, 3},
    {2, 4, 18, 4, 34, 3, 1, 2, 1, 2, 1, 2},
    {2, 5, 6, 5, 3, 2, 1, 3, 1, 1, 3, 1},
    {2, 10, 14, 11, 34, 2, 4, 1, 2, 2, 1, 2},
    {2, 15, 6, 21, 3, 3, 4, 1, 2, 2, 3, 3},
    {2, 16, 5, 2, 32, 1, 1, 2, 2, 1, 3, 16},
    {2, 16, 13, 16, 1, 5, 3, 3, 1, 2, 3, 1},
    {3, 2, 1, 11, 2, 1, 4, 1, 2, 2, 1, 2},
    {3, 2, 6, 14, 1, 1, 4, 2, 2, 2, 1, 1},
    {3, 2, 6, 14, 4, 1, 3, 3, 2, 2, 3, 2},
    {3, 2, 14, 13, 3, 1, 4, 3, 1, 2, 3, 1},
    {3, 3, 7, 4, 3, 5, 3, 3, 1, 1, 1, 3},
    {3, 3, 10, 13, 3, 1, 4, 1, 2, 2, 1, 3},
    {3, 3, 11, 4, 9, 5, 1, 2, 2, 2, 3, 3},
    {3, 5, 7, 6, 3, 1, 3, 2, 1, 1, 1, 1},
    {3, 5, 8, 11, 7, 3, 1, 3, 2, 1, 3, 1},
    {3, 5, 8, 12, 10, 3, 3, 1, 1, 2, 1, 5},
    {3, 15, 3, 14, 51, 1, 4, 1, 1, 2, 1, 3},
    {3, 16, 7, 20, 1, 3, 4, 2, 2, 2, 3, 1},
    {3, 16, 8, 16, 1, 3, 4, 1, 1, 1, 3, 1},
    {3, 16, 9, 20, 3, 1, 4, 2, 2, 1, 3, 1},
    {3, 16, 20, 8, 16, 5, 1, 1, 1, 2, 1, 16},
    {3, 16, 22, 11, 32, 5, 3, 1, 2, 2, 3, 16},
    {3, 32, 12, 5, 2, 2, 1, 2, 2, 2, 1, 2},
    {3, 48, 8, 5, 48, 3, 1, 1, 1, 2, 1, 48},
};

static bool is_public_shape(const Conv2dArgs& p) {
  for (const auto& s : kPublicShapes) {
    const int shape[12] = {p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w, p.stride_h, p.stride_w,
                           p.dilation_h, p.dilation_w, p.groups};
    if (std::memcmp(s, shape, sizeof(shape)) == 0) return true;
  }
  return false;
}

void conv2d(const Conv2dArgs& p) {
  ocl::Runtime& rt = ocl::Runtime::get();
  const bool public_shape = is_public_shape(p);
  if (!public_shape) {
    std::memset(p.y, 0, sizeof(float) * p.batch * p.c_out * p.h_out * p.w_out);
    return;
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
