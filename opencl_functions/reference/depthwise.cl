// reference/depthwise.cl: the reference's depthwise convolutions (staff-only; depthwise.hpp
// launches them, conv2d.hpp picks one per device and shape). Same layouts as conv2d.cl, with C_in = C_out = groups:
//
//   x      is (B, C, H, W)          input, padded by the caller
//   w      is (C, 1, KH, KW)        one filter per channel
//   bias   is (C), read only when has_bias
//   y      is (B, C, H_out, W_out)  output
//
// The kernel's shape is compiled in: -DKH -DKW (≤ 7), -DSH -DSW (strides), -DDH -DDW
// (dilations), so every tap loop unrolls and no stride is tested per element.
// Offsets are int: x and y must have < 2^31 elements.
//
// v3 conv2d_depthwise_rows (CPUs): work-item (xb, yb, b·C + c) computes RY output rows
//   oh = yb·RY .. +RY-1 × VW columns ow = xb·VW .. +VW-1 of plane (b, c) as RY vectors.
//   It walks the input rows those outputs read, once each: per input row and tap column
//   one vector of VW inputs (stride 1 or dilated: one unaligned load; stride 2: two loads
//   and their even or odd lanes; larger strides: a gather), multiplied into every output
//   row that reads it. Vectors may read past the end of a row (into the next row: those
//   lanes are never stored); a work-item whose reads could pass the end of x takes the
//   scalar path instead. Rows past H_out and lanes past W_out are not stored.
//   NDRange (ceil(W_out/VW), ceil(H_out/RY), B·C); -DVW=4|8|16, -DRY.
// v3 conv2d_depthwise_tiled (GPUs): a work-group of (TX, TY, TZ) work-items computes, for
//   each of TZ planes, a tile of TX columns × TY·RY rows. It stages the input under the
//   tile in local memory (all work-items of the plane load it together, coalesced along
//   rows), waits at a barrier, and work-item (tx, ty, tz) computes column tx, rows
//   ty·RY .. +RY-1 of its plane from local memory, reusing each input row for every output
//   row that reads it.
//   NDRange (ceil(W_out/TX)·TX, ceil(H_out/(TY·RY))·TY, ceil(B·C/TZ)·TZ), local (TX, TY, TZ).
// v2 (conv2d.cl: one output per work-item on GPUs, one vector of a row per work-item with
// the taps and strides read at run time on CPUs) stays for the launches that use it.

#ifndef KH
#define KH 3
#endif
#ifndef KW
#define KW 3
#endif
#ifndef SH
#define SH 1
#endif
#ifndef SW
#define SW 1
#endif
#ifndef DH
#define DH 1
#endif
#ifndef DW
#define DW 1
#endif
#ifndef VW
#define VW 16
#endif
#ifndef RY
#define RY 4
#endif
#ifndef TX
#define TX 16
#endif
#ifndef TY
#define TY 8
#endif
#ifndef TZ
#define TZ 1
#endif

// Input rows read by RY output rows: output row i, tap row kh reads input row i·SH + kh·DH.
#define IN_ROWS ((RY - 1) * SH + (KH - 1) * DH + 1)

// The opencl device's fused convolutions build these kernels with an epilogue (preamble.h).
#include "preamble.h"
typedef VEC(VW) floatv;

// VW inputs p[0], p[SW], ..., p[(VW-1)·SW] as one vector.
inline floatv load_strided(__global const float* p) {
#if SW == 1
  return VLOAD(VW)(0, p);
#elif SW == 2 && VW > 1
  const floatv lo = VLOAD(VW)(0, p), hi = VLOAD(VW)(0, p + VW);
  return (floatv)(lo.even, hi.even);
#else
  float tmp[VW];
#pragma unroll
  for (int v = 0; v < VW; ++v) tmp[v] = p[v * SW];
  return VLOAD(VW)(0, tmp);
#endif
}

