// The backward pass of conv2d (cross-correlation on an already padded input), OpenCL C 1.2.
//
//   x   is (B, C_in, H, W)                  the forward's (padded) input
//   w   is (C_out, C_in/groups, K_h, K_w)   the weights
//   dy  is (B, C_out, H_out, W_out)         gradient of the loss with respect to the output
//   dx  is (B, C_in, H, W)                  gradient with respect to x
//   dw  is (C_out, C_in/groups, K_h, K_w)   gradient with respect to w
//   db  is (C_out)                          gradient with respect to the bias
//
// With cin_g = C_in/groups, cout_g = C_out/groups, output channel co = g·cout_g + m of
// group g reads input channels g·cin_g + c, c < cin_g, and output pixel (oh, ow) reads
// input pixel (ih, iw) = (oh·stride_h + kh·dilation_h, ow·stride_w + kw·dilation_w).
//
// Kernels, two versions of each gradient (the host picks one by the channel counts):
//   grad_input_direct    v1: one work-item per element of dx, a gather over every
//                        (co, kh, kw) whose output pixel reads it. Best when cin_g is
//                        small (depthwise), where a tile would be mostly empty.
//   grad_input_tiled     v2: per group, dX_g (cin_g × B·H·W) = Wᵀ_g · dY_g as a tiled
//                        implicit GEMM over k = (co, kh, kw); dY_g's element (k, pixel)
//                        is the output gradient that pixel feeds through tap (kh, kw),
//                        or zero when no output pixel lies there (stride gaps, edges).
//   grad_weight_direct   v1: one work-item per (weight element, split), a sum over
//                        that split's share of the B·H_out·W_out output pixels.
//   grad_weight_tiled    v2: per group and split, dW_g (cout_g × cin_g·K_h·K_w) =
//                        dY_g (cout_g × P) · X_gᵀ (P × cin_g·K_h·K_w) as a tiled GEMM
//                        whose reduction runs over the split's output pixels p.
//   sum_splits           adds the per-split partial weight gradients.
//   grad_bias            one work-group per output channel, a tree reduction.
//
// The tiled kernels run TILE×TILE work-groups and stage TILE×TILE blocks of both
// operands in local memory, as conv2d.cl does; out-of-range elements load as zeros, so
// any size works. Splitting the pixel sum of the weight gradient gives enough
// work-groups when the weights are few and the images large.

#ifndef TILE
#define TILE 16
#endif
#define BIAS_GROUP 64

// The output pixel index along one axis that input position i reaches through tap k,
// or -1 when none does (i - k·dilation is negative, off the stride grid, or past the end).
inline int source_index(const int i, const int k, const int dilation, const int stride, const int size_out) {
  const int t = i - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int o = t / stride;
  return o < size_out ? o : -1;
}

// v1: dx[b, ci, ih, iw], one work-item each; NDRange dim 0 covers B·C_in·H·W.
__kernel void conv2d_grad_input_direct(__global const float* restrict dy, __global const float* restrict w,
                                       __global float* restrict dx, const int B, const int C_in, const int H,
                                       const int W, const int C_out, const int K_h, const int K_w,
                                       const int stride_h, const int stride_w, const int dilation_h,
                                       const int dilation_w, const int groups, const int H_out, const int W_out) {
  const int idx = get_global_id(0);
  if (idx >= B * C_in * H * W) return;
  const int iw = idx % W;
  const int ih = (idx / W) % H;
  const int ci = (idx / (W * H)) % C_in;
  const int b = idx / (W * H * C_in);
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int g = ci / cin_g;
  const int c = ci - g * cin_g;

  float acc = 0.0f;
  for (int kh = 0; kh < K_h; ++kh) {
    const int oh = source_index(ih, kh, dilation_h, stride_h, H_out);
    if (oh < 0) continue;
    for (int kw = 0; kw < K_w; ++kw) {
      const int ow = source_index(iw, kw, dilation_w, stride_w, W_out);
      if (ow < 0) continue;
      for (int m = 0; m < cout_g; ++m) {
        const int co = g * cout_g + m;
        acc += w[((size_t)(co * cin_g + c) * K_h + kh) * K_w + kw] *
               dy[((size_t)(b * C_out + co) * H_out + oh) * W_out + ow];
      }
    }
  }
  dx[idx] = acc;
}

