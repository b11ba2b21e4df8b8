// The fused LSTM and GRU cells on the opencl device, kernels/rnn.cl. torch's LSTM, GRU,
// LSTMCell and GRUCell call them on every accelerator (after the step's two matrix products:
// input_gates = x·W_ihᵀ, hidden_gates = h·W_hhᵀ, both (B, 4H) or (B, 3H)); multi-layer,
// bidirectional, batch-first and packed sequences are torch's composite code around them.
// The CPU has no such kernel, so these are the only way such models run here. float32, and
// float64 where the device has cl_khr_fp64; float16 and bfloat16 run on float32 copies
// (dispatch.h).
#include <torch/library.h>

#include <climits>

#include "dispatch.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

// The cells' element type (rnn.cl's T) for a tensor: float, or double where the device
// has cl_khr_fp64; DtypeError otherwise.
const char* cell_type(const at::Tensor& t, const char* what) {
  check_device(t, what);
  if (t.scalar_type() == at::kDouble) return cl_storage_type(at::kDouble, what);
  check_float(t, what);
  return "float";
}

cl_kernel rnn_kernel(const char* name, const char* type) {
  return device_kernel("rnn.cl", name, std::string("-DT=") + type);
}

bool given(const std::optional<at::Tensor>& t) { return t && t->defined(); }

// Checks of a cell's operands: gates (B, k·H) twice, the state (B, H), the biases (k·H) or
// none; all of one dtype. Returns the kernels' element type.
const char* check_cell(const char* op, int k, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                       const at::Tensor& state, const std::optional<at::Tensor>& input_bias,
                       const std::optional<at::Tensor>& hidden_bias) {
  const char* type = cell_type(input_gates, "input_gates");
  DEVICE_CHECK(state.dim() == 2, "opencl: ", op, ": the state must be 2-D (batch, hidden), got ", state.sizes());
  const int64_t B = state.size(0), H = state.size(1);
  const std::vector<int64_t> gates{B, k * H};
  DEVICE_CHECK(input_gates.sizes() == at::IntArrayRef(gates) && hidden_gates.sizes() == at::IntArrayRef(gates),
              "opencl: ", op, ": input_gates and hidden_gates must be ", at::IntArrayRef(gates), " for a state of ",
              state.sizes(), ", got ", input_gates.sizes(), " and ", hidden_gates.sizes());
  DEVICE_CHECK(given(input_bias) == given(hidden_bias), "opencl: ", op,
              ": input_bias and hidden_bias are given together or not at all");
  if (given(input_bias)) {
    DEVICE_CHECK(input_bias->dim() == 1 && input_bias->size(0) == k * H && hidden_bias->sizes() == input_bias->sizes(),
                "opencl: ", op, ": the biases must be (", k * H, "), got ", input_bias->sizes(), " and ",
                hidden_bias->sizes());
  }
  for (const at::Tensor* t : {&hidden_gates, &state}) {
    check_device(*t, op);
    DEVICE_CHECK(t->scalar_type() == input_gates.scalar_type(), "opencl: ", op, ": operands of dtypes ",
                input_gates.scalar_type(), " and ", t->scalar_type());
  }
  for (const std::optional<at::Tensor>* t : {&input_bias, &hidden_bias}) {
    if (!given(*t)) continue;
    check_device(**t, op);
    DEVICE_CHECK((*t)->scalar_type() == input_gates.scalar_type(), "opencl: ", op, ": a bias of dtype ",
                (*t)->scalar_type(), " beside gates of ", input_gates.scalar_type());
  }
  DEVICE_CHECK(B * k * H <= INT_MAX, "opencl: ", op, ": gates over 2^31 elements");
  return type;
}

// A contiguous copy of an optional tensor, or `stand_in` (never read) when absent.
at::Tensor or_else(const std::optional<at::Tensor>& t, const at::Tensor& stand_in) {
  return given(t) ? contiguous(*t) : stand_in;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  const char* type = check_cell("_thnn_fused_lstm_cell", 4, input_gates, hidden_gates, cx, input_bias, hidden_bias);
  const at::Tensor ig = contiguous(input_gates), hg = contiguous(hidden_gates), c = contiguous(cx);
  const at::ScalarType dtype = ig.scalar_type();
  at::Tensor hy = empty_device(c.sizes(), dtype), cy = empty_device(c.sizes(), dtype);
  at::Tensor workspace = empty_device(ig.sizes(), dtype);
  launch(rnn_kernel("lstm_cell", type), NDRange::linear(size_t(c.numel())), arg(ig), arg(hg),
         arg(or_else(input_bias, ig)), arg(or_else(hidden_bias, ig)), arg(c), arg(hy), arg(cy), arg(workspace),
         int(c.size(1)), int(given(input_bias)), int(c.numel()));
  return {hy, cy, workspace};
}

