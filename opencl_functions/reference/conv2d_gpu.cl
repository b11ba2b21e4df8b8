// reference/conv2d_gpu.cl: the reference's convolution for GPUs and its split-K sum
// (staff-only), launched by reference/conv2d_gpu.hpp for the library, the opencl device
// and the GEMMs of reference/matmul.hpp and reference/winograd.hpp. OpenCL C 1.2. Same
// arguments as conv2d_tiled (conv2d.cl) unless noted:
//
//   x      is (B, C_in, H, W)                    input, padded by the caller
//   w      is (C_out, C_in/groups, K_h, K_w)     weights
//   bias   is (C_out), read only when has_bias
//   y      is (B, C_out, H_out, W_out)           output
//
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
//              gradients with it (images and channels swapped) without transposing copies;
//              its K runs along rows of x there, so inputs are loaded along K (KH, KW: the
//              extent of dy, always given).
//   IO_HALF, IO_BFLOAT  x, w, bias and y hold float16 (read and written with vload_half and
//              vstore_half_rte: core OpenCL C, no cl_khr_fp16) or bfloat16 (the high half of
//              a float, in ushort; rounded to nearest even when stored, NaN kept quiet) values;
//              everything is computed in float, local memory included. The opencl device's
//              16-bit convolutions build with one of them. Default: float;
//   PARTS_FLOAT y is split-K's float partial sums (a 16-bit build with splits > 1);
//   MMA        (16-bit builds, NVIDIA sm_80 and later) the products on tensor cores: see below.
// Split-K: NDRange dim 2 is groups·splits; split s sums the K range [s·k_chunk,
// (s+1)·k_chunk) and writes its partial sums to y + s·B·C_out·H_out·W_out
// (conv2d_sum_splits adds them up and adds the bias). With splits = 1 it writes y.
// NDRange: (ceil(pixels/GTN)·GTN/GWN, ceil(C_out/groups / GTM)·GTM/GWM, groups·splits).
// v3 (one buffer, scalar local reads, 4×4 per work-item) reached 1.5–7 TFLOP/s on the
// H100 over ResNet-50's convs; v4 replaced it.

#include "conv2d_gpu_config.h"

