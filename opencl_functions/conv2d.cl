// conv2d_tiled: 2-D convolution (cross-correlation, as torch.nn.functional.conv2d) on an
// already padded input, written as a tiled implicit GEMM. OpenCL C 1.2.
//
//   x      is (B, C_in, H, W)                    input, padded by the caller
//   w      is (C_out, C_in/groups, K_h, K_w)     weights
//   bias   is (C_out), read only when has_bias
//   y      is (B, C_out, H_out, W_out)           output
//
// Per group g, the convolution is a matrix product Y_g = W_g · X_g where
//   Y_g is (C_out/groups) × N, N = B·H_out·W_out: column n is output pixel n, counted
//        over the whole batch (n = (b·H_out + oh)·W_out + ow);
//   W_g is (C_out/groups) × K, K = K_h·K_w·(C_in/groups): the weights;
//   X_g is K × N: column n holds the input patch under output pixel n. It is never
//        stored: each element is read from x where it lies ("implicit im2col").
// We order K tap by tap: k = (kh·K_w + kw)·(C_in/groups) + ci. For one tap (kh, kw),
// the rows of X_g are the input channels shifted by (kh·dilation_h, kw·dilation_w), so a
// block of TK consecutive k is TK input channels of one tap: no division per element to
// find (ci, kh, kw) from k.
//
// Tiling. A work-group of LX × LY work-items computes a TM × TN tile of Y_g:
// TM = LY·WM output channels starting at m0 = get_group_id(1)·TM, and
// TN = LX·WN output pixels starting at n0 = get_group_id(0)·TN.
// Work-item (tx, ty) computes WM × WN outputs, kept in registers (acc):
//   channels m0 + ty·WM + i   (i < WM, consecutive channels),
//   pixels   n0 + tx + j·LX   (j < WN, so neighbouring work-items have neighbouring pixels:
//                              their loads and stores of x and y are coalesced).
// The K dimension is walked in steps of TK (taps outside, input channels inside). Each
// step, the work-group stages in local memory
//   Ws[k][m] = W_g[m0 + m][step's k]   (TK × TM): work-item (tx, ty) loads k = tx for its
//                                       own WM channels;
//   Xs[k][n] = X_g[step's k][n0 + n]   (TK × TN): work-item (tx, ty) loads rows
//                                       k = ty + r·LY for its own WN pixels;
// waits at a barrier, accumulates from local memory, and waits again before the next
// step overwrites the tiles.
// Out-of-range channels and input channels are loaded as zeros; out-of-range pixels read
// the last pixel (valid memory) and are not stored. So any size works.
//
// Launch: local (LX, LY, 1),
//         global (ceil(N / TN)·LX, ceil((C_out/groups) / TM)·LY, groups).
// Build options: -DLX=16 -DLY=8 -DWM=4 -DWN=4 -DTK=16 (the defaults below); TK must equal
// LX and be a multiple of LY. Offsets are int: x, w and y must have < 2^31 elements.

#ifndef LX
#define LX 16
#endif
#ifndef LY
#define LY 8
#endif
#ifndef WM
#define WM 4
#endif
#ifndef WN
#define WN 4
#endif
#ifndef TK
#define TK 16
#endif
#if TK != LX || TK % LY != 0
#error "conv2d_tiled needs TK == LX and TK a multiple of LY"
#endif
#define TM (LY * WM)  // output channels per work-group
#define TN (LX * WN)  // output pixels per work-group

