// reference/conv2d_cpu.cl: the reference's convolutions for CPUs (staff-only), picked per
// device and shape by reference/conv2d.hpp for the library and the opencl device alike.
// OpenCL C 1.2. Same arguments as conv2d_tiled (conv2d.cl) unless noted:
//
//   x      is (B, C_in, H, W)                    input, padded by the caller
//   w      is (C_out, C_in/groups, K_h, K_w)     weights
//   bias   is (C_out), read only when has_bias
//   y      is (B, C_out, H_out, W_out)           output
//
// v2 conv2d_cpu: barrier-free direct convolution for CPUs (PoCL). Weights are first
// packed by conv2d_pack_weights into blocks of COV output channels,
//   wp is (groups, co_blocks, C_in/groups, K_h, K_w, COV), zero past C_out/groups,
// so one vector load gives one tap (ci, kh, kw) of COV output channels. Work-item
// (cb, pb, b·groups+g) computes COV output channels × PX consecutive output pixels
// (flattened oh·W_out+ow of image b), accumulating PX vectors in registers: each tap
// is one vector load and PX broadcast multiply-adds. NDRange: (co_blocks,
// ceil(H_out·W_out/PX), B·groups): channel blocks first, so the work-items that read the
// same input pixels run together. Built with -DKH=.. -DKW=.. (the kernel size) so the tap
// loops unroll.

#ifndef COV
#define COV 16
#endif
#ifndef PX
#define PX 8
#endif
// The opencl device's fused convolutions build with an epilogue (preamble.h); plain builds
// store what they computed.
#include "preamble.h"
typedef VEC(COV) floatv;
// The kernel size of conv2d_cpu, fixed at build time when KH and KW are defined.
#ifdef KH
#define KH_ KH
#define KW_ KW
#define TAP_UNROLL _Pragma("unroll")
#else
#define KH_ K_h
#define KW_ K_w
#define TAP_UNROLL
#endif

// wp (groups, co_blocks, C_in/groups·K_h·K_w, COV) from w (C_out, C_in/groups, K_h, K_w).
// NDRange: (k_dim, co_blocks·COV, groups).
__kernel void conv2d_pack_weights(__global const float* restrict w, __global float* restrict wp,
                                  const int k_dim, const int cout_g, const int co_blocks) {
  const int r = get_global_id(0);
  const int c = get_global_id(1);
  const int g = get_global_id(2);
  const int cb = c / COV, lane = c - cb * COV;
  const float v = c < cout_g ? w[(size_t)(g * cout_g + c) * k_dim + r] : 0.0f;
  wp[((size_t)(g * co_blocks + cb) * k_dim + r) * COV + lane] = v;
}

// The bias, the epilogue and the store of one block: acc[j] holds COV output channels of pixel
// p0 + j. The PX×COV block is transposed through private memory so each output channel's
// PX pixels are stored together.
inline void store_block(__global float* restrict y, __global const float* restrict bias, const int has_bias,
                        floatv* acc, const int b, const int g, const int co0, const int p0, const int C_out,
                        const int cout_g, const int hw_out EPI_PARAM) {
  const bool full_co = co0 + COV <= cout_g;
  if (has_bias) {
    floatv bv;
    if (full_co) {
      bv = VLOAD(COV)(0, bias + g * cout_g + co0);
    } else {
      float tmp[COV];
      for (int i = 0; i < COV; ++i) tmp[i] = co0 + i < cout_g ? bias[g * cout_g + co0 + i] : 0.0f;
      bv = VLOAD(COV)(0, tmp);
    }
#pragma unroll
    for (int j = 0; j < PX; ++j) acc[j] += bv;
  }
  float out[PX][COV];
#pragma unroll
  for (int j = 0; j < PX; ++j) VSTORE(COV)(acc[j], 0, out[j]);
  const size_t y0 = (size_t)(b * C_out + g * cout_g + co0) * hw_out + p0;
  const bool full_px = p0 + PX <= hw_out;
#pragma unroll
  for (int i = 0; i < COV; ++i) {
    if (full_co || co0 + i < cout_g) {
      const size_t yr = y0 + (size_t)i * hw_out;
      if (full_px) {
#pragma unroll
        for (int j = 0; j < PX; ++j) y[yr + j] = EPI(out[j][i], yr + j);
      } else {
        for (int j = 0; p0 + j < hw_out; ++j) y[yr + j] = EPI(out[j][i], yr + j);
      }
    }
  }
}

