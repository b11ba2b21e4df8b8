// The fused LSTM and GRU cells of the opencl device (torch's _thnn_fused_lstm_cell,
// _thnn_fused_gru_cell and their backward passes): what follows the two matrix products of
// a recurrent step, one work-item per element (b, j) of the (B, H) state. T (-DT=) is float
// or double; every tensor is contiguous, a buffer and an offset in elements.
//
// LSTM: gates = input_gates + hidden_gates (+ b_ih + b_hh), (B, 4H), the four blocks of H
// columns in torch's order i, f, g, o:
//   i = σ(gates_i), f = σ(gates_f), g = tanh(gates_g), o = σ(gates_o)
//   cy = f·cx + i·g,  hy = o·tanh(cy),  workspace (B, 4H) = [i, f, g, o]
// backward, from dhy and dcy (either may be absent: zero):
//   dc = dhy·o·(1 - tanh²(cy)) + dcy,  dcx = dc·f
//   d gates = [dc·g·i(1-i), dc·cx·f(1-f), dc·i·(1-g²), dhy·tanh(cy)·o(1-o)]
//
// GRU: gates (B, 3H) in the order r, z, n; the hidden gates' n block is scaled by r:
//   r = σ(ig_r + hg_r + b), z = σ(ig_z + hg_z + b), n = tanh(ig_n + b_ih_n + r·(hg_n + b_hh_n))
//   hy = n + z·(hx - n),  workspace (B, 5H) = [r, z, n, hx, hg_n + b_hh_n]
// backward, from dhy:
//   dhx = dhy·z,  dn = dhy·(1 - z)·(1 - n²),  dz = dhy·(hx - n)·z(1-z),
//   dr = dn·(hg_n + b_hh_n)·r(1-r)
//   d input gates = [dr, dz, dn],  d hidden gates = [dr, dz, dn·r]

#include "dtypes.h"

#ifndef T
#define T float
#endif

#define BUF(name) __global T *restrict name, const int name##_off
#define CBUF(name) __global const T *restrict name, const int name##_off

inline T sigmoid_(const T x) { return (T)1 / ((T)1 + exp(-x)); }
// tanh, ±1 from where it rounds to it in T (OpenCL's may stop an ulp short; elementwise.cl).
inline T tanh_(const T x) {
  const T limit = sizeof(T) == 8 ? (T)19.1 : (T)9.1;
  return fabs(x) >= limit ? copysign((T)1, x) : tanh(x);
}

// Gate k's pre-activation at (b, j): both products' values and, with has_bias, both biases.
inline T gate(__global const T* ig, __global const T* hg, __global const T* b_ih, __global const T* b_hh,
              const int has_bias, const int row, const int col) {
  T v = ig[row + col] + hg[row + col];
  if (has_bias) v += b_ih[col] + b_hh[col];
  return v;
}

__kernel void lstm_cell(CBUF(ig), CBUF(hg), CBUF(b_ih), CBUF(b_hh), CBUF(cx), BUF(hy), BUF(cy), BUF(ws),
                        const int H, const int has_bias, const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  const int b = e / H, j = e % H;
  const int row = b * 4 * H;
  __global const T* igp = ig + ig_off;
  __global const T* hgp = hg + hg_off;
  __global const T* bi = b_ih + b_ih_off;
  __global const T* bh = b_hh + b_hh_off;
  const T i = sigmoid_(gate(igp, hgp, bi, bh, has_bias, row, j));
  const T f = sigmoid_(gate(igp, hgp, bi, bh, has_bias, row, H + j));
  const T g = tanh_(gate(igp, hgp, bi, bh, has_bias, row, 2 * H + j));
  const T o = sigmoid_(gate(igp, hgp, bi, bh, has_bias, row, 3 * H + j));
  const T c = f * cx[cx_off + e] + i * g;
  cy[cy_off + e] = c;
  hy[hy_off + e] = o * tanh_(c);
  __global T* w = ws + ws_off + row;
  w[j] = i;
  w[H + j] = f;
  w[2 * H + j] = g;
  w[3 * H + j] = o;
}

__kernel void lstm_cell_backward(CBUF(dhy), CBUF(dcy), CBUF(cx), CBUF(cy), CBUF(ws), BUF(dgates), BUF(dcx),
                                 const int H, const int has_dhy, const int has_dcy, const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  const int b = e / H, j = e % H;
  const int row = b * 4 * H;
  __global const T* w = ws + ws_off + row;
  const T i = w[j], f = w[H + j], g = w[2 * H + j], o = w[3 * H + j];
  const T gh = has_dhy ? dhy[dhy_off + e] : (T)0;
  const T gc_out = has_dcy ? dcy[dcy_off + e] : (T)0;
  const T tc = tanh_(cy[cy_off + e]);
  const T dc = gh * o * ((T)1 - tc * tc) + gc_out;
  __global T* d = dgates + dgates_off + row;
  d[j] = dc * g * i * ((T)1 - i);
  d[H + j] = dc * cx[cx_off + e] * f * ((T)1 - f);
  d[2 * H + j] = dc * i * ((T)1 - g * g);
  d[3 * H + j] = gh * tc * o * ((T)1 - o);
  dcx[dcx_off + e] = dc * f;
}

__kernel void gru_cell(CBUF(ig), CBUF(hg), CBUF(b_ih), CBUF(b_hh), CBUF(hx), BUF(hy), BUF(ws), const int H,
                       const int has_bias, const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  const int b = e / H, j = e % H;
  const int row = b * 3 * H;
  __global const T* igp = ig + ig_off;
  __global const T* hgp = hg + hg_off;
  __global const T* bi = b_ih + b_ih_off;
  __global const T* bh = b_hh + b_hh_off;
  const T r = sigmoid_(gate(igp, hgp, bi, bh, has_bias, row, j));
  const T z = sigmoid_(gate(igp, hgp, bi, bh, has_bias, row, H + j));
  const T hn = hgp[row + 2 * H + j] + (has_bias ? bh[2 * H + j] : (T)0);
  const T n = tanh_(igp[row + 2 * H + j] + (has_bias ? bi[2 * H + j] : (T)0) + r * hn);
  const T h = hx[hx_off + e];
  hy[hy_off + e] = n + z * (h - n);
  __global T* w = ws + ws_off + b * 5 * H;
  w[j] = r;
  w[H + j] = z;
  w[2 * H + j] = n;
  w[3 * H + j] = h;
  w[4 * H + j] = hn;
}

__kernel void gru_cell_backward(CBUF(dhy), CBUF(ws), BUF(dig), BUF(dhg), BUF(dhx), const int H, const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  const int b = e / H, j = e % H;
  __global const T* w = ws + ws_off + b * 5 * H;
  const T r = w[j], z = w[H + j], n = w[2 * H + j], h = w[3 * H + j], hn = w[4 * H + j];
  const T gh = dhy[dhy_off + e];
  const T dn = gh * ((T)1 - z) * ((T)1 - n * n);
  const T dz = gh * (h - n) * z * ((T)1 - z);
  const T dr = dn * hn * r * ((T)1 - r);
  const int row = b * 3 * H;
  dig[dig_off + row + j] = dr;
  dig[dig_off + row + H + j] = dz;
  dig[dig_off + row + 2 * H + j] = dn;
  dhg[dhg_off + row + j] = dr;
  dhg[dhg_off + row + H + j] = dz;
  dhg[dhg_off + row + 2 * H + j] = dn * r;
  dhx[dhx_off + e] = gh * z;
}
