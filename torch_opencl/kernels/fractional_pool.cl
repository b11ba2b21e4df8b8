// Fractional max pooling of the opencl device, forward (the backward adds the gradients at
// the stored indices: the device's scatter_add). x is planes (P, D, H, W), contiguous (2-D
// pooling: D = 1); y and idx are (P, OD, OH, OW). -DT= float or double; tensor arguments are
// a buffer and an offset in elements.
//
// Each plane p has its samples u in [0, 1) (samples[p·NS + slot], NS per plane); along an
// axis of n inputs, o outputs and windows of k, output i's window starts at
//   i = o-1: n - k;  else: (int)((i + u)·alpha) - (int)(u·alpha),  alpha = (n - k)/(o - 1)
// computed in T as torch's CPU kernel computes it (alpha by the host, in T; a slot < 0: 0).
// One work-item per output element: the window's largest value and its index
// (d·H + h)·W + w in the plane; a NaN wins (the last one), as on the CPU.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it
#ifndef T
#define T float
#endif

inline int window_start(__global const T* u, const int slot, const int i, const int n, const int o, const int k,
                        const T alpha) {
  if (slot < 0) return 0;
  if (i == o - 1) return n - k;
  const T sample = u[slot];
  return (int)(((T)i + sample) * alpha) - (int)(sample * alpha);
}

__kernel void fractional_max_forward(__global const T* x, const int x_off, __global const T* samples,
                                     const int samples_off, __global T* y, const int y_off, __global long* idx,
                                     const int idx_off, const int D, const int H, const int W, const int OD,
                                     const int OH, const int OW, const int KD, const int KH, const int KW,
                                     const T alpha_d, const T alpha_h, const T alpha_w, const int NS,
                                     const int slot_d, const int slot_h, const int slot_w, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  __global const T* u = samples + samples_off + p * NS;
  const int d0 = window_start(u, slot_d, od, D, OD, KD, alpha_d);
  const int h0 = window_start(u, slot_h, oh, H, OH, KH, alpha_h);
  const int w0 = window_start(u, slot_w, ow, W, OW, KW, alpha_w);
  __global const T* plane = x + x_off + (size_t)p * D * H * W;
  T best = -INFINITY;
  int best_at = (d0 * H + h0) * W + w0;
  for (int d = d0; d < d0 + KD; ++d) {
    for (int h = h0; h < h0 + KH; ++h) {
      for (int w = w0; w < w0 + KW; ++w) {
        const int at = (d * H + h) * W + w;
        const T v = plane[at];
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