__kernel __attribute__((reqd_work_group_size(GLX, GLY, 1)))
void conv2d_gpu(__global const IO_T* restrict x, __global const IO_T* restrict w,
                __global const IO_T* restrict bias, __global Y_T* restrict y,
                const int has_bias, const int B, const int C_in, const int H, const int W,
                const int C_out, const int K_h, const int K_w, const int stride_h,
                const int stride_w, const int dilation_h, const int dilation_w,
                const int groups, const int H_out, const int W_out, const int splits, const int k_chunk EPI_PARAM) {
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
  // quad so that the transposing stores of weights spread over the banks (B rows too where
  // they are stored transposed: NC_SWAPPED).
#ifdef MMA
  // MMA: A as [m][k], B as [k][n], 16-bit values (rows 16-byte aligned for ldmatrix).
  __local ushort As_mma[2][GTM * MMA_KP] __attribute__((aligned(16)));
  __local ushort Bs_mma[2][GTK * MMA_NP] __attribute__((aligned(16)));
#else
  __local float4 As[2][GTK][GTM4 + 1];
#ifdef NC_SWAPPED
  __local float4 Bs[2][GTK][GTN4 + 1];
#else
  __local float4 Bs[2][GTK][GTN4];
#endif
#endif

  __global const IO_T* w_group = w + (size_t)g * cout_g * k_dim;
#ifdef VEC_W
  // Weight loads: float4 (m, k..k+3), m = tid / (GTK/4) + i·G_THREADS/(GTK/4).
  const int a_k = (tid % (GTK / 4)) * 4, a_row0 = tid / (GTK / 4);
  REG4_T a_reg[G_A_PER];
#else
  // Weight loads: (m, k), k = tid % GTK, m = tid / GTK + i·G_THREADS/GTK.
  const int a_k = tid % GTK, a_row0 = tid / GTK;
  REG_T a_reg[G_A_PER];
#endif

#ifdef POINTWISE
  // Input loads: the float4 of pixels n..n+3 (one image) of row k of X_g,
  // n = n0 + 4·(tid % GTN4), k = tid / GTN4 + i·G_THREADS/GTN4.
  const int b_q = tid % GTN4, b_row0 = tid / GTN4;
  const int n_load = n0 + 4 * b_q;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  __global const IO_T* x_col = x + (size_t)(nb * C_in + g * cin_g) * hw_out + (n_load - nb * hw_out);
  REG4_T b_reg[G_B_PER];
#elif defined(NC_SWAPPED)
  // Input loads, along K: row k = k0 + b_k of the step (every load of a work-item has the
  // same k: image, row and column of dy's extent KH × KW, from one division by constants)
  // and pixel columns b_col0 + i·G_THREADS/GTK, whose offsets into x are fixed: neighbouring
  // work-items read neighbouring x values (a row of dy's positions), not pixels H·W apart.
#if G_THREADS % GTK
#error "NC_SWAPPED needs a work-group size that is a multiple of GTK"
#endif
  const int b_k = tid % GTK, b_col0 = tid / GTK;
  size_t x_at[G_B_PER];  // -1: past the last pixel
  for (int i = 0; i < G_B_PER; ++i) {
    const int n = n0 + b_col0 + i * (G_THREADS / GTK);
    const int nb = n / hw_out, np = n - nb * hw_out;
    const int noh = np / W_out;
    x_at[i] = n < pixels ? nb * x_bs + (size_t)(g * cin_g) * x_cs + (size_t)(noh * stride_h) * W +
                               (np - noh * W_out) * stride_w
                         : (size_t)-1;
  }
  float b_reg[G_B_PER];
#else
  // Input loads: pixel column b_col of the tile (fixed), rows b_row0 + i·G_THREADS/GTN.
  const int b_col = tid % GTN, b_row0 = tid / GTN;
  const int n_load = n0 + b_col;
  const bool n_ok = n_load < pixels;
  const int nb = n_ok ? n_load / hw_out : 0;
  const int np = n_ok ? n_load - nb * hw_out : 0;
  const int noh = np / W_out;
  __global const IO_T* x_patch =
      x + nb * x_bs + (size_t)(g * cin_g) * x_cs + (size_t)(noh * stride_h) * W + (np - noh * W_out) * stride_w;
  REG_T b_reg[G_B_PER];
#endif

#ifdef MMA
  const int lane = tid & 31, warp = tid >> 5;
  const int lr = lane >> 2, lc = lane & 3;  // the lane's row and column pair in a fragment
  const int wm0 = (warp % MMA_WM) * MMA_BM, wn0 = (warp / MMA_WM) * MMA_BN;
  // The local addresses (bytes) of the rows this lane gives ldmatrix at kk = 0 in buffer 0:
  // matrix q = lane / 8, row lane % 8 of it. A: quarter q of a 16×16 piece (rows 8·(q%2),
  // k 8·(q/2)); B: k rows 8·(q%2) of piece q/2 of a pair.
  const int lq = lane >> 3, l8 = lane & 7;
  const uint a_ldm = (uint)(size_t)(As_mma[0] + (wm0 + (lq & 1) * 8 + l8) * MMA_KP + (lq >> 1) * 8);
  const uint b_ldm = (uint)(size_t)(Bs_mma[0] + ((lq & 1) * 8 + l8) * MMA_NP + wn0 + (lq >> 1) * 8);
  float acc[MMA_TM][MMA_TN][4];
  for (int i = 0; i < MMA_TM; ++i)
    for (int j = 0; j < MMA_TN; ++j)
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
#else
  float acc[GWM][GWN];
  for (int i = 0; i < GWM; ++i)
    for (int j = 0; j < GWN; ++j) acc[i][j] = 0.0f;
#if SUM_K > 0
  // Two-level sums: acc holds the products of the last SUM_K values of k, added to total
  // after them (one accumulator over all of K drifted to 3-6x torch's float32 error).
  float total[GWM][GWN];
  for (int i = 0; i < GWM; ++i)
    for (int j = 0; j < GWN; ++j) total[i][j] = 0.0f;
#endif
#endif

#ifdef VEC_W
#define LOAD_A(k0)                                                                            \
  for (int i = 0; i < G_A_PER; ++i) {                                                           \
    const int m = m0 + a_row0 + i * (G_THREADS / (GTK / 4)), k = (k0) + a_k;                     \
    a_reg[i] = (m < cout_g && k < k_end) ? LDV4(w_group, W_INDEX(m, k)) : ZERO4;                 \
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
    a_reg[i] = (m < cout_g && k < k_end) ? LDV(w_group, W_INDEX(m, k)) : ZERO;                 \
  }
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < G_A_PER; ++i) ((__local float*)As[buf][a_k])[a_row0 + i * (G_THREADS / GTK)] = a_reg[i];
#endif

