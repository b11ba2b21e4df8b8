// 2-D pooling of the opencl device, forward and backward: max (with indices), average and
// adaptive average. float32, contiguous (B·C, H, W) planes; tensor arguments are a buffer
// and an offset in elements. Forward: one work-item per output element (p, oh, ow) of the
// (B·C, OH, OW) output; backward: one work-item per input element (p, ih, iw), which
// gathers from the outputs whose window holds it (no atomics, a fixed order).
//
// Window of output (oh, ow) for max and average pooling: rows oh·SH - PH + kh·DH,
// kh < KH (columns alike), positions outside the input skipped. Max pooling stores the
// index ih·W + iw of the maximum (the first on ties; the last NaN wins), as torch does.
// Average pooling divides by divisor (divisor_override, any sign; 0: none), else by the window's size clipped to the
// padded input (count_include_pad), else by the count of positions inside the input.
// Adaptive average: rows [⌊oh·H/OH⌋, ⌈(oh+1)·H/OH⌉), columns alike.

#define BUF(name) __global float *restrict name, const int name##_off
#define CBUF(name) __global const float *restrict name, const int name##_off
#define GEOMETRY                                                                                       \
  const int H, const int W, const int OH, const int OW, const int KH, const int KW, const int SH, const int SW, \
      const int PH, const int PW, const int DH, const int DW, const int total

// The window (kernel, stride, padding, dilation per axis): compiled in when the host
// builds with -DWINDOW (the arguments then carry the same values), so that the loops over
// it unroll and PoCL vectorises across work-items; else read from the arguments.
#ifdef WINDOW
#define KH_ WKH
#define KW_ WKW
#define SH_ WSH
#define SW_ WSW
#define PH_ WPH
#define PW_ WPW
#define DH_ WDH
#define DW_ WDW
#else
#define KH_ KH
#define KW_ KW
#define SH_ SH
#define SW_ SW
#define PH_ PH
#define PW_ PW
#define DH_ DH
#define DW_ DW
#endif

// The output index along one axis whose window reaches input position i through tap k,
// or -1 (off the stride grid, or outside the output).
inline int source(const int i, const int k, const int pad, const int dilation, const int stride, const int out) {
  const int t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int o = t / stride;
  return o < out ? o : -1;
}

__kernel void max_pool_forward(CBUF(x), BUF(y), __global long* idx, const int idx_off, GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
  __global const float* plane = x + x_off + (size_t)p * H * W;
  // As torch's CPU kernel: the index starts at the window's first position inside the
  // input, then a larger value takes over (so the first of equal values stays); a window
  // with a NaN gives NaN at its last NaN. The NaN search runs apart, in a second loop that
  // only such windows take, so that PoCL vectorises the first across work-items.
  int h0 = oh * SH_ - PH_, w0 = ow * SW_ - PW_;
  if (h0 < 0) h0 += (-h0 + DH_ - 1) / DH_ * DH_;
  if (w0 < 0) w0 += (-w0 + DW_ - 1) / DW_ * DW_;
  float best = -INFINITY;
  int best_at = h0 * W + w0;
  bool nan = false;
  for (int kh = 0; kh < KH_; ++kh) {
    const int ih = oh * SH_ - PH_ + kh * DH_;
    if (ih < 0 || ih >= H) continue;
    for (int kw = 0; kw < KW_; ++kw) {
      const int iw = ow * SW_ - PW_ + kw * DW_;
      if (iw < 0 || iw >= W) continue;
      const float v = plane[ih * W + iw];
      nan |= v != v;
      if (v > best) {
        best = v;
        best_at = ih * W + iw;
      }
    }
  }
  if (nan) {  // rare: the window's last NaN wins, as in torch's kernel
    for (int kh = 0; kh < KH_; ++kh) {
      const int ih = oh * SH_ - PH_ + kh * DH_;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW_; ++kw) {
        const int iw = ow * SW_ - PW_ + kw * DW_;
        if (iw < 0 || iw >= W) continue;
        if (isnan(plane[ih * W + iw])) best_at = ih * W + iw;
      }
    }
    best = NAN;
  }
  y[y_off + i] = best;
  idx[idx_off + i] = best_at;
}

