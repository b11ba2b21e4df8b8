// reference/library.hpp: the reference solution's host code beside the student's interface
// (opencl-functions.hpp), staff-only and included from a staff region of opencl-functions.cpp:
// the course API's plumbing (host pointers into Buffers, resident copies, CLBlast) around the
// shared launches of conv2d.hpp and matmul.hpp, run through RuntimeLauncher. The student's
// conv2d and matmul run these first and keep their own code for what they return false for.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <clblast.h>

#include "../launch/runtime_launcher.hpp"
#include "../opencl-functions.hpp"
#include "conv2d.hpp"
#include "matmul.hpp"
#include "matmul_plan.hpp"

namespace oclf::reference {

// conv2d on the reference's kernels for the device and shape (conv2d.hpp); false when
// OCLF_CONV_KERNEL=tiled asks for the student's kernel. x, w, bias and y are p's buffers.
inline bool conv2d_fast(Runtime& rt, const Conv2dArgs& p, cl_mem x, cl_mem w, cl_mem bias, cl_mem y) {
  RuntimeLauncher launcher(rt, p.weight_dev);
  return conv2d(launcher, p, {x, w, bias, y});
}

// The solution's CLBlast call (c must start at zero for its GEMV), for measuring it.
inline void run_clblast(Runtime& rt, const MatmulArgs& p, cl_mem a, cl_mem b, Buffer& c) {
  using clblast::Layout;
  using clblast::Transpose;
  cl_event event = nullptr;
  const cl_event start = rt.marker();  // CLBlast returns its last kernel's event only
  if (p.m == 1) {
    const size_t rows = p.b_trans ? p.n : p.k, cols = p.b_trans ? p.k : p.n;
    c.zero();
    CLBLAST_CHECK(clblast::Gemv(Layout::kRowMajor, p.b_trans ? Transpose::kNo : Transpose::kYes, rows, cols, 1.0f,
                                b, 0, p.ldb, a, 0, p.a_trans ? p.lda : 1, 0.0f, c.get(), 0, 1, rt.queue_ptr(),
                                &event));
  } else {
    CLBLAST_CHECK(clblast::Gemm(Layout::kRowMajor, p.a_trans ? Transpose::kYes : Transpose::kNo,
                                p.b_trans ? Transpose::kYes : Transpose::kNo, p.m, p.n, p.k, 1.0f, a, 0, p.lda, b, 0,
                                p.ldb, 0.0f, c.get(), 0, p.n, rt.queue_ptr(), &event));
  }
  rt.record(event, start);
}

// C = op(A) · op(B) on the reference's own products where they beat CLBlast
// (matmul_plan.hpp); false leaves the product to the student's CLBlast call.
inline bool matmul_fast(Runtime& rt, const MatmulArgs& p) {
  const std::string forced = setting("MATMUL");
  if (forced == "clblast") return false;
  const size_t int_limit = size_t(1) << 31;
  if (p.a_len >= int_limit || p.b_len >= int_limit || p.m * p.n >= int_limit || p.k >= int_limit) return false;
  const DeviceInfo& info = rt.info();
  const int m = int(p.m), n = int(p.n), k = int(p.k);

  // A one-row A stored as a column (K values lda apart) is gathered into a contiguous row.
  std::vector<float> a_row;
  const float* a_host = p.a;
  size_t a_len = p.a_len;
  int sam = p.a_trans ? 1 : int(p.lda), sak = p.a_trans ? int(p.lda) : 1;
  if (m == 1 && sak != 1) {
    a_row.resize(p.k);
    for (size_t i = 0; i < p.k; ++i) a_row[i] = p.a[i * p.lda];
    a_host = a_row.data(), a_len = p.k, sam = k, sak = 1;
  }
  const bool a_plain = sak == 1 && sam == k;  // row-major, ld K
  const bool resident = p.b_dev != nullptr;
  const bool b_rows = p.b_trans;

  // Which kernels can compute this product (on any device; the candidates follow the device).
  Paths can;
  can.rows = sak == 1 && (b_rows || resident);
  can.cols = !b_rows;
  can.conv = m >= 2 && a_plain && (b_rows ? resident : int(p.ldb) == n);
  std::vector<std::string> quick, full;
  candidates(info, m, n, k, can, forced, quick, full);
  if (quick.empty()) return false;

  // The gathered row is copied into a device buffer now: the product runs after this
  // function returns (read_async below), when a_row is gone.
  Buffer a;
  if (a_host == p.a) {
    a = Buffer::input(p.a, a_len * sizeof(float));
  } else {
    a = Buffer(a_len * sizeof(float), CL_MEM_READ_ONLY);
    a.write(a_host, a_len * sizeof(float));
  }
  Buffer a_given;  // CLBlast reads A as given (strided or not)
  if (a_host != p.a) a_given = Buffer::input(p.a, p.a_len * sizeof(float));
  Buffer c = Buffer::output(p.c, p.m * p.n * sizeof(float), CL_MEM_READ_WRITE);
  Buffer b_here;
  cl_mem b = p.b_dev;
  if (!b) {
    b_here = Buffer::input(p.b, p.b_len * sizeof(float));
    b = b_here.get();
  }
  const Operands given{m, n, k, a.get(), sam, sak, b, int(p.ldb), b_rows, c.get()};
  RuntimeLauncher launcher(rt, p.b_dev);
  auto run = [&](const std::string& config) {
    if (config_kind(config) == "clblast")
      run_clblast(rt, p, a_given.get() ? a_given.get() : a.get(), b, c);
    else
      run_product(launcher, config, given);
  };

  const Product product{m, n, k, b_rows, resident, sak != 1, can};
  const std::string config = choose_product(launcher, product, quick, full, forced, run);
  if (config_kind(config) == "clblast") return false;
  run(config);
  c.read_async(p.c, p.m * p.n * sizeof(float));
  return true;
}

}  // namespace oclf::reference
