// The CTC loss of the opencl device (Graves et al. 2006), forward and backward, in log space
// as torch's CPU kernel computes it. Tensor arguments are a buffer and an offset in elements;
// -DT= float or double; -DGROUP= the work-group size of ctc_alpha and ctc_beta.
//
// log_probs lp (Tn, N, C) contiguous (Tn time steps, N sequences, C labels); for sequence b:
// input length IL = il[b] <= Tn, target length TL = tl[b], its labels at targets[off[b] + j]
// (int64). The extended target l' has S = 2·TL + 1 positions: l'(s) = blank for even s, else
// label (s-1)/2. A label outside [0, C) (torch does not check them) has log-probability -inf.
// log_alpha and log_beta are (N, Tn, SMAX), SMAX = 2·max(TL) + 1, filled with -inf by the host.
//
// ctc_alpha  one work-group per sequence b, a work-item per position s (s = lid, lid + GROUP,
//            ...), a barrier per time step: alpha[0, s] = lp[0, l'(s)] for s < 2;
//            alpha[t, s] = logsumexp(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2] where
//            l'(s) != l'(s-2)) + lp[t, l'(s)]; nll[b] = -log(alpha[IL-1, S-1] + alpha[IL-1, S-2])
//            (-alpha[IL-1, 0] for TL = 0; 0 or inf for IL = 0).
// ctc_beta   the same backwards in time from beta[IL-1, S-1], beta[IL-1, S-2].
// ctc_grad   one work-item per (t, b): grad[t, b, c] = (exp(lp) - exp(log Σ_{s: l'(s) = c}
//            alpha·beta + nll - lp))·go[b] for t < IL, else 0 (and 0 throughout where
//            zero_infinity and nll[b] is infinite). The sums add s from S-1 down to 0, as
//            the CPU does.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it
#ifndef T
#define T float
#endif
#ifndef GROUP
#define GROUP 64
#endif

#define IN(type, name) __global const type *restrict name, const int name##_off
#define OUT(type, name) __global type *restrict name, const int name##_off
#define SEQUENCES                                                                                              \
  IN(T, lp), IN(long, targets), IN(long, off), IN(long, il), IN(long, tl), const int Tn, const int N, const int C, \
      const int SMAX, const int blank

// l'(s) of sequence b (a label index, possibly out of range).
inline long label(__global const long* targets, const int base, const int s, const int blank) {
  return (s % 2 == 0) ? blank : targets[base + s / 2];
}

// lp[t, b, c], or -inf for a label outside [0, C).
inline T logp(__global const T* lp, const int lp_off, const int t, const int b, const long c, const int N,
              const int C) {
  if (c < 0 || c >= C) return -INFINITY;
  return lp[lp_off + ((size_t)t * N + b) * C + (int)c];
}

// log(exp(a) + exp(b) + exp(c)), as the CPU kernel forms it.
inline T log_add3(const T a, const T b, const T c) {
  T m = max(a, max(b, c));
  if (m == -INFINITY) m = 0;
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void ctc_alpha(SEQUENCES, OUT(T, alpha), OUT(T, nll)) {
  const int b = get_group_id(0), lid = get_local_id(0);
  const int IL = (int)il[il_off + b], TL = (int)tl[tl_off + b], base = targets_off + (int)off[off_off + b];
  const int S = 2 * TL + 1;
  __global T* a = alpha + alpha_off + (size_t)b * Tn * SMAX;
  if (IL == 0) {
    if (lid == 0) nll[nll_off + b] = TL == 0 ? (T)0 : (T)INFINITY;
    return;
  }
  for (int s = lid; s < S && s < 2; s += GROUP) a[s] = logp(lp, lp_off, 0, b, label(targets, base, s, blank), N, C);
  barrier(CLK_GLOBAL_MEM_FENCE);
  for (int t = 1; t < IL; ++t) {
    __global const T* prev = a + (t - 1) * SMAX;
    for (int s = lid; s < S; s += GROUP) {
      const long l = label(targets, base, s, blank);
      const T a1 = prev[s];
      const T a2 = s > 0 ? prev[s - 1] : -INFINITY;
      const T a3 = s > 1 && label(targets, base, s - 2, blank) != l ? prev[s - 2] : -INFINITY;
      a[t * SMAX + s] = log_add3(a1, a2, a3) + logp(lp, lp_off, t, b, l, N, C);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  if (lid == 0) {
    __global const T* last = a + (IL - 1) * SMAX;
    if (TL == 0) {
      nll[nll_off + b] = -last[0];
    } else {
      const T l1 = last[2 * TL], l2 = last[2 * TL - 1];
      T m = max(l1, l2);
      if (m == -INFINITY) m = 0;
      nll[nll_off + b] = -(log(exp(l1 - m) + exp(l2 - m)) + m);
    }
  }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void ctc_beta(SEQUENCES, OUT(T, beta)) {
  const int b = get_group_id(0), lid = get_local_id(0);
  const int IL = (int)il[il_off + b], TL = (int)tl[tl_off + b], base = targets_off + (int)off[off_off + b];
  const int S = 2 * TL + 1;
  __global T* be = beta + beta_off + (size_t)b * Tn * SMAX;
  if (IL == 0) return;
  for (int s = lid; s < S; s += GROUP) {
    if (s >= S - 2) be[(IL - 1) * SMAX + s] = logp(lp, lp_off, IL - 1, b, label(targets, base, s, blank), N, C);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  for (int t = IL - 2; t >= 0; --t) {
    __global const T* next = be + (t + 1) * SMAX;
    for (int s = lid; s < S; s += GROUP) {
      const long l = label(targets, base, s, blank);
      const T b1 = next[s];
      const T b2 = s < S - 1 ? next[s + 1] : -INFINITY;
      const T b3 = s < S - 2 && label(targets, base, s + 2, blank) != l ? next[s + 2] : -INFINITY;
      be[t * SMAX + s] = log_add3(b1, b2, b3) + logp(lp, lp_off, t, b, l, N, C);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
}

__kernel void ctc_grad(SEQUENCES, IN(T, alpha), IN(T, beta), IN(T, nll), IN(T, go), OUT(T, grad),
                       const int zero_infinity) {
  const int i = get_global_id(0);
  if (i >= Tn * N) return;
  const int t = i / N, b = i % N;
  __global T* row = grad + grad_off + (size_t)i * C;
  const int IL = (int)il[il_off + b], TL = (int)tl[tl_off + b], base = targets_off + (int)off[off_off + b];
  const T loss = nll[nll_off + b];
  if (t >= IL || (zero_infinity && loss == INFINITY)) {
    for (int c = 0; c < C; ++c) row[c] = 0;
    return;
  }
  for (int c = 0; c < C; ++c) row[c] = -INFINITY;
  const size_t at = ((size_t)b * Tn + t) * SMAX;
  for (int s = 2 * TL; s >= 0; --s) {
    const long l = label(targets, base, s, blank);
    if (l < 0 || l >= C) continue;
    const T ab = alpha[alpha_off + at + s] + beta[beta_off + at + s];
    const T acc = row[l];
    if (acc == -INFINITY) {
      row[l] = ab;
    } else {
      const T m = max(acc, ab);
      row[l] = log(exp(acc - m) + exp(ab - m)) + m;
    }
  }
  const T g = go[go_off + b];
  for (int c = 0; c < C; ++c) {
    const T p = lp[lp_off + (size_t)i * C + c];
    row[c] = (exp(p) - exp(row[c] + loss - p)) * g;
  }
}
