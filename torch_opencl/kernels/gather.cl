// Gather, scatter, cumulative sums and linspace of the opencl device. Tensor
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

__kernel void linspace(__global T* y, const int y_off, const float a, const float b, const float step,
                       const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  y[y_off + i] = (T)(i < total / 2 ? a + step * i : b - step * (total - 1 - i));
}
