// Indexing kernels of the opencl device: index_select (and so embedding), the embedding's
// backward, and triangular masks. Tensor arguments are a buffer and an offset in elements.
//
//   index_select       x viewed as (outer, D, inner) contiguous, idx (n) int64:
//                      y[(o·n + j)·inner + k] = x[(o·D + idx[j])·inner + k]; one work-item per
//                      element of y. -DT= the element type.
//   embedding_backward dy (n, E), idx (n), dw (V, E) zeroed before: one work-item per column
//                      e sums dy[j, e] into dw[idx[j], e] for j = 0 .. n-1 in order (no atomics),
//                      skipping padding_idx.
//   Indices of index_select, index_add and embedding_backward are checked by another kernel
//   (index_check.cl) that does not stop these: here one out of range is clamped (reads) or
//   skipped (writes), never an access outside the tensor.
//   arange             y[i] = start + i·step, one work-item per element.
//   index_add          y (outer, D, inner) += alpha · src (outer, n, inner) at rows idx (n): one
//                      work-item per (o, k) adds the n rows in order (no atomics).
//   pad2d              y (P, H + 2·PH, W + 2·PW) contiguous = x (B, C, H, W) with any strides,
//                      zero-padded on each side; P = B·C. NDRange (ceil(WP / CHUNK), P·HP):
//                      CHUNK elements of one row of y per work-item (CPUs 16, GPUs 1).
//   spread2d           y (P, LH, LW) = x (P, H, W) contiguous spread out for a transposed
//                      convolution: x[h, w] at y[top + h·SH, left + w·SW], zeros elsewhere
//                      (top, left may be negative: rows before the window are dropped).
//                      NDRange as pad2d's.
//   flip_swap_weights  w' (C_in, C_out/G, NH, NW) = w (C_out, C_in/G, KH, KW) with the kernel
//                      flipped and each group's input and output channels swapped, taps
//                      (H0 + HS·jh, W0 + WS·jw) of the flipped kernel (all: 0, 1, KH, 0, 1,
//                      KW); one work-item per element, or with -DPER_PAIR (CPUs) per
//                      (input, output) channel pair.
//   unphase2d          y (P, H, W) from the outputs of its stride phases (P, ⌈(H - rh)/SH⌉,
//                      ⌈(W - rw)/SW⌉) p0..p3 (phase rh·SW + rw; SH·SW <= 4). NDRange as
//                      pad2d's.
//   triangle           y = x where the element (r, c) of each trailing (R, Cols) matrix is
//                      kept, else 0: -DLOWER keeps c - r <= diagonal (tril), else c - r >= diagonal.
//   cat2               y (outer, n0 + n1, inner) = a (outer, n0, inner) and b (outer, n1, inner)
//                      one after the other along the middle dimension, all contiguous; one
//                      work-item per element of y (a concatenation in one launch).
//   cat2_strided       the same of a and b at any strides (L.stride_a, L.stride_b; y contiguous
//                      over L.size, at most 6 dimensions, a's n0 first along `dim`): a rotary
//                      embedding's halves, slices of one tensor, in one launch.
//   index_gather       advanced indexing y = x[..., i0, i1, ...]: y contiguous over L.size, one
//                      dimension of which (L.block) runs over the J broadcast index positions;
//                      element i at coordinates c reads x at Σ_{d≠block} c_d·L.stride_x[d]
//                      + offs[c_block], offs (J) int64 the indexed dimensions' offsets (already
//                      wrapped and checked). One work-item per element of y.
//   index_put          x[..., i0, i1, ...] = v (-DADD: +=), the same layout, v at strides
//                      L.stride_v: one work-item per line (every coordinate but the block fixed)
//                      walks its J positions in order, so repeated positions within a line add
//                      up (or the last one wins) deterministically, without atomics; lines of a
//                      tensor without internal overlap never share targets.
//   nonzero_coords     y (n, ndim) int64: the coordinates (over L.size, last fastest) of every
//                      element i with flag[i] != 0, in row pos[i] - 1 (pos: flag's inclusive
//                      cumulative sum). One work-item per element of flag.
//   isin               y[i] = (x[i] equals some t[j], j < m) xor invert; x and t contiguous, of
//                      one type T; one work-item per element of x walks t.

#ifndef T
#define T float
#endif
#ifndef CHUNK
#define CHUNK 1  // values of a row per work-item in the row kernels (pad2d, spread2d, unphase2d)
#endif

__kernel void index_select(__global const T* x, const int x_off, __global const long* idx, const int idx_off,
                           __global T* y, const int y_off, const int D, const int n, const int inner,
                           const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int k = i % inner, j = (i / inner) % n, o = i / (inner * n);
  const long row = clamp(idx[idx_off + j], 0L, (long)D - 1);  // checked apart (index_check.cl)
  y[y_off + i] = x[x_off + ((size_t)o * D + row) * inner + k];
}

