// Pooling of the opencl device, 2-D and 3-D, forward and backward: max (with indices),
// average, adaptive average, adaptive max, and fractional max's forward (its backward is the
// device's scatter_add at the indices). x is contiguous (P, D, H, W) volumes, P = B·C, y and
// the indices (P, OD, OH, OW); tensor arguments are a buffer and an offset in elements; -DT=
// is the element type (float; fractional pooling also double). 2-D poolings build with
// -DDIMS=2: a depth of 1, compiled in, so that the depth's loops and index math vanish.
// Forward: one work-item per output element (p, od, oh, ow); backward: one work-item per input
// element (p, id, ih, iw), which gathers from the outputs whose window holds it (no atomics, a
// fixed order). Values per axis (depth, height, width) travel as an int3.
//
// Windows along each axis (depth, height, width alike):
//   max and average pooling  od·SD - PD + kd·DD, kd < KD (average pooling: DD = 1);
//   adaptive pooling         [⌊od·D/OD⌋, ⌈(od+1)·D/OD⌉);
//   fractional max pooling   KD positions from a start placed by plane p's random samples u
//                            (samples[p·NS + slot], a slot < 0: start 0): for output i of o,
//                            n - k where i = o - 1, else (int)((i + u)·alpha) - (int)(u·alpha),
//                            alpha = (n - k)/(o - 1) computed in T by the host, as torch's CPU
//                            kernel computes it;
// positions outside the input skipped. Max pooling stores the index (id·H + ih)·W + iw of the
// maximum: the window's first position inside the input to start with, then each larger
// value (so the first of equal values stays), and the last NaN where there is one, as
// torch's CPU kernels. Average pooling divides by divisor (divisor_override, any sign; 0:
// none), else by the window's size clipped to the padded input (count_include_pad), else by
// the count of positions inside the input.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it
#ifndef T
#define T float
#endif
#ifndef DIMS
#define DIMS 3
#endif

#define BUF(name) __global T *restrict name, const int name##_off
#define CBUF(name) __global const T *restrict name, const int name##_off
#define IBUF(name) __global long *restrict name, const int name##_off
#define CIBUF(name) __global const long *restrict name, const int name##_off
#define GEOMETRY                                                                                             \
  const int D, const int H, const int W, const int OD, const int OH, const int OW, const int KD, const int KH, \
      const int KW, const int SD, const int SH, const int SW, const int PD, const int PH, const int PW,       \
      const int DD, const int DH, const int DW, const int total
#define ADAPTIVE const int D, const int H, const int W, const int OD, const int OH, const int OW, const int total

// The input's and output's depth: 1 in 2-D builds.
#if DIMS == 2
#define D_ 1
#define OD_ 1
#else
#define D_ D
#define OD_ OD
#endif

// The window (kernel, stride, padding, dilation), compiled in when the host builds with
// -DWINDOW -DWKD=.. .. -DWDW=.. (the arguments then carry the same values), so that the loops
// over it unroll and PoCL vectorises across work-items; else read from the arguments.
#ifdef WINDOW
#define KERNEL3 (int3)(WKD, WKH, WKW)
#define STRIDE3 (int3)(WSD, WSH, WSW)
#define PAD3 (int3)(WPD, WPH, WPW)
#define DILATION3 (int3)(WDD, WDH, WDW)
#else
#define KERNEL3 (int3)(KD, KH, KW)
#define STRIDE3 (int3)(SD, SH, SW)
#define PAD3 (int3)(PD, PH, PW)
#define DILATION3 (int3)(DD, DH, DW)
#endif
#define IN3 (int3)(D_, H, W)
#define OUT3 (int3)(OD_, OH, OW)
// The first position of output (od, oh, ow)'s window per axis, o·stride - pad (scalars: the
// arithmetic of int3s costs PoCL's vectorisation across work-items).
#define WINDOW_START(od, oh, ow) \
  (int3)((od) * STRIDE3.x - PAD3.x, (oh) * STRIDE3.y - PAD3.y, (ow) * STRIDE3.z - PAD3.z)

// The index of position c in a volume of `size`.
inline int at3(const int3 c, const int3 size) { return (c.x * size.y + c.y) * size.z + c.z; }

// The window start + k·step, k < count, per axis: its largest value, and at *at its index
// in the volume of `size` (see above); positions outside the volume skipped (a window holds
// one at least).
inline T window_max(__global const T* vol, const int3 start, const int3 count, const int3 step, const int3 size,
                    int* at) {
  int best_at = at3(select(start, start + (-start + step - 1) / step * step, start < 0), size), nan_at = -1;
  T best = -INFINITY;
  for (int kd = 0; kd < count.x; ++kd) {
    const int id = start.x + kd * step.x;
    if (id < 0 || id >= size.x) continue;
    for (int kh = 0; kh < count.y; ++kh) {
      const int ih = start.y + kh * step.y;
      if (ih < 0 || ih >= size.y) continue;
      for (int kw = 0; kw < count.z; ++kw) {
        const int iw = start.z + kw * step.z;
        if (iw < 0 || iw >= size.z) continue;
        const int a = (id * size.y + ih) * size.z + iw;
        const T v = vol[a];
        if (v != v) nan_at = a;
        if (v > best) {
          best = v;
          best_at = a;
        }
      }
    }
  }
  *at = nan_at >= 0 ? nan_at : best_at;
  return nan_at >= 0 ? (T)NAN : best;
}