__kernel __attribute__((reqd_work_group_size(LX, LY, 1)))
void conv2d_tiled(__global const float* restrict x, __global const float* restrict w,
                  __global const float* restrict bias, __global float* restrict y,
                  const int has_bias, const int B, const int C_in, const int H, const int W,
                  const int C_out, const int K_h, const int K_w, const int stride_h,
                  const int stride_w, const int dilation_h, const int dilation_w,
                  const int groups, const int H_out, const int W_out) {
  // BEGIN SOLUTION
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int g = get_group_id(2);
  const int cin_g = C_in / groups, cout_g = C_out / groups;
  const int k_area = K_h * K_w;
  const int hw = H * W, hw_out = H_out * W_out;
  const int pixels = B * hw_out;
  const int m0 = get_group_id(1) * TM;  // first output channel (within the group) of the tile
  const int n0 = get_group_id(0) * TN;  // first output pixel of the tile

  // Where this work-item's pixels n0 + tx + j·LX read input channel 0 of the group at
  // tap (0, 0). Pixels past the end read the last pixel instead (never stored).
  int x_off[WN];
  for (int j = 0; j < WN; ++j) {
    const int n = min(n0 + tx + j * LX, pixels - 1);
    const int b = n / hw_out, p = n - b * hw_out;
    const int oh = p / W_out, ow = p - oh * W_out;
    x_off[j] = (b * C_in + g * cin_g) * hw + oh * stride_h * W + ow * stride_w;
  }
  // This work-item's first channel; channel m0 + ty·WM + i has its weights at
  // w[w_row + i·cin_g·k_area ..].
  const int m_first = m0 + ty * WM;
  const int w_row = (g * cout_g + m_first) * cin_g * k_area;

  __local float Ws[TK][TM + 1];  // +1: the column-wise stores below hit different banks
  __local float Xs[TK][TN];

  float acc[WN][WM];
  for (int j = 0; j < WN; ++j)
    for (int i = 0; i < WM; ++i) acc[j][i] = 0.0f;

  for (int kh = 0; kh < K_h; ++kh) {
    for (int kw = 0; kw < K_w; ++kw) {
      const int x_tap = kh * dilation_h * W + kw * dilation_w;  // input offset of the tap
      const int w_tap = kh * K_w + kw;                          // weight offset of the tap
      for (int c0 = 0; c0 < cin_g; c0 += TK) {
        // Stage the weights: Ws[tx][ty·WM + i] = w[g·cout_g + m_first + i][c0 + tx][kh][kw].
        const int ci_w = c0 + tx;
        for (int i = 0; i < WM; ++i)
          Ws[tx][ty * WM + i] = (ci_w < cin_g && m_first + i < cout_g)
                                    ? w[w_row + i * cin_g * k_area + ci_w * k_area + w_tap]
                                    : 0.0f;
        // Stage the inputs: Xs[k][tx + j·LX] = input channel c0 + k under pixel n0 + tx + j·LX.
        for (int r = 0; r < TK / LY; ++r) {
          const int k = ty + r * LY;
          const int ci = c0 + k;
          for (int j = 0; j < WN; ++j)
            Xs[k][tx + j * LX] = ci < cin_g ? x[x_off[j] + ci * hw + x_tap] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the tiles are complete

        // Multiply: this work-item's WM × WN block of the tile product.
        for (int kk = 0; kk < TK; ++kk) {
          for (int j = 0; j < WN; ++j) {
            const float xv = Xs[kk][tx + j * LX];
            for (int i = 0; i < WM; ++i) acc[j][i] += Ws[kk][ty * WM + i] * xv;
          }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // everyone is done with the tiles
      }
    }
  }

  // Store the block: y[b][g·cout_g + m][oh][ow] for pixel n = b·hw_out + oh·W_out + ow.
  for (int i = 0; i < WM; ++i) {
    const int m = m_first + i;
    if (m < cout_g) {
      const int co = g * cout_g + m;
      const float bias_co = has_bias ? bias[co] : 0.0f;
      for (int j = 0; j < WN; ++j) {
        const int n = n0 + tx + j * LX;
        if (n < pixels) {
          const int b = n / hw_out;
          y[(b * C_out + co) * hw_out + (n - b * hw_out)] = acc[j][i] + bias_co;
        }
      }
    }
  }
  // END SOLUTION
  // BEGIN PROMPT
  // TODO: compute this work-group's TM × TN tile of outputs as the comment at the top of
  // the file describes: per step of TK along K, stage the weights (Ws) and the input
  // patches (Xs) in local memory, wait at a barrier, accumulate this work-item's WM × WN
  // outputs in registers, wait again; then add the bias and store the outputs.
  // END PROMPT
}

// BEGIN STAFF
// ---------------------------------------------------------------------------------
// Faster kernels, picked by opencl-functions.cpp per device and shape. Same arguments
// as conv2d_tiled unless noted; x, w, y, bias have the same layouts.
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
#define VEC_(n) float##n
#define VEC(n) VEC_(n)
#define VLOAD_(n) vload##n
#define VLOAD(n) VLOAD_(n)
#define VSTORE_(n) vstore##n
#define VSTORE(n) VSTORE_(n)
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

__kernel void conv2d_cpu(__global const float* restrict x, __global const float* restrict wp,
                         __global const float* restrict bias, __global float* restrict y,
                         const int has_bias, const int B, const int C_in, const int H, const int W,
                         const int C_out, const int K_h, const int K_w, const int stride_h,
                         const int stride_w, const int dilation_h, const int dilation_w,
                         const int groups, const int H_out, const int W_out) {
  const int pb = get_global_id(1);
  const int cb = get_global_id(0);
  const int b = get_global_id(2) / groups;
  const int g = get_global_id(2) - b * groups;
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int co_blocks = (cout_g + COV - 1) / COV;
  const int hw_out = H_out * W_out;
  const int p0 = pb * PX;

  // Offsets of this work-item's PX output pixels in an input channel (the last pixel
  // repeats past the end of the image).
  int xoff[PX];
#pragma unroll
  for (int j = 0; j < PX; ++j) {
    const int p = min(p0 + j, hw_out - 1);
    const int oh = p / W_out;
    xoff[j] = oh * stride_h * W + (p - oh * W_out) * stride_w;
  }
  floatv acc[PX];
#pragma unroll
  for (int j = 0; j < PX; ++j) acc[j] = (floatv)(0.0f);

  __global const float* xc = x + (size_t)(b * C_in + g * cin_g) * H * W;
  __global const float* wc = wp + (size_t)(g * co_blocks + cb) * cin_g * K_h * K_w * COV;
  for (int ci = 0; ci < cin_g; ++ci, xc += H * W) {
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
    }
  }

  // Bias, then the PX×COV block transposed through private memory so each output
  // channel's PX pixels are stored together (a vector store when the block is whole).
  const int co0 = cb * COV;
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
  __global float* yb = y + (size_t)(b * C_out + g * cout_g + co0) * hw_out + p0;
  const bool full_px = p0 + PX <= hw_out;
#pragma unroll
  for (int i = 0; i < COV; ++i) {
    if (full_co || co0 + i < cout_g) {
      __global float* yr = yb + (size_t)i * hw_out;
      if (full_px) {
#pragma unroll
        for (int j = 0; j < PX; ++j) yr[j] = out[j][i];
      } else {
        for (int j = 0; p0 + j < hw_out; ++j) yr[j] = out[j][i];
      }
    }
  }
}

// v2 conv2d_depthwise: C_in/groups = C_out/groups = 1. One output per work-item,
// NDRange (W_out, H_out, B·C_out), so consecutive work-items read consecutive inputs.
__kernel void conv2d_depthwise(__global const float* restrict x, __global const float* restrict w,
                               __global const float* restrict bias, __global float* restrict y,
                               const int has_bias, const int B, const int C_in, const int H, const int W,
                               const int C_out, const int K_h, const int K_w, const int stride_h,
                               const int stride_w, const int dilation_h, const int dilation_w,
                               const int groups, const int H_out, const int W_out) {
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
  y[((size_t)bc * H_out + oh) * W_out + ow] = acc;
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
                                   const int groups, const int H_out, const int W_out) {
  const int ow0 = get_global_id(0) * COV;
  const int oh = get_global_id(1);
  const int bc = get_global_id(2);
  const int c = bc % C_out;
  __global const float* xs = x + ((size_t)bc * H + oh * stride_h) * W + ow0 * stride_w;
  __global const float* ws = w + (size_t)c * K_h * K_w;
  __global float* ys = y + ((size_t)bc * H_out + oh) * W_out + ow0;
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
    VSTORE(COV)(acc, 0, ys);
  } else {
    for (int j = 0; ow0 + j < W_out; ++j) {
      float acc = b0;
      for (int kh = 0; kh < K_h; ++kh)
        for (int kw = 0; kw < K_w; ++kw)
          acc = fma(ws[kh * K_w + kw], xs[kh * dilation_h * W + j * stride_w + kw * dilation_w], acc);
      ys[j] = acc;
    }
  }
}
// END STAFF