__kernel void embedding_backward(__global const float* dy, const int dy_off, __global const long* idx,
                                 const int idx_off, __global float* dw, const int dw_off, const int n, const int E,
                                 const int padding_idx, const int V) {
  const int e = get_global_id(0);
  if (e >= E) return;
  for (int j = 0; j < n; ++j) {
    const long row = idx[idx_off + j];
    if (row == padding_idx || row < 0 || row >= V) continue;  // out of range: checked apart
    dw[dw_off + row * E + e] += dy[dy_off + (size_t)j * E + e];
  }
}

__kernel void triangle(__global const T* x, const int x_off, __global T* y, const int y_off, const int R,
                       const int Cols, const int diagonal, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int c = i % Cols, r = (i / Cols) % R;
#ifdef LOWER
  const int keep = c - r <= diagonal;
#else
  const int keep = c - r >= diagonal;
#endif
  y[y_off + i] = keep ? x[x_off + i] : (T)0;
}

__kernel void arange(__global T* y, const int y_off, const T start, const T step, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  y[y_off + i] = start + (T)i * step;
}

__kernel void index_add(__global T* y, const int y_off, __global const long* idx, const int idx_off,
                        __global const T* src, const int src_off, const T alpha, const int D, const int n,
                        const int inner, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int k = i % inner, o = i / inner;
  for (int j = 0; j < n; ++j) {
    const long row = idx[idx_off + j];
    if (row < 0 || row >= D) continue;  // out of range: checked apart (index_check.cl)
    y[y_off + ((size_t)o * D + row) * inner + k] += alpha * src[src_off + ((size_t)o * n + j) * inner + k];
  }
}

__kernel void spread2d(__global const T* x, __global T* y, const int H, const int W, const int LH, const int LW,
                       const int top, const int left, const int SH, const int SW, const int rows) {
  const int j0 = get_global_id(0) * CHUNK, r = get_global_id(1);
  if (j0 >= LW || r >= rows) return;
  const int oh = r % LH, p = r / LH;
  const int dh = oh - top;
  const bool row_in = dh >= 0 && dh % SH == 0 && dh / SH < H;
  __global const T* in = x + ((size_t)p * H + (row_in ? dh / SH : 0)) * W;
  __global T* out = y + (size_t)r * LW;
  const int end = min(CHUNK, LW - j0);
  for (int k = 0; k < end; ++k) {
    const int dw = j0 + k - left;
    out[j0 + k] = (row_in && dw >= 0 && dw % SW == 0 && dw / SW < W) ? in[dw / SW] : (T)0;
  }
}

__kernel void flip_swap_weights(__global const T* w, __global T* y, const int G, const int CIG, const int COG,
                                const int KH, const int KW, const int H0, const int HS, const int NH, const int W0,
                                const int WS, const int NW, const int items) {
  const int i = get_global_id(0);
  if (i >= items) return;
  const int taps = NH * NW;
#ifdef PER_PAIR
  const int pair = i, t0 = 0, t1 = taps;  // CPUs: a pair's taps in one work-item
#else
  const int pair = i / taps, t0 = i - pair * taps, t1 = t0 + 1;  // GPUs: one element, coalesced
#endif
  const int co = pair % COG, c = pair / COG;
  const int g = c / CIG, ci = c % CIG;
  __global const T* from = w + ((size_t)(g * COG + co) * CIG + ci) * KH * KW;
  __global T* to = y + (size_t)pair * taps;
  for (int t = t0; t < t1; ++t) {
    const int jh = t / NW, jw = t - jh * NW;
    to[t] = from[(KH - 1 - H0 - HS * jh) * KW + (KW - 1 - W0 - WS * jw)];
  }
}

// dx's element (p, h, w) from the output of its phase (h mod SH, w mod SW) at (h / SH, w / SW).
__kernel void unphase2d(__global const T* p0, __global const T* p1, __global const T* p2, __global const T* p3,
                        __global T* y, const int H, const int W, const int SH, const int SW, const int rows) {
  const int j0 = get_global_id(0) * CHUNK, r = get_global_id(1);
  if (j0 >= W || r >= rows) return;
  const int h = r % H, p = r / H;
  const int rh = h % SH, ph = (H - rh + SH - 1) / SH;
  __global T* out = y + (size_t)r * W;
  const int end = min(CHUNK, W - j0);
  for (int k = 0; k < end; ++k) {
    const int w = j0 + k, rw = w % SW, phase = rh * SW + rw;
    const int pw = (W - rw + SW - 1) / SW;
    __global const T* part = phase == 0 ? p0 : phase == 1 ? p1 : phase == 2 ? p2 : p3;
    out[w] = part[((size_t)p * ph + h / SH) * pw + w / SW];
  }
}

