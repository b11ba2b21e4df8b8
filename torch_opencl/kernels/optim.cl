// The fused optimizer steps of the opencl device (torch.optim's fused=True): Adam, AdamW
// and SGD over up to TENSORS parameters per launch, as torch's fused kernels compute them,
// in float32. Contiguous tensors; every tensor argument is a buffer and an offset in
// elements.
//
// NDRange (items, tensors): row t of work-items updates the parameter in slot t (FOR_EACH
// says which elements each work-item takes). Slots past the launch's count get null buffers and
// n = 0. Per slot: the parameter p, its gradient g, the optimizer's state (Adam: exp_avg m,
// exp_avg_sq v, max_exp_avg_sq w when amsgrad, the step count s, already incremented;
// SGD: the momentum buffer b) and its element count n.
// Shared: lr (a number, or lr_t[0] when lr_t is given), the hyper-parameters, and the
// gradient scaler's scale and found_inf (optional): with found_inf[0] != 0 nothing
// changes; with a scale (SCALED) the gradient is divided by it and stored back unscaled.
// What decides which tensors are written is a build option (SCALED, AMSGRAD, MOMENTUM),
// so the loops have no conditional stores and CPUs vectorise them.

#ifndef TENSORS
#define TENSORS 8
#endif
#ifndef SCALED
#define SCALED 0
#endif
#ifndef AMSGRAD
#define AMSGRAD 0
#endif
#ifndef MOMENTUM
#define MOMENTUM 0
#endif

#include "for_each.h"  // FOR_EACH(i, n): a work-item's elements

#define ADAM_SLOT(k)                                                                                     \
  __global float *p##k, const int p##k##_off, __global float *g##k, const int g##k##_off,              \
      __global float *m##k, const int m##k##_off, __global float *v##k, const int v##k##_off,          \
      __global float *w##k, const int w##k##_off, __global const float *s##k, const int s##k##_off,    \
      const int n##k

#define ADAM_PICK(k)                                                                                     \
  case k:                                                                                                \
    p = p##k + p##k##_off; g = g##k + g##k##_off; m = m##k + m##k##_off; v = v##k + v##k##_off;        \
    w = w##k + w##k##_off; step = n##k ? s##k[s##k##_off] : 0.0f; n = n##k;                             \
    break;

#define SGD_SLOT(k)                                                                                      \
  __global float *p##k, const int p##k##_off, __global float *g##k, const int g##k##_off,              \
      __global float *b##k, const int b##k##_off, const int n##k

#define SGD_PICK(k)                                                                                      \
  case k:                                                                                                \
    p = p##k + p##k##_off; g = g##k + g##k##_off; b = b##k + b##k##_off; n = n##k;                     \
    break;

// The gradient as the update reads it: unscaled (and stored back so) when SCALED.
inline float read_grad(__global float* g, int i, __global const float* scale, int scale_off) {
#if SCALED
  const float grad = g[i] / scale[scale_off];
  g[i] = grad;
  return grad;
#else
  return g[i];
#endif
}

__kernel void adam(ADAM_SLOT(0), ADAM_SLOT(1), ADAM_SLOT(2), ADAM_SLOT(3), ADAM_SLOT(4), ADAM_SLOT(5),
                   ADAM_SLOT(6), ADAM_SLOT(7), const float lr_value, __global const float* lr_t, const int lr_off,
                   const float beta1, const float beta2, const float weight_decay, const float eps,
                   const int maximize, const int decoupled, __global const float* scale,
                   const int scale_off, __global const float* found_inf, const int found_off) {
  if (found_inf && found_inf[found_off] != 0.0f) return;
  __global float *p = 0, *g = 0, *m = 0, *v = 0, *w = 0;
  float step = 0.0f;
  int n = 0;
  switch (get_global_id(1)) {
    ADAM_PICK(0) ADAM_PICK(1) ADAM_PICK(2) ADAM_PICK(3) ADAM_PICK(4) ADAM_PICK(5) ADAM_PICK(6) ADAM_PICK(7)
    default: return;
  }
  if (n == 0) return;
  const float lr = lr_t ? lr_t[lr_off] : lr_value;
  const float bias1 = 1.0f - pow(beta1, step);
  const float bias2_sqrt = sqrt(1.0f - pow(beta2, step));
  const float step_size = lr / bias1;
  FOR_EACH(i, n) {
    float grad = read_grad(g, i, scale, scale_off);
    grad = maximize ? -grad : grad;
    float param = p[i];
    if (weight_decay != 0.0f) {
      if (decoupled) param -= lr * weight_decay * param;
      else grad += weight_decay * param;
    }
    const float mi = m[i] + (1.0f - beta1) * (grad - m[i]);
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
#if AMSGRAD
    const float second = fmax(w[i], vi);
    w[i] = second;
#else
    const float second = vi;
#endif
    p[i] = param - step_size * mi / (sqrt(second) / bias2_sqrt + eps);
  }
}