// BEGIN STAFF
// ---------------------------------------------------------------------------------
// v4 conv2d_gpu: implicit GEMM for GPUs, Y_g = W_g · X_g as in conv2d_tiled, with a
// GTM×GTN output tile per work-group (GTM output channels × GTN pixels of B·H_out·W_out) and
// (GTN/GWN)×(GTM/GWM) work-items each computing GWM×GWN outputs in registers (GWM, GWN multiples
// of 4). Work-item (tx, ty) owns the channel quads ty + i·GLY and the pixel quads
// tx + j·GLX (quad q = 4 consecutive rows or columns 4q..4q+3), so it reads its operands
// from local memory as float4, and neighbouring work-items read neighbouring float4s
// (no bank conflicts). The K dimension is walked in steps of GTK with two local buffers:
// each step computes from one buffer while the next step's tiles, loaded into registers
// before the computation, are stored into the other; one barrier per step.
// Build options beside the tile sizes:
//   KH, KW     the kernel's size when known, so that the im2col index math uses constants;
//   VEC_W      k_dim % 4 == 0: weights are read as float4 along K (aligned: K steps start
//              at multiples of GTK);
//   POINTWISE  1×1, stride 1, H_out·W_out % 4 == 0 (so H = H_out, W = W_out): X_g is
//              C_in × pixels per image, read as float4 along pixels, no index math;
//   VEC_OUT    H_out·W_out % 4 == 0: outputs are written as float4;
//   NC_SWAPPED every tensor with its first two dimensions swapped: x (C_in, B, H, W),
//              w (C_in, C_out, K_h, K_w), y (C_out, B, H_out, W_out); groups = 1, no
//              POINTWISE, VEC_W only if K_h·K_w % 4 == 0. The opencl device computes weight
//              gradients with it (images and channels swapped) without transposing copies.
// Split-K: NDRange dim 2 is groups·splits; split s sums the K range [s·k_chunk,
// (s+1)·k_chunk) and writes its partial sums to y + s·B·C_out·H_out·W_out
// (conv2d_sum_splits adds them up and adds the bias). With splits = 1 it writes y.
// NDRange: (ceil(pixels/GTN)·GTN/GWN, ceil(C_out/groups / GTM)·GTM/GWM, groups·splits).
// v3 (one buffer, scalar local reads, 4×4 per work-item) reached 1.5–7 TFLOP/s on the
// H100 over ResNet-50's convs; v4 replaced it.

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

