// The range check of an index tensor, made on the device: the first index found outside
// [floor, size) (values equal to `ignore` aside where has_ignore: a loss's ignore_index) is
// written to the device's index record (index_record.h), which the host reads at its next
// wait for the device and raises from (check_index_range in csrc/aten/tensors.cpp). The
// operator's own kernel keeps every access inside its tensor whatever the indices, so a
// wrong index costs a wrong value until that wait, never memory outside a buffer.
//   idx      n contiguous values of type INDEX (int or long)
// Any NDRange over n (each work-item steps by the global size).
#include "index_record.h"

#ifndef INDEX
#define INDEX long
#endif

__kernel void index_check(__global const INDEX* idx, const int idx_off, const int n, const long floor,
                          const long size, __global long* rec, const int rec_off, const int code, const int dim,
                          const long ignore, const int has_ignore) {
  for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
    const long v = idx[idx_off + i];
    if ((v < floor || v >= size) && !(has_ignore && v == ignore)) {
      index_record_error(rec + rec_off, code, v, size, dim);
      return;
    }
  }
}
