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
