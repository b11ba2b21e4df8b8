// 3-D pooling of the opencl device, forward and backward: max (with indices), average,
// adaptive average and adaptive max (also 2-D adaptive max, as a depth of 1). float32,
// contiguous (P, D, H, W) volumes, P = B·C; tensor arguments are a buffer and an offset in
// elements. Forward: one work-item per output element (p, od, oh, ow) of the (P, OD, OH, OW)
// output; backward: one work-item per input element (p, id, ih, iw), which gathers from the
// outputs whose window holds it (no atomics, a fixed order).
//
// Window of output (od, oh, ow) for max and average pooling: depths od·SD - PD + kd·DD,
// kd < KD (rows and columns alike), positions outside the input skipped. Max pooling stores
// the index (id·H + ih)·W + iw of the maximum: the window's first position inside the input
// to start with, then each larger value, and the last NaN where there is one, as torch's CPU
// kernel. Average pooling (dilation 1) divides by divisor (divisor_override, any sign; 0:
// none), else by the window's size clipped to the padded input (count_include_pad), else by
// the count of positions inside the input.
// Adaptive pooling: depths [⌊od·D/OD⌋, ⌈(od+1)·D/OD⌉), rows and columns alike; adaptive max
// takes the first maximum (the last NaN) as max pooling does.

#define BUF(name) __global float *restrict name, const int name##_off
#define CBUF(name) __global const float *restrict name, const int name##_off
#define IBUF(name) __global long *restrict name, const int name##_off
#define CIBUF(name) __global const long *restrict name, const int name##_off
#define GEOMETRY3                                                                                            \
  const int D, const int H, const int W, const int OD, const int OH, const int OW, const int KD, const int KH, \
      const int KW, const int SD, const int SH, const int SW, const int PD, const int PH, const int PW,       \
      const int DD, const int DH, const int DW, const int total
#define ADAPTIVE const int D, const int H, const int W, const int OD, const int OH, const int OW, const int total

// The output index along one axis whose window reaches input position i through tap k,
// or -1 (off the stride grid, or outside the output).
inline int source(const int i, const int k, const int pad, const int dilation, const int stride, const int out) {
  const int t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int o = t / stride;
  return o < out ? o : -1;
}

// The first position at or after start - pad on the dilation grid that lies inside the input.
inline int first_inside(const int start, const int dilation) {
  return start < 0 ? start + (-start + dilation - 1) / dilation * dilation : start;
}

__kernel void max_pool3d_forward(CBUF(x), BUF(y), IBUF(idx), GEOMETRY3) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  __global const float* vol = x + x_off + (size_t)p * D * H * W;
  const int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
  float best = -INFINITY;
  int best_at = (first_inside(d0, DD) * H + first_inside(h0, DH)) * W + first_inside(w0, DW);
  for (int kd = 0; kd < KD; ++kd) {
    const int id = d0 + kd * DD;
    if (id < 0 || id >= D) continue;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = h0 + kh * DH;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = w0 + kw * DW;
        if (iw < 0 || iw >= W) continue;
        const int at = (id * H + ih) * W + iw;
        const float v = vol[at];
        if (v > best || isnan(v)) {
          best = v;
          best_at = at;
        }
      }
    }
  }
  y[y_off + i] = best;
  idx[idx_off + i] = best_at;
}

__kernel void max_pool3d_backward(CBUF(dy), CIBUF(idx), BUF(dx), GEOMETRY3) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D, p = i / (W * H * D);
  const size_t vol = (size_t)p * OD * OH * OW;
  const int at = (id * H + ih) * W + iw;
  float g = 0.0f;
  for (int kd = 0; kd < KD; ++kd) {
    const int od = source(id, kd, PD, DD, SD, OD);
    if (od < 0) continue;
    for (int kh = 0; kh < KH; ++kh) {
      const int oh = source(ih, kh, PH, DH, SH, OH);
      if (oh < 0) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int ow = source(iw, kw, PW, DW, SW, OW);
        if (ow < 0) continue;
        const size_t o = vol + ((size_t)od * OH + oh) * OW + ow;
        if (idx[idx_off + o] == at) g += dy[dy_off + o];
      }
    }
  }
  dx[dx_off + i] = g;
}

// The divisor of output (od, oh, ow)'s average (dilation 1).
inline float avg_divisor3(const int od, const int oh, const int ow, const int D, const int H, const int W,
                          const int KD, const int KH, const int KW, const int SD, const int SH, const int SW,
                          const int PD, const int PH, const int PW, const int include_pad, const int divisor) {
  if (divisor != 0) return (float)divisor;
  int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
  int d1 = min(d0 + KD, D + PD), h1 = min(h0 + KH, H + PH), w1 = min(w0 + KW, W + PW);
  const int padded = (d1 - d0) * (h1 - h0) * (w1 - w0);
  if (include_pad) return (float)padded;
  d0 = max(d0, 0);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  d1 = min(d1, D);
  h1 = min(h1, H);
  w1 = min(w1, W);
  return (float)((d1 - d0) * (h1 - h0) * (w1 - w0));
}

__kernel void avg_pool3d_forward(CBUF(x), BUF(y), const int include_pad, const int divisor, GEOMETRY3) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  __global const float* vol = x + x_off + (size_t)p * D * H * W;
  float s = 0.0f;
  for (int kd = 0; kd < KD; ++kd) {
    const int id = od * SD - PD + kd;
    if (id < 0 || id >= D) continue;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * SH - PH + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * SW - PW + kw;
        if (iw >= 0 && iw < W) s += vol[(id * H + ih) * W + iw];
      }
    }
  }
  y[y_off + i] = s / avg_divisor3(od, oh, ow, D, H, W, KD, KH, KW, SD, SH, SW, PD, PH, PW, include_pad, divisor);
}

