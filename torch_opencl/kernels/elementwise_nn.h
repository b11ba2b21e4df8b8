// More operations F(a, b, c) of elementwise.cl, included at the end of its list of
// operations (same build options, same names: a, b, c the inputs in CT, s0 and s1 the
// parameters). Activations and their gradients, the losses' elementwise parts, gating and
// x·log(y). The formulas follow torch's CPU kernels, NaN handling included: a comparison
// with a NaN is false, so each ternary below sends a NaN down the branch torch's does.
//
// Activations: a = x (forward), a = grad_output and b = x or the forward's result (backward).
//   elu              s0 = alpha·scale, s1 = scale, b = input_scale (a number)
//   elu_backward_x   (b = x, c = input_scale)   elu_backward_y (b = result, c = input_scale)
//   softplus         s0 = beta, s1 = threshold (and its backward)
//   log_sigmoid      min(x, 0) - log1p(exp(-|x|)) (and its backward)
//   mish, hardshrink and softshrink (s0 = lambda), threshold (s0 = threshold, s1 = value)
// Losses: a = input, b = target; the backward forms take c = grad_output (broadcast) and
// s1 = the reduction's norm (1/numel for a mean, else 1).
//   bce              -c·(b·log(a) + (1-b)·log(1-a)), logs clamped at -100, c the weight
//   bce_backward     s0 = norm: s0·c·(a-b) / max(a·(1-a), 1e-12)
//   smooth_l1        s0 = beta; huber: s0 = delta (and their backward)
//   in_unit          a in [0, 1] (BCE's check of its input)
// Gating: glu = a·sigmoid(b); glu_backward_b = a·b·σ(c)·(1-σ(c)) (a = grad_output, b and c
// the two halves); prelu = a > 0 ? a : b·a, prelu_backward_input (a = grad, b = x, c =
// weight), prelu_backward_weight (a = grad, b = x).
// Math: xlogy = a·log(b) (0 where a is 0, NaN where b is), xlog1py = a·log1p(b).

