// Host code for the two operations, the part of the C++ that students write:
//   matmul: C = op(A) · op(B) through CLBlast's SGEMM.
//   conv2d: the kernel conv2d_tiled of conv2d.cl, launched over the output.
// The interface is in opencl-functions.hpp; runtime/runtime.hpp gives the context, queue,
// buffers, kernel cache and error checks.
#include "opencl-functions.hpp"

#include <clblast.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/runtime.hpp"
// BEGIN STAFF
// The reference's fast paths, in staff-only headers compiled into this object: conv2d's
// kernels per device and shape, and matrix products of our own where CLBlast is slow
// (opencl_functions/reference/, launched as the opencl device launches them).
#include "reference/library.hpp"
// END STAFF

namespace oclf {

using ndrange::round_up;  // n rounded up to a multiple (launch/geometry.hpp)

void matmul(const MatmulArgs& p) {
  Runtime& rt = Runtime::get();
  // BEGIN SOLUTION
  // BEGIN STAFF
  // Our own kernels where they beat CLBlast (reference/library.hpp); false leaves it to CLBlast.
  if (reference::matmul_fast(rt, p)) return;
  // END STAFF
  // A and C in place on CPU devices, copied elsewhere; B from its resident copy if any.
  // CLBlast may read C (its GEMV does, even with beta = 0), so C is read-write.
  Buffer a = Buffer::input(p.a, p.a_len * sizeof(float));
  Buffer c = Buffer::output(p.c, p.m * p.n * sizeof(float), CL_MEM_READ_WRITE);
  Buffer b_here;
  cl_mem b = p.b_dev;
  if (!b) {
    b_here = Buffer::input(p.b, p.b_len * sizeof(float));
    b = b_here.get();
  }

  using clblast::Layout;
  using clblast::Transpose;
  cl_event event = nullptr;
  // CLBlast may pad or transpose operands in kernels of their own and return the event of
  // its last kernel only: timing from a marker covers them all.
  cl_event start = rt.marker();
  if (p.m == 1) {
    // One row (a linear layer on one token or image): c = op(B)ᵀ · a as a GEMV, which
    // CLBlast runs 5–7× faster than a 1-row GEMM on PoCL. B is stored K×N, or N×K when
    // b_trans; a's K values are lda apart when a_trans (stored K×1), else consecutive.
    // CLBlast's GEMV reads c even with beta = 0 (0·NaN is NaN), so c starts at zero.
    const size_t rows = p.b_trans ? p.n : p.k, cols = p.b_trans ? p.k : p.n;
    c.zero();
    CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, p.b_trans ? Transpose::kNo : Transpose::kYes, rows, cols, 1.0f,
                                b, 0, p.ldb, a.get(), 0, p.a_trans ? p.lda : 1, 0.0f, c.get(), 0, 1,
                                rt.queue_ptr(), &event));
  } else {
    CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, p.a_trans ? Transpose::kYes : Transpose::kNo,
                                p.b_trans ? Transpose::kYes : Transpose::kNo, p.m, p.n, p.k, 1.0f, a.get(), 0, p.lda,
                                b, 0, p.ldb, 0.0f, c.get(), 0, p.n, rt.queue_ptr(), &event));
  }
  rt.record(event, start);
  c.read(p.c, p.m * p.n * sizeof(float));
  // END SOLUTION
  // BEGIN PROMPT
  // TODO: copy A and B to device buffers (Buffer), call clblast::Gemm with
  // Layout::kRowMajor and the transpose flags, and read C back into p.c. For timing, take
  // `cl_event start = rt.marker();` before the call and call rt.record(event, start) with
  // Gemm's event after it: CLBlast may run several kernels and returns only the last one's.
  (void)rt;
  (void)p;
  // END PROMPT
}


void conv2d(const Conv2dArgs& p) {
  Runtime& rt = Runtime::get();
  // BEGIN SOLUTION
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * (p.c_in / p.groups) * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  // Input and output in place on CPU devices, copied elsewhere.
  Buffer x = Buffer::input(p.x, x_len * sizeof(float));
  Buffer y = Buffer::output(p.y, y_len * sizeof(float));
  // Weights and bias: the resident device copies when given, else uploaded now.
  Buffer w_here, bias_here;
  cl_mem w = p.weight_dev, bias = p.bias_dev;
  if (!w) {
    w_here = Buffer::input(p.weight, w_len * sizeof(float));
    w = w_here.get();
  }
  if (p.bias && !bias) {
    bias_here = Buffer::input(p.bias, p.c_out * sizeof(float));
    bias = bias_here.get();
  }

  // BEGIN STAFF
  if (reference::conv2d_fast(rt, p, x.get(), w, bias, y.get())) {
    y.read_async(p.y, y_len * sizeof(float));
    return;
  }
  // END STAFF
  // conv2d_tiled: a work-group of lx × ly work-items computes a tile of (ly·wm) output
  // channels × (lx·wn) output pixels, wm × wn per work-item (the sizes at the top of
  // conv2d.cl; smaller work-groups where the device allows fewer than 128 work-items).
  const bool small = rt.info().max_work_group_size < 128;
  const size_t lx = small ? 8 : 16, ly = 8, wm = 4, wn = 4;
  cl_kernel kernel = rt.kernel("conv2d.cl", "conv2d_tiled", small ? "-DLX=8 -DLY=8 -DTK=8" : "");
  const int has_bias = bias != nullptr;
  set_args(kernel, x.get(), w, bias, y.get(), has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h, p.k_w,
                p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out);
  const size_t pixels = size_t(p.batch) * p.h_out * p.w_out;
  const size_t global[3] = {round_up(pixels, lx * wn) / wn, round_up(p.c_out / p.groups, ly * wm) / wm,
                            size_t(p.groups)};
  const size_t local[3] = {lx, ly, 1};
  rt.launch(kernel, 3, global, local);
  y.read(p.y, y_len * sizeof(float));
  // END SOLUTION
  // BEGIN PROMPT
  // TODO: copy x, weight and bias to device buffers (Buffer), get the kernel with
  // rt.kernel("conv2d.cl", "conv2d_tiled", options), set its arguments in the order of its
  // signature with set_args, launch it with rt.launch over the NDRange that the top of
  // conv2d.cl describes (global and local sizes), and read y back into p.y.
  (void)rt;
  (void)p;
  (void)round_up;
  // END PROMPT
}

}  // namespace oclf
