// The gradient scaler's kernels (torch.amp.GradScaler on the opencl device), as torch's
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ compute them:
//
//   unscale        up to TENSORS gradients per launch, each multiplied in place by
//                  inv_scale[0] (not written when it is 1: the check alone), and
//                  found_inf[0] set to 1 when any element was inf or NaN (never reset:
//                  the caller zeroes it). Elements of type -DT= (dtypes.h: float, double,
//                  half, bfloat), computed in -DCOMPUTE= (float; double for double).
//   update_scale   one work-item: the scale backs off where found_inf[0] != 0, else it
//                  grows every growth_interval successful steps, counted in growth_tracker.
//
// Every tensor argument is a buffer and an offset in elements. The gradients are dense
// (their n elements lie one after the other from the offset, in any order of dimensions).
// NDRange of unscale: (items, TENSORS); row t of work-items takes the gradient in slot t
// (FOR_EACH says which elements each work-item takes); slots past the launch's count get
// a null buffer and n = 0. Nothing stays on the host: found_inf and the scale live on the
// device, so a training step reads nothing back.

#include "dtypes.h"

#ifndef TENSORS
#define TENSORS 8
#endif
#ifndef T
#define T float
#endif
#ifndef COMPUTE
#define COMPUTE float
#endif

#include "for_each.h"  // FOR_EACH(i, n): a work-item's elements

#define GRAD_SLOT(k) __global T *g##k, const int g##k##_off, const int n##k
#define GRAD_PICK(k)                                                                                     \
  case k:                                                                                                \
    g = g##k + g##k##_off; n = n##k;                                                                     \
    break;

__kernel void unscale(GRAD_SLOT(0), GRAD_SLOT(1), GRAD_SLOT(2), GRAD_SLOT(3), GRAD_SLOT(4), GRAD_SLOT(5),
                      GRAD_SLOT(6), GRAD_SLOT(7), __global float* found_inf, const int found_off,
                      __global const float* inv_scale, const int inv_off) {
  __global T* g = 0;
  int n = 0;
  switch (get_global_id(1)) {
    GRAD_PICK(0) GRAD_PICK(1) GRAD_PICK(2) GRAD_PICK(3) GRAD_PICK(4) GRAD_PICK(5) GRAD_PICK(6) GRAD_PICK(7)
    default: return;
  }
  const COMPUTE inv = inv_scale[inv_off];
  const int scaled = inv != (COMPUTE)1;
  int bad = 0;
  FOR_EACH(i, n) {
    const COMPUTE v = READ(T, g, i);
    bad |= !isfinite(v);
    if (scaled) WRITE(T, g, i, v * inv);
  }
  // Several work-items may find one: the store is atomic, and every one stores 1.
  if (bad) atomic_xchg((volatile __global float*)(found_inf + found_off), 1.0f);
}

// The factors in double where the device has it (torch multiplies the float scale by the
// double factor, then rounds to float), else in float.
#ifdef HAS_FP64
typedef double factor_t;
#else
typedef float factor_t;
#endif

__kernel void update_scale(__global float* scale, const int scale_off, __global int* growth_tracker,
                           const int tracker_off, __global const float* found_inf, const int found_off,
                           const factor_t growth_factor, const factor_t backoff_factor,
                           const long growth_interval) {
  if (get_global_id(0) != 0) return;
  const float current = scale[scale_off];
  if (found_inf[found_off] != 0.0f) {
    scale[scale_off] = (float)(current * backoff_factor);
    growth_tracker[tracker_off] = 0;
    return;
  }
  const int successful = growth_tracker[tracker_off] + 1;
  if (successful == growth_interval) {
    const float grown = (float)(current * growth_factor);
    if (isfinite(grown)) scale[scale_off] = grown;  // never past float's range to inf
    growth_tracker[tracker_off] = 0;
  } else {
    growth_tracker[tracker_off] = successful;
  }
}
