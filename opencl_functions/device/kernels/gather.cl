// Gather, scatter, cumulative sums and random numbers of the opencl device. Tensor
// arguments are a buffer and an offset in elements; -DT= is the element type.
//
//   gather        y (the index's shape, contiguous) = x along dimension `dim`: element i of
//                 y, at coordinates c over L.size (the index's shape, last fastest), reads x at
//                 Σ_d c_d·L.stride_x[d] with c_dim replaced by idx[i]. One work-item per element.
//   scatter       x along `dim` at idx gets src (-DADD: += src): one work-item per line of the
//                 index (all coordinates but dim fixed) walks that line in order, so repeated
//                 targets within a line add up deterministically (no atomics); lines never share
//                 targets. src is a tensor (strides L.stride_src), or the number `value`
//                 (-DVALUE).
//   Their indices are checked by another kernel (index_check.cl) that does not stop these:
//   one outside x's D rows along dim is clamped (gather) or skipped (scatter).
//   cumsum        y (outer, D, inner) contiguous: y[o, j, k] = Σ_{j' <= j} x[o, j', k]; one
//                 work-item per (o, k).
//   random_fill   y (n) contiguous: uniform in [a, b) (mode 0), normal with mean a and standard
//                 deviation b (mode 1, Box-Muller), 1 with probability a, else 0 (mode 2),
//                 exponential of rate a (mode 3), log-normal of a normal (a, b) (mode 4), Cauchy
//                 of median a and scale b (mode 5), geometric of success probability a, from 1
//                 (mode 6); numbers hash (seed, i), so a draw depends on its seed alone.
//   random_range  y (n) contiguous, of type T: from + (a 64-bit hash of (seed, i)) mod range,
//                 range 0 standing for 2^64 (random_ and randint on every computing type).
//   linspace      y[i] = a + i·step for i < n/2, else b - (n-1-i)·step (as torch: exact ends).

#ifndef T
#define T float
#endif
#define MAX_DIMS 6

typedef struct {
  int ndim;
  int size[MAX_DIMS];
  int stride_x[MAX_DIMS];
  int stride_src[MAX_DIMS];
  int stride_idx[MAX_DIMS];
} Coords;

__kernel void gather(__global const T* x, const int x_off, __global const long* idx, const int idx_off,
                     __global T* y, const int y_off, const Coords L, const int dim, const int D, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  int rest = i, at = x_off, ia = idx_off;
  for (int d = L.ndim - 1; d >= 0; --d) {
    const int c = rest % L.size[d];
    rest /= L.size[d];
    ia += c * L.stride_idx[d];
    if (d != dim) at += c * L.stride_x[d];
  }
  const int row = (int)clamp(idx[ia], 0L, (long)D - 1);  // checked apart (index_check.cl)
  y[y_off + i] = x[at + row * L.stride_x[dim]];
}

__kernel void scatter(__global T* x, const int x_off, __global const long* idx, const int idx_off,
                      __global const T* src, const int src_off, const T value, const Coords L, const int dim,
                      const int D, const int lines) {
  const int line = get_global_id(0);
  if (line >= lines) return;
  int rest = line, at = x_off, ia = idx_off, is = src_off;
  for (int d = L.ndim - 1; d >= 0; --d) {
    if (d == dim) continue;
    const int c = rest % L.size[d];
    rest /= L.size[d];
    at += c * L.stride_x[d];
    ia += c * L.stride_idx[d];
    is += c * L.stride_src[d];
  }
  for (int k = 0; k < L.size[dim]; ++k) {
    const long row = idx[ia + k * L.stride_idx[dim]];
    if (row < 0 || row >= D) continue;  // out of range: checked apart (index_check.cl)
    const int target = at + (int)row * L.stride_x[dim];
#ifdef VALUE
    const T v = value;
#else
    const T v = src[is + k * L.stride_src[dim]];
#endif
#ifdef ADD
    x[target] += v;
#else
    x[target] = v;
#endif
  }
}

__kernel void cumsum(__global const T* x, const int x_off, __global T* y, const int y_off, const int D,
                     const int inner, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int k = i % inner, o = i / inner;
  const size_t base = (size_t)o * D * inner + k;
  T s = (T)0;
  for (int j = 0; j < D; ++j) {
    s += x[x_off + base + (size_t)j * inner];
    y[y_off + base + (size_t)j * inner] = s;
  }
}

// A 32-bit integer hash (lowbias32, by C. Wellons).
inline uint mix32(uint x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// A number in (0, 1] from (seed, i, stream).
inline float unit(const uint lo, const uint hi, const uint i, const uint stream) {
  const uint h = mix32(mix32(i ^ lo) + hi + stream * 0x9e3779b9U);
  return ((float)(h >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

__kernel void random_fill(__global float* y, const int y_off, const uint seed_lo, const uint seed_hi, const int mode,
                          const float a, const float b, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const float u = unit(seed_lo, seed_hi, (uint)i, 0);
  float v;
  if (mode == 0) {
    v = a + (b - a) * (1.0f - u);  // [a, b)
  } else if (mode == 1 || mode == 4) {
    const float u2 = unit(seed_lo, seed_hi, (uint)i, 1);
    v = a + b * sqrt(-2.0f * log(u)) * cos(6.283185307179586f * u2);
    if (mode == 4) v = exp(v);
  } else if (mode == 2) {
    v = (1.0f - u) < a ? 1.0f : 0.0f;
  } else if (mode == 3) {
    v = -log(u) / a;
  } else if (mode == 5) {
    v = a + b * tan(3.141592653589793f * (u - 0.5f));
  } else {
    v = ceil(log(u) / log1p(-a));  // mode 6
    v = v < 1.0f ? 1.0f : v;
  }
  y[y_off + i] = v;
}

__kernel void random_range(__global T* y, const int y_off, const uint seed_lo, const uint seed_hi, const long from,
                           const ulong range, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const uint base = mix32((uint)i ^ seed_lo) + seed_hi;
  const ulong h = ((ulong)mix32(base + 2u * 0x9e3779b9U) << 32) | mix32(base + 3u * 0x9e3779b9U);
  y[y_off + i] = (T)(from + (long)(range ? h % range : h));
}

__kernel void linspace(__global T* y, const int y_off, const float a, const float b, const float step,
                       const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  y[y_off + i] = (T)(i < total / 2 ? a + step * i : b - step * (total - 1 - i));
}
