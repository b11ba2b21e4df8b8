// reference/epilogue.h: the fused epilogue of the reference's convolutions (staff-only), for
// the opencl device's fused convolutions (torch.ops.oclf.conv2d_fused) and products
// (torch.ops.oclf.addmm_act). preamble.h, which every reference kernel includes, includes it
// in builds with either of
//   -DEPI_RES     a residual, shaped and laid out as y, added to each output; the kernel takes
//                 it as one more argument, its last (EPI_PARAM closes the signature; EPI_ARGS
//                 passes it on to a helper function declared with EPI_PARAM);
//   -DEPI_ACT=n   then an activation: 1 ReLU, 2 ReLU6, 3 SiLU, 4 GELU (erf), 5 Hardswish,
//                 6 GELU (tanh approximation), 7 sigmoid, 8 tanh.
// Without them the kernels store what they computed (preamble.h's plain forms).
//   EPI(v, i)       output v at index i of y (after the bias), as stored;
//   EPIV(v, i, n)   the same for a vector of n outputs at i .. i+n-1;
//   ACT(v), ACTV(v, n)  the activation alone, for kernels that take no residual.
// NaN passes through each activation, as in torch.

#ifndef EPI_ACT
#define EPI_ACT 0
#endif

#ifdef EPI_RES
#define EPI_PARAM , __global const float* restrict epi_res
#define EPI_ARGS , epi_res
#define EPI_ADD(v, i) ((v) + epi_res[i])
#define EPI_ADDV(v, i, n) ((v) + vload##n(0, epi_res + (i)))
#else
#define EPI_PARAM
#define EPI_ARGS
#define EPI_ADD(v, i) (v)
#define EPI_ADDV(v, i, n) (v)
#endif

// The activation as an expression of v, for float and float vectors alike (a scalar operand
// widens to the vector's type; comparisons are false for NaN, so NaN is kept).
#if EPI_ACT == 0
#define EPI_F(v) (v)
#elif EPI_ACT == 1
#define EPI_F(v) ((v) < 0.0f ? 0.0f : (v))
#elif EPI_ACT == 2
#define EPI_F(v) ((v) < 0.0f ? 0.0f : (v) > 6.0f ? 6.0f : (v))
#elif EPI_ACT == 3
#define EPI_F(v) ((v) / (1.0f + exp(-(v))))
#elif EPI_ACT == 4
#define EPI_F(v) (0.5f * (v) * (1.0f + erf((v) * M_SQRT1_2_F)))
#elif EPI_ACT == 5
#define EPI_F(v) ((v) * ((v) < -3.0f ? 0.0f : (v) > 3.0f ? 6.0f : (v) + 3.0f) / 6.0f)
#elif EPI_ACT == 6
#define EPI_F(v) (0.5f * (v) * (1.0f + tanh(0.7978845608028654f * ((v) + 0.044715f * (v) * (v) * (v)))))
#elif EPI_ACT == 7
#define EPI_F(v) (1.0f / (1.0f + exp(-(v))))
#elif EPI_ACT == 8
#define EPI_F(v) tanh(v)
#else
#error "EPI_ACT must be 0..8"
#endif

// One function per type, so that v is evaluated once.
#define EPI_DEFINE(T) \
  inline T epi_##T(T v) { return EPI_F(v); }
EPI_DEFINE(float)
EPI_DEFINE(float2)
EPI_DEFINE(float4)
EPI_DEFINE(float8)
EPI_DEFINE(float16)
#undef EPI_DEFINE

#define ACT(v) epi_float(v)
#define ACTV_(v, n) epi_float##n(v)
#define ACTV(v, n) ACTV_(v, n)
#define EPI(v, i) ACT(EPI_ADD(v, i))
#define EPIV(v, i, n) ACTV(EPI_ADDV(v, i, n), n)
