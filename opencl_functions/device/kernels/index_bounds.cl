// The range of an index tensor, read back by the host to check indices before a kernel uses
// them (check_index_range in csrc/aten/tensors.cpp): b[0], b[1] = the smallest and largest of
// idx (n contiguous values of type INDEX, int or long). One work-group of BOUNDS_GROUP
// work-items (a power of two, set by the host), each over the values i ≡ its id
// (mod BOUNDS_GROUP), then a tree in local memory.
// A file of its own: it builds in a moment at first use, apart from index.cl's many kernels.
#ifndef INDEX
#define INDEX long
#endif
#ifndef BOUNDS_GROUP
#define BOUNDS_GROUP 64
#endif

__kernel __attribute__((reqd_work_group_size(BOUNDS_GROUP, 1, 1)))
void index_bounds(__global const INDEX* idx, const int idx_off, const int n, __global long* b, const int b_off) {
  __local long lo[BOUNDS_GROUP], hi[BOUNDS_GROUP];
  const int t = get_local_id(0);
  long low = LONG_MAX, high = LONG_MIN;
  for (int i = t; i < n; i += BOUNDS_GROUP) {
    const long v = idx[idx_off + i];
    low = min(low, v);
    high = max(high, v);
  }
  lo[t] = low;
  hi[t] = high;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = BOUNDS_GROUP / 2; step > 0; step /= 2) {
    if (t < step) {
      lo[t] = min(lo[t], lo[t + step]);
      hi[t] = max(hi[t], hi[t + step]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) {
    b[b_off] = lo[0];
    b[b_off + 1] = hi[0];
  }
}
