// conv2d_blocked: 2-D convolution (cross-correlation, as torch.nn.functional.conv2d) on an
// already padded input, register-blocked, without local memory. OpenCL C 1.2.
// Same arguments and layouts as conv2d_tiled:
//   x (B, C_in, H, W) padded, w (C_out, C_in/groups, K_h, K_w), bias (C_out),
//   y (B, C_out, H_out, W_out).
//
// Work-item (get_global_id(0), get_global_id(1), get_global_id(2)) computes an RM × 4·RQ
// block of outputs of image b and group g (get_global_id(2) = b·groups + g):
//   channels  m0 + i, i < RM, m0 = get_global_id(1)·RM (within the group),
//   pixels    row oh, columns ow0 .. ow0 + 4·RQ - 1, as RQ float4 "quads",
//             where get_global_id(0) = oh·ceil(W_out / (4·RQ)) + ow0 / (4·RQ).
// The RM·RQ float4 accumulators stay in registers. For each tap (kh, kw) and input
// channel ci, the work-item reads its RQ input quads once (one vload4 each when the stride
// is 1) and RM weights, and does RM·RQ float4 multiply-adds: every input value read is
// used RM times and every weight 4·RQ times, instead of once as in the naive kernel.
// Reads come straight from global memory (the caches keep what neighbours share).
//
// Edges: a quad that runs past the end of the row (W_out not a multiple of 4) reads its
// lanes one by one with the column clamped to W_out - 1, and stores only the valid ones;
// channels past C_out/groups read the last channel's weights and are not stored.
//
// Launch: global (H_out·ceil(W_out / (4·RQ)), ceil((C_out/groups) / RM), B·groups), local
// size left to the runtime (any size works). Build options: -DRM=8 -DRQ=2 (defaults below).
// Offsets are int: x, w and y must have < 2^31 elements.

#ifndef RM
#define RM 8
#endif
#ifndef RQ
#define RQ 2
#endif

__kernel void conv2d_blocked(__global const float* restrict x, __global const float* restrict w,
                             __global const float* restrict bias, __global float* restrict y,
                             const int has_bias, const int B, const int C_in, const int H, const int W,
                             const int C_out, const int K_h, const int K_w, const int stride_h,
                             const int stride_w, const int dilation_h, const int dilation_w,
                             const int groups, const int H_out, const int W_out) {
  const int col_blocks = (W_out + 4 * RQ - 1) / (4 * RQ);
  const int oh = get_global_id(0) / col_blocks;
  const int ow0 = (get_global_id(0) - oh * col_blocks) * 4 * RQ;
  const int m0 = get_global_id(1) * RM;
  const int b = get_global_id(2) / groups, g = get_global_id(2) - b * groups;
  const int cin_g = C_in / groups, cout_g = C_out / groups;
  if (oh >= H_out || m0 >= cout_g) return;
  const int k_area = K_h * K_w;
  const int hw = H * W;

  // whole[q]: quad q lies inside the row. xo: input column offsets of the 4·RQ pixels,
  // clamped to the row (used by partial quads and strides other than 1 and 2).
  bool whole[RQ];
  int xo[4 * RQ];
#pragma unroll
  for (int q = 0; q < RQ; ++q) whole[q] = ow0 + 4 * q + 4 <= W_out;
#pragma unroll
  for (int c = 0; c < 4 * RQ; ++c) xo[c] = min(ow0 + c, W_out - 1) * stride_w;

  // Weights of channel m0 + i (clamped to the last channel) and input channel 0 of the group.
  int w_off[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) w_off[i] = (g * cout_g + min(m0 + i, cout_g - 1)) * cin_g * k_area;
  // Input row oh·stride_h of channel 0 of the group, column 0.
  __global const float* x_row = x + (b * C_in + g * cin_g) * hw + oh * stride_h * W;

  float4 acc[RM][RQ];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int q = 0; q < RQ; ++q) acc[i][q] = (float4)(0.0f);

  for (int kh = 0; kh < K_h; ++kh) {
    for (int kw = 0; kw < K_w; ++kw) {
      __global const float* xs = x_row + kh * dilation_h * W + kw * dilation_w;  // tap's input, ci = 0
      __global const float* ws = w + kh * K_w + kw;                              // tap's weights, ci = 0
      for (int ci = 0; ci < cin_g; ++ci, xs += hw, ws += k_area) {
        // The RQ input quads under this work-item's pixels.
        float4 xv[RQ];
#pragma unroll
        for (int q = 0; q < RQ; ++q) {
          __global const float* xq = xs + (ow0 + 4 * q) * stride_w;
          if (whole[q] && stride_w == 1) {
            xv[q] = vload4(0, xq);
          } else if (whole[q] && stride_w == 2) {  // xq[0], xq[2], xq[4], xq[6]
            const float4 lo = vload4(0, xq), hi = vload4(0, xq + 3);
            xv[q] = (float4)(lo.even, hi.odd);
          } else {
            xv[q] = (float4)(xs[xo[4 * q]], xs[xo[4 * q + 1]], xs[xo[4 * q + 2]], xs[xo[4 * q + 3]]);
          }
        }
        // RM weights, each multiplied with all RQ quads.
#pragma unroll
        for (int i = 0; i < RM; ++i) {
          const float wv = ws[w_off[i]];
#pragma unroll
          for (int q = 0; q < RQ; ++q) acc[i][q] = fma((float4)(wv), xv[q], acc[i][q]);
        }
      }
    }
  }

  // Store the valid part of the block, with the bias.
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int m = m0 + i;
    if (m < cout_g) {
      const int co = g * cout_g + m;
      const float bias_co = has_bias ? bias[co] : 0.0f;
      __global float* yr = y + ((b * C_out + co) * H_out + oh) * W_out;
#pragma unroll
      for (int q = 0; q < RQ; ++q) {
        const float4 v = acc[i][q] + bias_co;
        const int ow = ow0 + 4 * q;
        if (whole[q]) {
          vstore4(v, 0, yr + ow);
        } else {  // at most 3 valid lanes
          if (ow < W_out) yr[ow] = v.x;
          if (ow + 1 < W_out) yr[ow + 1] = v.y;
          if (ow + 2 < W_out) yr[ow + 2] = v.z;
        }
      }
    }
  }
}