// The sum of the box [lo, hi) of a volume of `size` (inside it).
inline T box_sum(__global const T* vol, const int3 lo, const int3 hi, const int3 size) {
  T s = 0;
  for (int id = lo.x; id < hi.x; ++id)
    for (int ih = lo.y; ih < hi.y; ++ih)
      for (int iw = lo.z; iw < hi.z; ++iw) s += vol[(id * size.y + ih) * size.z + iw];
  return s;
}

inline int volume(const int3 n) { return n.x * n.y * n.z; }

// The output index along one axis whose window reaches input position i through tap k,
// or -1 (off the stride grid, or outside the output).
inline int source(const int i, const int k, const int pad, const int dilation, const int stride, const int out) {
  const int t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int o = t / stride;
  return o < out ? o : -1;
}

// ---- max and average pooling -------------------------------------------------------------

__kernel void max_pool_forward(CBUF(x), BUF(y), IBUF(idx), GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD_, p = i / (OW * OH * OD_);
  int at;
  y[y_off + i] =
      window_max(x + x_off + (size_t)p * D_ * H * W, WINDOW_START(od, oh, ow), KERNEL3, DILATION3, IN3, &at);
  idx[idx_off + i] = at;
}

// Average pooling's window [start, end) (dilation 1), clipped to the padded input. (Its part
// inside the input is [max(start, (int3)(0)), min(end, IN3)): Oclgrind misreads max(int3, 0).)
#define AVG_END(start) min((start) + KERNEL3, IN3 + PAD3)

// The divisor of the average over the window [start, end).
inline T avg_divisor(const int3 start, const int3 end, const int3 in, const int include_pad, const int divisor) {
  if (divisor != 0) return (T)divisor;
  return (T)(include_pad ? volume(end - start) : volume(min(end, in) - max(start, (int3)(0))));
}

__kernel void avg_pool_forward(CBUF(x), BUF(y), const int include_pad, const int divisor, GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD_, p = i / (OW * OH * OD_);
  const int3 start = WINDOW_START(od, oh, ow), end = AVG_END(start);
  y[y_off + i] = box_sum(x + x_off + (size_t)p * D_ * H * W, max(start, (int3)(0)), min(end, IN3), IN3) /
                 avg_divisor(start, end, IN3, include_pad, divisor);
}

// The gradient of input element i: over the outputs o whose window holds it (dilation 1 where
// avg), dy / their divisor where avg, else dy where their index is it.
inline T gather_windows(__global const T* dy, __global const long* idx, const int avg, const int i, GEOMETRY,
                        const int include_pad, const int divisor) {
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D_, p = i / (W * H * D_);
  const int3 c = (int3)(id, ih, iw), k = KERNEL3, s = STRIDE3, pad = PAD3, d = avg ? (int3)(1) : DILATION3;
  const size_t vol = (size_t)p * OD_ * OH * OW;
  const int at = at3(c, IN3);
  T g = 0;
  for (int kd = 0; kd < k.x; ++kd) {
    const int od = source(c.x, kd, pad.x, d.x, s.x, OD_);
    if (od < 0) continue;
    for (int kh = 0; kh < k.y; ++kh) {
      const int oh = source(c.y, kh, pad.y, d.y, s.y, OH);
      if (oh < 0) continue;
      for (int kw = 0; kw < k.z; ++kw) {
        const int ow = source(c.z, kw, pad.z, d.z, s.z, OW);
        if (ow < 0) continue;
        const int3 o = (int3)(od, oh, ow), start = WINDOW_START(od, oh, ow);
        const size_t from = vol + at3(o, OUT3);
        if (avg)
          g += dy[from] / avg_divisor(start, AVG_END(start), IN3, include_pad, divisor);
        else if (idx[from] == at)
          g += dy[from];
      }
    }
  }
  return g;
}

#define GEOMETRY_ARGS D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, total

__kernel void max_pool_backward(CBUF(dy), CIBUF(idx), BUF(dx), GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  dx[dx_off + i] = gather_windows(dy + dy_off, idx + idx_off, 0, i, GEOMETRY_ARGS, 0, 0);
}

__kernel void avg_pool_backward(CBUF(dy), BUF(dx), const int include_pad, const int divisor, GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  dx[dx_off + i] = gather_windows(dy + dy_off, 0, 1, i, GEOMETRY_ARGS, include_pad, divisor);
}

