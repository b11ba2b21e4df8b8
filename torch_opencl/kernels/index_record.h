// The device's index record (Stream::index_record in csrc/runtime/index_checks.cpp), as kernels
// write it: 8 longs, of which rec[0]'s first int is 0 while no index was found out of range;
// the first work-item to find one sets it to 1 and writes rec[1] = the operator's code
// (Stream::index_op_code), rec[2] = the index, rec[3] = the size of the dimension, rec[4] =
// the dimension (-1: unnamed). The host reads it at its next wait for the device and raises.
// Included by index_check.cl (eager operators) and compiled.h (generated kernels).
#ifndef DEVICE_INDEX_RECORD_H
#define DEVICE_INDEX_RECORD_H

inline void index_record_error(__global long* rec, const long code, const long v, const long size, const long dim) {
  if (atomic_cmpxchg((__global int*)rec, 0, 1) == 0) {
    rec[1] = code;
    rec[2] = v;
    rec[3] = size;
    rec[4] = dim;
  }
}

#endif