__kernel void max_pool_backward(CBUF(dy), __global const long* idx, const int idx_off, BUF(dx), GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, p = i / (W * H);
  const size_t plane = (size_t)p * OH * OW;
  float g = 0.0f;
  for (int kh = 0; kh < KH_; ++kh) {
    const int oh = source(ih, kh, PH_, DH_, SH_, OH);
    if (oh < 0) continue;
    for (int kw = 0; kw < KW_; ++kw) {
      const int ow = source(iw, kw, PW_, DW_, SW_, OW);
      if (ow < 0) continue;
      const size_t at = plane + oh * OW + ow;
      if (idx[idx_off + at] == ih * W + iw) g += dy[dy_off + at];
    }
  }
  dx[dx_off + i] = g;
}

// The divisor of output (oh, ow)'s average.
inline float avg_divisor(const int oh, const int ow, const int H, const int W, const int KH, const int KW,
                         const int SH, const int SW, const int PH, const int PW, const int include_pad,
                         const int divisor) {
  if (divisor != 0) return (float)divisor;
  int h0 = oh * SH - PH, w0 = ow * SW - PW;
  int h1 = min(h0 + KH, H + PH), w1 = min(w0 + KW, W + PW);
  const int padded = (h1 - h0) * (w1 - w0);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  h1 = min(h1, H);
  w1 = min(w1, W);
  return (float)(include_pad ? padded : (h1 - h0) * (w1 - w0));
}

__kernel void avg_pool_forward(CBUF(x), BUF(y), const int include_pad, const int divisor, GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
  __global const float* plane = x + x_off + (size_t)p * H * W;
  float s = 0.0f;
  for (int kh = 0; kh < KH_; ++kh) {
    const int ih = oh * SH_ - PH_ + kh;
    if (ih < 0 || ih >= H) continue;
    for (int kw = 0; kw < KW_; ++kw) {
      const int iw = ow * SW_ - PW_ + kw;
      if (iw >= 0 && iw < W) s += plane[ih * W + iw];
    }
  }
  y[y_off + i] = s / avg_divisor(oh, ow, H, W, KH_, KW_, SH_, SW_, PH_, PW_, include_pad, divisor);
}

__kernel void avg_pool_backward(CBUF(dy), BUF(dx), const int include_pad, const int divisor, GEOMETRY) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, p = i / (W * H);
  const size_t plane = (size_t)p * OH * OW;
  float g = 0.0f;
  for (int kh = 0; kh < KH_; ++kh) {
    const int oh = source(ih, kh, PH_, 1, SH_, OH);
    if (oh < 0) continue;
    for (int kw = 0; kw < KW_; ++kw) {
      const int ow = source(iw, kw, PW_, 1, SW_, OW);
      if (ow < 0) continue;
      g += dy[dy_off + plane + oh * OW + ow] /
           avg_divisor(oh, ow, H, W, KH_, KW_, SH_, SW_, PH_, PW_, include_pad, divisor);
    }
  }
  dx[dx_off + i] = g;
}

__kernel void adaptive_avg_forward(CBUF(x), BUF(y), const int H, const int W, const int OH, const int OW,
                                   const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
  const int h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
  const int w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
  __global const float* plane = x + x_off + (size_t)p * H * W;
  float s = 0.0f;
  for (int ih = h0; ih < h1; ++ih)
    for (int iw = w0; iw < w1; ++iw) s += plane[ih * W + iw];
  y[y_off + i] = s / (float)((h1 - h0) * (w1 - w0));
}

__kernel void adaptive_avg_backward(CBUF(dy), BUF(dx), const int H, const int W, const int OH, const int OW,
                                    const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int iw = i % W, ih = (i / W) % H, p = i / (W * H);
  const size_t plane = (size_t)p * OH * OW;
  float g = 0.0f;
  for (int oh = ih * OH / H; oh < min(OH, ((ih + 1) * OH + H - 1) / H); ++oh) {
    const int h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
    if (ih < h0 || ih >= h1) continue;
    for (int ow = iw * OW / W; ow < min(OW, ((iw + 1) * OW + W - 1) / W); ++ow) {
      const int w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
      if (iw < w0 || iw >= w1) continue;
      g += dy[dy_off + plane + oh * OW + ow] / (float)((h1 - h0) * (w1 - w0));
    }
  }
  dx[dx_off + i] = g;
}
