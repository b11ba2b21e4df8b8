// Elementwise operations of the opencl device: out = F(a, b, c) for every element, with
// broadcasting and any strides. One work-item computes one output element.
//
// Build options name the operation and the types:
//   -DOP_<name>      the operation F (the list below)
//   -DTO=, -DTA=, -DTB=, -DTC=   element types of out and of the inputs a, b, c
//                    (dtypes.h: float, double, half, bfloat, long, int, ..., uchar for bool)
//   -DCT=            the type F computes in; inputs are converted to it (float for half
//                    and bfloat: 16-bit storage, float32 arithmetic)
//   -DNIN=0|1|2|3    how many inputs F reads (0: fill)
//   -DA_SCALAR, -DB_SCALAR, -DC_SCALAR   a (b, c) is a number, passed as va (vb, vc)
//   -DOUT_BOOL       out is bool: stores F != 0
// Scalars s0 and s1 are F's parameters (alpha, beta, min, max, ...).
//
// ew_contig: out, a, b, c are contiguous with n elements each (or scalars); UNROLL
//   elements per work-item (-DUNROLL: 4 on GPUs, 1 on CPUs).
// ew_strided2: the same over NDRange (ceil(inner / CHUNK), outer): work-item (q, r)
//   computes elements q·CHUNK .. q·CHUNK+CHUNK-1 of row r, the last dimension of L, at
//   offsets o_k + j · L.stride[k][last] from the row's offsets o_k (computed once). CPUs
//   build with CHUNK=16 (a loop that vectorises), GPUs with CHUNK=1.
// ew_strided: element i of out is at index (i_0, ..., i_{ndim-1}) of the shape L.size
//   (row-major, the last dimension fastest); operand k (0 = out, 1..3 = a, b, c) is read
//   at offset_k + Σ_d i_d · L.stride[k][d], in elements (stride 0 broadcasts). CHUNK
//   elements per work-item, as ew_strided2's (CPUs: 16, one division per chunk).

#include "dtypes.h"

#ifndef NIN
#define NIN 1
#endif
#ifndef TB
#define TB TA
#endif
#ifndef TC
#define TC TA
#endif
#define MAX_DIMS 6
#ifndef UNROLL
#define UNROLL 1
#endif

typedef struct {
  int ndim;
  int size[MAX_DIMS];
  int stride[4][MAX_DIMS];
} Layout;

#define GELU_K 0.7071067811865476f   // 1/sqrt(2)
#define GELU_T 0.7978845608028654f   // sqrt(2/pi)
#define GELU_C 0.044715f
#define INV_SQRT_2PI 0.3989422804014327f

inline float gelu_tanh_grad(const float x) {
  const float inner = GELU_T * (x + GELU_C * x * x * x);
  const float t = tanh(inner);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_T * (1.0f + 3.0f * GELU_C * x * x);
}

