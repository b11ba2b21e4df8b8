// Batch norm and layer norm of the opencl device, forward and backward. float32,
// contiguous tensors; every tensor argument is a buffer and an offset in elements.
//
// Batch norm: x and y are (N, C, HW) (HW = H·W, 1 for 2-D inputs); statistics per
// channel c over the n = N·HW values of that channel.
//   bn_stats          one work-group per channel: mean and 1/sqrt(var + eps) (biased var,
//                     two passes over the channel), and the running statistics updated
//                     (running_var with the unbiased variance) when has_running.
//   bn_stats_part     with channels too few for the device's compute units: NDRange
//                     (GROUP·S, C), work-group (s, c) takes slice s of channel c's n values
//                     (slices of ceil(n / S)) and writes their mean and sum of squared
//                     deviations to part (C, S, 2);
//   bn_stats_combine  then one work-item per channel joins its S slices (Chan et al.'s
//                     pairwise formula: no sum of squares of large values) and finishes as
//                     bn_stats does.
//   bn_apply          NDRange (ceil(HW / CHUNK), N·C): work-item (q, p) computes pixels
//                     q·CHUNK .. q·CHUNK+CHUNK-1 of plane p (channel
//                     c = p mod C; the planes' rows are contiguous): y = (x - mean[c]) · invstd[c] · w[c] + b[c];
//                     with use_var, invstd[c] holds a variance and 1/sqrt(var + eps) is taken
//                     (eval mode on the running statistics).
//                     x and y of -DT=, mean and invstd of -DTS=, w and b of -DTW= (float by
//                     default; 16-bit eval-mode batch norm reads them directly).
//   bn_apply4         (GPUs) the same over the flat tensor, work-item i computing elements
//                     4i .. 4i+3 as one float4: for HW % 4 == 0 and offsets that are
//                     multiples of 4 (so the four are in one plane and 16-byte aligned).
//   bn_backward_reduce  one work-group per channel: db[c] = Σ dy, dw[c] = Σ dy · x̂, x̂ = (x - mean)·invstd;
//                     bn_backward_part and bn_backward_combine split it as bn_stats_part does.
//   bn_backward_input   NDRange as bn_apply: training: dx = w·invstd/n · (n·dy - Σdy - x̂·Σdy·x̂);
//                     eval: dx = dy · w · invstd.
//   bn_backward_input4  (GPUs) the same over float4s, as bn_apply4.
// The channel reductions walk their values with a step of GROUP (ChannelWalk: no division
// per value).
// Layer norm: x and y are (M, D), each row normalised on its own.
//   ln_forward        one work-group per row: mean, rstd = 1/sqrt(var + eps), y = x̂·w + b;
//                     x and y of type -DT=, w and b of -DTW= (dtypes.h names, float by
//                     default: float16 and bfloat16 read directly), mean, rstd and the
//                     arithmetic float32.
//   ln_backward_input one work-group per row: g = dy·w, dx = rstd·(g - mean(g) - x̂·mean(g·x̂)).
//   ln_backward_params one work-item per column j: dw[j] = Σ_rows dy·x̂, db[j] = Σ_rows dy.
// Work-groups have GROUP work-items (build option), reducing through local memory.

#include "dtypes.h"

#ifndef GROUP
#define GROUP 256
#endif
#ifndef T
#define T float
#endif
#ifndef TW
#define TW T
#endif
#ifndef TS
#define TS float  // bn_apply's mean and invstd (its running statistics in eval mode)
#endif
#ifndef CHUNK
#define CHUNK 1  // pixels per work-item in bn_apply and bn_backward_input (16 on CPUs)
#endif

#define BUF(name) __global float *restrict name, const int name##_off
#define CBUF(name) __global const float *restrict name, const int name##_off
#define TBUF(type, name) __global type *restrict name, const int name##_off
#define CTBUF(type, name) __global const type *restrict name, const int name##_off

