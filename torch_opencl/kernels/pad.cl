// Reflection and replication padding of the opencl device, forward and backward. 1-D, 2-D
// and 3-D inputs are planes x (P, D, H, W), contiguous (P = batch·channels; D = H = 1 for
// fewer dimensions); the output y is (P, OD, OH, OW) with OD = D + before_d + after_d and
// so on (a negative padding crops). Tensor arguments are a buffer and an offset in elements.
//
// Along an axis of n inputs, output position o holds input position src(o - before):
//   -DREFLECT    src(j) = -j for j < 0, 2(n-1) - j for j > n-1, else j (|padding| < n: the host
//                checks it, so one reflection suffices)
//   -DREPLICATE  src(j) = clamp(j, 0, n-1)
//
// pad_forward   one work-item per output element: y[p, od, oh, ow] = x[p, src_d, src_h, src_w].
//               -DT= any element type (moved as its bits).
// pad_backward  one work-item per input element (p, d, h, w): dx = the sum of dy over the
//               output positions whose source it is, axis by axis, in a fixed order (no
//               atomics). Along an axis those positions o (inside [0, out)) are
//                 REFLECT    before - i (i > 0); i + before; before + 2(n-1) - i (i < n-1)
//                 REPLICATE  i + before, and every o <= before for i = 0, every
//                            o >= n-1 + before for i = n-1 (a range)
//               -DT= float or double.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it

inline int src(const int o, const int n, const int before) {
  const int j = o - before;
#ifdef REFLECT
  return j < 0 ? -j : j > n - 1 ? 2 * (n - 1) - j : j;
#else
  return j < 0 ? 0 : j > n - 1 ? n - 1 : j;
#endif
}

#define SHAPE                                                                                            \
  const int D, const int H, const int W, const int OD, const int OH, const int OW, const int bd, const int bh, \
      const int bw, const int total

__kernel void pad_forward(__global const T* x, const int x_off, __global T* y, const int y_off, SHAPE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD, p = i / (OW * OH * OD);
  const int at = ((p * D + src(od, D, bd)) * H + src(oh, H, bh)) * W + src(ow, W, bw);
  y[y_off + i] = x[x_off + at];
}

// The ranges [lo[k], hi[k]] of output positions along one axis whose source is input i;
// returns how many (at most 3).
inline int targets(const int i, const int n, const int before, const int out, int* lo, int* hi) {
  int count = 0;
#ifdef REFLECT
  // In increasing order, so the sums add in the output's order, as torch's CPU kernel does.
  const int cand[3] = {i > 0 ? before - i : -1, i + before, i < n - 1 ? before + 2 * (n - 1) - i : -1};
  for (int k = 0; k < 3; ++k) {
    if (cand[k] < 0 || cand[k] >= out) continue;
    lo[count] = cand[k];
    hi[count] = cand[k];
    ++count;
  }
#else
  const int a = max(i == 0 ? 0 : i + before, 0);
  const int b = min(i == n - 1 ? out - 1 : i + before, out - 1);
  if (a <= b) {
    lo[0] = a;
    hi[0] = b;
    count = 1;
  }
#endif
  return count;
}

__kernel void pad_backward(__global const T* dy, const int dy_off, __global T* dx, const int dx_off, SHAPE) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int w = i % W, h = (i / W) % H, d = (i / (W * H)) % D, p = i / (W * H * D);
  int dlo[3], dhi[3], hlo[3], hhi[3], wlo[3], whi[3];
  const int nd = targets(d, D, bd, OD, dlo, dhi);
  const int nh = targets(h, H, bh, OH, hlo, hhi);
  const int nw = targets(w, W, bw, OW, wlo, whi);
  __global const T* plane = dy + dy_off + (size_t)p * OD * OH * OW;
  T sum = 0;
  for (int a = 0; a < nd; ++a) {
    for (int od = dlo[a]; od <= dhi[a]; ++od) {
      for (int b = 0; b < nh; ++b) {
        for (int oh = hlo[b]; oh <= hhi[b]; ++oh) {
          for (int c = 0; c < nw; ++c) {
            for (int ow = wlo[c]; ow <= whi[c]; ++ow) sum += plane[(od * OH + oh) * OW + ow];
          }
        }
      }
    }
  }
  dx[dx_off + i] = sum;
}
