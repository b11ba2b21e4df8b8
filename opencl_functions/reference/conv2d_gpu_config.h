// reference/conv2d_gpu_config.h: conv2d_gpu.cl's configuration (staff-only): its tile sizes
// and build options turned into the macros the kernels use, the 16-bit storage types, and
// the tensor-core (MMA) fragments' layout. Included once, by conv2d_gpu.cl, before its kernels.
#ifndef CONV2D_GPU_CONFIG_H
#define CONV2D_GPU_CONFIG_H

#ifndef GTM
#define GTM 64
#endif
#ifndef GTN
#define GTN 64
#endif
#ifndef GWM
#define GWM 4
#endif
#ifndef GWN
#define GWN 4
#endif
#ifndef GTK
#define GTK 16
#endif
// float32 sums: products over SUM_K values of k at a time (a multiple of GTK), then added
// to the work-item's totals; 0 keeps one accumulator.
#ifndef SUM_K
#define SUM_K 256
#endif
#define GLX (GTN / GWN)
#define GLY (GTM / GWM)
#define G_THREADS (GLX * GLY)
#define GTM4 (GTM / 4)
#define GTN4 (GTN / 4)
#ifdef KH
#define K_H_ KH
#define K_W_ KW
#else
#define K_H_ K_h
#define K_W_ K_w
#endif
#ifdef VEC_W
#define G_A_PER (GTM * GTK / 4 / G_THREADS)  // weight float4s loaded per work-item and step
#else
#define G_A_PER (GTM * GTK / G_THREADS)      // weights loaded per work-item and step
#endif
#ifdef POINTWISE
#define G_B_PER (GTK * GTN4 / G_THREADS)     // input float4s loaded per work-item and step
#else
#define G_B_PER (GTK * GTN / G_THREADS)      // inputs loaded per work-item and step
#endif

// x, w, bias and y: IO_T, read as float by LD/LD4 and written by ST/ST4 (io_types.h).
#include "io_types.h"

#if (defined(IO_HALF) || defined(IO_BFLOAT)) && defined(EPI_RES)
#error "the residual epilogue reads float32: 16-bit builds take no residual"
#endif
#ifdef PARTS_FLOAT
#define Y_T float
#define ST_Y(p, i, v) ((p)[i] = (v))
#define ST4_Y(p, i, v) (*(__global float4*)((p) + (i)) = (v))
#else
#define Y_T IO_T
#define ST_Y ST
#define ST4_Y ST4
#endif

// The opencl device's fused convolutions build with an epilogue (preamble.h): conv2d_gpu's
// when it writes y (splits = 1), conv2d_sum_splits' otherwise. Plain builds store the sums.
#include "preamble.h"

// MMA: the tile's products on tensor cores through inline PTX (mma.sync m16n8k16, float16 or
// bfloat16 operands, float32 accumulation; NVIDIA's OpenCL compiler passes asm statements
// through). The loads from global memory are the plain build's; the tiles are staged in local
// memory as the operands' 16-bit patterns, A as [m][k] (k contiguous, rows padded to GTK + 8
// values) and B as [k][n] (n contiguous, as the pixels arrive; rows padded to GTN + 8), and warp
// w of the work-group computes a MMA_BM × MMA_BN block of the tile in 16×8 pieces (PTX ISA,
// "Matrix fragments for mma.m16n8k16": lane l = 4·r + c holds A's (r, 2c..2c+1),
// (r+8, 2c..2c+1), (r, 2c+8..2c+9), (r+8, 2c+8..2c+9), B's (2c..2c+1, r) and (2c+8..2c+9, r),
// and the sums (r, 2c..2c+1), (r+8, 2c..2c+1)). The fragments come from local memory by
// ldmatrix, four 8×8 matrices an instruction, each lane giving one 16-byte row's address: A's
// 16×16 piece as its four quarters, two of B's 16×8 pieces transposed (.trans: lane l gets
// rows 2c, 2c+1 of column r, which is B's fragment). The padding puts the 8 rows an 8×8
// matrix reads on 8 distinct groups of 4 banks. MMA_WM warps along m (the host's choice), the
// rest along n; GTK a multiple of 16.
#ifdef MMA
#if !defined(IO_HALF) && !defined(IO_BFLOAT)
#error "MMA takes 16-bit operands"
#endif
#ifdef NC_SWAPPED
#error "MMA does not take NC_SWAPPED"
#endif
#define MMA_WN (G_THREADS / 32 / MMA_WM)
#define MMA_BM (GTM / MMA_WM)
#define MMA_BN (GTN / MMA_WN)
#define MMA_TM (MMA_BM / 16)
#define MMA_TN (MMA_BN / 8)
#define MMA_KP (GTK + 8)  // A's row length in local memory (16-bit values)
#define MMA_NP (GTN + 8)  // B's
#if G_THREADS % 32 || MMA_BM % 16 || MMA_BN % 8 || GTK % 16 || MMA_WM * MMA_WN * 32 != G_THREADS
#error "MMA: 32·MMA_WM·MMA_WN work-items, blocks of whole 16×8 pieces, GTK a multiple of 16"
#endif
#ifdef IO_HALF
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#else
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#endif
#endif

// What the loads stage in registers on their way to local memory: float values, or in MMA
// builds the operands' 16-bit patterns as they are (no conversion to float and back).
#ifdef MMA
#define REG_T ushort
#define REG4_T ushort4
#define LDV(p, i) (((__global const ushort*)(p))[i])
#define LDV4(p, i) (*(__global const ushort4*)((__global const ushort*)(p) + (i)))
#define ZERO ((ushort)0)
#define ZERO4 ((ushort4)(0))
#else
#define REG_T float
#define REG4_T float4
#define LDV LD
#define LDV4 LD4
#define ZERO 0.0f
#define ZERO4 ((float4)(0.0f))
#endif

#endif  // CONV2D_GPU_CONFIG_H