__kernel __attribute__((reqd_work_group_size(GLX, GLY, 1)))
void conv2d_gpu(__global const float* restrict x, __global const float* restrict w,
                __global const float* restrict bias, __global float* restrict y,
                const int has_bias, const int B, const int C_in, const int H, const int W,
                const int C_out, const int K_h, const int K_w, const int stride_h,
                const int stride_w, const int dilation_h, const int dilation_w,
                const int groups, const int H_out, const int W_out, const int splits, const int k_chunk) {
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int tid = ty * GLX + tx;
  const int g = get_group_id(2) / splits;
  const int split = get_group_id(2) - g * splits;
  const int cin_g = C_in / groups, cout_g = C_out / groups;
  const int k_area = K_H_ * K_W_;
  const int k_dim = cin_g * k_area;
  const int hw_out = H_out * W_out;
  const int pixels = B * hw_out;
  const int m0 = get_group_id(1) * GTM, n0 = get_group_id(0) * GTN;
#ifdef NC_SWAPPED
#ifdef POINTWISE
#error "NC_SWAPPED does not take POINTWISE"
#endif
  const size_t x_bs = (size_t)H * W, x_cs = (size_t)B * H * W;  // between images, channels
#define W_INDEX(m, k) (((size_t)((k) / k_area) * C_out + (m)) * k_area + (k) % k_area)
#define Y_INDEX(b, co) ((size_t)(co) * B + (b))
#else
  const size_t x_bs = (size_t)C_in * H * W, x_cs = (size_t)H * W;
#define W_INDEX(m, k) ((size_t)(m) * k_dim + (k))
#define Y_INDEX(b, co) ((size_t)(b) * C_out + (co))
#endif
  const int k_begin = split * k_chunk;
  const int k_end = min(k_dim, k_begin + k_chunk);

  // As[buf][k][m] and Bs[buf][k][n], as float4 quads along m and n; A rows padded by one
  // quad so that the transposing stores of weights spread over the banks.
  __local float4 As[2][GTK][GTM4 + 1];
  __local float4 Bs[2][GTK][GTN4];

  __global const float* w_group = w + (size_t)g * cout_g * k_dim;
#ifdef VEC_W
  // Weight loads: float4 (m, k..k+3), m = tid / (GTK/4) + i·G_THREADS/(GTK/4).
  const int a_k = (tid % (GTK / 4)) * 4, a_row0 = tid / (GTK / 4);
  float4 a_reg[G_A_PER];
#else
  // Weight loads: (m, k), k = tid % GTK, m = tid / GTK + i·G_THREADS/GTK.
  const int a_k = tid % GTK, a_row0 = tid / GTK;
  float a_reg[G_A_PER];
#endif

#ifdef POINTWISE
  // Input loads: the float4 of pixels n..n+3 (one image) of row k of X_g,
  // n = n0 + 4·(tid % GTN4), k = tid / GTN4 + i·G_THREADS/GTN4.
  const int b_q = tid % GTN4, b_row0 = tid / GTN4;
  const int n_load = n0 + 4 * b_q;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  __global const float* x_col = x + (size_t)(nb * C_in + g * cin_g) * hw_out + (n_load - nb * hw_out);
  float4 b_reg[G_B_PER];
#else
  // Input loads: pixel column b_col of the tile (fixed), rows b_row0 + i·G_THREADS/GTN.
  const int b_col = tid % GTN, b_row0 = tid / GTN;
  const int n_load = n0 + b_col;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  const int np = n_ok ? n_load - nb * hw_out : 0;
  const int noh = np / W_out;
  __global const float* x_patch =
      x + nb * x_bs + (size_t)(g * cin_g) * x_cs + (size_t)(noh * stride_h) * W + (np - noh * W_out) * stride_w;
  float b_reg[G_B_PER];
#endif

  float acc[GWM][GWN];
  for (int i = 0; i < GWM; ++i)
    for (int j = 0; j < GWN; ++j) acc[i][j] = 0.0f;

#ifdef VEC_W
#define LOAD_A(k0)                                                                            \
  for (int i = 0; i < G_A_PER; ++i) {                                                           \
    const int m = m0 + a_row0 + i * (G_THREADS / (GTK / 4)), k = (k0) + a_k;                     \
    __global const float4* src = (__global const float4*)(w_group + W_INDEX(m, k));             \
    a_reg[i] = (m < cout_g && k < k_end) ? *src : (float4)(0.0f);                              \
  }
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < G_A_PER; ++i) {                                                           \
    __local float* col = (__local float*)As[buf][a_k] + a_row0 + i * (G_THREADS / (GTK / 4));     \
    col[0] = a_reg[i].x;                                                                      \
    col[(GTM4 + 1) * 4] = a_reg[i].y;                                                          \
    col[(GTM4 + 1) * 8] = a_reg[i].z;                                                          \
    col[(GTM4 + 1) * 12] = a_reg[i].w;                                                         \
  }