// ---- the operations: F(a, b, c), in CT --------------------------------------------------
#if defined(OP_copy)
#define F(a, b, c) (a)
#elif defined(OP_fill)
#define F(a, b, c) (s0)
#elif defined(OP_neg)
#define F(a, b, c) (-(a))
#elif defined(OP_abs)
#define F(a, b, c) ((a) < 0 ? -(a) : (a))
#elif defined(OP_sign)
#define F(a, b, c) (CT)(((a) > 0) - ((a) < 0))
#elif defined(OP_exp)
#define F(a, b, c) exp(a)
#elif defined(OP_log)
#define F(a, b, c) log(a)
#elif defined(OP_log1p)
#define F(a, b, c) log1p(a)
#elif defined(OP_expm1)
#define F(a, b, c) expm1(a)
#elif defined(OP_sqrt)
#define F(a, b, c) sqrt(a)
#elif defined(OP_rsqrt)
#define F(a, b, c) rsqrt(a)
#elif defined(OP_sin)
#define F(a, b, c) sin(a)
#elif defined(OP_cos)
#define F(a, b, c) cos(a)
#elif defined(OP_erf)
#define F(a, b, c) erf(a)
#elif defined(OP_tanh)
// ±1 from where tanh rounds to it in the type (|x| > 9.01 in float32, 19.06 in float64):
// OpenCL's tanh may stop an ulp short (PoCL: tanh(inf) = 0.99999994), and a gradient
// 1 - tanh² then misses torch's 0 (inf · 0 = NaN in torch's, inf on the device).
inline CT tanh_ends(const CT x) {
  const CT limit = sizeof(CT) == 8 ? (CT)19.1 : (CT)9.1;
  return fabs(x) >= limit ? copysign((CT)1, x) : tanh(x);
}
#define F(a, b, c) tanh_ends(a)
#elif defined(OP_sigmoid)
#define F(a, b, c) (1.0f / (1.0f + exp(-(a))))
#elif defined(OP_reciprocal)
#define F(a, b, c) (1.0f / (a))
#elif defined(OP_floor)
#define F(a, b, c) floor(a)
#elif defined(OP_ceil)
#define F(a, b, c) ceil(a)
#elif defined(OP_round)
#define F(a, b, c) rint(a)
#elif defined(OP_trunc)
#define F(a, b, c) trunc(a)
#elif defined(OP_relu)
#define F(a, b, c) ((a) > 0 || (a) != (a) ? (a) : (CT)0)  // NaN stays NaN, as torch
#elif defined(OP_gelu)
// x·Φ(x) with IEEE's infinities, as torch's formula gives them with an exact erf: inf at +inf,
// NaN at -inf (-inf · 0; the device's erf(-inf) may miss -1 by an ulp, which gave -inf).
#define F(a, b, c) (isinf(a) ? ((a) > 0 ? (a) : (CT)NAN) : 0.5f * (a) * (1.0f + erf((a) * GELU_K)))
#elif defined(OP_gelu_tanh)
#define F(a, b, c) \
  (isinf(a) ? ((a) > 0 ? (a) : (CT)NAN) : 0.5f * (a) * (1.0f + tanh(GELU_T * ((a) + GELU_C * (a) * (a) * (a)))))
