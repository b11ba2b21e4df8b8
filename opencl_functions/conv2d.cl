// conv2d_tiled: 2-D convolution (cross-correlation, as torch.nn.functional.conv2d) on an
// already padded input, written as a tiled implicit GEMM. OpenCL C 1.2.
//
//   x      is (B, C_in, H, W)                    input, padded by the caller
//   w      is (C_out, C_in/groups, K_h, K_w)     weights
//   bias   is (C_out), read only when has_bias
//   y      is (B, C_out, H_out, W_out)           output
//
// Per group g, the convolution is a matrix product Y_g = W_g · X_g where
//   W_g is (C_out/groups) × Kdim, Kdim = (C_in/groups)·K_h·K_w: the weights, row-major,
//   X_g is Kdim × (B·H_out·W_out): column n holds the input patch under output pixel n
//        (never stored: each element is read from x where it lies, "implicit im2col").
//
// NDRange: dim 0 covers output pixels n (B·H_out·W_out, rounded up to TILE), dim 1
// covers output channels m of the group (rounded up to TILE), dim 2 is the group.
// A TILE×TILE work-group computes a TILE×TILE tile of Y_g: work-item (tx, ty) computes
// output pixel n = group0·TILE + tx of channel m = group1·TILE + ty. The K dimension is
// walked in steps of TILE; each step, the work-group stages a TILE×TILE block of W_g and
// of X_g in local memory (one element per work-item), then accumulates from it.
// Out-of-range elements are loaded as zeros, so any size works.

