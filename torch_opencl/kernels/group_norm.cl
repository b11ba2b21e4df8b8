// Group norm's backward on the opencl device. x and dy are (N, C, HW) contiguous, C
// channels in G groups of D = C/G; tensor arguments are a buffer and an offset in elements,
// -DT= the element type (float, or double with cl_khr_fp64), in which sums run too.
//
// gn_channel_sums    one work-group of GROUP work-items per row (n, c):
//                    ds[n,c] = Σ_hw dy·x, db[n,c] = Σ_hw dy (strided partial sums, then a
//                    tree through local memory).
// gn_backward_input  one work-item per element (n, c, hw), g = c / D:
//                    dx = a[n,c]·dy + b[n,g]·x + e[n,g], the coefficients (a = rstd·gamma,
//                    b and e from the group's sums) made by the host from ds and db.

#include "dtypes.h"  // cl_khr_fp64 enabled where the device has it
#ifndef T
#define T float
#endif
#ifndef GROUP
#define GROUP 64
#endif

#define IN(name) __global const T *restrict name, const int name##_off
#define OUT(name) __global T *restrict name, const int name##_off

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void gn_channel_sums(IN(dy), IN(x), OUT(ds), OUT(db), const int HW) {
  __local T part_ds[GROUP], part_db[GROUP];
  const int row = get_group_id(0), lid = get_local_id(0);
  const size_t base = (size_t)row * HW;
  T a = 0, b = 0;
  for (int k = lid; k < HW; k += GROUP) {
    const T g = dy[dy_off + base + k];
    a += g * x[x_off + base + k];
    b += g;
  }
  part_ds[lid] = a;
  part_db[lid] = b;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) {
      part_ds[lid] += part_ds[lid + step];
      part_db[lid] += part_db[lid + step];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    ds[ds_off + row] = part_ds[0];
    db[db_off + row] = part_db[0];
  }
}

__kernel void gn_backward_input(IN(dy), IN(x), IN(a), IN(b), IN(e), OUT(dx), const int C, const int D, const int HW,
                                const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int nc = i / HW;
  const int n = nc / C, c = nc % C;
  const int ng = n * (C / D) + c / D;
  dx[dx_off + i] = a[a_off + nc] * dy[dy_off + i] + b[b_off + ng] * x[x_off + i] + e[e_off + ng];
}
