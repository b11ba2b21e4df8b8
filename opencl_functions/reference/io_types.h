// reference/io_types.h: the element types of the reference's GPU convolutions (conv2d_gpu.cl,
// winograd.cl; staff-only), which include it: float, or in builds with
//   -DIO_HALF     float16, read and written with vload_half / vstore_half_rte (core OpenCL C,
//                 no cl_khr_fp16);
//   -DIO_BFLOAT   bfloat16: the high half of a float, in ushort; rounded to nearest even when
//                 stored, NaN kept quiet.
// Everything is computed in float:
//   IO_T              the storage type
//   LD(p, i)          element i of p as a float
//   LD4(p, i)         elements i .. i+3 as a float4; p + i must be aligned to 4 elements
//   ST(p, i, v)       stores the float v as element i
//   ST4(p, i, v)      stores the float4 v as elements i .. i+3 (aligned to 4 elements)
// (The aligned forms, vloada_half4 and vstorea_half4_rte, tell the compiler it may move 8
// bytes at once; vload_half4 promises 2-byte alignment only.)
#ifndef REFERENCE_IO_TYPES_H
#define REFERENCE_IO_TYPES_H

#if defined(IO_HALF)
#define IO_T half
#define LD(p, i) vload_half((i), (p))
#define LD4(p, i) vloada_half4(0, (p) + (i))
#define ST(p, i, v) vstore_half_rte((v), (i), (p))
#define ST4(p, i, v) vstorea_half4_rte((v), 0, (p) + (i))
#elif defined(IO_BFLOAT)
#define IO_T ushort
inline float bf16_load(const ushort b) { return as_float((uint)b << 16); }
inline ushort bf16_round(const float f) {
  const uint u = as_uint(f);
  return isnan(f) ? (ushort)((u >> 16) | 0x40) : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline ushort4 bf16_round4(const float4 v) {
  return (ushort4)(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
}
#define LD(p, i) bf16_load((p)[i])
#define LD4(p, i) as_float4(convert_uint4(*(__global const ushort4*)((p) + (i))) << 16)
#define ST(p, i, v) ((p)[i] = bf16_round(v))
#define ST4(p, i, v) (*(__global ushort4*)((p) + (i)) = bf16_round4(v))
#else
#define IO_T float
#define LD(p, i) ((p)[i])
#define LD4(p, i) (*(__global const float4*)((p) + (i)))
#define ST(p, i, v) ((p)[i] = (v))
#define ST4(p, i, v) (*(__global float4*)((p) + (i)) = (v))
#endif

#endif  // REFERENCE_IO_TYPES_H