// (d gates (B, 4H), d cx (B, H), d bias (4H) or undefined): the biases' gradient is the
// gates' summed over the batch, as torch gives it (one tensor for both biases).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  if (!given(grad_hy) && !given(grad_cy)) return {};
  const char* type = cell_type(workspace, "workspace");
  const at::Tensor c = contiguous(cx), ws = contiguous(workspace);
  const int64_t B = c.dim() == 2 ? c.size(0) : -1, H = c.dim() == 2 ? c.size(1) : -1;
  const std::vector<int64_t> gates{B, 4 * H};
  DEVICE_CHECK(c.dim() == 2 && cy.sizes() == c.sizes() && ws.sizes() == at::IntArrayRef(gates),
              "opencl: _thnn_fused_lstm_cell_backward: cx and cy must be (B, H) and the workspace (B, 4H), got ",
              cx.sizes(), ", ", cy.sizes(), " and ", workspace.sizes());
  for (const std::optional<at::Tensor>* g : {&grad_hy, &grad_cy}) {
    if (!given(*g)) continue;
    check_device(**g, "grad");
    DEVICE_CHECK((*g)->sizes() == c.sizes() && (*g)->scalar_type() == ws.scalar_type(), "opencl: ",
                "_thnn_fused_lstm_cell_backward: gradients must be ", c.sizes(), " of ", ws.scalar_type(), ", got ",
                (*g)->sizes(), " of ", (*g)->scalar_type());
  }
  for (const at::Tensor* t : {&cx, &cy}) {
    check_device(*t, "_thnn_fused_lstm_cell_backward");
    DEVICE_CHECK(t->scalar_type() == ws.scalar_type(), "opencl: _thnn_fused_lstm_cell_backward: operands of dtypes ",
                ws.scalar_type(), " and ", t->scalar_type());
  }
  const at::Tensor dhy = or_else(grad_hy, c), dcy = or_else(grad_cy, c);
  at::Tensor dgates = empty_device(ws.sizes(), ws.scalar_type()), dcx = empty_device(c.sizes(), ws.scalar_type());
  launch(rnn_kernel("lstm_cell_backward", type), NDRange::linear(size_t(c.numel())), arg(dhy), arg(dcy), arg(c),
         arg(contiguous(cy)), arg(ws), arg(dgates), arg(dcx), int(H), int(given(grad_hy)), int(given(grad_cy)),
         int(c.numel()));
  at::Tensor dbias = has_bias ? dgates.sum(0) : at::Tensor();
  return {dgates, dcx, dbias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  const char* type = check_cell("_thnn_fused_gru_cell", 3, input_gates, hidden_gates, hx, input_bias, hidden_bias);
  const at::Tensor ig = contiguous(input_gates), hg = contiguous(hidden_gates), h = contiguous(hx);
  const at::ScalarType dtype = ig.scalar_type();
  at::Tensor hy = empty_device(h.sizes(), dtype);
  at::Tensor workspace = empty_device({h.size(0), 5 * h.size(1)}, dtype);
  launch(rnn_kernel("gru_cell", type), NDRange::linear(size_t(h.numel())), arg(ig), arg(hg),
         arg(or_else(input_bias, ig)), arg(or_else(hidden_bias, ig)), arg(h), arg(hy), arg(workspace),
         int(h.size(1)), int(given(input_bias)), int(h.numel()));
  return {hy, workspace};
}

// (d input gates (B, 3H), d hidden gates (B, 3H), d hx (B, H), d input bias, d hidden bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                         const at::Tensor& workspace,
                                                                                         bool has_bias) {
  const char* type = cell_type(workspace, "workspace");
  check_device(grad_hy, "grad_hy");
  const at::Tensor dhy = contiguous(grad_hy), ws = contiguous(workspace);
  const std::vector<int64_t> kept{dhy.dim() == 2 ? dhy.size(0) : -1, dhy.dim() == 2 ? 5 * dhy.size(1) : -1};
  DEVICE_CHECK(dhy.dim() == 2 && ws.sizes() == at::IntArrayRef(kept) && dhy.scalar_type() == ws.scalar_type(),
              "opencl: _thnn_fused_gru_cell_backward: grad_hy must be (B, H) and the workspace (B, 5H) of one dtype, "
              "got ", grad_hy.sizes(), " of ", grad_hy.scalar_type(), " and ", workspace.sizes(), " of ",
              workspace.scalar_type());
  const int64_t B = dhy.size(0), H = dhy.size(1);
  at::Tensor dig = empty_device({B, 3 * H}, ws.scalar_type()), dhg = empty_device({B, 3 * H}, ws.scalar_type());
  at::Tensor dhx = empty_device(dhy.sizes(), ws.scalar_type());
  launch(rnn_kernel("gru_cell_backward", type), NDRange::linear(size_t(dhy.numel())), arg(dhy), arg(ws), arg(dig),
         arg(dhg), arg(dhx), int(H), int(dhy.numel()));
  at::Tensor dbi, dbh;
  if (has_bias) {
    dbi = dig.sum(0);
    dbh = dhg.sum(0);
  }
  return {dig, dhg, dhx, dbi, dbh};
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace oclf::device
