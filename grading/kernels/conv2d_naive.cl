// conv2d_naive: the grader's performance baseline, the plainest correct conv2d
// (cross-correlation on an already padded input, as torch.nn.functional.conv2d).
// One work-item per output element, every operand read straight from global memory.
//
//   x    is (B, C_in, H, W)                 input, padded by the caller
//   w    is (C_out, C_in/groups, K_h, K_w)  weights
//   bias is (C_out), read only when has_bias
//   y    is (B, C_out, H_out, W_out)        output
//
// NDRange: dim 0 = ow (W_out), dim 1 = oh (H_out), dim 2 = b·C_out + co.

__kernel void conv2d_naive(__global const float* x, __global const float* w, __global const float* bias,
                           __global float* y, const int has_bias, const int B, const int C_in, const int H,
                           const int W, const int C_out, const int K_h, const int K_w, const int stride_h,
                           const int stride_w, const int dilation_h, const int dilation_w, const int groups,
                           const int H_out, const int W_out) {
  const int ow = get_global_id(0);
  const int oh = get_global_id(1);
  const int b = get_global_id(2) / C_out;
  const int co = get_global_id(2) % C_out;
  if (ow >= W_out || oh >= H_out || b >= B) return;
  const int cin_g = C_in / groups;
  const int g = co / (C_out / groups);

  float acc = has_bias ? bias[co] : 0.0f;
  for (int ci = 0; ci < cin_g; ++ci) {
    for (int kh = 0; kh < K_h; ++kh) {
      for (int kw = 0; kw < K_w; ++kw) {
        const int ih = oh * stride_h + kh * dilation_h;
        const int iw = ow * stride_w + kw * dilation_w;
        acc += x[((b * C_in + g * cin_g + ci) * H + ih) * W + iw] * w[((co * cin_g + ci) * K_h + kh) * K_w + kw];
      }
    }
  }
  y[((b * C_out + co) * H_out + oh) * W_out + ow] = acc;
}