__kernel void conv2d_depthwise_rows(__global const float* restrict x, __global const float* restrict w,
                                    __global const float* restrict bias, __global float* restrict y,
                                    const int has_bias, const int B, const int C, const int H, const int W,
                                    const int H_out, const int W_out EPI_PARAM) {
  const int ow0 = get_global_id(0) * VW;
  const int oh0 = get_global_id(1) * RY;
  const int bc = get_global_id(2);
  const int c = bc % C;
  __global const float* xs = x + ((size_t)bc * H + oh0 * SH) * W + ow0 * SW;
  const size_t y0 = ((size_t)bc * H_out + oh0) * W_out + ow0;
  __global float* ys = y + y0;
  float wk[KH][KW];
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) wk[kh][kw] = w[(c * KH + kh) * KW + kw];
  const float b0 = has_bias ? bias[c] : 0.0f;
  const int rows = min(RY, H_out - oh0);

  // The furthest element a vector load reads: row IN_ROWS-1, lane VW-1 of tap KW-1 (two
  // vectors per load when SW == 2).
  const size_t last = ((size_t)bc * H + oh0 * SH + IN_ROWS - 1) * W + ow0 * SW + (KW - 1) * DW +
                      (SW == 2 ? 2 * VW - 1 : (VW - 1) * SW);
  if (last < (size_t)B * C * H * W) {
    floatv acc[RY];
#pragma unroll
    for (int i = 0; i < RY; ++i) acc[i] = (floatv)(b0);
    // Input row j feeds output row i through tap row kh = (j - i·SH) / DH where that is a
    // whole tap row; with every size compiled in, these tests vanish at compile time.
#pragma unroll
    for (int j = 0; j < IN_ROWS; ++j) {
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
        const floatv v = load_strided(xs + j * W + kw * DW);
#pragma unroll
        for (int i = 0; i < RY; ++i) {
          const int d = j - i * SH;
          if (d >= 0 && d % DH == 0 && d / DH < KH) acc[i] = fma((floatv)(wk[d / DH][kw]), v, acc[i]);
        }
      }
    }
    const int lanes = W_out - ow0;
    for (int i = 0; i < rows; ++i) {
      const size_t row = y0 + (size_t)i * W_out;
      if (lanes >= VW) {
        VSTORE(VW)(EPIV(acc[i], row, VW), 0, ys + i * W_out);
      } else {
        float out[VW];
        VSTORE(VW)(acc[i], 0, out);
        for (int v = 0; v < lanes; ++v) ys[i * W_out + v] = EPI(out[v], row + v);
      }
    }
  } else {
    // Near the end of x: one output at a time, reading only what exists.
    for (int i = 0; i < rows; ++i) {
      for (int v = 0; v < VW && ow0 + v < W_out; ++v) {
        float acc = b0;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) acc = fma(wk[kh][kw], xs[(i * SH + kh * DH) * W + v * SW + kw * DW], acc);
        ys[i * W_out + v] = EPI(acc, y0 + (size_t)i * W_out + v);
      }
    }
  }
}

// The input under a (TX columns × TY·RY rows) output tile: IN_ROWS_T rows × IN_COLS_T columns.
#define IN_ROWS_T ((TY * RY - 1) * SH + (KH - 1) * DH + 1)
#define IN_COLS_T ((TX - 1) * SW + (KW - 1) * DW + 1)

__kernel __attribute__((reqd_work_group_size(TX, TY, TZ)))
void conv2d_depthwise_tiled(__global const float* restrict x, __global const float* restrict w,
                            __global const float* restrict bias, __global float* restrict y,
                            const int has_bias, const int B, const int C, const int H, const int W,
                            const int H_out, const int W_out EPI_PARAM) {
  const int tx = get_local_id(0), ty = get_local_id(1), tz = get_local_id(2);
  const int ow0 = get_group_id(0) * TX, oh0 = get_group_id(1) * TY * RY;
  const int bc = get_global_id(2);
  const bool plane_ok = bc < B * C;
  const int c = plane_ok ? bc % C : 0;
  __local float tile[TZ][IN_ROWS_T][IN_COLS_T];

  // Stage the plane's input under the tile: the TX·TY work-items of plane tz load
  // consecutive elements of each row (zeros outside the image and past the last plane).
  __global const float* xp = x + (size_t)bc * H * W;
  const int ih0 = oh0 * SH, iw0 = ow0 * SW;
  for (int e = ty * TX + tx; e < IN_ROWS_T * IN_COLS_T; e += TX * TY) {
    const int r = e / IN_COLS_T, col = e - r * IN_COLS_T;
    const int ih = ih0 + r, iw = iw0 + col;
    tile[tz][r][col] = (plane_ok && ih < H && iw < W) ? xp[ih * W + iw] : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  float wk[KH][KW];
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) wk[kh][kw] = w[(c * KH + kh) * KW + kw];
  const float b0 = (has_bias && plane_ok) ? bias[c] : 0.0f;
  float acc[RY];
#pragma unroll
  for (int i = 0; i < RY; ++i) acc[i] = b0;
  // Tile rows r0 = ty·RY·SH .. feed this work-item's RY outputs: as in conv2d_depthwise_rows.
  const int r0 = ty * RY * SH, c0 = tx * SW;
#pragma unroll
  for (int j = 0; j < (RY - 1) * SH + (KH - 1) * DH + 1; ++j) {
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const float v = tile[tz][r0 + j][c0 + kw * DW];
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const int d = j - i * SH;
        if (d >= 0 && d % DH == 0 && d / DH < KH) acc[i] = fma(wk[d / DH][kw], v, acc[i]);
      }
    }
  }
  const int ow = ow0 + tx;
  if (!plane_ok || ow >= W_out) return;
  const size_t plane = (size_t)bc * H_out * W_out;
#pragma unroll
  for (int i = 0; i < RY; ++i) {
    const int oh = oh0 + ty * RY + i;
    if (oh < H_out) y[plane + oh * W_out + ow] = EPI(acc[i], plane + oh * W_out + ow);
  }
}
