// reference/preamble.h: the macros every reference kernel starts with (conv2d_gpu.cl,
// conv2d_cpu.cl, depthwise.cl, winograd.cl, matmul.cl; staff-only). The runtime builds a
// source that includes headers with the source's own folder on the include path, so each
// includes "preamble.h" as it stands.
//   VEC(n), VLOAD(n), VSTORE(n)  floatn, vloadn and vstoren, n a macro (VEC(VW) is float8
//                                where VW is 8);
//   EPI(v, i), EPIV(v, i, n)     output v (a vector of n outputs) at index i of y as stored,
//   EPI_PARAM, EPI_ARGS          and the residual argument: epilogue.h's fused epilogue in
//                                builds with -DEPI_RES or -DEPI_ACT (the opencl device's fused
//                                convolutions), else v as computed and no argument;
//   ACT(v), ACTV(v, n)           the activation alone (the products: -DEPI_ACT), else v.
#ifndef REFERENCE_PREAMBLE_H
#define REFERENCE_PREAMBLE_H

#define VEC_(n) float##n
#define VEC(n) VEC_(n)
#define VLOAD_(n) vload##n
#define VLOAD(n) VLOAD_(n)
#define VSTORE_(n) vstore##n
#define VSTORE(n) VSTORE_(n)

#if defined(EPI_ACT) || defined(EPI_RES)
#include "epilogue.h"
#else
#define EPI_PARAM
#define EPI_ARGS
#define EPI(v, i) (v)
#define EPIV(v, i, n) (v)
#define ACT(v) (v)
#define ACTV(v, n) (v)
#endif

#endif  // REFERENCE_PREAMBLE_H