__kernel void sgd(SGD_SLOT(0), SGD_SLOT(1), SGD_SLOT(2), SGD_SLOT(3), SGD_SLOT(4), SGD_SLOT(5), SGD_SLOT(6),
                  SGD_SLOT(7), const float lr_value, __global const float* lr_t, const int lr_off,
                  const float weight_decay, const float momentum, const float dampening, const int nesterov,
                  const int maximize, const int first_step, __global const float* scale, const int scale_off,
                  __global const float* found_inf, const int found_off) {
  if (found_inf && found_inf[found_off] != 0.0f) return;
  __global float *p = 0, *g = 0, *b = 0;
  int n = 0;
  switch (get_global_id(1)) {
    SGD_PICK(0) SGD_PICK(1) SGD_PICK(2) SGD_PICK(3) SGD_PICK(4) SGD_PICK(5) SGD_PICK(6) SGD_PICK(7)
    default: return;
  }
  if (n == 0) return;
  const float lr = lr_t ? lr_t[lr_off] : lr_value;
  FOR_EACH(i, n) {
    float grad = read_grad(g, i, scale, scale_off);
    grad = maximize ? -grad : grad;
    const float param = p[i];
    if (weight_decay != 0.0f) grad += weight_decay * param;
#if MOMENTUM
    const float buf = first_step ? grad : momentum * b[i] + (1.0f - dampening) * grad;
    b[i] = buf;
    grad = nesterov ? grad + momentum * buf : buf;
#endif
    p[i] = param - lr * grad;
  }
}

// x += value over up to TENSORS tensors (torch._foreach_add_ with a number: the fused
// optimizers' step counts, one 1-element tensor per parameter).
#define ADD_SLOT(k) __global float *x##k, const int x##k##_off, const int n##k
#define ADD_PICK(k)                                                                                      \
  case k:                                                                                                \
    x = x##k + x##k##_off; n = n##k;                                                                     \
    break;

__kernel void foreach_add(ADD_SLOT(0), ADD_SLOT(1), ADD_SLOT(2), ADD_SLOT(3), ADD_SLOT(4), ADD_SLOT(5),
                          ADD_SLOT(6), ADD_SLOT(7), const float value) {
  __global float* x = 0;
  int n = 0;
  switch (get_global_id(1)) {
    ADD_PICK(0) ADD_PICK(1) ADD_PICK(2) ADD_PICK(3) ADD_PICK(4) ADD_PICK(5) ADD_PICK(6) ADD_PICK(7)
    default: return;
  }
  FOR_EACH(i, n) x[i] += value;
}

// z = a·x + b·y over up to TENSORS tensor pairs: torch._foreach_add_ and _foreach_add with a
// list and alpha (a = 1, b = alpha; z is x in place) and torch._foreach_mul_ with a number
// (HAS_Y 0: y is not read, b unused): the steps of SGD's default (foreach) path.
#ifndef HAS_Y
#define HAS_Y 1
#endif
#define AXPBY_SLOT(k)                                                                                    \
  __global float *z##k, const int z##k##_off, __global const float *x##k, const int x##k##_off,          \
      __global const float *y##k, const int y##k##_off, const int n##k
#define AXPBY_PICK(k)                                                                                    \
  case k:                                                                                                \
    z = z##k + z##k##_off; x = x##k + x##k##_off; y = y##k + y##k##_off; n = n##k;                       \
    break;

__kernel void foreach_axpby(AXPBY_SLOT(0), AXPBY_SLOT(1), AXPBY_SLOT(2), AXPBY_SLOT(3), AXPBY_SLOT(4),
                            AXPBY_SLOT(5), AXPBY_SLOT(6), AXPBY_SLOT(7), const float a, const float b) {
  __global float* z = 0;
  __global const float *x = 0, *y = 0;
  int n = 0;
  switch (get_global_id(1)) {
    AXPBY_PICK(0) AXPBY_PICK(1) AXPBY_PICK(2) AXPBY_PICK(3) AXPBY_PICK(4) AXPBY_PICK(5) AXPBY_PICK(6) AXPBY_PICK(7)
    default: return;
  }
#if HAS_Y
  FOR_EACH(i, n) z[i] = a * x[i] + b * y[i];
#else
  FOR_EACH(i, n) z[i] = a * x[i];
#endif
}