#ifndef TILE
#define TILE 16
#endif

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void conv2d_tiled(__global const float* restrict x, __global const float* restrict w,
                  __global const float* restrict bias, __global float* restrict y,
                  const int has_bias, const int B, const int C_in, const int H, const int W,
                  const int C_out, const int K_h, const int K_w, const int stride_h,
                  const int stride_w, const int dilation_h, const int dilation_w,
                  const int groups, const int H_out, const int W_out) {
  // BEGIN SOLUTION
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
  const int g = get_global_id(2);
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int k_area = K_h * K_w;
  const int k_dim = cin_g * k_area;
  const int pixels = B * H_out * W_out;

  // This work-item's output: pixel n of channel m (both may lie past the end).
  const int n = get_group_id(0) * TILE + tx;
  const int m = get_group_id(1) * TILE + ty;

  // The pixel whose patch this work-item loads into Xs: column tx of the tile.
  const int ow = n % W_out;
  const int oh = (n / W_out) % H_out;
  const int b = n / (W_out * H_out);
  __global const float* x_patch = x + ((size_t)(b * C_in + g * cin_g) * H + oh * stride_h) * W + ow * stride_w;
  // The weight row this work-item loads into Ws: row ty of the tile.
  const int m_load = get_group_id(1) * TILE + ty;
  __global const float* w_row = w + (size_t)(g * cout_g + m_load) * k_dim;

  __local float Ws[TILE][TILE + 1];  // [m][k]; +1 avoids bank conflicts
  __local float Xs[TILE][TILE + 1];  // [k][n]

  float acc = 0.0f;
  for (int k0 = 0; k0 < k_dim; k0 += TILE) {
    const int kw_idx = k0 + tx;  // Ws column loaded by this work-item
    Ws[ty][tx] = (m_load < cout_g && kw_idx < k_dim) ? w_row[kw_idx] : 0.0f;

    const int kx_idx = k0 + ty;  // Xs row loaded by this work-item
    float v = 0.0f;
    if (n < pixels && kx_idx < k_dim) {
      const int ci = kx_idx / k_area;
      const int r = kx_idx - ci * k_area;
      const int kh = r / K_w;
      const int kw = r - kh * K_w;
      v = x_patch[((size_t)ci * H + kh * dilation_h) * W + kw * dilation_w];
    }
    Xs[ty][tx] = v;
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int t = 0; t < TILE; ++t) acc += Ws[ty][t] * Xs[t][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  if (n < pixels && m < cout_g) {
    const int co = g * cout_g + m;
    if (has_bias) acc += bias[co];
    y[((size_t)(b * C_out + co) * H_out + oh) * W_out + ow] = acc;
  }
  // END SOLUTION
  // BEGIN PROMPT
  // TODO: compute the outputs of this work-group's tile, staging blocks of the weights
  // and of the input patches in local memory (see the comment at the top of the file).
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
// TM×TN output tile per work-group (TM output channels × TN pixels of B·H_out·W_out) and
// (TN/WN)×(TM/WM) work-items each computing WM×WN outputs in registers (WM, WN multiples
// of 4). Work-item (tx, ty) owns the channel quads ty + i·LY and the pixel quads
// tx + j·LX (quad q = 4 consecutive rows or columns 4q..4q+3), so it reads its operands
// from local memory as float4, and neighbouring work-items read neighbouring float4s
// (no bank conflicts). The K dimension is walked in steps of TK with two local buffers:
// each step computes from one buffer while the next step's tiles, loaded into registers
// before the computation, are stored into the other; one barrier per step.
// Build options beside the tile sizes:
//   KH, KW     the kernel's size when known, so that the im2col index math uses constants;
//   VEC_W      k_dim % 4 == 0: weights are read as float4 along K (aligned: K steps start
//              at multiples of TK);
//   POINTWISE  1×1, stride 1, H_out·W_out % 4 == 0 (so H = H_out, W = W_out): X_g is
//              C_in × pixels per image, read as float4 along pixels, no index math;
//   VEC_OUT    H_out·W_out % 4 == 0: outputs are written as float4.
// Split-K: NDRange dim 2 is groups·splits; split s sums the K range [s·k_chunk,
// (s+1)·k_chunk) and writes its partial sums to y + s·B·C_out·H_out·W_out
// (conv2d_sum_splits adds them up and adds the bias). With splits = 1 it writes y.
// NDRange: (ceil(pixels/TN)·TN/WN, ceil(C_out/groups / TM)·TM/WM, groups·splits).
// v3 (one buffer, scalar local reads, 4×4 per work-item) reached 1.5–7 TFLOP/s on the
// H100 over ResNet-50's convs; v4 replaced it.

#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
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
#define LX (TN / WN)
#define LY (TM / WM)
#define THREADS (LX * LY)
#define TM4 (TM / 4)
#define TN4 (TN / 4)
#ifdef KH
#define K_H_ KH
#define K_W_ KW
#else
#define K_H_ K_h
#define K_W_ K_w
#endif
#ifdef VEC_W
#define A_PER (TM * TK / 4 / THREADS)  // weight float4s loaded per work-item and step
#else
#define A_PER (TM * TK / THREADS)      // weights loaded per work-item and step
#endif
#ifdef POINTWISE
#define B_PER (TK * TN4 / THREADS)     // input float4s loaded per work-item and step
#else
#define B_PER (TK * TN / THREADS)      // inputs loaded per work-item and step
#endif

__kernel __attribute__((reqd_work_group_size(LX, LY, 1)))
void conv2d_gpu(__global const float* restrict x, __global const float* restrict w,
                __global const float* restrict bias, __global float* restrict y,
                const int has_bias, const int B, const int C_in, const int H, const int W,
                const int C_out, const int K_h, const int K_w, const int stride_h,
                const int stride_w, const int dilation_h, const int dilation_w,
                const int groups, const int H_out, const int W_out, const int splits, const int k_chunk) {
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int tid = ty * LX + tx;
  const int g = get_group_id(2) / splits;
  const int split = get_group_id(2) - g * splits;
  const int cin_g = C_in / groups, cout_g = C_out / groups;
  const int k_area = K_H_ * K_W_;
  const int k_dim = cin_g * k_area;
  const int hw_out = H_out * W_out;
  const int pixels = B * hw_out;
  const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
  const int k_begin = split * k_chunk;
  const int k_end = min(k_dim, k_begin + k_chunk);

  // As[buf][k][m] and Bs[buf][k][n], as float4 quads along m and n; A rows padded by one
  // quad so that the transposing stores of weights spread over the banks.
  __local float4 As[2][TK][TM4 + 1];
  __local float4 Bs[2][TK][TN4];

  __global const float* w_group = w + (size_t)g * cout_g * k_dim;
#ifdef VEC_W
  // Weight loads: float4 (m, k..k+3), m = tid / (TK/4) + i·THREADS/(TK/4).
  const int a_k = (tid % (TK / 4)) * 4, a_row0 = tid / (TK / 4);
  float4 a_reg[A_PER];
#else
  // Weight loads: (m, k), k = tid % TK, m = tid / TK + i·THREADS/TK.
  const int a_k = tid % TK, a_row0 = tid / TK;
  float a_reg[A_PER];
#endif

#ifdef POINTWISE
  // Input loads: the float4 of pixels n..n+3 (one image) of row k of X_g,
  // n = n0 + 4·(tid % TN4), k = tid / TN4 + i·THREADS/TN4.
  const int b_q = tid % TN4, b_row0 = tid / TN4;
  const int n_load = n0 + 4 * b_q;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  __global const float* x_col = x + (size_t)(nb * C_in + g * cin_g) * hw_out + (n_load - nb * hw_out);
  float4 b_reg[B_PER];
#else
  // Input loads: pixel column b_col of the tile (fixed), rows b_row0 + i·THREADS/TN.
  const int b_col = tid % TN, b_row0 = tid / TN;
  const int n_load = n0 + b_col;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  const int np = n_ok ? n_load - nb * hw_out : 0;
  const int noh = np / W_out;
  __global const float* x_patch =
      x + ((size_t)(nb * C_in + g * cin_g) * H + noh * stride_h) * W + (np - noh * W_out) * stride_w;
  float b_reg[B_PER];
#endif

  float acc[WM][WN];
  for (int i = 0; i < WM; ++i)
    for (int j = 0; j < WN; ++j) acc[i][j] = 0.0f;

#ifdef VEC_W
#define LOAD_A(k0)                                                                            \
  for (int i = 0; i < A_PER; ++i) {                                                           \
    const int m = m0 + a_row0 + i * (THREADS / (TK / 4)), k = (k0) + a_k;                     \
    __global const float4* src = (__global const float4*)(w_group + (size_t)m * k_dim + k);     \
    a_reg[i] = (m < cout_g && k < k_end) ? *src : (float4)(0.0f);                              \
  }
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < A_PER; ++i) {                                                           \
    __local float* col = (__local float*)As[buf][a_k] + a_row0 + i * (THREADS / (TK / 4));     \
    col[0] = a_reg[i].x;                                                                      \
    col[(TM4 + 1) * 4] = a_reg[i].y;                                                          \
    col[(TM4 + 1) * 8] = a_reg[i].z;                                                          \
    col[(TM4 + 1) * 12] = a_reg[i].w;                                                         \
  }
#else
#define LOAD_A(k0)                                                                            \
  for (int i = 0; i < A_PER; ++i) {                                                           \
    const int m = m0 + a_row0 + i * (THREADS / TK), k = (k0) + a_k;                           \
    a_reg[i] = (m < cout_g && k < k_end) ? w_group[(size_t)m * k_dim + k] : 0.0f;              \
  }
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < A_PER; ++i) ((__local float*)As[buf][a_k])[a_row0 + i * (THREADS / TK)] = a_reg[i];
#endif

#ifdef POINTWISE
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (THREADS / TN4);                                        \
    b_reg[i] = (n_ok && k < k_end) ? *(__global const float4*)(x_col + (size_t)k * hw_out) : (float4)(0.0f); \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < B_PER; ++i) Bs[buf][b_row0 + i * (THREADS / TN4)][b_q] = b_reg[i];
