// reference/winograd.cl: Winograd F(2×2, 3×3) for stride-1, undilated 3×3 convolutions with one group
// (staff-only; a GPU candidate of conv2d.hpp, launched by winograd.hpp). Each 2×2 block of outputs comes from a
// 4×4 tile of the input, with 16 multiplications per input channel instead of 36:
//
//   U = G g Gᵀ    the weights of one (output, input) channel pair, 3×3 → 4×4 (once per weight)
//   V = Bᵀ d B    one 4×4 input tile d of one input channel
//   M = Σ_ci U ⊙ V       16 matrix products, one per tile position ξ = 4·i + j:
//                        M[ξ] (C_out × P) = U[ξ] (C_out × C_in) · V[ξ] (C_in × P)
//   Y = Aᵀ M A    2×2 outputs of one output channel
//
// with G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1], Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1] and
// Aᵀ = [1 1 1 0; 0 1 -1 -1]: only additions and halvings, exact in float32 but for the
// order of the sums. The 16 products run as conv2d_gpu's grouped 1×1 convolution (16 groups),
// the tuned implicit GEMM of the direct path.
//
// Layouts: x (B, C_in, H, W) padded by the caller, w (C_out, C_in, 3, 3), y (B, C_out,
// H_out, W_out) with H_out = H - 2, W_out = W - 2; tiles t = (b·TH + th)·TW + tw of
// P = B·TH·TW, TH = ceil(H_out / 2), TW = ceil(W_out / 2); tile (th, tw) reads input rows
// 2·th .. 2·th+3 and columns 2·tw .. 2·tw+3 (zeros past H and W) and writes outputs
// 2·th, 2·th+1 × 2·tw, 2·tw+1 that exist.
//   U is (16, C_out, C_in); V is (16, C_in, P); M is (16, C_out, P).
// Offsets are int: every array must have < 2^31 elements.

// x, w, bias and y hold float16 or bfloat16 values in builds with -DIO_HALF or -DIO_BFLOAT
// (io_types.h: the opencl device's 16-bit convolutions); U, V and M are float32 always.
#include "io_types.h"

// The opencl device's fused convolutions build winograd_output with an epilogue (epilogue.h).
#include "preamble.h"

// U[ξ][co][ci] from w[co][ci]: one work-item per (ci, co). NDRange (C_in, C_out).
__kernel void winograd_weights(__global const IO_T* restrict w, __global float* restrict u, const int C_in,
                               const int C_out) {
  const int ci = get_global_id(0), co = get_global_id(1);
  __global const IO_T* g = w + ((size_t)co * C_in + ci) * 9;
  float gg[4][3];  // G · g
  for (int c = 0; c < 3; ++c) {
    const float a = LD(g, c), b = LD(g, 3 + c), d = LD(g, 6 + c);
    gg[0][c] = a;
    gg[1][c] = 0.5f * (a + b + d);
    gg[2][c] = 0.5f * (a - b + d);
    gg[3][c] = d;
  }
  const size_t plane = (size_t)C_out * C_in;
  __global float* out = u + (size_t)co * C_in + ci;
  for (int i = 0; i < 4; ++i) {  // (G g) · Gᵀ, row i
    const float a = gg[i][0], b = gg[i][1], d = gg[i][2];
    out[(4 * i + 0) * plane] = a;
    out[(4 * i + 1) * plane] = 0.5f * (a + b + d);
    out[(4 * i + 2) * plane] = 0.5f * (a - b + d);
    out[(4 * i + 3) * plane] = d;
  }
}

// V[ξ][ci][t] from the 4×4 input tile of tile t in channel ci. NDRange (P, C_in).
__kernel void winograd_input(__global const IO_T* restrict x, __global float* restrict v, const int B,
                             const int C_in, const int H, const int W, const int TH, const int TW) {
  const int t = get_global_id(0), ci = get_global_id(1);
  const int P = B * TH * TW;
  if (t >= P) return;
  const int b = t / (TH * TW), rest = t - b * TH * TW;
  const int r0 = 2 * (rest / TW), c0 = 2 * (rest % TW);
  __global const IO_T* xc = x + ((size_t)b * C_in + ci) * H * W;
  float d[4][4];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) d[r][c] = (r0 + r < H && c0 + c < W) ? LD(xc, (r0 + r) * W + c0 + c) : 0.0f;
  float bd[4][4];  // Bᵀ · d
  for (int c = 0; c < 4; ++c) {
    bd[0][c] = d[0][c] - d[2][c];
    bd[1][c] = d[1][c] + d[2][c];
    bd[2][c] = d[2][c] - d[1][c];
    bd[3][c] = d[1][c] - d[3][c];
  }
  const size_t plane = (size_t)C_in * P;
  __global float* out = v + (size_t)ci * P + t;
  for (int i = 0; i < 4; ++i) {  // (Bᵀ d) · B, row i
    out[(4 * i + 0) * plane] = bd[i][0] - bd[i][2];
    out[(4 * i + 1) * plane] = bd[i][1] + bd[i][2];
    out[(4 * i + 2) * plane] = bd[i][2] - bd[i][1];
    out[(4 * i + 3) * plane] = bd[i][1] - bd[i][3];
  }
}

// y's 2×2 outputs of tile t in channel co from M[ξ][co][t] (+ bias). NDRange (P, C_out).
__kernel void winograd_output(__global const float* restrict m, __global const IO_T* restrict bias,
                              __global IO_T* restrict y, const int has_bias, const int B, const int C_out,
                              const int H_out, const int W_out, const int TH, const int TW EPI_PARAM) {
  const int t = get_global_id(0), co = get_global_id(1);
  const int P = B * TH * TW;
  if (t >= P) return;
  const int b = t / (TH * TW), rest = t - b * TH * TW;
  const int r0 = 2 * (rest / TW), c0 = 2 * (rest % TW);
  const size_t plane = (size_t)C_out * P;
  __global const float* in = m + (size_t)co * P + t;
  float mm[4][4];
  for (int i = 0; i < 16; ++i) mm[i / 4][i % 4] = in[i * plane];
  float am[2][4];  // Aᵀ · M
  for (int c = 0; c < 4; ++c) {
    am[0][c] = mm[0][c] + mm[1][c] + mm[2][c];
    am[1][c] = mm[1][c] - mm[2][c] - mm[3][c];
  }
  const float b0 = has_bias ? LD(bias, co) : 0.0f;
  const size_t yc = ((size_t)b * C_out + co) * H_out * W_out;
  for (int r = 0; r < 2; ++r) {  // (Aᵀ M) · A, row r
    const float out0 = am[r][0] + am[r][1] + am[r][2] + b0;
    const float out1 = am[r][1] - am[r][2] - am[r][3] + b0;
    if (r0 + r < H_out) {
      const size_t at = yc + (r0 + r) * W_out + c0;
      if (c0 < W_out) ST(y, at, EPI(out0, at));
      if (c0 + 1 < W_out) ST(y, at + 1, EPI(out1, at + 1));
    }
  }
}