// Sum of `value` over the work-group; every work-item gets the result.
inline float group_sum(float value, __local float* scratch) {
  const int lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = GROUP / 2; step > 0; step /= 2) {
    if (lid < step) scratch[lid] += scratch[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

// Element i of channel c's n = N·HW values: image i / HW, pixel i % HW.
#define CHANNEL_AT(i) ((((i) / HW) * C + c) * HW + (i) % HW)

// A work-item's walk over channel c's values i, i + GROUP, i + 2·GROUP, ...: the address of
// each from the last one's without dividing (a step of GROUP values is GROUP / HW images
// and GROUP % HW pixels, with one carry into the next image).
typedef struct {
  size_t at;     // the element's index in x
  int pixel;     // its pixel in the image
  size_t jump;   // a step's index change without a carry
  size_t carry;  // what a carry adds: the rest of the image's channels
  int pixels;    // a step's pixels
} ChannelWalk;

inline ChannelWalk walk_from(const int i, const int c, const int C, const int HW) {
  ChannelWalk w = {0, 0, 0, 0, 0};
  if (HW <= 0) return w;  // no values to walk
  w.at = CHANNEL_AT((size_t)i);
  w.pixel = i % HW;
  w.pixels = GROUP % HW;
  w.jump = (size_t)(GROUP / HW) * C * HW + w.pixels;
  w.carry = (size_t)(C - 1) * HW;
  return w;
}

inline void walk_step(ChannelWalk* w, const int HW) {
  w->at += w->jump;
  w->pixel += w->pixels;
  if (w->pixel >= HW) {
    w->pixel -= HW;
    w->at += w->carry;
  }
}

// Channel c's statistics from its mean m and biased variance var over n values.
inline void bn_finish(BUF(mean), BUF(invstd), BUF(run_mean), BUF(run_var), const int has_running, const int c,
                      const int n, const float m, const float var, const float eps, const float momentum) {
  mean[mean_off + c] = m;
  invstd[invstd_off + c] = rsqrt(var + eps);
  if (has_running) {
    const float unbiased = n > 1 ? var * n / (n - 1) : var;
    run_mean[run_mean_off + c] = (1.0f - momentum) * run_mean[run_mean_off + c] + momentum * m;
    run_var[run_var_off + c] = (1.0f - momentum) * run_var[run_var_off + c] + momentum * unbiased;
  }
}

// The mean of x's values i0 .. i1-1 of channel c, and their sum of squared deviations from it.
inline float2 slice_moments(__global const float* x, const int c, const int C, const int HW, const int i0,
                            const int i1, __local float* scratch) {
  const int first = i0 + get_local_id(0);
  float s = 0.0f;
  ChannelWalk w = walk_from(first, c, C, HW);
  for (int i = first; i < i1; i += GROUP, walk_step(&w, HW)) s += x[w.at];
  const float m = group_sum(s, scratch) / max(i1 - i0, 1);  // 0 for an empty slice
  float q = 0.0f;
  w = walk_from(first, c, C, HW);
  for (int i = first; i < i1; i += GROUP, walk_step(&w, HW)) {
    const float d = x[w.at] - m;
    q += d * d;
  }
  return (float2)(m, group_sum(q, scratch));
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void bn_stats(CBUF(x), BUF(mean), BUF(invstd), BUF(run_mean), BUF(run_var), const int has_running, const int N,
              const int C, const int HW, const float eps, const float momentum) {
  __local float scratch[GROUP];
  const int c = get_group_id(0);
  const int n = N * HW;
  const float2 mq = slice_moments(x + x_off, c, C, HW, 0, n, scratch);
  if (get_local_id(0) == 0)
    bn_finish(mean, mean_off, invstd, invstd_off, run_mean, run_mean_off, run_var, run_var_off, has_running, c, n,
              mq.x, mq.y / n, eps, momentum);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void bn_stats_part(CBUF(x), BUF(part), const int N, const int C, const int HW, const int S) {
  __local float scratch[GROUP];
  const int s = get_group_id(0), c = get_group_id(1);
  const int n = N * HW, len = (n + S - 1) / S;
  const int i0 = min(n, s * len), i1 = min(n, i0 + len);
  const float2 mq = slice_moments(x + x_off, c, C, HW, i0, i1, scratch);
  if (get_local_id(0) == 0) vstore2(mq, c * S + s, part + part_off);
}

__kernel void bn_stats_combine(CBUF(part), BUF(mean), BUF(invstd), BUF(run_mean),
                               BUF(run_var), const int has_running, const int N, const int C, const int HW,
                               const int S, const float eps, const float momentum) {
  const int c = get_global_id(0);
  if (c >= C) return;
  const int n = N * HW, len = (n + S - 1) / S;
  // Slices joined one by one: mean and sum of squared deviations of the values so far.
  float m = 0.0f, q = 0.0f;
  int count = 0;
  for (int s = 0; s < S; ++s) {
    const int k = min(n, (s + 1) * len) - min(n, s * len);
    if (k <= 0) continue;
    const float2 mq = vload2(c * S + s, part + part_off);
    const float d = mq.x - m;
    const int joined = count + k;
    m += d * k / joined;
    q += mq.y + d * d * ((float)count * k / joined);
    count = joined;
  }
  bn_finish(mean, mean_off, invstd, invstd_off, run_mean, run_mean_off, run_var, run_var_off, has_running, c, n, m,
            q / n, eps, momentum);
}

// Channel c's y = x · scale + shift of bn_apply.
// x and y of type T, mean and invstd of TS, w and b of TW (float unless built otherwise: the
// 16-bit eval-mode batch norm of 16-bit models reads them directly).
inline float2 bn_affine(__global const TS* mean, __global const TS* invstd, __global const TW* w,
                        __global const TW* b, const int has_w, const int has_b, const int use_var,
                        const float eps, const int c) {
  const float is = use_var ? rsqrt(READ(TS, invstd, c) + eps) : READ(TS, invstd, c);
  const float scale = has_w ? READ(TW, w, c) * is : is;
  return (float2)(scale, (has_b ? READ(TW, b, c) : 0.0f) - READ(TS, mean, c) * scale);
}

__kernel void bn_apply(CTBUF(T, x), TBUF(T, y), CTBUF(TS, mean), CTBUF(TS, invstd), CTBUF(TW, w), CTBUF(TW, b),
                       const int has_w, const int has_b, const int use_var, const int C, const int HW,
                       const float eps) {
  const int j0 = get_global_id(0) * CHUNK;
  const int p = get_global_id(1);
  if (j0 >= HW) return;
  const float2 ab = bn_affine(mean + mean_off, invstd + invstd_off, w + w_off, b + b_off, has_w, has_b, use_var,
                              eps, p % C);
  __global const T* xr = x + x_off + (size_t)p * HW;
  __global T* yr = y + y_off + (size_t)p * HW;
  const int end = min(CHUNK, HW - j0);
  for (int k = 0; k < end; ++k) WRITE(T, yr, j0 + k, fma(READ(T, xr, j0 + k), ab.x, ab.y));
}

__kernel void bn_apply4(CTBUF(T, x), TBUF(T, y), CTBUF(TS, mean), CTBUF(TS, invstd), CTBUF(TW, w), CTBUF(TW, b),
                        const int has_w, const int has_b, const int use_var, const int C, const int HW,
                        const float eps, const int n4) {
  const int i = get_global_id(0);
  if (i >= n4) return;
  const float2 ab = bn_affine(mean + mean_off, invstd + invstd_off, w + w_off, b + b_off, has_w, has_b, use_var,
                              eps, (i * 4 / HW) % C);
  WRITE4(T, y + y_off, i, fma(READ4(T, x + x_off, i), (float4)(ab.x), (float4)(ab.y)));
}

// Σ dy and Σ dy·x̂ over values i0 .. i1-1 of channel c.
inline float2 slice_grad_sums(CBUF(dy), CBUF(x), CBUF(mean), CBUF(invstd), const int use_var, const int C,
                              const int HW, const float eps, const int c, const int i0, const int i1,
                              __local float* scratch) {
  const float m = mean[mean_off + c];
  const float is = use_var ? rsqrt(invstd[invstd_off + c] + eps) : invstd[invstd_off + c];
  float s = 0.0f, t = 0.0f;
  const int first = i0 + get_local_id(0);
  ChannelWalk w = walk_from(first, c, C, HW);
  for (int i = first; i < i1; i += GROUP, walk_step(&w, HW)) {
    const float g = dy[dy_off + w.at];
    s += g;
    t += g * (x[x_off + w.at] - m) * is;
  }
  s = group_sum(s, scratch);
  return (float2)(s, group_sum(t, scratch));
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void bn_backward_reduce(CBUF(dy), CBUF(x), CBUF(mean), CBUF(invstd), BUF(sum_dy), BUF(sum_dy_xhat),
                        const int use_var, const int N, const int C, const int HW, const float eps) {
  __local float scratch[GROUP];
  const int c = get_group_id(0);
  const float2 st = slice_grad_sums(dy, dy_off, x, x_off, mean, mean_off, invstd, invstd_off, use_var, C, HW, eps, c,
                                    0, N * HW, scratch);
  if (get_local_id(0) == 0) {
    sum_dy[sum_dy_off + c] = st.x;
    sum_dy_xhat[sum_dy_xhat_off + c] = st.y;
  }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void bn_backward_part(CBUF(dy), CBUF(x), CBUF(mean), CBUF(invstd), BUF(part), const int use_var,
                      const int N, const int C, const int HW, const int S, const float eps) {
  __local float scratch[GROUP];
  const int s = get_group_id(0), c = get_group_id(1);
  const int n = N * HW, len = (n + S - 1) / S;
  const int i0 = min(n, s * len), i1 = min(n, i0 + len);
  const float2 st = slice_grad_sums(dy, dy_off, x, x_off, mean, mean_off, invstd, invstd_off, use_var, C, HW, eps, c,
                                    i0, i1, scratch);
  if (get_local_id(0) == 0) vstore2(st, c * S + s, part + part_off);
}

__kernel void bn_backward_combine(CBUF(part), BUF(sum_dy), BUF(sum_dy_xhat), const int C,
                                  const int S) {
  const int c = get_global_id(0);
  if (c >= C) return;
  float2 st = (float2)(0.0f);
  for (int s = 0; s < S; ++s) st += vload2(c * S + s, part + part_off);
  sum_dy[sum_dy_off + c] = st.x;
  sum_dy_xhat[sum_dy_xhat_off + c] = st.y;
}

// Channel c's dx = scale·dy - a - b·(x - mean) of bn_backward_input: (scale, a, b, mean).
inline float4 bn_input_terms(__global const float* mean, __global const float* invstd, __global const float* w,
                             __global const float* sum_dy, __global const float* sum_dy_xhat, const int has_w,
                             const int training, const int use_var, const float n, const float eps, const int c) {
  const float is = use_var ? rsqrt(invstd[c] + eps) : invstd[c];
  const float scale = (has_w ? w[c] : 1.0f) * is;
  const float a = training ? scale / n * sum_dy[c] : 0.0f;
  const float b = training ? scale / n * sum_dy_xhat[c] * is : 0.0f;
  return (float4)(scale, a, b, mean[c]);
}

#define BN_INPUT_TERMS(c)                                                                                      \
  bn_input_terms(mean + mean_off, invstd + invstd_off, w + w_off, sum_dy + sum_dy_off,                        \
                 sum_dy_xhat + sum_dy_xhat_off, has_w, training, use_var, (float)N * HW, eps, c)

__kernel void bn_backward_input(CBUF(dy), CBUF(x), CBUF(mean), CBUF(invstd), CBUF(w), CBUF(sum_dy),
                                CBUF(sum_dy_xhat), BUF(dx), const int has_w, const int training, const int use_var,
                                const int N, const int C, const int HW, const float eps) {
  const int j0 = get_global_id(0) * CHUNK;
  const int p = get_global_id(1);
  if (j0 >= HW) return;
  const float4 k = BN_INPUT_TERMS(p % C);
  const size_t base = (size_t)p * HW;
  const int end = min(CHUNK, HW - j0);
  // training: dx = scale·dy - a - b·(x - mean); eval: dx = scale·dy.
  for (int j = 0; j < end; ++j) {
    const size_t i = base + j0 + j;
    dx[dx_off + i] = k.x * dy[dy_off + i] - k.y - k.z * (x[x_off + i] - k.w);
  }
}

__kernel void bn_backward_input4(CBUF(dy), CBUF(x), CBUF(mean), CBUF(invstd), CBUF(w), CBUF(sum_dy),
                                 CBUF(sum_dy_xhat), BUF(dx), const int has_w, const int training,
                                 const int use_var, const int N, const int C, const int HW, const float eps,
                                 const int n4) {
  const int i = get_global_id(0);
  if (i >= n4) return;
  const float4 k = BN_INPUT_TERMS((i * 4 / HW) % C);
  const float4 g = ((__global const float4*)(dy + dy_off))[i];
  const float4 v = ((__global const float4*)(x + x_off))[i];
  ((__global float4*)(dx + dx_off))[i] = k.x * g - k.y - k.z * (v - k.w);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void ln_forward(CTBUF(T, x), TBUF(T, y), CTBUF(TW, w), CTBUF(TW, b), BUF(mean), BUF(rstd), const int has_w,
                const int has_b, const int D, const float eps) {
  __local float scratch[GROUP];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const size_t xr = x_off + (size_t)row * D, yr = y_off + (size_t)row * D;  // the row's first elements
  float s = 0.0f;
  for (int j = lid; j < D; j += GROUP) s += (float)READ(T, x, xr + j);
  const float m = group_sum(s, scratch) / D;
  float q = 0.0f;
  for (int j = lid; j < D; j += GROUP) {
    const float d = (float)READ(T, x, xr + j) - m;
    q += d * d;
  }
  const float r = rsqrt(group_sum(q, scratch) / D + eps);
  for (int j = lid; j < D; j += GROUP) {
    float v = ((float)READ(T, x, xr + j) - m) * r;
    if (has_w) v *= (float)READ(TW, w, w_off + j);
    if (has_b) v += (float)READ(TW, b, b_off + j);
    WRITE(T, y, yr + j, v);
  }
  if (lid == 0) {
    mean[mean_off + row] = m;
    rstd[rstd_off + row] = r;
  }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void ln_backward_input(CBUF(dy), CBUF(x), CBUF(mean), CBUF(rstd), CBUF(w), BUF(dx), const int has_w, const int D) {
  __local float scratch[GROUP];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const size_t base = (size_t)row * D;
  const float m = mean[mean_off + row], r = rstd[rstd_off + row];
  float s = 0.0f, t = 0.0f;
  for (int j = lid; j < D; j += GROUP) {
    const float g = dy[dy_off + base + j] * (has_w ? w[w_off + j] : 1.0f);
    s += g;
    t += g * (x[x_off + base + j] - m) * r;
  }
  const float mean_g = group_sum(s, scratch) / D;
  const float mean_gx = group_sum(t, scratch) / D;
  for (int j = lid; j < D; j += GROUP) {
    const float g = dy[dy_off + base + j] * (has_w ? w[w_off + j] : 1.0f);
    const float xhat = (x[x_off + base + j] - m) * r;
    dx[dx_off + base + j] = r * (g - mean_g - xhat * mean_gx);
  }
}

__kernel void ln_backward_params(CBUF(dy), CBUF(x), CBUF(mean), CBUF(rstd), BUF(dw), BUF(db), const int has_dw,
                                 const int has_db, const int M, const int D) {
  const int j = get_global_id(0);
  if (j >= D) return;
  float sw = 0.0f, sb = 0.0f;
  for (int row = 0; row < M; ++row) {
    const size_t at = (size_t)row * D + j;
    const float g = dy[dy_off + at];
    sb += g;
    sw += g * (x[x_off + at] - mean[mean_off + row]) * rstd[rstd_off + row];
  }
  if (has_dw) dw[dw_off + j] = sw;
  if (has_db) db[db_off + j] = sb;
}
