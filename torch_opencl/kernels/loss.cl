// Margin losses of the opencl device, one work-item per sample n of the input x (N, C),
// contiguous. Tensor arguments are a buffer and an offset in elements; -DT= is the element
// type of x, the weight, the losses and the gradients (float, or double with cl_khr_fp64),
// targets are int64 (checked in range by the host).
//
// multi_margin_forward    loss[n] = Σ_{i≠y} w[y]·h(margin - x[n,y] + x[n,i]) / C, y = target[n],
//                         h(z) = z (p = 1) or z² (p = 2) where z > 0, else 0; w = 1 without weight
// multi_margin_backward   dx[n,i] = go·w[y]·scale·(p = 1 ? 1 : 2z) for i ≠ y where z > 0 (else 0),
//                         dx[n,y] = -Σ_{i≠y} dx[n,i]; scale = 1/C, or 1/(N·C) for a mean
// multilabel_margin_forward    target[n] lists the row's classes, ended by the first -1;
//                         is_target[n,i] = 1 for a listed class, else 0;
//                         loss[n] = Σ_{listed y} Σ_{i not listed} max(0, 1 - x[n,y] + x[n,i]) / C
// multilabel_margin_backward   each term with z > 0 adds scale to dx[n,i], takes it from
//                         dx[n,y]; then dx[n,:] times go
// go: the gradient of the loss, one per sample (go_per_row) or one for all.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it
#ifndef T
#define T float
#endif

#define IN(name) __global const T *restrict name, const int name##_off
#define OUT(name) __global T *restrict name, const int name##_off
#define TARGET __global const long *restrict target, const int target_off

__kernel void multi_margin_forward(IN(x), TARGET, IN(w), const int has_w, OUT(loss), const int p, const T margin,
                                   const int N, const int C) {
  const int n = get_global_id(0);
  if (n >= N) return;
  const int row = x_off + n * C;
  const int y = clamp((int)target[target_off + n], 0, C - 1);  // checked apart (index_check.cl)
  const T xy = x[row + y];
  const T wy = has_w ? w[w_off + y] : (T)1;
  T sum = 0;
  for (int i = 0; i < C; ++i) {
    if (i == y) continue;
    const T z = margin - xy + x[row + i];
    if (z > 0) sum += (p == 1 ? z : z * z) * wy;
  }
  loss[loss_off + n] = sum / C;
}

__kernel void multi_margin_backward(IN(go), const int go_per_row, IN(x), TARGET, IN(w), const int has_w, OUT(dx),
                                    const int p, const T margin, const T scale, const int N, const int C) {
  const int n = get_global_id(0);
  if (n >= N) return;
  const int row = x_off + n * C, out = dx_off + n * C;
  const int y = clamp((int)target[target_off + n], 0, C - 1);  // checked apart (index_check.cl)
  const T xy = x[row + y];
  const T wy = has_w ? w[w_off + y] : (T)1;
  const T g = go_per_row ? go[go_off + n] : go[go_off];
  T grad_y = 0;
  for (int i = 0; i < C; ++i) {
    if (i == y) continue;
    const T z = margin - xy + x[row + i];
    T h = 0;
    if (z > 0) {
      h = (p == 1 ? scale : 2 * scale * z) * wy;
      grad_y -= h;
    }
    dx[out + i] = h * g;
  }
  dx[out + y] = grad_y * g;
}

__kernel void multilabel_margin_forward(IN(x), TARGET, OUT(is_target), OUT(loss), const int N, const int C) {
  const int n = get_global_id(0);
  if (n >= N) return;
  const int row = n * C;
  __global T* listed = is_target + is_target_off + row;
  for (int i = 0; i < C; ++i) listed[i] = 0;
  for (int j = 0; j < C; ++j) {
    const long y = target[target_off + row + j];
    if (y < 0) break;
    if (y >= C) continue;  // out of range: checked apart (index_check.cl)
    listed[y] = 1;
  }
  T sum = 0;
  for (int j = 0; j < C; ++j) {
    const long y = target[target_off + row + j];
    if (y < 0) break;
    if (y >= C) continue;  // out of range: checked apart (index_check.cl)
    const T xy = x[x_off + row + y];
    for (int i = 0; i < C; ++i) {
      if (listed[i] != 0) continue;
      const T z = 1 - xy + x[x_off + row + i];
      if (z > 0) sum += z;
    }
  }
  loss[loss_off + n] = sum / C;
}

__kernel void multilabel_margin_backward(IN(go), const int go_per_row, IN(x), TARGET, IN(is_target), OUT(dx),
                                         const T scale, const int N, const int C) {
  const int n = get_global_id(0);
  if (n >= N) return;
  const int row = n * C;
  __global T* d = dx + dx_off + row;
  __global const T* listed = is_target + is_target_off + row;
  for (int i = 0; i < C; ++i) d[i] = 0;
  for (int j = 0; j < C; ++j) {
    const long y = target[target_off + row + j];
    if (y < 0) break;
    if (y >= C) continue;  // out of range: checked apart (index_check.cl)
    const T xy = x[x_off + row + y];
    for (int i = 0; i < C; ++i) {
      if (listed[i] != 0) continue;
      const T z = 1 - xy + x[x_off + row + i];
      if (z > 0) {
        d[y] -= scale;
        d[i] += scale;
      }
    }
  }
  const T g = go_per_row ? go[go_off + n] : go[go_off];
  for (int i = 0; i < C; ++i) d[i] *= g;
}