#elif defined(OP_silu)
#define F(a, b, c) ((a) / (1.0f + exp(-(a))))
#elif defined(OP_hardsigmoid)
#define F(a, b, c) ((a) != (a) ? (a) : clamp((a) / 6 + (CT)0.5f, (CT)0, (CT)1))  // NaN stays (clamp drops it)
#elif defined(OP_hardswish)
#define F(a, b, c) ((a) * clamp((a) / 6 + (CT)0.5f, (CT)0, (CT)1))
#elif defined(OP_clamp)
#define F(a, b, c) ((a) != (a) ? (a) : min(max((a), s0), s1))  // a NaN input stays NaN, as torch
#elif defined(OP_clamp_min)
#define F(a, b, c) ((a) != (a) ? (a) : max((a), s0))
#elif defined(OP_clamp_max)
#define F(a, b, c) ((a) != (a) ? (a) : min((a), s0))
#elif defined(OP_leaky_relu)
#define F(a, b, c) ((a) > 0 ? (a) : (a) * s0)
#elif defined(OP_elu)
#define F(a, b, c) ((a) > 0 ? (a) : s0 * (exp(a) - 1.0f))
#elif defined(OP_pow_scalar)
#define F(a, b, c) (s0 == 2.0f ? (a) * (a) : s0 == 3.0f ? (a) * (a) * (a) : pow((a), s0))
#elif defined(OP_logical_not)
#define F(a, b, c) ((a) == 0)
#elif defined(OP_bitwise_not)
#define F(a, b, c) (~(a))
#elif defined(OP_isnan)
#define F(a, b, c) ((a) != (a))  // of every type: false for integers (isnan() takes floats only)
#elif defined(OP_isinf)
#define F(a, b, c) ((a) == INFINITY || (a) == -INFINITY)
#elif defined(OP_isneginf)
#define F(a, b, c) ((a) == -INFINITY)
#elif defined(OP_isposinf)
#define F(a, b, c) ((a) == INFINITY)
#elif defined(OP_nan_to_num)
#define F(a, b, c) (isnan(a) ? s0 : isinf(a) ? ((a) > 0 ? s1 : -s1) : (a))
// binary
#elif defined(OP_add)
#define F(a, b, c) ((a) + s0 * (b))
#elif defined(OP_sub)
#define F(a, b, c) ((a) - s0 * (b))
#elif defined(OP_rsub)
#define F(a, b, c) ((b) - s0 * (a))
#elif defined(OP_mul)
#define F(a, b, c) ((a) * (b))
#elif defined(OP_div)
#define F(a, b, c) ((a) / (b))
#elif defined(OP_div_floor)
// torch's div_floor_floating (c10/util/generic_math.h): the quotient of a - fmod(a, b), so an
// infinite dividend gives NaN (fmod(inf, b) is NaN) where floor(a / b) would give inf, and a
// zero quotient keeps the sign of a / b.
inline CT div_floor(const CT a, const CT b) {
  if (b == 0) return a / b;
  const CT mod = fmod(a, b);
  CT div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= (CT)1;
  if (div == 0) return copysign((CT)0, a / b);
  CT result = floor(div);
  if (div - result > (CT)0.5) result += (CT)1;
  return result;
}
#define F(a, b, c) div_floor((a), (b))
#elif defined(OP_div_trunc)
#define F(a, b, c) trunc((a) / (b))
#elif defined(OP_idiv_floor)
#define F(a, b, c) ((a) / (b) - (((a) % (b) != 0) && (((a) < 0) != ((b) < 0))))
#elif defined(OP_remainder)
// torch's remainder of floats: fmod, moved by b where its sign is not b's, so that
// remainder(x, ±inf) is x or ±inf (a - floor(a / b) * b gives NaN there).
inline CT remainder_of(const CT a, const CT b) {
  const CT mod = fmod(a, b);
  return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
}
#define F(a, b, c) remainder_of((a), (b))
#elif defined(OP_iremainder)
#define F(a, b, c) ((a) % (b) != 0 && (((a) < 0) != ((b) < 0)) ? (a) % (b) + (b) : (a) % (b))
#elif defined(OP_maximum)
#define F(a, b, c) ((a) != (a) ? (a) : (b) != (b) ? (b) : max((a), (b)))  // either NaN wins, as torch
#elif defined(OP_minimum)
#define F(a, b, c) ((a) != (a) ? (a) : (b) != (b) ? (b) : min((a), (b)))
#elif defined(OP_pow)
#define F(a, b, c) pow((a), (b))
#elif defined(OP_ipow)
// Integer powers, exact (by squaring, wrapping as torch's do); a negative exponent gives 1
// for a base of 1, ±1 for -1 and 0 otherwise, as torch's integer pow.
inline CT ipow_ct(CT base, CT e) {
  if (e < (CT)0) return base == (CT)1 ? (CT)1 : base == (CT)(-1) ? ((e & (CT)1) ? (CT)(-1) : (CT)1) : (CT)0;
  CT r = (CT)1;
  while (e != (CT)0) {
    if (e & (CT)1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}
#define F(a, b, c) ipow_ct((a), (b))
#elif defined(OP_atan2)
#define F(a, b, c) atan2((a), (b))
#elif defined(OP_eq)
#define F(a, b, c) ((a) == (b))
#elif defined(OP_ne)
#define F(a, b, c) ((a) != (b))
#elif defined(OP_lt)
#define F(a, b, c) ((a) < (b))
#elif defined(OP_le)
#define F(a, b, c) ((a) <= (b))
#elif defined(OP_gt)
#define F(a, b, c) ((a) > (b))
#elif defined(OP_ge)
#define F(a, b, c) ((a) >= (b))
#elif defined(OP_logical_and)
#define F(a, b, c) ((a) != 0 && (b) != 0)
#elif defined(OP_logical_or)
#define F(a, b, c) ((a) != 0 || (b) != 0)
#elif defined(OP_bitwise_and)
#define F(a, b, c) ((a) & (b))
#elif defined(OP_bitwise_or)
#define F(a, b, c) ((a) | (b))
#elif defined(OP_bitwise_xor)
#define F(a, b, c) ((a) ^ (b))
// backward of activations: a = grad_output, b = the forward's input (or output)
#elif defined(OP_threshold_backward)
#define F(a, b, c) ((b) <= s0 ? (CT)0 : (a))
#elif defined(OP_sigmoid_backward)
#define F(a, b, c) ((a) * (b) * (1.0f - (b)))
#elif defined(OP_tanh_backward)
#define F(a, b, c) ((a) * (1.0f - (b) * (b)))
#elif defined(OP_gelu_backward)
#define F(a, b, c) ((a) * (0.5f * (1.0f + erf((b) * GELU_K)) + (b) * INV_SQRT_2PI * exp(-0.5f * (b) * (b))))
#elif defined(OP_gelu_tanh_backward)
#define F(a, b, c) ((a) * gelu_tanh_grad(b))
#elif defined(OP_silu_backward)
#define F(a, b, c) ((a) * (1.0f / (1.0f + exp(-(b)))) * (1.0f + (b) * (1.0f - 1.0f / (1.0f + exp(-(b))))))
#elif defined(OP_hardsigmoid_backward)
#define F(a, b, c) ((b) > -3.0f && (b) < 3.0f ? (a) / 6.0f : 0.0f)
#elif defined(OP_hardswish_backward)
#define F(a, b, c) ((b) < -3.0f ? 0.0f : (b) <= 3.0f ? (a) * ((b) / 3.0f + 0.5f) : (a))
#elif defined(OP_hardtanh_backward)
#define F(a, b, c) ((b) <= s0 || (b) >= s1 ? 0.0f : (a))
#elif defined(OP_leaky_relu_backward)
#define F(a, b, c) ((b) > 0 ? (a) : (a) * s0)
#elif defined(OP_elu_backward)
#define F(a, b, c) ((b) > 0 ? (a) : (a) * ((b) + s0))
#elif defined(OP_dropout_backward)
#define F(a, b, c) ((a) * (CT)((b) != 0) * s0)  // grad · mask · scale, as torch: a NaN gradient stays NaN
// ternary
#elif defined(OP_where)
#define F(a, b, c) ((a) != 0 ? (b) : (c))
#elif defined(OP_addcmul)
#define F(a, b, c) ((a) + s0 * (b) * (c))
#elif defined(OP_addcdiv)
#define F(a, b, c) ((a) + s0 * (b) / (c))
#elif defined(OP_lerp) || defined(OP_lerp_scalar)
// torch's two forms (ATen/native/Lerp.h): from `a` for small weights, from `b` for the others,
// so that weight 1 gives b exactly and infinities and NaN land where torch's do.
inline CT lerp_of(const CT a, const CT b, const CT w) {
  return fabs(w) < (CT)0.5 ? a + w * (b - a) : b - (b - a) * ((CT)1 - w);
}
#if defined(OP_lerp)
#define F(a, b, c) lerp_of((a), (b), (c))
#else
#define F(a, b, c) lerp_of((a), (b), (CT)s0)
#endif
#elif defined(OP_clamp_tensor)
#define F(a, b, c) ((a) != (a) ? (a) : min(max((a), (b)), (c)))
#else
#include "elementwise_nn.h"  // the activations, losses and gating ops, or #error
#endif

#ifdef OUT_BOOL
#define STORE(x) ((x) != 0)
#else
#define STORE(x) (x)
#endif

#ifdef A_SCALAR
#define LOAD_A(o) va
#else
#define LOAD_A(o) (CT) READ(TA, a, o)
#endif
#ifdef B_SCALAR
#define LOAD_B(o) vb
#else
#define LOAD_B(o) (CT) READ(TB, b, o)
#endif
#ifdef C_SCALAR
#define LOAD_C(o) vc
#else
#define LOAD_C(o) (CT) READ(TC, c, o)
#endif

#define ARGS                                                                                   \
  __global TO *out, const int out_off, __global const TA *a, const int a_off, __global const TB *b, \
      const int b_off, __global const TC *c, const int c_off, const CT s0, const CT s1, const CT va, \
      const CT vb, const CT vc, const int n

// Contiguous operands: elements i < n of each. Work-item l of work-group g computes
// elements g·G·UNROLL + l + k·G (k < UNROLL, G the work-group size), so each of its loads
// is coalesced across the work-group; all loads come before the stores (out may be an
// input). GPUs build with UNROLL=4 (fewer, fuller work-groups), CPUs with 1.
__kernel void ew_contig(ARGS) {
  const int G = get_local_size(0);
  const int base = get_group_id(0) * G * UNROLL + get_local_id(0);
  CT av[UNROLL], bv[UNROLL], cv[UNROLL];
  for (int k = 0; k < UNROLL; ++k) {
    const int i = base + k * G;  // past the end: nothing read (no race with an in-place store)
#if NIN >= 1
    av[k] = i < n ? LOAD_A(a_off + i) : (CT)0;
#else
    av[k] = s0;
#endif
#if NIN >= 2
    bv[k] = i < n ? LOAD_B(b_off + i) : (CT)0;
#else
    bv[k] = av[k];
#endif
#if NIN >= 3
    cv[k] = i < n ? LOAD_C(c_off + i) : (CT)0;
#else
    cv[k] = av[k];
#endif
  }
  for (int k = 0; k < UNROLL; ++k) {
    const int i = base + k * G;
    if (i < n) WRITE(TO, out, out_off + i, STORE(F(av[k], bv[k], cv[k])));
  }
}

#ifndef CHUNK
#define CHUNK 1
#endif

// Any strides: operand offsets from the element's index in the shape L.size. Work-item q
// computes elements q·CHUNK .. q·CHUNK+CHUNK-1: the first one's index by division, the
// next ones' by stepping the index (the last dimension fastest), without dividing again.
__kernel void ew_strided(ARGS, const Layout L) {
  const int i0 = get_global_id(0) * CHUNK;
  if (i0 >= n) return;
  int idx[MAX_DIMS];
  int o0 = out_off, o1 = a_off, o2 = b_off, o3 = c_off;
  int rest = i0;
  for (int d = L.ndim - 1; d >= 0; --d) {
    idx[d] = rest % L.size[d];
    rest /= L.size[d];
    o0 += idx[d] * L.stride[0][d];
    o1 += idx[d] * L.stride[1][d];
    o2 += idx[d] * L.stride[2][d];
    o3 += idx[d] * L.stride[3][d];
  }
  const int end = min(CHUNK, n - i0);
  for (int k = 0; k < end; ++k) {
#if NIN >= 1
    const CT av = LOAD_A(o1);
#else
    const CT av = s0;
#endif
#if NIN >= 2
    const CT bv = LOAD_B(o2);
#else
    const CT bv = av;
#endif
#if NIN >= 3
    const CT cv = LOAD_C(o3);
#else
    const CT cv = av;
#endif
    WRITE(TO, out, o0, STORE(F(av, bv, cv)));
#if CHUNK > 1
    // The next element's index and offsets.
    for (int d = L.ndim - 1; d >= 0; --d) {
      o0 += L.stride[0][d];
      o1 += L.stride[1][d];
      o2 += L.stride[2][d];
      o3 += L.stride[3][d];
      if (++idx[d] < L.size[d]) break;
      o0 -= L.size[d] * L.stride[0][d];
      o1 -= L.size[d] * L.stride[1][d];
      o2 -= L.size[d] * L.stride[2][d];
      o3 -= L.size[d] * L.stride[3][d];
      idx[d] = 0;
    }
#endif
  }
}

__kernel void ew_strided2(ARGS, const Layout L) {
  const int j0 = get_global_id(0) * CHUNK;
  const int last = L.ndim - 1;
  if (j0 >= L.size[last]) return;
  int o0 = out_off, o1 = a_off, o2 = b_off, o3 = c_off;
  int rest = get_global_id(1);
  for (int d = last - 1; d >= 0; --d) {
    const int idx = rest % L.size[d];
    rest /= L.size[d];
    o0 += idx * L.stride[0][d];
    o1 += idx * L.stride[1][d];
    o2 += idx * L.stride[2][d];
    o3 += idx * L.stride[3][d];
  }
  const int s0_ = L.stride[0][last], s1_ = L.stride[1][last], s2_ = L.stride[2][last], s3_ = L.stride[3][last];
  const int end = min(CHUNK, L.size[last] - j0);
  for (int k = 0; k < end; ++k) {
    const int j = j0 + k;
#if NIN >= 1
    const CT av = LOAD_A(o1 + j * s1_);
#else
    const CT av = s0;
#endif
#if NIN >= 2
    const CT bv = LOAD_B(o2 + j * s2_);
#else
    const CT bv = av;
#endif
#if NIN >= 3
    const CT cv = LOAD_C(o3 + j * s3_);
#else
    const CT cv = av;
#endif
    WRITE(TO, out, o0 + j * s0_, STORE(F(av, bv, cv)));
  }
}