#else
#define LOAD_A(k0)                                                                            \
  for (int i = 0; i < G_A_PER; ++i) {                                                           \
    const int m = m0 + a_row0 + i * (G_THREADS / GTK), k = (k0) + a_k;                           \
    a_reg[i] = (m < cout_g && k < k_end) ? w_group[W_INDEX(m, k)] : 0.0f;                      \
  }
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < G_A_PER; ++i) ((__local float*)As[buf][a_k])[a_row0 + i * (G_THREADS / GTK)] = a_reg[i];
#endif

#ifdef POINTWISE
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < G_B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (G_THREADS / GTN4);                                        \
    b_reg[i] = (n_ok && k < k_end) ? *(__global const float4*)(x_col + (size_t)k * hw_out) : (float4)(0.0f); \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) Bs[buf][b_row0 + i * (G_THREADS / GTN4)][b_q] = b_reg[i];
#else
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < G_B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (G_THREADS / GTN);                                         \
    float v = 0.0f;                                                                           \
    if (n_ok && k < k_end) {                                                                  \
      const int ci = k / k_area, r = k - ci * k_area;                                         \
      const int kh = r / K_W_, kw = r - kh * K_W_;                                            \
      v = x_patch[(size_t)ci * x_cs + kh * dilation_h * W + kw * dilation_w];                 \
    }                                                                                         \
    b_reg[i] = v;                                                                             \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) ((__local float*)Bs[buf][b_row0 + i * (G_THREADS / GTN)])[b_col] = b_reg[i];