#if defined(OP_elu_full)
#define F(a, b, c) ((a) <= 0 ? s0 * expm1((a) * (b)) : (a) * s1)
#elif defined(OP_elu_backward_x)
#define F(a, b, c) ((b) <= 0 ? (a) * (c) * s0 * exp((b) * (c)) : (a) * s1)
#elif defined(OP_elu_backward_y)
#define F(a, b, c) ((b) <= 0 ? (a) * (c) * ((b) + s0) : (a) * s1)
#elif defined(OP_softplus)
#define F(a, b, c) ((a) * s0 > s1 ? (a) : log1p(exp((a) * s0)) / s0)
#elif defined(OP_softplus_backward)
inline CT softplus_grad(const CT g, const CT x, const CT beta, const CT threshold) {
  const CT z = exp(x * beta);
  return x * beta > threshold ? g : g * z / (z + (CT)1);
}
#define F(a, b, c) softplus_grad((a), (b), s0, s1)
#elif defined(OP_log_sigmoid)
#define F(a, b, c) (((a) < 0 ? (a) : (CT)0) - log1p(exp(-fabs(a))))
#elif defined(OP_log_sigmoid_backward)
inline CT log_sigmoid_grad(const CT g, const CT x) {
  const CT z = exp(-fabs(x));
  const CT max_deriv = x < 0 ? (CT)1 : (CT)0;
  const CT sign = x < 0 ? (CT)1 : (CT)-1;
  return g * (max_deriv - sign * (z / ((CT)1 + z)));
}
#define F(a, b, c) log_sigmoid_grad((a), (b))
#elif defined(OP_mish)
#define F(a, b, c) ((a) * tanh(log1p(exp(a))))
#elif defined(OP_mish_backward)
inline CT mish_grad(const CT g, const CT x) {
  // At ±inf torch's formula meets inf · 0 (NaN); the device's tanh may stop short of 1 there.
  if (isinf(x)) return (CT)NAN;
  const CT sigmoid = (CT)1 / ((CT)1 + exp(-x));
  const CT t = tanh(log1p(exp(x)));
  return g * (t + x * sigmoid * ((CT)1 - t * t));
}
#define F(a, b, c) mish_grad((a), (b))
#elif defined(OP_hardshrink)
#define F(a, b, c) ((a) >= -s0 && (a) <= s0 ? (CT)0 : (a))
#elif defined(OP_shrink_backward)
#define F(a, b, c) ((b) >= -s0 && (b) <= s0 ? (CT)0 : (a))
#elif defined(OP_softshrink)
#define F(a, b, c) ((a) > s0 ? (a) - s0 : (a) < -s0 ? (a) + s0 : (a) * (CT)0)
#elif defined(OP_threshold)
#define F(a, b, c) ((a) <= s0 ? s1 : (a))
// losses
#elif defined(OP_bce)
inline CT clamped_log(const CT v) {
  const CT l = log(v);
  return l < (CT)-100 ? (CT)-100 : l;
}
#define F(a, b, c) (-(c) * ((b) * clamped_log(a) + ((CT)1 - (b)) * clamped_log((CT)1 - (a))))
#elif defined(OP_bce_backward)
inline CT bce_grad(const CT x, const CT t, const CT g, const CT norm) {
  const CT d = ((CT)1 - x) * x;
  return norm * g * (x - t) / (d < (CT)1e-12 ? (CT)1e-12 : d);
}
#define F(a, b, c) bce_grad((a), (b), (c), s0)
#elif defined(OP_in_unit)
#define F(a, b, c) ((a) >= 0 && (a) <= 1)
#elif defined(OP_smooth_l1)
inline CT smooth_l1(const CT x, const CT t, const CT beta) {
  const CT z = fabs(x - t);
  return z < beta ? (CT)0.5 * z * z / beta : z - (CT)0.5 * beta;
}
#define F(a, b, c) smooth_l1((a), (b), s0)
#elif defined(OP_smooth_l1_backward)
inline CT smooth_l1_grad(const CT x, const CT t, const CT g, const CT beta, const CT norm) {
  const CT d = x - t;
  return d <= -beta ? -norm * g : d >= beta ? norm * g : norm * d * g / beta;
}
#define F(a, b, c) smooth_l1_grad((a), (b), (c), s0, s1)
#elif defined(OP_huber)
inline CT huber(const CT x, const CT t, const CT delta) {
  const CT z = fabs(x - t);
  return z < delta ? (CT)0.5 * z * z : delta * (z - (CT)0.5 * delta);
}
#define F(a, b, c) huber((a), (b), s0)
#elif defined(OP_huber_backward)
inline CT huber_grad(const CT x, const CT t, const CT g, const CT delta, const CT norm) {
  const CT d = x - t;
  return d < -delta ? -norm * g * delta : d > delta ? norm * g * delta : norm * d * g;
}
#define F(a, b, c) huber_grad((a), (b), (c), s0, s1)
// gating
#elif defined(OP_glu)
#define F(a, b, c) ((a) * ((CT)1 / ((CT)1 + exp(-(b)))))
#elif defined(OP_glu_backward_b)
inline CT glu_grad_b(const CT g, const CT first, const CT second) {
  const CT sigmoid = (CT)1 / ((CT)1 + exp(-second));
  return g * first * sigmoid * ((CT)1 - sigmoid);
}
#define F(a, b, c) glu_grad_b((a), (b), (c))
#elif defined(OP_prelu)
#define F(a, b, c) ((a) > 0 ? (a) : (b) * (a))
#elif defined(OP_prelu_backward_input)
#define F(a, b, c) ((b) > 0 ? (a) : (c) * (a))
#elif defined(OP_prelu_backward_weight)
#define F(a, b, c) ((b) > 0 ? (CT)0 : (b) * (a))
// math
#elif defined(OP_xlogy)
#define F(a, b, c) ((b) != (b) ? (b) : (a) == 0 ? (CT)0 : (a) * log(b))
#elif defined(OP_xlog1py)
#define F(a, b, c) ((b) != (b) ? (b) : (a) == 0 ? (CT)0 : (a) * log1p(b))
#else
#error "elementwise.cl: build with -DOP_<name>"
#endif
