// Softmax, log-softmax and the negative log-likelihood loss of the opencl device.
// Contiguous; tensor arguments are a buffer and an offset in elements. The NLL loss is
// float32; softmax reads x (dy, y) of type -DT= and writes y (dx) of type -DTY= (dtypes.h
// names, float by default), computing in float32: float16 and bfloat16 are read directly.
//
// Softmax over dimension d of x viewed as (outer, D, inner): row (o, k) holds the D
// elements x[(o·D + j)·inner + k], j < D. One work-group of GROUP work-items per row.
//   softmax_forward    y = exp(x - max) / Σ exp(x - max), or with -DLOG x - max - log Σ.
//   softmax_backward   softmax: dx = y·(dy - Σ dy·y); log-softmax (-DLOG): dx = dy - exp(y)·Σ dy.
// NLL loss: x is (N, C) log-probabilities (N = 1 for a 1-D input), target (N) int64.
//   nll_forward        one work-group: Σ_i -w[t_i]·x[i, t_i] and Σ_i w[t_i] over samples whose
//                      target is not ignore_index; reduction 0 (none) writes per-sample losses.
//   nll_backward       one work-item per sample: dx[i, t_i] = -w[t_i]·g (dx zeroed before), g the
//                      incoming gradient (per sample, or scalar / total weight for the mean).

#include "dtypes.h"

#ifndef GROUP
#define GROUP 256
#endif
#ifndef T
#define T float
#endif
#ifndef TY
#define TY T
#endif

#define BUF(name) __global float *restrict name, const int name##_off
#define CBUF(name) __global const float *restrict name, const int name##_off
#define TBUF(type, name) __global type *restrict name, const int name##_off
#define CTBUF(type, name) __global const type *restrict name, const int name##_off

inline float group_reduce(float value, __local float* scratch, const int is_max) {
  const int lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = GROUP / 2; step > 0; step /= 2) {
    if (lid < step) {
      scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + step]) : scratch[lid] + scratch[lid + step];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void softmax_forward(CTBUF(T, x), TBUF(TY, y), const int D, const int inner) {
  __local float scratch[GROUP];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const int o = row / inner, k = row - o * inner;
  const size_t base = (size_t)o * D * inner + k;
  float m = -INFINITY;
  for (int j = lid; j < D; j += GROUP) m = fmax(m, (float)READ(T, x, x_off + base + (size_t)j * inner));
  m = group_reduce(m, scratch, 1);
  float s = 0.0f;
  for (int j = lid; j < D; j += GROUP) s += exp((float)READ(T, x, x_off + base + (size_t)j * inner) - m);
  s = group_reduce(s, scratch, 0);
#ifdef LOG
  const float shift = m + log(s);
  for (int j = lid; j < D; j += GROUP) {
    WRITE(TY, y, y_off + base + (size_t)j * inner, (float)READ(T, x, x_off + base + (size_t)j * inner) - shift);
  }
#else
  const float scale = 1.0f / s;
  for (int j = lid; j < D; j += GROUP) {
    WRITE(TY, y, y_off + base + (size_t)j * inner, exp((float)READ(T, x, x_off + base + (size_t)j * inner) - m) * scale);
  }
#endif
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void softmax_backward(CTBUF(T, dy), CTBUF(T, y), TBUF(TY, dx), const int D, const int inner) {
  __local float scratch[GROUP];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const int o = row / inner, k = row - o * inner;
  const size_t base = (size_t)o * D * inner + k;
  float s = 0.0f;
  for (int j = lid; j < D; j += GROUP) {
    const size_t at = base + (size_t)j * inner;
#ifdef LOG
    s += (float)READ(T, dy, dy_off + at);
#else
    s += (float)READ(T, dy, dy_off + at) * (float)READ(T, y, y_off + at);
#endif
  }
  s = group_reduce(s, scratch, 0);
  for (int j = lid; j < D; j += GROUP) {
    const size_t at = base + (size_t)j * inner;
#ifdef LOG
    WRITE(TY, dx, dx_off + at, (float)READ(T, dy, dy_off + at) - exp((float)READ(T, y, y_off + at)) * s);
#else
    WRITE(TY, dx, dx_off + at, (float)READ(T, y, y_off + at) * ((float)READ(T, dy, dy_off + at) - s));
#endif
  }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void nll_forward(CBUF(x), __global const long* target, const int target_off, CBUF(w), BUF(out), BUF(total),
                 const int has_w, const int reduction, const int ignore_index, const int N, const int C) {
  __local float scratch[GROUP];
  const int lid = get_local_id(0);
  float loss = 0.0f, weight = 0.0f;
  for (int i = lid; i < N; i += GROUP) {
    const long t = target[target_off + i];
    float li = 0.0f;
    if (t != ignore_index && t >= 0 && t < C) {
      const float wt = has_w ? w[w_off + t] : 1.0f;
      li = -wt * x[x_off + (size_t)i * C + t];
      weight += wt;
    }
    loss += li;
    if (reduction == 0) out[out_off + i] = li;
  }
  loss = group_reduce(loss, scratch, 0);
  weight = group_reduce(weight, scratch, 0);
  if (lid == 0) {
    if (reduction == 1) out[out_off] = loss / weight;
    if (reduction == 2) out[out_off] = loss;
    total[total_off] = weight;
  }
}

__kernel void nll_backward(CBUF(grad), __global const long* target, const int target_off, CBUF(w), CBUF(total),
                           BUF(dx), const int has_w, const int reduction, const int ignore_index, const int N,
                           const int C) {
  const int i = get_global_id(0);
  if (i >= N) return;
  const long t = target[target_off + i];
  if (t == ignore_index || t < 0 || t >= C) return;
  const float wt = has_w ? w[w_off + t] : 1.0f;
  float g = reduction == 0 ? grad[grad_off + i] : grad[grad_off];
  if (reduction == 1) g /= total[total_off];
  dx[dx_off + (size_t)i * C + t] = -wt * g;
}
