// Sorting and sampling of the opencl device. Tensor arguments are a buffer and an offset in
// elements; -DT= is the key type (-DFLOATING for floating types: NaN sorts as the largest
// value, as in torch), -DDESCENDING sorts largest first.
//
//   merge_pass        one pass of a stable merge sort of each row of keys (rows, n)
//                     contiguous, with their indices (rows, n) int64 alongside: sorted runs of
//                     `width` elements are merged in pairs into out (rows, n). One work-item
//                     per element: its place in the merged pair is its rank in its own run
//                     plus, by binary search, how many elements of the partner run go before
//                     it (for the left run's elements: those strictly before; for the right
//                     run's: those not after, so equal keys keep their order). log2(n) passes
//                     sort a row.
//   multinomial_draw  y (rows, k) int64: for each uniform u in [0, 1) of u (rows, k), the first
//                     category j of cdf (rows, n), a row's inclusive cumulative sums of its
//                     probabilities, with cdf[j] > u·cdf[n-1] (categories of probability 0
//                     are never drawn). One work-item per draw.

#ifndef T
#define T float
#endif

#ifdef FLOATING
#define IS_NAN(a) isnan(a)
#else
#define IS_NAN(a) 0
#endif

// Whether key a goes strictly before key b.
inline int before(const T a, const T b) {
#ifdef DESCENDING
  return a > b || (IS_NAN(a) && !IS_NAN(b));
#else
  return a < b || (!IS_NAN(a) && IS_NAN(b));
#endif
}

__kernel void merge_pass(__global const T* keys, const int keys_off, __global const long* idx, const int idx_off,
                         __global T* out_keys, const int out_keys_off, __global long* out_idx, const int out_idx_off,
                         const int n, const int width, const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  const int row = e / n, i = e % n;
  const int run = i / width, start = run * width;
  const int left = (run & 1) == 0;
  const int partner = left ? start + width : start - width;
  const int partner_end = min(partner + width, n);
  __global const T* r = keys + keys_off + (size_t)row * n;
  const T key = r[i];
  int lo = partner, hi = max(partner, partner_end);
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    const int goes_before = left ? before(r[mid], key) : !before(key, r[mid]);
    if (goes_before) lo = mid + 1;
    else hi = mid;
  }
  const int merged_start = left ? start : partner;
  const size_t at = (size_t)row * n + merged_start + (i - start) + (lo - partner);
  out_keys[out_keys_off + at] = key;
  out_idx[out_idx_off + at] = idx[idx_off + (size_t)row * n + i];
}

__kernel void multinomial_draw(__global const float* cdf, const int cdf_off, __global const float* u,
                               const int u_off, __global long* y, const int y_off, const int n, const int k,
                               const int total) {
  const int e = get_global_id(0);
  if (e >= total) return;
  __global const float* c = cdf + cdf_off + (size_t)(e / k) * n;
  const float sum = c[n - 1];
  const float target = u[u_off + e] * sum;
  const int strict = target < sum;  // else (rounding) the last category of nonzero probability
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (strict ? c[mid] > target : c[mid] >= sum) hi = mid;
    else lo = mid + 1;
  }
  y[y_off + e] = lo;
}