#ifdef POINTWISE
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < G_B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (G_THREADS / GTN4);                                        \
    b_reg[i] = (n_ok && k < k_end) ? LDV4(x_col, (size_t)k * hw_out) : ZERO4;                   \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) Bs[buf][b_row0 + i * (G_THREADS / GTN4)][b_q] = b_reg[i];
#elif defined(NC_SWAPPED)
#define LOAD_B(k0)                                                                            \
  {                                                                                           \
    const int k = (k0) + b_k;                                                                 \
    const int ci = k / k_area, r = k - ci * k_area;                                           \
    const int kh = r / K_W_, kw = r - kh * K_W_;                                              \
    const size_t k_at = (size_t)ci * x_cs + kh * dilation_h * W + kw * dilation_w;            \
    for (int i = 0; i < G_B_PER; ++i)                                                         \
      b_reg[i] = (k < k_end && x_at[i] != (size_t)-1) ? LD(x, x_at[i] + k_at) : 0.0f;         \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) ((__local float*)Bs[buf][b_k])[b_col0 + i * (G_THREADS / GTK)] = b_reg[i];
#else
#define LOAD_B(k0)                                                                            \
  for (int i = 0; i < G_B_PER; ++i) {                                                           \
    const int k = (k0) + b_row0 + i * (G_THREADS / GTN);                                         \
    REG_T v = ZERO;                                                                           \
    if (n_ok && k < k_end) {                                                                  \
      const int ci = k / k_area, r = k - ci * k_area;                                         \
      const int kh = r / K_W_, kw = r - kh * K_W_;                                            \
      v = LDV(x_patch, (size_t)ci * x_cs + kh * dilation_h * W + kw * dilation_w);            \
    }                                                                                         \
    b_reg[i] = v;                                                                             \
  }
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) ((__local float*)Bs[buf][b_row0 + i * (G_THREADS / GTN)])[b_col] = b_reg[i];
#endif

#ifdef MMA
  // The same loads' 16-bit patterns, staged as they are: A at [m][k], B at [n][k].
#undef STORE_A
#undef STORE_B
#define A_STAGE(buf) (As_mma[buf])
#define B_STAGE(buf) (Bs_mma[buf])
#ifdef VEC_W
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < G_A_PER; ++i)                                                           \
    *(__local ushort4*)(A_STAGE(buf) + (a_row0 + i * (G_THREADS / (GTK / 4))) * MMA_KP + a_k) = a_reg[i];
#else
#define STORE_A(buf)                                                                          \
  for (int i = 0; i < G_A_PER; ++i) A_STAGE(buf)[(a_row0 + i * (G_THREADS / GTK)) * MMA_KP + a_k] = a_reg[i];
#endif
#ifdef POINTWISE
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i)                                                           \
    *(__local ushort4*)(B_STAGE(buf) + (b_row0 + i * (G_THREADS / GTN4)) * MMA_NP + 4 * b_q) = b_reg[i];
#else
#define STORE_B(buf)                                                                          \
  for (int i = 0; i < G_B_PER; ++i) B_STAGE(buf)[(b_row0 + i * (G_THREADS / GTN)) * MMA_NP + b_col] = b_reg[i];
#endif
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
#ifdef MMA
#pragma unroll
    for (int kk = 0; kk < GTK; kk += 16) {
      // Fragments as pairs of 16-bit values, by ldmatrix.
      uint fa[MMA_TM][4], fb[MMA_TN + 1][2];
      const uint a_at = a_ldm + (uint)(buf * GTM * MMA_KP + kk) * 2u;
      const uint b_at = b_ldm + (uint)(buf * GTK * MMA_NP + kk * MMA_NP) * 2u;
#pragma unroll
      for (int i = 0; i < MMA_TM; ++i)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(fa[i][0]), "=r"(fa[i][1]), "=r"(fa[i][2]), "=r"(fa[i][3])
                     : "r"(a_at + (uint)(16 * i * MMA_KP) * 2u));