__kernel void pad2d(__global const T* x, const int x_off, __global T* y, const int y_off, const int C, const int H,
                    const int W, const int PH, const int PW, const int sb, const int sc, const int sh, const int sw,
                    const int rows) {
  const int j0 = get_global_id(0) * CHUNK, r = get_global_id(1);
  const int WP = W + 2 * PW, HP = H + 2 * PH;
  if (j0 >= WP || r >= rows) return;
  const int oh = r % HP, p = r / HP;
  const int ih = oh - PH;
  __global T* out = y + y_off + (size_t)r * WP;
  const bool inside = ih >= 0 && ih < H;
  __global const T* in = x + x_off + (size_t)(p / C) * sb + (size_t)(p % C) * sc + (inside ? ih : 0) * sh;
  const int end = min(CHUNK, WP - j0);
  for (int k = 0; k < end; ++k) {
    const int iw = j0 + k - PW;
    out[j0 + k] = (inside && iw >= 0 && iw < W) ? in[iw * sw] : (T)0;
  }
}

__kernel void cat2(__global const T* a, const int a_off, __global const T* b, const int b_off, __global T* y,
                   const int y_off, const int n0, const int n1, const int inner, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int row = (n0 + n1) * inner, o = i / row, t = i % row;
  y[y_off + i] = t < n0 * inner ? a[a_off + o * n0 * inner + t] : b[b_off + o * n1 * inner + t - n0 * inner];
}

#define CAT_DIMS 6
typedef struct {
  int ndim;
  int size[CAT_DIMS];  // y's
  int stride_a[CAT_DIMS];
  int stride_b[CAT_DIMS];
} Cat2;

__kernel void cat2_strided(__global const T* a, const int a_off, __global const T* b, const int b_off,
                           __global T* y, const int y_off, const Cat2 L, const int dim, const int n0,
                           const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  int rest = i, at_a = a_off, at_b = b_off, first = 1;
  for (int d = L.ndim - 1; d >= 0; --d) {
    int c = rest % L.size[d];
    rest /= L.size[d];
    if (d == dim) {
      first = c < n0;
      if (!first) c -= n0;
    }
    at_a += c * L.stride_a[d];
    at_b += c * L.stride_b[d];
  }
  y[y_off + i] = first ? a[at_a] : b[at_b];
}

// ---- advanced indexing ---------------------------------------------------------------------

#define MAX_INDEX_DIMS 8

typedef struct {
  int ndim;   // dimensions of the selection, the index block counted once
  int block;  // which of them runs over the index positions
  int size[MAX_INDEX_DIMS];
  int stride_x[MAX_INDEX_DIMS];  // x's strides (0 at the block: offs holds those offsets)
  int stride_v[MAX_INDEX_DIMS];  // the values' strides (index_put)
} IndexLayout;

__kernel void index_gather(__global const T* x, const int x_off, __global const long* offs, const int offs_off,
                           __global T* y, const int y_off, const IndexLayout L, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  int rest = i, j = 0;
  long at = x_off;
  for (int d = L.ndim - 1; d >= 0; --d) {
    const int c = rest % L.size[d];
    rest /= L.size[d];
    if (d == L.block) j = c;
    else at += (long)c * L.stride_x[d];
  }
  y[y_off + i] = x[at + offs[offs_off + j]];
}

__kernel void index_put(__global T* x, const int x_off, __global const long* offs, const int offs_off,
                        __global const T* v, const int v_off, const IndexLayout L, const int lines) {
  const int line = get_global_id(0);
  if (line >= lines) return;
  int rest = line;
  long at = x_off, av = v_off;
  for (int d = L.ndim - 1; d >= 0; --d) {
    if (d == L.block) continue;
    const int c = rest % L.size[d];
    rest /= L.size[d];
    at += (long)c * L.stride_x[d];
    av += (long)c * L.stride_v[d];
  }
  const int J = L.size[L.block], vs = L.stride_v[L.block];
  for (int j = 0; j < J; ++j) {
    const long target = at + offs[offs_off + j];
#ifdef ADD
    x[target] += v[av + (long)j * vs];
#else
    x[target] = v[av + (long)j * vs];
#endif
  }
}

__kernel void nonzero_coords(__global const uchar* flag, const int flag_off, __global const long* pos,
                             const int pos_off, __global long* y, const int y_off, const IndexLayout L,
                             const int total) {
  const int i = get_global_id(0);
  if (i >= total || !flag[flag_off + i]) return;
  const long row = pos[pos_off + i] - 1;
  int rest = i;
  for (int d = L.ndim - 1; d >= 0; --d) {
    y[y_off + row * L.ndim + d] = rest % L.size[d];
    rest /= L.size[d];
  }
}

__kernel void isin(__global const T* x, const int x_off, __global const T* t, const int t_off, __global uchar* y,
                   const int y_off, const int m, const int invert, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const T value = x[x_off + i];
  int found = 0;
  for (int j = 0; j < m && !found; ++j) found = t[t_off + j] == value;
  y[y_off + i] = (uchar)(found != invert);
}
