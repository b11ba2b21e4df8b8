// The range check of an index tensor, made on the device: the first index found outside
// [floor, size) (values equal to `ignore` aside where has_ignore: a loss's ignore_index) is
// written to the device's index record (Device::index_record in
// csrc/runtime/device.cpp), which the host reads at its next wait for the device and raises
// from (check_index_range in csrc/aten/tensors.cpp). The operator's own kernel keeps every
// access inside its tensor whatever the indices, so a wrong index costs a wrong value until
// that wait, never memory outside a buffer.
//   idx      n contiguous values of type INDEX (int or long)
//   flag     the record's first int: 0 while no index was found out of range; the work-item
//            that turns it to 1 writes rec[1..4] = the operator's code, the index, size, dim
// Any NDRange over n (each work-item steps by the global size).
#ifndef INDEX
#define INDEX long
#endif

__kernel void index_check(__global const INDEX* idx, const int idx_off, const int n, const long floor,
                          const long size, __global int* flag, const int flag_off, __global long* rec,
                          const int rec_off, const int code, const int dim, const long ignore,
                          const int has_ignore) {
  for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
    const long v = idx[idx_off + i];
    if ((v < floor || v >= size) && !(has_ignore && v == ignore)) {
      if (atomic_cmpxchg(flag + flag_off, 0, 1) == 0) {
        rec[rec_off + 1] = code;
        rec[rec_off + 2] = v;
        rec[rec_off + 3] = size;
        rec[rec_off + 4] = dim;
      }
      return;
    }
  }
}