// Offsets of the PX output pixels p0.. in an input channel (the last pixel repeats past the
// end of the image).
inline void pixel_offsets(int* xoff, const int p0, const int hw_out, const int W_out, const int W,
                          const int stride_h, const int stride_w) {
#pragma unroll
  for (int j = 0; j < PX; ++j) {
    const int p = min(p0 + j, hw_out - 1);
    const int oh = p / W_out;
    xoff[j] = oh * stride_h * W + (p - oh * W_out) * stride_w;
  }
}

// KC (optional, with NS): the input channels in chunks of KC, each chunk over NS blocks of PX
// pixels before the next, the blocks' sums kept in private memory between chunks. A chunk's
// packed weights (KC·K_h·K_w·COV floats) then stay in L1 for NS blocks, where without KC
// every block streams its channel block's weights whole (64 KB at 1024 inputs and COV 16).
// On a 2-core Zen 3 it was ahead on some of ResNet-50's 3×3 layers and even on the 1×1 ones
// (docs/PERFORMANCE.md), so only the sweep measures it. NDRange dim 1:
// ceil(H_out·W_out / (PX·NS)).
#ifndef NS
#define NS 1
#endif
#ifndef SUM_TAPS
#define SUM_TAPS 64
#endif

__kernel void conv2d_cpu(__global const float* restrict x, __global const float* restrict wp,
                         __global const float* restrict bias, __global float* restrict y,
                         const int has_bias, const int B, const int C_in, const int H, const int W,
                         const int C_out, const int K_h, const int K_w, const int stride_h,
                         const int stride_w, const int dilation_h, const int dilation_w,
                         const int groups, const int H_out, const int W_out EPI_PARAM) {
  const int pb = get_global_id(1);
  const int cb = get_global_id(0);
  const int b = get_global_id(2) / groups;
  const int g = get_global_id(2) - b * groups;
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int co_blocks = (cout_g + COV - 1) / COV;
  const int hw_out = H_out * W_out;
  const int taps = KH_ * KW_;
  __global const float* x_img = x + (size_t)(b * C_in + g * cin_g) * H * W;
  __global const float* w_blk = wp + (size_t)(g * co_blocks + cb) * cin_g * taps * COV;

  // Input channels c0 .. c1-1 for the block of PX pixels at p0: with KC, every chunk for NS
  // blocks, a block's sums starting from the previous chunk's (ACC_START); else one pass.
#ifdef KC
  const int p_first = pb * PX * NS;
  floatv part[NS][PX];
  for (int c0 = 0; c0 < cin_g; c0 += KC) {
    const int c1 = min(cin_g, c0 + KC);
    for (int s = 0; s < NS; ++s) {
      const int p0 = p_first + s * PX;
      if (p0 >= hw_out) break;
#define ACC_START(j) (c0 == 0 ? (floatv)(0.0f) : part[s][j])
#else
  {
    const int c0 = 0, c1 = cin_g;
    {
      const int p0 = pb * PX;
#define ACC_START(j) ((floatv)(0.0f))
#endif
      int xoff[PX];
      pixel_offsets(xoff, p0, hw_out, W_out, W, stride_h, stride_w);
      // Two-level sums: each run of SUM_TAPS multiply-adds accumulates from zero, then adds
      // to the block's total (one long accumulator over C_in·K_h·K_w products drifted to
      // 3-6x torch's float32 error against float64; torch's own products sum in blocks).
      floatv total[PX];
#pragma unroll
      for (int j = 0; j < PX; ++j) total[j] = ACC_START(j);
      const int run = max(1, SUM_TAPS / taps);  // input channels per partial sum
      __global const float* xc = x_img + (size_t)c0 * H * W;
      __global const float* wc = w_blk + (size_t)c0 * taps * COV;
      for (int cr = c0; cr < c1; cr += run) {
        floatv acc[PX];
#pragma unroll
        for (int j = 0; j < PX; ++j) acc[j] = (floatv)(0.0f);
        const int ce = min(c1, cr + run);
        for (int ci = cr; ci < ce; ++ci, xc += H * W) {
          TAP_UNROLL
          for (int kh = 0; kh < KH_; ++kh) {
            __global const float* xr = xc + kh * dilation_h * W;
            TAP_UNROLL
            for (int kw = 0; kw < KW_; ++kw, wc += COV) {
              const floatv wv = VLOAD(COV)(0, wc);
              __global const float* xs = xr + kw * dilation_w;
#pragma unroll
              for (int j = 0; j < PX; ++j) acc[j] = fma(wv, (floatv)(xs[xoff[j]]), acc[j]);
            }
            if (taps > SUM_TAPS) {  // a long kernel (a weight gradient's: an image's taps): a sum per row
#pragma unroll
              for (int j = 0; j < PX; ++j) {
                total[j] += acc[j];
                acc[j] = (floatv)(0.0f);
              }
            }
          }
        }
#pragma unroll
        for (int j = 0; j < PX; ++j) total[j] += acc[j];
      }
#ifdef KC
      if (c1 < cin_g) {
#pragma unroll
        for (int j = 0; j < PX; ++j) part[s][j] = total[j];
        continue;
      }
#endif
      store_block(y, bias, has_bias, total, b, g, cb * COV, p0, C_out, cout_g, hw_out EPI_ARGS);
    }
  }
#undef ACC_START
}

// v2 conv2d_depthwise: C_in/groups = C_out/groups = 1. One output per work-item,
// NDRange (W_out, H_out, B·C_out), so consecutive work-items read consecutive inputs.
__kernel void conv2d_depthwise(__global const float* restrict x, __global const float* restrict w,
                               __global const float* restrict bias, __global float* restrict y,
                               const int has_bias, const int B, const int C_in, const int H, const int W,
                               const int C_out, const int K_h, const int K_w, const int stride_h,
                               const int stride_w, const int dilation_h, const int dilation_w,
                               const int groups, const int H_out, const int W_out EPI_PARAM) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int bc = get_global_id(2);  // b·C_out + c, and the input channel is the same
  if (ow >= W_out || oh >= H_out) return;
  const int c = bc % C_out;
  __global const float* xs = x + ((size_t)bc * H + oh * stride_h) * W + ow * stride_w;
  __global const float* ws = w + (size_t)c * K_h * K_w;
  float acc = has_bias ? bias[c] : 0.0f;
  for (int kh = 0; kh < K_h; ++kh)
    for (int kw = 0; kw < K_w; ++kw) acc = fma(ws[kh * K_w + kw], xs[kh * dilation_h * W + kw * dilation_w], acc);
  const size_t i = ((size_t)bc * H_out + oh) * W_out + ow;
  y[i] = EPI(acc, i);
}

// v2 conv2d_depthwise_cpu: depthwise for CPUs. Work-item (ob, oh, b·C_out+c) computes
// the COV outputs ow = ob·COV .. ob·COV+COV-1 of row oh as one vector: per tap, one
// or two vector loads of the input row (stride 1 or 2; a gather otherwise), one multiply-add.
// NDRange: (ceil(W_out/COV), H_out, B·C_out).
__kernel void conv2d_depthwise_cpu(__global const float* restrict x, __global const float* restrict w,
                                   __global const float* restrict bias, __global float* restrict y,
                                   const int has_bias, const int B, const int C_in, const int H, const int W,
                                   const int C_out, const int K_h, const int K_w, const int stride_h,
                                   const int stride_w, const int dilation_h, const int dilation_w,
                                   const int groups, const int H_out, const int W_out EPI_PARAM) {
  const int ow0 = get_global_id(0) * COV;
  const int oh = get_global_id(1);
  const int bc = get_global_id(2);
  const int c = bc % C_out;
  __global const float* xs = x + ((size_t)bc * H + oh * stride_h) * W + ow0 * stride_w;
  __global const float* ws = w + (size_t)c * K_h * K_w;
  const size_t y0 = ((size_t)bc * H_out + oh) * W_out + ow0;
  __global float* ys = y + y0;
  const float b0 = has_bias ? bias[c] : 0.0f;
  if (ow0 + COV <= W_out) {
    floatv acc = (floatv)(b0);
    for (int kh = 0; kh < K_h; ++kh) {
      for (int kw = 0; kw < K_w; ++kw) {
        __global const float* xp = xs + kh * dilation_h * W + kw * dilation_w;
        floatv v;
        if (stride_w == 1) {
          v = VLOAD(COV)(0, xp);
        } else if (stride_w == 2) {  // xp[0, 2, ..]: even lanes of [0, COV) and odd lanes of [COV-1, 2·COV-1)
          const floatv lo = VLOAD(COV)(0, xp), hi = VLOAD(COV)(0, xp + COV - 1);
          v = (floatv)(lo.even, hi.odd);
        } else {
          float tmp[COV];
          for (int j = 0; j < COV; ++j) tmp[j] = xp[j * stride_w];
          v = VLOAD(COV)(0, tmp);
        }
        acc = fma((floatv)(ws[kh * K_w + kw]), v, acc);
      }
    }
    VSTORE(COV)(EPIV(acc, y0, COV), 0, ys);
  } else {
    for (int j = 0; ow0 + j < W_out; ++j) {
      float acc = b0;
      for (int kh = 0; kh < K_h; ++kh)
        for (int kw = 0; kw < K_w; ++kw)
          acc = fma(ws[kh * K_w + kw], xs[kh * dilation_h * W + j * stride_w + kw * dilation_w], acc);
      ys[j] = EPI(acc, y0 + j);
    }
  }
}