#endif

  LOAD_A(k_begin)
  LOAD_B(k_begin)
  STORE_A(0)
  STORE_B(0)
  barrier(CLK_LOCAL_MEM_FENCE);
  int buf = 0;
  for (int k0 = k_begin; k0 < k_end; k0 += GTK) {
    const bool more = k0 + GTK < k_end;
    if (more) {
      LOAD_A(k0 + GTK)
      LOAD_B(k0 + GTK)
    }
#pragma unroll
    for (int kk = 0; kk < GTK; ++kk) {
      float a[GWM], bv[GWN];
#pragma unroll
      for (int i = 0; i < GWM / 4; ++i) {
        const float4 v = As[buf][kk][ty + i * GLY];
        a[4 * i] = v.x;
        a[4 * i + 1] = v.y;
        a[4 * i + 2] = v.z;
        a[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < GWN / 4; ++j) {
        const float4 v = Bs[buf][kk][tx + j * GLX];
        bv[4 * j] = v.x;
        bv[4 * j + 1] = v.y;
        bv[4 * j + 2] = v.z;
        bv[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < GWM; ++i)
#pragma unroll
        for (int j = 0; j < GWN; ++j) acc[i][j] = mad(a[i], bv[j], acc[i][j]);
    }
    if (more) {
      STORE_A(buf ^ 1)
      STORE_B(buf ^ 1)
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    buf ^= 1;
  }
#undef LOAD_A
#undef STORE_A
#undef LOAD_B
#undef STORE_B
#undef W_INDEX

  __global float* out = y + (size_t)split * pixels * C_out;
#pragma unroll
  for (int i = 0; i < GWM; ++i) {
    const int m = m0 + 4 * (ty + (i / 4) * GLY) + i % 4;
    if (m >= cout_g) continue;
    const int co = g * cout_g + m;
    const float b_add = (has_bias && splits == 1) ? bias[co] : 0.0f;
#pragma unroll
    for (int j4 = 0; j4 < GWN / 4; ++j4) {
      const int n = n0 + 4 * (tx + j4 * GLX);
#ifdef VEC_OUT
      if (n < pixels) {
        const int b = n / hw_out;
        const float4 v = (float4)(acc[i][4 * j4], acc[i][4 * j4 + 1], acc[i][4 * j4 + 2], acc[i][4 * j4 + 3]);
        *(__global float4*)(out + Y_INDEX(b, co) * hw_out + (n - b * hw_out)) = v + b_add;
      }
#else
      for (int c = 0; c < 4; ++c) {
        if (n + c < pixels) {
          const int b = (n + c) / hw_out;
          out[Y_INDEX(b, co) * hw_out + (n + c - b * hw_out)] = acc[i][4 * j4 + c] + b_add;
        }
      }
#endif
    }
  }
}

#undef Y_INDEX

// y = sum over s of parts[s] (+ bias): the end of a split-K conv2d_gpu.
// parts is (splits, B, C_out, hw_out); NDRange: (B·C_out·hw_out).
__kernel void conv2d_sum_splits(__global const float* restrict parts, __global const float* restrict bias,
                                __global float* restrict y, const int has_bias, const int splits,
                                const int C_out, const int hw_out, const int total) {
  const int i = get_global_id(0);
  if (i >= total) return;
  float s = has_bias ? bias[(i / hw_out) % C_out] : 0.0f;
  for (int k = 0; k < splits; ++k) s += parts[(size_t)k * total + i];
  y[i] = s;
}
// END STAFF