// v2: per group g, dX_g[c][n] = Σ_k A[c][k] · D[k][n], k = (m, kh, kw) over cout_g·K_h·K_w,
// A[c][k] = w[g·cout_g + m, c, kh, kw], D[k][n] = dy at the output pixel that input pixel
// n = (b, ih, iw) feeds through (kh, kw), or 0. NDRange: dim 0 covers the B·H·W input
// pixels, dim 1 the cin_g channels of the group (both rounded up to TILE), dim 2 the groups.
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void conv2d_grad_input_tiled(__global const float* restrict dy, __global const float* restrict w,
                             __global float* restrict dx, const int B, const int C_in, const int H, const int W,
                             const int C_out, const int K_h, const int K_w, const int stride_h, const int stride_w,
                             const int dilation_h, const int dilation_w, const int groups, const int H_out,
                             const int W_out) {
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
  const int g = get_global_id(2);
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int k_area = K_h * K_w;
  const int k_dim = cout_g * k_area;
  const int pixels = B * H * W;

  // This work-item's result: input pixel n of channel c of the group.
  const int n = get_group_id(0) * TILE + tx;
  const int c = get_group_id(1) * TILE + ty;
  const int iw = n % W;
  const int ih = (n / W) % H;
  const int b = n / (W * H);
  __global const float* dy_image = dy + (size_t)(b * C_out + g * cout_g) * H_out * W_out;
  // The weights of input channel c_load; it loads row ty of the A tile.
  const int c_load = get_group_id(1) * TILE + ty;

  __local float As[TILE][TILE + 1];  // [c][k]
  __local float Ds[TILE][TILE + 1];  // [k][n]

  float acc = 0.0f;
  for (int k0 = 0; k0 < k_dim; k0 += TILE) {
    const int ka = k0 + tx;  // A column loaded by this work-item
    float a = 0.0f;
    if (c_load < cin_g && ka < k_dim) {
      const int m = ka / k_area;
      const int r = ka - m * k_area;
      a = w[((size_t)((g * cout_g + m) * cin_g + c_load)) * k_area + r];
    }
    As[ty][tx] = a;

    const int kd = k0 + ty;  // D row loaded by this work-item, for pixel n
    float d = 0.0f;
    if (n < pixels && kd < k_dim) {
      const int m = kd / k_area;
      const int r = kd - m * k_area;
      const int kh = r / K_w;
      const int kw = r - kh * K_w;
      const int oh = source_index(ih, kh, dilation_h, stride_h, H_out);
      const int ow = source_index(iw, kw, dilation_w, stride_w, W_out);
      if (oh >= 0 && ow >= 0) d = dy_image[((size_t)m * H_out + oh) * W_out + ow];
    }
    Ds[ty][tx] = d;
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int t = 0; t < TILE; ++t) acc += As[ty][t] * Ds[t][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  if (n < pixels && c < cin_g) dx[((size_t)(b * C_in + g * cin_g + c) * H + ih) * W + iw] = acc;
}

// v1: out[s, co, c, kh, kw] = Σ over output pixels p in split s of dy[b, co, oh, ow] ·
// x[b, g·cin_g + c, oh·stride_h + kh·dilation_h, ow·stride_w + kw·dilation_w].
// NDRange: dim 0 covers the C_out·cin_g·K_h·K_w weights, dim 1 the splits; split s
// takes pixels [s·chunk, (s+1)·chunk). out holds splits × that many weights.
__kernel void conv2d_grad_weight_direct(__global const float* restrict x, __global const float* restrict dy,
                                        __global float* restrict out, const int B, const int C_in, const int H,
                                        const int W, const int C_out, const int K_h, const int K_w,
                                        const int stride_h, const int stride_w, const int dilation_h,
                                        const int dilation_w, const int groups, const int H_out, const int W_out,
                                        const int chunk) {
  const int idx = get_global_id(0);
  const int s = get_global_id(1);
  const int cin_g = C_in / groups;
  const int n_weights = C_out * cin_g * K_h * K_w;
  if (idx >= n_weights) return;
  const int kw = idx % K_w;
  const int kh = (idx / K_w) % K_h;
  const int c = (idx / (K_w * K_h)) % cin_g;
  const int co = idx / (K_w * K_h * cin_g);
  const int g = co / (C_out / groups);
  const int ci = g * cin_g + c;
  const int out_area = H_out * W_out;
  const int pixels = B * out_area;
  const int p_end = min(pixels, (s + 1) * chunk);

  float acc = 0.0f;
  for (int p = s * chunk; p < p_end; ++p) {
    const int ow = p % W_out;
    const int oh = (p / W_out) % H_out;
    const int b = p / out_area;
    const int ih = oh * stride_h + kh * dilation_h;
    const int iw = ow * stride_w + kw * dilation_w;
    acc += dy[((size_t)(b * C_out + co) * H_out + oh) * W_out + ow] *
           x[((size_t)(b * C_in + ci) * H + ih) * W + iw];
  }
  out[(size_t)s * n_weights + idx] = acc;
}

// v2: per group g and split s, out[s][g·cout_g + m][k] = Σ_p dY[m][p] · X[p][k] over the
// split's pixels p, k = (c, kh, kw) over cin_g·K_h·K_w. NDRange: dim 0 covers k, dim 1 the
// cout_g channels (both rounded up to TILE), dim 2 the groups × splits (g + groups·s).
// chunk is a multiple of TILE.
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void conv2d_grad_weight_tiled(__global const float* restrict x, __global const float* restrict dy,
                              __global float* restrict out, const int B, const int C_in, const int H, const int W,
                              const int C_out, const int K_h, const int K_w, const int stride_h,
                              const int stride_w, const int dilation_h, const int dilation_w, const int groups,
                              const int H_out, const int W_out, const int chunk) {
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
  const int g = get_global_id(2) % groups;
  const int s = get_global_id(2) / groups;
  const int cin_g = C_in / groups;
  const int cout_g = C_out / groups;
  const int k_area = K_h * K_w;
  const int k_dim = cin_g * k_area;
  const int out_area = H_out * W_out;
  const int pixels = B * out_area;
  const int p_begin = s * chunk;
  const int p_end = min(pixels, p_begin + chunk);

  // This work-item's result: weight k of output channel m of the group.
  const int k = get_group_id(0) * TILE + tx;
  const int m = get_group_id(1) * TILE + ty;
  // Column k of X: input channel c, tap (kh, kw); this work-item loads it into Xs.
  const int c = k / k_area;
  const int r = k - c * k_area;
  const int kh = r / K_w;
  const int kw = r - kh * K_w;
  const size_t x_tap = ((size_t)(g * cin_g + c) * H + kh * dilation_h) * W + kw * dilation_w;
  // Row m_load of dY; this work-item loads it into Ys.
  const int m_load = get_group_id(1) * TILE + ty;
  const int co_load = g * cout_g + m_load;

  __local float Ys[TILE][TILE + 1];  // [m][p]
  __local float Xs[TILE][TILE + 1];  // [p][k]

  float acc = 0.0f;
  for (int p0 = p_begin; p0 < p_end; p0 += TILE) {
    const int py = p0 + tx;  // Ys column loaded by this work-item
    float yv = 0.0f;
    if (m_load < cout_g && py < p_end) {
      const int ow = py % W_out;
      const int oh = (py / W_out) % H_out;
      const int b = py / out_area;
      yv = dy[((size_t)(b * C_out + co_load) * H_out + oh) * W_out + ow];
    }
    Ys[ty][tx] = yv;

    const int px = p0 + ty;  // Xs row loaded by this work-item
    float xv = 0.0f;
    if (k < k_dim && px < p_end) {
      const int ow = px % W_out;
      const int oh = (px / W_out) % H_out;
      const int b = px / out_area;
      xv = x[(size_t)b * C_in * H * W + x_tap + ((size_t)oh * stride_h) * W + ow * stride_w];
    }
    Xs[ty][tx] = xv;
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int t = 0; t < TILE; ++t) acc += Ys[ty][t] * Xs[t][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  if (k < k_dim && m < cout_g) out[((size_t)s * C_out + g * cout_g + m) * k_dim + k] = acc;
}

// dw[i] = Σ_s partial[s·n + i]: the splits of grad_weight added in a fixed order.
__kernel void conv2d_sum_splits(__global const float* restrict partial, __global float* restrict dw, const int n,
                                const int splits) {
  const int i = get_global_id(0);
  if (i >= n) return;
  float acc = 0.0f;
  for (int s = 0; s < splits; ++s) acc += partial[(size_t)s * n + i];
  dw[i] = acc;
}

// db[co] = Σ_{b, oh, ow} dy[b, co, oh, ow]. One work-group of BIAS_GROUP work-items per
// channel: each sums a strided share of the B·H_out·W_out values, then a tree in local memory.
__kernel __attribute__((reqd_work_group_size(BIAS_GROUP, 1, 1)))
void conv2d_grad_bias(__global const float* restrict dy, __global float* restrict db, const int B,
                      const int C_out, const int out_area) {
  const int co = get_group_id(0);
  const int lid = get_local_id(0);
  const int count = B * out_area;
  float acc = 0.0f;
  for (int i = lid; i < count; i += BIAS_GROUP) {
    const int b = i / out_area;
    const int q = i - b * out_area;
    acc += dy[(size_t)(b * C_out + co) * out_area + q];
  }
  __local float partial[BIAS_GROUP];
  partial[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = BIAS_GROUP / 2; step > 0; step /= 2) {
    if (lid < step) partial[lid] += partial[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) db[co] = partial[0];
}
