// conv2d_naive: the baseline 2-D convolution, one output per work-item. OpenCL C 1.2.
// Same arguments and layouts as conv2d_tiled (opencl_functions/conv2d.cl):
//   x (B, C_in, H, W) padded, w (C_out, C_in/groups, K_h, K_w), bias (C_out), y (B, C_out, H_out, W_out).
// NDRange: dim 0 is the output pixel oh*W_out + ow, dim 1 the output channel, dim 2 the image.
// Each work-item sums its whole receptive field straight from global memory.

__kernel void conv2d_naive(__global const float* restrict x, __global const float* restrict w,
                           __global const float* restrict bias, __global float* restrict y,
                           const int has_bias, const int B, const int C_in, const int H, const int W,
                           const int C_out, const int K_h, const int K_w, const int stride_h,
                           const int stride_w, const int dilation_h, const int dilation_w,
                           const int groups, const int H_out, const int W_out) {
  const int pixel = get_global_id(0);
  const int co = get_global_id(1);
  const int b = get_global_id(2);
  const int oh = pixel / W_out;
  const int ow = pixel - oh * W_out;
  const int cin_g = C_in / groups;
  const int g = co / (C_out / groups);

  float acc = has_bias ? bias[co] : 0.0f;
  for (int ci = 0; ci < cin_g; ++ci) {
    __global const float* xc = x + ((size_t)(b * C_in + g * cin_g + ci) * H + oh * stride_h) * W + ow * stride_w;
    __global const float* wc = w + ((size_t)co * cin_g + ci) * K_h * K_w;
    for (int kh = 0; kh < K_h; ++kh)
      for (int kw = 0; kw < K_w; ++kw) acc += wc[kh * K_w + kw] * xc[kh * dilation_h * W + kw * dilation_w];
  }
  y[((size_t)(b * C_out + co) * H_out + oh) * W_out + ow] = acc;
}
