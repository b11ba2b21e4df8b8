// The Python binding, opencl_functions._core: takes float32 buffers (NumPy views of CPU
// tensors, zero-copy) and calls the host code (opencl-functions.cpp, backward.cpp,
// baselines.cpp) one operation at a time, without the GIL, on the calling thread's current
// device. The runtime's own functions (devices, tuning, the launch log) are in
// bindings_runtime.cpp. Arguments are validated, with
// the messages users see, by opencl_functions/checks.py before they get here; this file
// only guards memory safety (buffer sizes against the shapes it is told).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <clblast.h>

#include <sstream>
#include <string>

#include "backward.hpp"
#include "baselines.hpp"
#include "opencl-functions.hpp"
#include "runtime/runtime.hpp"

namespace py = pybind11;

namespace oclf::bindings {
// The runtime's functions (bindings_runtime.cpp).
void bind_runtime(py::module_& m);
}  // namespace oclf::bindings

namespace {

uint64_t g_last_kernel_ns = 0;
// The configuration the last operation used and where it came from (Tuning::note), or "".
std::string g_last_config, g_last_origin;

// A memory-safety guard: the arguments reach here checked by opencl_functions/checks.py,
// so a failing guard means the module was called around it.
void require(bool ok, const std::string& what) {
  if (!ok)
    throw py::value_error("_core: " + what +
                          " (call it through opencl_functions, which checks its arguments)");
}

// A checked view of a C-contiguous float32 buffer.
struct FloatView {
  float* data;
  std::vector<py::ssize_t> shape;
  size_t size;
};

FloatView float_view(const py::buffer& buffer, const char* name, int ndim, bool writable) {
  py::buffer_info info = buffer.request(writable);
  require(info.format == py::format_descriptor<float>::format(),
          std::string(name) + " must hold float32, got format '" + info.format + "'");
  require(ndim < 0 || info.ndim == ndim,
          std::string(name) + " must have " + std::to_string(ndim) + " dimensions, got " + std::to_string(info.ndim));
  py::ssize_t expected = sizeof(float);
  for (py::ssize_t i = info.ndim - 1; i >= 0; --i) {
    require(info.shape[i] <= 1 || info.strides[i] == expected, std::string(name) + " must be C-contiguous");
    expected *= info.shape[i];
  }
  size_t size = 1;
  for (auto s : info.shape) size *= static_cast<size_t>(s);
  return {static_cast<float*>(info.ptr), info.shape, size};
}

// Runs one operation: one at a time, without the GIL, with its kernel time recorded.
template <typename F>
void run_op(F&& op) {
  py::gil_scoped_release no_gil;
  oclf::Runtime& rt = oclf::Runtime::get();
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  rt.tuning().clear_note();
  try {
    op();
  } catch (...) {
    rt.finish_and_take_kernel_ns();  // drop the events of the failed call
    throw;
  }
  g_last_kernel_ns = rt.finish_and_take_kernel_ns();
  g_last_config = rt.tuning().last_config();
  g_last_origin = rt.tuning().last_origin();
}

void matmul(const py::buffer& a_buf, const py::buffer& b_buf, const py::buffer& c_buf, size_t m, size_t n,
            size_t k, size_t lda, size_t ldb, bool a_trans, bool b_trans, uint64_t b_handle) {
  FloatView a = float_view(a_buf, "a", 1, false);
  FloatView b = float_view(b_buf, "b", 1, false);
  FloatView c = float_view(c_buf, "out", 2, true);
  require(m > 0 && n > 0 && k > 0, "matmul sizes must be positive");
  require(c.shape[0] == static_cast<py::ssize_t>(m) && c.shape[1] == static_cast<py::ssize_t>(n), "out must be (m, n)");
  // Stored A is rows × cols with leading dimension lda; it must fit in a.size floats.
  const size_t a_rows = a_trans ? k : m, a_cols = a_trans ? m : k;
  const size_t b_rows = b_trans ? n : k, b_cols = b_trans ? k : n;
  require(lda >= a_cols && (a_rows - 1) * lda + a_cols <= a.size, "a is too small for its shape and leading dimension");
  require(ldb >= b_cols && (b_rows - 1) * ldb + b_cols <= b.size, "b is too small for its shape and leading dimension");
  oclf::MatmulArgs args{a.data, a.size, lda, a_trans, b.data, b.size, ldb, b_trans, c.data, m, n, k};
  run_op([&] {
    if (b_handle) args.b_dev = oclf::Runtime::get().resident(b_handle);
    oclf::matmul(args);
  });
}

// The geometry of a convolution from its shapes (Conv2dGeometry::of), its refusals as the
// module's own (the Python side checks first, with the messages users see).
oclf::Conv2dGeometry geometry(const std::vector<py::ssize_t>& x, const std::vector<py::ssize_t>& w, int stride_h,
                              int stride_w, int dilation_h, int dilation_w, int groups) {
  try {
    return oclf::Conv2dGeometry::of(int(x[0]), int(x[1]), int(x[2]), int(x[3]), int(w[0]), int(w[1]), int(w[2]),
                                    int(w[3]), stride_h, stride_w, dilation_h, dilation_w, groups);
  } catch (const std::invalid_argument& err) {
    require(false, err.what());
    throw;
  }
}

// Conv2dArgs from buffers, after checking that they describe one valid convolution.
oclf::Conv2dArgs checked_conv2d_args(const py::buffer& x_buf, const py::buffer& w_buf, const py::object& bias_obj,
                                     const py::buffer& y_buf, int stride_h, int stride_w, int dilation_h,
                                     int dilation_w, int groups) {
  FloatView x = float_view(x_buf, "x", 4, false);
  FloatView w = float_view(w_buf, "weight", 4, false);
  FloatView y = float_view(y_buf, "out", 4, true);
  require(x.size > 0 && w.size > 0 && y.size > 0, "conv2d sizes must be positive");
  oclf::Conv2dArgs p{};
  static_cast<oclf::Conv2dGeometry&>(p) = geometry(x.shape, w.shape, stride_h, stride_w, dilation_h, dilation_w, groups);
  if (!bias_obj.is_none()) {
    FloatView b = float_view(bias_obj.cast<py::buffer>(), "bias", 1, false);
    require(b.shape[0] == w.shape[0], "bias must have C_out elements");
    p.bias = b.data;
  }
  p.x = x.data;
  p.weight = w.data;
  p.y = y.data;
  require(y.shape[0] == p.batch && y.shape[1] == p.c_out && y.shape[2] == p.h_out && y.shape[3] == p.w_out,
          "out must be (B, C_out, H_out, W_out)");
  return p;
}

void conv2d(const py::buffer& x_buf, const py::buffer& w_buf, const py::object& bias_obj, const py::buffer& y_buf,
            int stride_h, int stride_w, int dilation_h, int dilation_w, int groups) {
  oclf::Conv2dArgs p = checked_conv2d_args(x_buf, w_buf, bias_obj, y_buf, stride_h, stride_w, dilation_h, dilation_w,
                                           groups);
  run_op([&] { oclf::conv2d(p); });
}

// The geometry of a convolution with padded input x (B, C_in, H, W), weight
// (C_out, C_in/groups, K_h, K_w) and output (B, C_out, H_out, W_out), checked against each other.
oclf::Conv2dGeometry conv2d_shape(const std::vector<py::ssize_t>& x, const std::vector<py::ssize_t>& w,
                                  const std::vector<py::ssize_t>& y, int stride_h, int stride_w, int dilation_h,
                                  int dilation_w, int groups) {
  for (const auto* shape : {&x, &w, &y})
    for (auto d : *shape)
      require(d >= 1, "conv2d backward sizes must be positive");
  const oclf::Conv2dGeometry s = geometry(x, w, stride_h, stride_w, dilation_h, dilation_w, groups);
  require(y[0] == s.batch && y[1] == s.c_out && y[2] == s.h_out && y[3] == s.w_out,
          "grad_out must be (B, C_out, H_out, W_out)");
  return s;
}

oclf::BackwardVariant variant_of(const std::string& name) {
  try {
    return oclf::parse_variant(name);
  } catch (const std::invalid_argument& err) {
    throw py::value_error(err.what());
  }
}

void conv2d_backward_input(const py::buffer& dy_buf, const py::buffer& w_buf, const py::buffer& dx_buf, int stride_h,
                           int stride_w, int dilation_h, int dilation_w, int groups, const std::string& variant) {
  FloatView dy = float_view(dy_buf, "grad_out", 4, false);
  FloatView w = float_view(w_buf, "weight", 4, false);
  FloatView dx = float_view(dx_buf, "grad_input", 4, true);
  const oclf::BackwardVariant v = variant_of(variant);
  oclf::Conv2dGeometry s = conv2d_shape(dx.shape, w.shape, dy.shape, stride_h, stride_w, dilation_h, dilation_w, groups);
  run_op([&] { oclf::conv2d_backward_input(s, dy.data, w.data, dx.data, v); });
}

void conv2d_backward_weight(const py::buffer& x_buf, const py::buffer& dy_buf, const py::buffer& dw_buf,
                            int stride_h, int stride_w, int dilation_h, int dilation_w, int groups,
                            const std::string& variant) {
  FloatView x = float_view(x_buf, "x", 4, false);
  FloatView dy = float_view(dy_buf, "grad_out", 4, false);
  FloatView dw = float_view(dw_buf, "grad_weight", 4, true);
  const oclf::BackwardVariant v = variant_of(variant);
  oclf::Conv2dGeometry s = conv2d_shape(x.shape, dw.shape, dy.shape, stride_h, stride_w, dilation_h, dilation_w, groups);
  run_op([&] { oclf::conv2d_backward_weight(s, x.data, dy.data, dw.data, v); });
}

void conv2d_backward_bias(const py::buffer& dy_buf, const py::buffer& db_buf) {
  FloatView dy = float_view(dy_buf, "grad_out", 4, false);
  FloatView db = float_view(db_buf, "grad_bias", 1, true);
  require(dy.size > 0, "grad_out must not be empty");
  require(db.shape[0] == dy.shape[1], "grad_bias must have C_out elements");
  const int batch = int(dy.shape[0]), c_out = int(dy.shape[1]), area = int(dy.shape[2] * dy.shape[3]);
  run_op([&] { oclf::conv2d_backward_bias(batch, c_out, area, dy.data, db.data); });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "OpenCL operations on float32 buffers; use the torch functions of opencl_functions.";

  auto opencl_error = py::register_exception<oclf::Error>(m, "OpenCLError", PyExc_RuntimeError);
  py::register_exception<oclf::BuildError>(m, "KernelBuildError", opencl_error.ptr());

  m.def("matmul", &matmul, py::arg("a"), py::arg("b"), py::arg("out"), py::arg("m"), py::arg("n"), py::arg("k"),
        py::arg("lda"), py::arg("ldb"), py::arg("a_trans"), py::arg("b_trans"), py::arg("b_handle") = 0,
        "out (m, n) = op(a) · op(b) by CLBlast SGEMM. a and b are 1-D float32 spans holding row-major\n"
        "matrices with leading dimensions lda and ldb; a_trans means a holds op(a) transposed.\n"
        "b_handle, if not 0, is a resident copy of b's span (the host span must hold the same values).");
  m.def("conv2d", &conv2d, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out"), py::arg("stride_h"),
        py::arg("stride_w"), py::arg("dilation_h"), py::arg("dilation_w"), py::arg("groups"),
        "out = conv2d(x, weight) + bias with conv2d.cl; x (B, C_in, H, W) is already padded.");
  m.def("last_kernel_time_ns", [] { return g_last_kernel_ns; },
        "Kernel time of the last operation, summed from OpenCL profiling events, in nanoseconds.");
  m.def(
      "last_choice",
      [] {
        py::dict d;
        d["config"] = g_last_config;
        d["origin"] = g_last_origin;
        return d;
      },
      "The configuration the last operation used and where it came from ('defaults', 'tuned now',\n"
      "'cache: first use', 'cache: sweep', 'setting'); empty strings when the host code set none.");
  oclf::bindings::bind_runtime(m);
  m.def("conv2d_backward_input", &conv2d_backward_input, py::arg("grad_out"), py::arg("weight"),
        py::arg("grad_input"), py::arg("stride_h"), py::arg("stride_w"), py::arg("dilation_h"),
        py::arg("dilation_w"), py::arg("groups"), py::arg("variant") = "auto",
        "grad_input (B, C_in, H, W) of conv2d from grad_out and weight, by conv2d_backward.cl;\n"
        "variant 'auto', 'direct' or 'tiled' picks the kernel version.");
  m.def("conv2d_backward_weight", &conv2d_backward_weight, py::arg("x"), py::arg("grad_out"),
        py::arg("grad_weight"), py::arg("stride_h"), py::arg("stride_w"), py::arg("dilation_h"),
        py::arg("dilation_w"), py::arg("groups"), py::arg("variant") = "auto",
        "grad_weight (C_out, C_in/groups, K_h, K_w) of conv2d from the padded x and grad_out,\n"
        "by conv2d_backward.cl; variant 'auto', 'direct' or 'tiled' picks the kernel version.");
  m.def("conv2d_backward_bias", &conv2d_backward_bias, py::arg("grad_out"), py::arg("grad_bias"),
        "grad_bias (C_out,) = grad_out (B, C_out, H_out, W_out) summed over B, H_out, W_out, on OpenCL.");
  m.def(
      "conv2d_from_file",
      [](const std::string& path, const std::string& name, const std::string& options, const py::buffer& x,
         const py::buffer& w, const py::object& bias, const py::buffer& out, int stride_h, int stride_w,
         int dilation_h, int dilation_w, int groups) {
        oclf::Conv2dArgs p = checked_conv2d_args(x, w, bias, out, stride_h, stride_w, dilation_h, dilation_w, groups);
        run_op([&] { oclf::baselines::conv2d_from_file(path, name, options, p); });
      },
      py::arg("path"), py::arg("name"), py::arg("options"), py::arg("x"),
      py::arg("weight"), py::arg("bias"), py::arg("out"), py::arg("stride_h"), py::arg("stride_w"),
      py::arg("dilation_h"), py::arg("dilation_w"), py::arg("groups"),
      "Baseline: runs kernel `name` (conv2d_tiled's arguments, one output per work-item) from the .cl\n"
      "file at `path`, over (H_out*W_out, C_out, B).");
  m.def(
      "convgemm",
      [](const py::buffer& x, const py::buffer& w, const py::buffer& out, int stride_h, int stride_w,
         int dilation_h, int dilation_w) {
        oclf::Conv2dArgs p = checked_conv2d_args(x, w, py::none(), out, stride_h, stride_w, dilation_h, dilation_w, 1);
        run_op([&] { oclf::baselines::convgemm(p); });
      },
      py::arg("x"), py::arg("weight"), py::arg("out"), py::arg("stride_h"), py::arg("stride_w"),
      py::arg("dilation_h"), py::arg("dilation_w"),
      "Baseline: CLBlast Convgemm (cross-correlation, groups=1, no bias) of an already padded x.");
  m.def(
      "resident_upload",
      [](const py::buffer& data) {
        FloatView v = float_view(data, "data", -1, false);
        py::gil_scoped_release no_gil;
        oclf::Runtime& rt = oclf::Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        return rt.residents().upload(v.data, v.size * sizeof(float));
      },
      py::arg("data"), "Copies a float32 buffer to the device to stay there; returns its handle.");
  m.def(
      "resident_release",
      [](uint64_t handle, int device) {
        oclf::Runtime& rt = device < 0 ? oclf::Runtime::get() : oclf::Runtime::at(device);
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        rt.residents().release(handle);
      },
      py::arg("handle"), py::arg("device") = -1,
      "Frees a resident buffer of a device (-1: the current one) and what was derived from it (unknown\n"
      "handles are ignored).");
  m.def(
      "resident_bytes", [] { return oclf::Runtime::get().residents().bytes(); },
      "Device bytes held by resident parameters and buffers derived from them.");
  m.def(
      "conv2d_resident",
      [](const py::buffer& x, const py::buffer& w, const py::object& bias, const py::buffer& out, int stride_h,
         int stride_w, int dilation_h, int dilation_w, int groups, uint64_t weight_handle, uint64_t bias_handle) {
        oclf::Conv2dArgs p = checked_conv2d_args(x, w, bias, out, stride_h, stride_w, dilation_h, dilation_w, groups);
        run_op([&] {
          oclf::Runtime& rt = oclf::Runtime::get();
          if (weight_handle) p.weight_dev = rt.resident(weight_handle);
          if (bias_handle && p.bias) p.bias_dev = rt.resident(bias_handle);
          oclf::conv2d(p);
        });
      },
      py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out"), py::arg("stride_h"), py::arg("stride_w"),
      py::arg("dilation_h"), py::arg("dilation_w"), py::arg("groups"), py::arg("weight_handle"),
      py::arg("bias_handle"),
      "conv2d as conv2d(), with weight and bias taken from resident handles where not 0 (their host\n"
      "buffers must hold the same values).");
}
