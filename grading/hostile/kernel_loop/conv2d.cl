// Hostile submission for the grader's tests: this kernel never ends.
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
  for (float spin = 0.0f;; spin += 1.0f) y[0] = spin;  // never ends
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
}