__kernel void avg_pool3d_backward(CBUF(dy), BUF(dx), const int include_pad, const int divisor, GEOMETRY3) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D, p = i / (W * H * D);
  const size_t vol = (size_t)p * OD * OH * OW;
  float g = 0.0f;
  for (int kd = 0; kd < KD; ++kd) {
    const int od = source(id, kd, PD, 1, SD, OD);
    if (od < 0) continue;
    for (int kh = 0; kh < KH; ++kh) {
      const int oh = source(ih, kh, PH, 1, SH, OH);
      if (oh < 0) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int ow = source(iw, kw, PW, 1, SW, OW);
        if (ow < 0) continue;
        g += dy[dy_off + vol + ((size_t)od * OH + oh) * OW + ow] /
             avg_divisor3(od, oh, ow, D, H, W, KD, KH, KW, SD, SH, SW, PD, PH, PW, include_pad, divisor);
      }
    }
  }
  dx[dx_off + i] = g;
}

// The adaptive window [start, end) of output o of `out` along an axis of `in` positions.
inline int window_start(const int o, const int in, const int out) { return o * in / out; }
inline int window_end(const int o, const int in, const int out) { return ((o + 1) * in + out - 1) / out; }

// The outputs [first, last) whose adaptive windows may hold input position i.
inline int first_output(const int i, const int in, const int out) { return i * out / in; }
inline int last_output(const int i, const int in, const int out) { return min(out, ((i + 1) * out + in - 1) / in); }

__kernel void adaptive_avg3d_forward(CBUF(x), BUF(y), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  const int d0 = window_start(od, D, OD), d1 = window_end(od, D, OD);
  const int h0 = window_start(oh, H, OH), h1 = window_end(oh, H, OH);
  const int w0 = window_start(ow, W, OW), w1 = window_end(ow, W, OW);
  __global const float* vol = x + x_off + (size_t)p * D * H * W;
  float s = 0.0f;
  for (int id = d0; id < d1; ++id)
    for (int ih = h0; ih < h1; ++ih)
      for (int iw = w0; iw < w1; ++iw) s += vol[(id * H + ih) * W + iw];
  y[y_off + i] = s / (float)((d1 - d0) * (h1 - h0) * (w1 - w0));
}

__kernel void adaptive_avg3d_backward(CBUF(dy), BUF(dx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D, p = i / (W * H * D);
  const size_t vol = (size_t)p * OD * OH * OW;
  float g = 0.0f;
  for (int od = first_output(id, D, OD); od < last_output(id, D, OD); ++od) {
    const int d0 = window_start(od, D, OD), d1 = window_end(od, D, OD);
    if (id < d0 || id >= d1) continue;
    for (int oh = first_output(ih, H, OH); oh < last_output(ih, H, OH); ++oh) {
      const int h0 = window_start(oh, H, OH), h1 = window_end(oh, H, OH);
      if (ih < h0 || ih >= h1) continue;
      for (int ow = first_output(iw, W, OW); ow < last_output(iw, W, OW); ++ow) {
        const int w0 = window_start(ow, W, OW), w1 = window_end(ow, W, OW);
        if (iw < w0 || iw >= w1) continue;
        g += dy[dy_off + vol + ((size_t)od * OH + oh) * OW + ow] / (float)((d1 - d0) * (h1 - h0) * (w1 - w0));
      }
    }
  }
  dx[dx_off + i] = g;
}

__kernel void adaptive_max3d_forward(CBUF(x), BUF(y), IBUF(idx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  const int d0 = window_start(od, D, OD), d1 = window_end(od, D, OD);
  const int h0 = window_start(oh, H, OH), h1 = window_end(oh, H, OH);
  const int w0 = window_start(ow, W, OW), w1 = window_end(ow, W, OW);
  __global const float* vol = x + x_off + (size_t)p * D * H * W;
  float best = -INFINITY;
  int best_at = (d0 * H + h0) * W + w0;
  for (int id = d0; id < d1; ++id) {
    for (int ih = h0; ih < h1; ++ih) {
      for (int iw = w0; iw < w1; ++iw) {
        const int at = (id * H + ih) * W + iw;
        const float v = vol[at];
        if (v > best || isnan(v)) {
          best = v;
          best_at = at;
        }
      }
    }
  }
  y[y_off + i] = best;
  idx[idx_off + i] = best_at;
}

__kernel void adaptive_max3d_backward(CBUF(dy), CIBUF(idx), BUF(dx), ADAPTIVE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, id = (i / (W * H)) % D, p = i / (W * H * D);
  const size_t vol = (size_t)p * OD * OH * OW;
  const int at = (id * H + ih) * W + iw;
  float g = 0.0f;
  for (int od = first_output(id, D, OD); od < last_output(id, D, OD); ++od) {
    for (int oh = first_output(ih, H, OH); oh < last_output(ih, H, OH); ++oh) {
      for (int ow = first_output(iw, W, OW); ow < last_output(iw, W, OW); ++ow) {
        const size_t o = vol + ((size_t)od * OH + oh) * OW + ow;
        if (idx[idx_off + o] == at) g += dy[dy_off + o];
      }
    }
  }
  dx[dx_off + i] = g;
}
