// Scaled dot-product attention of the opencl device, forward (inference: no gradient is
// asked for, no dropout). One work-group of GROUP work-items per query row r = (b, h, l):
//
//   s_j = scale · q[b,h,l,:] · k[b,g,j,:]   (j < S), plus the mask:
//         MASK=1 (bool)  s_j = -inf where mask[b,h,l,j] is false
//         MASK=2 (float) s_j += mask[b,h,l,j]
//         CAUSAL         s_j = -inf where j > l (torch's is_causal: the upper-left triangle)
//   p = softmax(s), o[b,h,l,:] = Σ_j p_j · v[b,g,j,:];  lse[r] = log Σ_j exp(s_j)
//   g = h / KVG: KVG query heads share one key/value head (grouped heads; KVG = 1 without).
//   A row whose every s_j is -inf gives zeros (as torch's math path, _safe_softmax).
//
// q (B,H,L,D), k (B,H/KVG,S,D), v (B,H/KVG,S,E) and the mask (B,H,L,S; stride 0 where broadcast)
// are read at any strides, given in elements as int4 (b, h, row, column); o (B,H,L,E) and
// lse (B,H,L) are contiguous. q, k, v and o are of type -DT= (dtypes.h names: float by
// default; float16 and bfloat16 read directly), a float mask of -DTM=, lse and the arithmetic
// float32. The scores stay in local memory: S ≤ MAX_S, D ≤ MAX_D
// (build options; the host falls back to torch's math path past them).

#include "dtypes.h"

#ifndef GROUP
#define GROUP 64
#endif
#ifndef T
#define T float
#endif
#ifndef TM
#define TM float
#endif
#ifndef MASK
#define MASK 0
#endif
#ifndef MAX_S
#define MAX_S 1024
#endif
#ifndef MAX_D
#define MAX_D 256
#endif

#if MASK == 1
typedef uchar mask_t;
#else
typedef TM mask_t;
#endif

inline float group_reduce(float value, __local float* scratch, const int is_max) {
  const int lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = GROUP / 2; step > 0; step /= 2) {
    if (lid < step) scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + step]) : scratch[lid] + scratch[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void sdpa_forward(__global const T* q, const int q_off, const int4 qs, __global const T* k, const int k_off,
                  const int4 ks, __global const T* v, const int v_off, const int4 vs, __global const mask_t* mask,
                  const int mask_off, const int4 ms, __global T* o, const int o_off, __global float* lse,
                  const int lse_off, const int H, const int KVG, const int L, const int S, const int D, const int E,
                  const float scale) {
  __local float qrow[MAX_D];
  __local float p[MAX_S];
  __local float scratch[GROUP];
  const int lid = get_local_id(0);
  const int r = get_group_id(0);
  const int l = r % L, h = (r / L) % H, b = r / (L * H);

  const int qp = q_off + b * qs.x + h * qs.y + l * qs.z;
  for (int d = lid; d < D; d += GROUP) qrow[d] = (float)READ(T, q, qp + d * qs.w);
  barrier(CLK_LOCAL_MEM_FENCE);

  const int g = h / KVG;
  const int kb = k_off + b * ks.x + g * ks.y;
  float top = -INFINITY;
  for (int j = lid; j < S; j += GROUP) {
    float s = -INFINITY;
#ifdef CAUSAL
    if (j <= l)
#endif
    {
      const int kp = kb + j * ks.z;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc = fma(qrow[d], (float)READ(T, k, kp + d * ks.w), acc);
      s = acc * scale;
#if MASK == 1
      if (!mask[mask_off + b * ms.x + h * ms.y + l * ms.z + j * ms.w]) s = -INFINITY;
#elif MASK == 2
      s += (float)READ(TM, mask, mask_off + b * ms.x + h * ms.y + l * ms.z + j * ms.w);
#endif
    }
    p[j] = s;
    top = fmax(top, s);
  }
  top = group_reduce(top, scratch, 1);
  float sum = 0.0f;
  for (int j = lid; j < S; j += GROUP) {
    const float e = top == -INFINITY ? 0.0f : exp(p[j] - top);
    p[j] = e;
    sum += e;
  }
  sum = group_reduce(sum, scratch, 0);  // its barriers also publish every p[j]
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;

  const int vb = v_off + b * vs.x + g * vs.y;
  const size_t orow = o_off + (size_t)r * E;
  for (int e = lid; e < E; e += GROUP) {
    float acc = 0.0f;
    for (int j = 0; j < S; ++j) acc = fma(p[j], (float)READ(T, v, vb + j * vs.z + e * vs.w), acc);
    WRITE(T, o, orow + e, acc * inv);
  }
  if (lid == 0) lse[lse_off + r] = top == -INFINITY ? -INFINITY : top + log(sum);
}