#else
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (THREADS / TN);                                         \
    float v = 0.0f;                                                                           \
    if (n_ok && k < k_end) {                                                                  \
      const int ci = k / k_area, r = k - ci * k_area;                                         \
      const int kh = r / K_W_, kw = r - kh * K_W_;                                            \
      v = x_patch[((size_t)ci * H + kh * dilation_h) * W + kw * dilation_w];                  \
    }                                                                                         \
    b_reg[i] = v;                                                                             \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < B_PER; ++i) ((__local float*)Bs[buf][b_row0 + i * (THREADS / TN)])[b_col] = b_reg[i];
#endif

  LOAD_A(k_begin)
  LOAD_B(k_begin)
  STORE_A(0)
  STORE_B(0)
  barrier(CLK_LOCAL_MEM_FENCE);
  int buf = 0;
  for (int k0 = k_begin; k0 < k_end; k0 += TK) {
    const bool more = k0 + TK < k_end;
    if (more) {
      LOAD_A(k0 + TK)
      LOAD_B(k0 + TK)
    }
#pragma unroll
    for (int kk = 0; kk < TK; ++kk) {
      float a[WM], bv[WN];
#pragma unroll
      for (int i = 0; i < WM / 4; ++i) {
        const float4 v = As[buf][kk][ty + i * LY];
        a[4 * i] = v.x;
        a[4 * i + 1] = v.y;
        a[4 * i + 2] = v.z;
        a[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < WN / 4; ++j) {
        const float4 v = Bs[buf][kk][tx + j * LX];
        bv[4 * j] = v.x;
        bv[4 * j + 1] = v.y;
        bv[4 * j + 2] = v.z;
        bv[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j) acc[i][j] = mad(a[i], bv[j], acc[i][j]);
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

  __global float* out = y + (size_t)split * pixels * C_out;
#pragma unroll
  for (int i = 0; i < WM; ++i) {
    const int m = m0 + 4 * (ty + (i / 4) * LY) + i % 4;
    if (m >= cout_g) continue;
    const int co = g * cout_g + m;
    const float b_add = (has_bias && splits == 1) ? bias[co] : 0.0f;
#pragma unroll
    for (int j4 = 0; j4 < WN / 4; ++j4) {
      const int n = n0 + 4 * (tx + j4 * LX);
#ifdef VEC_OUT
      if (n < pixels) {
        const int b = n / hw_out;
        const float4 v = (float4)(acc[i][4 * j4], acc[i][4 * j4 + 1], acc[i][4 * j4 + 2], acc[i][4 * j4 + 3]);
        *(__global float4*)(out + (size_t)(b * C_out + co) * hw_out + (n - b * hw_out)) = v + b_add;
      }
#else
      for (int c = 0; c < 4; ++c) {
        if (n + c < pixels) {
          const int b = (n + c) / hw_out;
          out[(size_t)(b * C_out + co) * hw_out + (n + c - b * hw_out)] = acc[i][4 * j4 + c] + b_add;
        }
      }
#endif
    }
  }
}

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