#pragma unroll
      for (int j = 0; j < MMA_TN; j += 2)  // (an odd last piece loads a pair too, into fb[MMA_TN]: rows within the padding)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(fb[j][0]), "=r"(fb[j][1]), "=r"(fb[j + 1][0]), "=r"(fb[j + 1][1])
                     : "r"(b_at + (uint)(8 * j) * 2u));
#pragma unroll
      for (int i = 0; i < MMA_TM; ++i)
#pragma unroll
        for (int j = 0; j < MMA_TN; ++j)
          asm volatile(MMA_OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                       : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                       : "r"(fa[i][0]), "r"(fa[i][1]), "r"(fa[i][2]), "r"(fa[i][3]), "r"(fb[j][0]), "r"(fb[j][1]));
    }
#else
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
#if SUM_K > 0
    if ((k0 - k_begin + GTK) % SUM_K == 0) {
#pragma unroll
      for (int i = 0; i < GWM; ++i)
#pragma unroll
        for (int j = 0; j < GWN; ++j) {
          total[i][j] += acc[i][j];
          acc[i][j] = 0.0f;
        }
    }
#endif
#endif
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

  __global Y_T* out = y + (size_t)split * pixels * C_out;
#ifdef MMA
  // Sum c of piece (i, j): row 16·i + lr + 8·(c / 2), column 8·j + 2·lc + c % 2 of the block.
#pragma unroll
  for (int i = 0; i < MMA_TM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + wm0 + 16 * i + lr + 8 * h;
      if (m >= cout_g) continue;
      const int co = g * cout_g + m;
      const float b_add = (has_bias && splits == 1) ? LD(bias, co) : 0.0f;
#pragma unroll
      for (int j = 0; j < MMA_TN; ++j) {
        for (int c = 0; c < 2; ++c) {
          const int n = n0 + wn0 + 8 * j + 2 * lc + c;
          if (n < pixels) {
            const int b = n / hw_out;
            const size_t at = Y_INDEX(b, co) * hw_out + (n - b * hw_out);
            ST_Y(out, at, EPI(acc[i][j][2 * h + c] + b_add, at));
          }
        }
      }
    }
  }
#else
#if SUM_K > 0
#pragma unroll
  for (int i = 0; i < GWM; ++i)
#pragma unroll
    for (int j = 0; j < GWN; ++j) acc[i][j] += total[i][j];
#endif
#pragma unroll
  for (int i = 0; i < GWM; ++i) {
    const int m = m0 + 4 * (ty + (i / 4) * GLY) + i % 4;
    if (m >= cout_g) continue;
    const int co = g * cout_g + m;
    const float b_add = (has_bias && splits == 1) ? LD(bias, co) : 0.0f;
#pragma unroll
    for (int j4 = 0; j4 < GWN / 4; ++j4) {
      const int n = n0 + 4 * (tx + j4 * GLX);
#ifdef VEC_OUT
      if (n < pixels) {
        const int b = n / hw_out;
        const float4 v = (float4)(acc[i][4 * j4], acc[i][4 * j4 + 1], acc[i][4 * j4 + 2], acc[i][4 * j4 + 3]);
        const size_t at = Y_INDEX(b, co) * hw_out + (n - b * hw_out);
        ST4_Y(out, at, EPIV(v + b_add, at, 4));
      }
#else
      for (int c = 0; c < 4; ++c) {
        if (n + c < pixels) {
          const int b = (n + c) / hw_out;
          const size_t at = Y_INDEX(b, co) * hw_out + (n + c - b * hw_out);
          ST_Y(out, at, EPI(acc[i][4 * j4 + c] + b_add, at));
        }
      }
#endif
    }
  }
#endif
}

#undef Y_INDEX

// y = sum over s of parts[s] (+ bias): the end of a split-K conv2d_gpu.
// parts is (splits, B, C_out, hw_out); NDRange: (B·C_out·hw_out).
__kernel void conv2d_sum_splits(__global const float* restrict parts, __global const IO_T* restrict bias,
                                __global IO_T* restrict y, const int has_bias, const int splits,
                                const int C_out, const int hw_out, const int total EPI_PARAM) {
  const int i = get_global_id(0);
  if (i >= total) return;
  float s = has_bias ? LD(bias, (i / hw_out) % C_out) : 0.0f;
  for (int k = 0; k < splits; ++k) s += parts[(size_t)k * total + i];
  ST(y, i, EPI(s, i));
}
