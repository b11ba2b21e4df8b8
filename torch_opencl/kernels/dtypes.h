// Element types of the opencl device's kernels, and how an element is read and written.
// Included by the kernel files (the host builds every device program with -I<this folder>,
// and -DHAS_FP64 where the device reports cl_khr_fp64).
//
// A kernel names a tensor's element type by its storage name (the host's cl_type()):
//   float, double, long, int, short, char, uchar (uint8 and bool)
//   half    float16: declared as half, read and written with vload_half / vstore_half_rte
//           (core OpenCL C, no cl_khr_fp16), computed in float
//   bfloat  bfloat16: the high 16 bits of a float, stored as ushort, computed in float;
//           rounded to nearest even on store, NaN kept (quiet)
//
//   READ(T, p, i)       element i of p (a __global T *) in the type it computes in
//                       (T itself; float for half and bfloat)
//   WRITE(T, p, i, v)   stores the number v (any type) as element i of p
//   READ4, WRITE4       elements 4i .. 4i+3 as a float4 (float, half, bfloat; aligned)

#ifndef DEVICE_DTYPES_H
#define DEVICE_DTYPES_H

#ifdef HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

typedef ushort bfloat;

inline float bfloat_to_float(const ushort b) { return as_float((uint)b << 16); }

inline ushort float_to_bfloat(const float f) {
  const uint u = as_uint(f);
  if (isnan(f)) return (ushort)((u >> 16) | 0x40);  // a quiet NaN of the same sign
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#define READ(T, p, i) READ_(T, p, i)
#define READ_(T, p, i) read_##T(p, i)
#define WRITE(T, p, i, v) WRITE_(T, p, i, v)
#define WRITE_(T, p, i, v) write_##T(p, i, v)

#define read_float(p, i) ((p)[i])
#define read_double(p, i) ((p)[i])
#define read_long(p, i) ((p)[i])
#define read_int(p, i) ((p)[i])
#define read_short(p, i) ((p)[i])
#define read_char(p, i) ((p)[i])
#define read_uchar(p, i) ((p)[i])
#define read_half(p, i) vload_half((i), (p))
#define read_bfloat(p, i) bfloat_to_float((p)[i])

// Four elements 4i .. 4i+3 at once, as a float4 (p + 4i aligned to four elements).
#define READ4(T, p, i) READ4_(T, p, i)
#define READ4_(T, p, i) read4_##T(p, i)
#define WRITE4(T, p, i, v) WRITE4_(T, p, i, v)
#define WRITE4_(T, p, i, v) write4_##T(p, i, v)
#define read4_float(p, i) (((__global const float4*)(p))[i])
#define read4_half(p, i) vloada_half4((i), (p))
#define read4_bfloat(p, i) as_float4(convert_uint4(((__global const ushort4*)(p))[i]) << 16)
#define write4_float(p, i, v) (((__global float4*)(p))[i] = (v))
#define write4_half(p, i, v) vstorea_half4_rte((v), (i), (p))
#define write4_bfloat(p, i, v) \
  (((__global ushort4*)(p))[i] = (ushort4)(float_to_bfloat((v).x), float_to_bfloat((v).y), float_to_bfloat((v).z), float_to_bfloat((v).w)))

#define write_float(p, i, v) ((p)[i] = (float)(v))
#define write_double(p, i, v) ((p)[i] = (double)(v))
#define write_long(p, i, v) ((p)[i] = (long)(v))
#define write_int(p, i, v) ((p)[i] = (int)(v))
#define write_short(p, i, v) ((p)[i] = (short)(v))
#define write_char(p, i, v) ((p)[i] = (char)(v))
#define write_uchar(p, i, v) ((p)[i] = (uchar)(v))
#define write_half(p, i, v) vstore_half_rte((float)(v), (i), (p))
#define write_bfloat(p, i, v) ((p)[i] = float_to_bfloat((float)(v)))

#endif  // DEVICE_DTYPES_H