// ---- adaptive pooling ---------------------------------------------------------------------

// The adaptive window [START, END) of output o of `out` along an axis of `in` positions, and
// the outputs [FIRST, LAST) whose windows may hold input position i: of ints, or of int3s
// for the three axes at once.
#define START(o, in, out) ((o) * (in) / (out))
#define END(o, in, out) ((((o) + 1) * (in) + (out) - 1) / (out))
#define FIRST(i, in, out) ((i) * (out) / (in))
#define LAST(i, in, out) min((out), (((i) + 1) * (out) + (in) - 1) / (in))

__kernel void adaptive_avg_forward(CBUF(x), BUF(y), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD_, p = i / (OW * OH * OD_);
  const int3 o = (int3)(od, oh, ow);
  const int3 lo = START(o, IN3, OUT3), hi = END(o, IN3, OUT3);
  y[y_off + i] = box_sum(x + x_off + (size_t)p * D_ * H * W, lo, hi, IN3) / (T)volume(hi - lo);
}

__kernel void adaptive_max_forward(CBUF(x), BUF(y), IBUF(idx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD_, p = i / (OW * OH * OD_);
  const int3 o = (int3)(od, oh, ow);
  int at;
  const int3 lo = START(o, IN3, OUT3), hi = END(o, IN3, OUT3);
  y[y_off + i] = window_max(x + x_off + (size_t)p * D_ * H * W, lo, hi - lo, (int3)(1), IN3, &at);
  idx[idx_off + i] = at;
}

// The gradient of input element i over the adaptive windows that hold it: dy / the window's
// size where avg, else dy where the output's index is it.
inline T gather_adaptive(__global const T* dy, __global const long* idx, const int avg, const int i, ADAPTIVE) {
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D_, p = i / (W * H * D_);
  const int3 c = (int3)(id, ih, iw), first = FIRST(c, IN3, OUT3), last = LAST(c, IN3, OUT3);
  const size_t vol = (size_t)p * OD_ * OH * OW;
  const int at = at3(c, IN3);
  T g = 0;
  for (int od = first.x; od < last.x; ++od) {
    const int d0 = START(od, D_, OD_), d1 = END(od, D_, OD_);
    if (c.x < d0 || c.x >= d1) continue;
    for (int oh = first.y; oh < last.y; ++oh) {
      const int h0 = START(oh, H, OH), h1 = END(oh, H, OH);
      if (c.y < h0 || c.y >= h1) continue;
      for (int ow = first.z; ow < last.z; ++ow) {
        const int w0 = START(ow, W, OW), w1 = END(ow, W, OW);
        if (c.z < w0 || c.z >= w1) continue;
        const size_t from = vol + at3((int3)(od, oh, ow), OUT3);
        if (avg)
          g += dy[from] / (T)((d1 - d0) * (h1 - h0) * (w1 - w0));
        else if (idx[from] == at)
          g += dy[from];
      }
    }
  }
  return g;
}

__kernel void adaptive_avg_backward(CBUF(dy), BUF(dx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  dx[dx_off + i] = gather_adaptive(dy + dy_off, 0, 1, i, D, H, W, OD, OH, OW, total);
}

__kernel void adaptive_max_backward(CBUF(dy), CIBUF(idx), BUF(dx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  dx[dx_off + i] = gather_adaptive(dy + dy_off, idx + idx_off, 0, i, D, H, W, OD, OH, OW, total);
}

// ---- fractional max pooling ---------------------------------------------------------------

// The start of output i's window of k along an axis of n inputs and o outputs, from the
// plane's samples u.
inline int fractional_start(__global const T* u, const int slot, const int i, const int n, const int o, const int k,
                            const T alpha) {
  if (slot < 0) return 0;
  if (i == o - 1) return n - k;
  const T sample = u[slot];
  return (int)(((T)i + sample) * alpha) - (int)(sample * alpha);
}

__kernel void fractional_max_forward(CBUF(x), CBUF(samples), BUF(y), IBUF(idx), const int D, const int H,
                                     const int W, const int OD, const int OH, const int OW, const int KD,
                                     const int KH, const int KW, const T alpha_d, const T alpha_h, const T alpha_w,
                                     const int NS, const int slot_d, const int slot_h, const int slot_w,
                                     const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD_, p = i / (OW * OH * OD_);
  const int3 o = (int3)(od, oh, ow);
  int at;
  __global const T* u = samples + samples_off + p * NS;
  const int3 start = (int3)(fractional_start(u, slot_d, o.x, D_, OD_, KD, alpha_d),
                            fractional_start(u, slot_h, o.y, H, OH, KH, alpha_h),
                            fractional_start(u, slot_w, o.z, W, OW, KW, alpha_w));
  y[y_off + i] = window_max(x + x_off + (size_t)p * D_ * H * W, start, (int3)(KD, KH, KW), (int3)(1), IN3, &at);
  idx[idx_off + i] = at;
}
