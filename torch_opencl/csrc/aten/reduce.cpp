// Reductions of the opencl device (kernels/reduce.cl): sum, mean, prod, amax/amin,
// max/min (with indices), argmax/argmin, all/any and the vector norm, over any dimensions
// of a strided tensor, keepdim or not.
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <torch/library.h>

#include <climits>
#include <cmath>

#include "dispatch.h"
#include "kernel_launch.h"
#include "pointwise.h"
#include "tensors.h"

namespace oclf::device {

namespace {

constexpr int kMaxDims = 6;  // MAX_DIMS in reduce.cl
constexpr size_t kGroup = 256;

struct Dims {
  cl_int ndim = 0;
  cl_int size[kMaxDims] = {0};
  cl_int stride[kMaxDims] = {0};
};

// Sizes and strides with size-1 dimensions dropped and neighbours merged where the
// strides allow (the outer one's stride is the inner one's times its size).
Dims merged(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  std::vector<int64_t> s, t;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!s.empty() && t.back() == strides[d] * sizes[d]) {
      s.back() *= sizes[d];
      t.back() = strides[d];
    } else {
      s.push_back(sizes[d]);
      t.push_back(strides[d]);
    }
  }
  DEVICE_CHECK(s.size() <= size_t(kMaxDims), "opencl: reduction over a layout of ", s.size(),
              " non-mergeable dimensions; at most ", kMaxDims, " are supported");
  Dims out;
  out.ndim = static_cast<cl_int>(s.size());
  for (size_t d = 0; d < s.size(); ++d) {
    out.size[d] = static_cast<cl_int>(s[d]);
    out.stride[d] = static_cast<cl_int>(t[d]);
  }
  return out;
}

// Which of self's dimensions a reduction over `dims` (all when empty) covers, read as torch
// reads them: negative dimensions wrap, a repeated one is an error, and a 0-d tensor (one
// element, no dimensions) takes dim 0 or -1 and reduces nothing away: its result is 0-d.
std::vector<bool> reduced_dims(const std::string& op, const at::Tensor& self, at::IntArrayRef dims) {
  const int64_t nd = self.dim();
  std::vector<bool> reduced(nd, dims.empty());
  std::vector<bool> seen(std::max<int64_t>(nd, 1), false);
  for (int64_t d : dims) {
    const int64_t w = at::maybe_wrap_dim(d, nd);  // IndexError naming the valid range
    DEVICE_CHECK(!seen[w], "opencl: ", op, "(): dim ", w, " appears multiple times in the list of dims");
    seen[w] = true;
    if (w < nd) reduced[w] = true;
  }
  return reduced;
}

const char* lowest(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble: return "(-INFINITY)";
    case at::kLong: return "LONG_MIN";
    case at::kInt: return "INT_MIN";
    case at::kShort: return "SHRT_MIN";
    case at::kChar: return "CHAR_MIN";
    default: return "0";  // uint8, bool
  }
}

const char* highest(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble: return "INFINITY";
    case at::kLong: return "LONG_MAX";
    case at::kInt: return "INT_MAX";
    case at::kShort: return "SHRT_MAX";
    case at::kChar: return "CHAR_MAX";
    case at::kBool: return "1";
    default: return "255";  // uint8
  }
}

// The type a reduction accumulates in, given the one its caller asks for: float for
// float16 and bfloat16 (as torch accumulates them), float64 where float64 is read or written.
at::ScalarType accumulate_type(at::ScalarType acc, at::ScalarType in, at::ScalarType out) {
  if (is_16bit_float(acc)) return at::kFloat;
  if (acc == at::kFloat && (in == at::kDouble || out == at::kDouble)) return at::kDouble;
  return acc;
}

// Reduces `self` over `dims` (all when empty) into `values` (and `indices` for max/min
// and the arg reductions), both contiguous with the kept dimensions' shape.
// `acc` is the accumulator type; mean passes scale = 1/R.
void reduce(const std::string& op, const at::Tensor& self, at::IntArrayRef dims, const at::Tensor& values,
            const at::Tensor& indices, at::ScalarType acc, bool scale_by_count = false) {
  check_device(self, "input");
  const int64_t nd = self.dim();
  DEVICE_CHECK(nd <= 64, "opencl: ", op, "(): only tensors with up to 64 dims are supported, got ", nd);
  const std::vector<bool> reduced = reduced_dims(op, self, dims);
  std::vector<int64_t> kept_size, kept_stride, red_size, red_stride;
  for (int64_t d = 0; d < nd; ++d) {
    (reduced[d] ? red_size : kept_size).push_back(self.size(d));
    (reduced[d] ? red_stride : kept_stride).push_back(self.stride(d));
  }
  int64_t count = 1, outputs = 1;
  for (int64_t s : red_size) count *= s;
  for (int64_t s : kept_size) outputs *= s;
  if (outputs == 0) return;
  DEVICE_CHECK(self.numel() <= INT_MAX, "opencl: reductions over more than 2^31 elements are not supported");
  const bool arg_op = op == "argmax" || op == "argmin";
  if (count == 0 && (op == "max" || op == "min" || arg_op)) {
    // torch's exception types: a RuntimeError for the whole tensor, an IndexError for a dim
    DEVICE_CHECK(!dims.empty(), "opencl: ", op, "(): Expected reduction dim to be specified for input.numel() == 0");
    DEVICE_CHECK_INDEX(false, "opencl: ", op, "(): Expected reduction dim to have non-zero size: ",
                      "cannot reduce over a zero-size dimension");
  }

  const at::ScalarType in_type = self.scalar_type();
  const at::ScalarType out_type = values.defined() ? values.scalar_type() : in_type;
  acc = accumulate_type(acc, in_type, out_type);
  const bool group = count >= 64 && outputs < 4096;
  std::string options = "-DOP_" + op + " -DTI=" + cl_storage_type(in_type) + " -DTO=" + cl_storage_type(out_type) +
                        " -DACC=" + cl_storage_type(acc) + " -DLOWEST=" + lowest(acc) + " -DHIGHEST=" + highest(acc) +
                        " -DGROUP=" + std::to_string(kGroup);
  const Dims kept = merged(kept_size, kept_stride), red = merged(red_size, red_stride);
  // The mean of nothing is 0/0, NaN, as in torch.
  const ScalarArg scale(!scale_by_count ? 1.0 : count > 0 ? 1.0 / static_cast<double>(count) : NAN, acc);

  const at::Tensor& first = values.defined() ? values : indices;
  const at::Tensor& second = indices.defined() ? indices : values;
  // Few outputs over many elements (a whole tensor's sum, an argmax over a vocabulary): one
  // work-group an output would leave most of a GPU idle, so each output's range is cut into
  // slices reduced side by side (4 work-groups a compute unit in all, at least 8 elements a
  // work-item), then the slices' results merged.
  const int64_t wanted = 4 * int64_t(Runtime::get().info().compute_units);
  int64_t parts = 1;
  if (group && outputs < wanted) parts = std::min((wanted + outputs - 1) / outputs, count / int64_t(8 * kGroup));
  if (parts >= 2) {
    const int64_t chunk = (count + parts - 1) / parts;
    parts = (count + chunk - 1) / chunk;
    const at::Tensor part_v = empty_device({outputs * parts}, acc), part_i = empty_device({outputs * parts}, at::kInt);
    const size_t part_global[1] = {size_t(outputs * parts) * kGroup}, global[1] = {size_t(outputs) * kGroup};
    const size_t local[1] = {kGroup};
    launch(device_kernel("reduce.cl", "reduce_parts", options), NDRange(1, part_global, local), arg(self), kept,
           red, static_cast<int>(count), static_cast<int>(chunk), static_cast<int>(parts), arg(part_v), arg(part_i));
    launch(device_kernel("reduce.cl", "reduce_combine", options), NDRange(1, global, local), arg(part_v),
           arg(part_i), static_cast<int>(parts), arg(first), arg(second), indices.defined() ? 1 : 0, scale);
    return;
  }
  const size_t global[1] = {size_t(outputs) * kGroup};
  const size_t local[1] = {kGroup};
  launch(device_kernel("reduce.cl", group ? "reduce_group" : "reduce_item", options),
         group ? NDRange(1, global, local) : NDRange::linear(size_t(outputs)), arg(self), arg(first), arg(second),
         indices.defined() ? 1 : 0, kept, red, static_cast<int>(count), static_cast<int>(outputs), scale);
}

// The result's shape: reduced dimensions dropped, or kept as size 1.
std::vector<int64_t> result_shape(const char* op, const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  const int64_t nd = self.dim();
  const std::vector<bool> reduced = reduced_dims(op, self, dims);
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) {
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return shape;
}

at::ScalarType sum_type(at::ScalarType in, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(in, /*includeBool=*/true) ? at::kLong : in;
}

// What sum and prod accumulate in (reduce() widens float to float64 where needed).
at::ScalarType sum_accumulator(at::ScalarType in, std::optional<at::ScalarType> dtype) {
  return at::isFloatingType(sum_type(in, dtype)) ? at::kFloat : at::kLong;
}

// Writes through a contiguous result when `out` is not contiguous.
template <typename Fill>
at::Tensor& into(at::Tensor& out, const std::vector<int64_t>& shape, Fill fill) {
  at::native::resize_output(out, shape);
  if (out.is_contiguous()) {
    fill(out);
  } else {
    at::Tensor tmp = empty_device(shape, out.scalar_type());
    fill(tmp);
    out.copy_(tmp);
  }
  return out;
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
  const at::ScalarType acc = sum_accumulator(self.scalar_type(), dtype);
  return into(out, result_shape("sum", self, dims, keepdim), [&](const at::Tensor& v) {
    reduce("sum", self, dims, v, at::Tensor(), acc);
  });
}

at::Tensor sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = empty_device({0}, sum_type(self.scalar_type(), dtype));
  return sum_out(self, dim, keepdim, dtype, out);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
  DEVICE_CHECK_NOT_IMPLEMENTED(!at::isComplexType(out.scalar_type()), "opencl: mean(): complex results are not ",
                              "supported, got ", out.scalar_type());
  DEVICE_CHECK(at::isFloatingType(out.scalar_type()), "opencl: mean(): could not infer output dtype: it must be ",
              "a floating point dtype, got ", out.scalar_type());
  return into(out, result_shape("mean", self, dims, keepdim), [&](const at::Tensor& v) {
    reduce("sum", self, dims, v, at::Tensor(), at::kFloat, /*scale_by_count=*/true);
  });
}

at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype) {
  at::Tensor out = empty_device({0}, dtype.value_or(self.scalar_type()));
  return mean_out(self, dim, keepdim, dtype, out);
}

at::Tensor& prod_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                     at::Tensor& out) {
  const at::ScalarType acc = sum_accumulator(self.scalar_type(), dtype);
  return into(out, result_shape("prod", self, {dim}, keepdim), [&](const at::Tensor& v) {
    reduce("prod", self, {dim}, v, at::Tensor(), acc);
  });
}

at::Tensor prod_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  const at::ScalarType type = sum_type(self.scalar_type(), dtype);
  at::Tensor out = empty_device({}, type);
  reduce("prod", self, {}, out, at::Tensor(), sum_accumulator(self.scalar_type(), dtype));
  return out;
}

template <const char* op>
at::Tensor& extreme_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  DEVICE_CHECK(out.scalar_type() == self.scalar_type(), "opencl: ", op, "(): Expected the dtype for input and out ",
              "to match, but got ", self.scalar_type(), " for input's dtype and ", out.scalar_type(), " for out's dtype.");
  return into(out, result_shape(op, self, dim, keepdim), [&](const at::Tensor& v) {
    reduce(op, self, dim, v, at::Tensor(), self.scalar_type());
  });
}

template <const char* op>
at::Tensor extreme(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  at::Tensor out = empty_device({0}, self.scalar_type());
  return extreme_out<op>(self, dim, keepdim, out);
}

template <const char* op>
at::Tensor extreme_all(const at::Tensor& self) {
  return extreme<op>(self, {}, false);
}

template <const char* op>
std::tuple<at::Tensor, at::Tensor> extreme_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  const std::vector<int64_t> shape = result_shape(op, self, {dim}, keepdim);
  at::Tensor values = empty_device(shape, self.scalar_type());
  at::Tensor indices = empty_device(shape, at::kLong);
  reduce(op, self, {dim}, values, indices, self.scalar_type());
  return {values, indices};
}

template <const char* op>
at::Tensor arg_extreme(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  const at::Tensor input = dim ? self : self.reshape({-1});
  const int64_t d = dim.value_or(0);
  std::vector<int64_t> shape = result_shape(op, input, {d}, keepdim && dim.has_value());
  if (!dim && keepdim) shape.assign(self.dim(), 1);
  at::Tensor indices = empty_device(shape, at::kLong);
  reduce(op, input, {d}, at::Tensor(), indices, input.scalar_type());
  return indices;
}

// all and any of a uint8 tensor are uint8 (torch keeps that old rule), else bool.
at::ScalarType logical_type(const at::Tensor& self) {
  return self.scalar_type() == at::kByte ? at::kByte : at::kBool;
}

template <const char* op>
at::Tensor logical_all(const at::Tensor& self) {
  at::Tensor out = empty_device({}, logical_type(self));
  reduce(op, self, {}, out, at::Tensor(), at::kInt);
  return out;
}

template <const char* op>
at::Tensor logical_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor out = empty_device(result_shape(op, self, {dim}, keepdim), logical_type(self));
  reduce(op, self, {dim}, out, at::Tensor(), at::kInt);
  return out;
}

at::Tensor vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype) {
  check_device(self, "input");
  DEVICE_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
               "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", self.scalar_type());
  DEVICE_DTYPE_CHECK(!at::isComplexType(self.scalar_type()), "opencl: linalg_vector_norm of ", self.scalar_type());
  const at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
  const double p = ord.toDouble();
  const std::vector<int64_t> shape = result_shape("sum", self, dims, keepdim);
  at::Tensor out = empty_device(shape, dtype.value_or(self.scalar_type()));
  if (p == 2.0) {
    reduce("norm2", self, dims, out, at::Tensor(), at::kFloat);
  } else if (p == 1.0) {
    reduce("sum", self.abs(), dims, out, at::Tensor(), at::kFloat);
  } else if (p == 0.0) {  // the count of nonzero elements
    reduce("sum", self.ne(0), dims, out, at::Tensor(), at::kFloat);
  } else if (std::isinf(p)) {
    reduce(p > 0 ? "max" : "min", self.abs(), dims, out, at::Tensor(), at::kFloat);
  } else {
    reduce("sum", self.abs().pow(p), dims, out, at::Tensor(), at::kFloat);
    out = out.pow(1.0 / p);
  }
  return out;
}

// ---- variance, standard deviation, cumulative sum -------------------------------------------

std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction, bool keepdim) {
  check_float(self, "input");
  const at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
  int64_t n = 1;
  if (dims.empty()) {
    n = self.numel();
  } else {
    for (int64_t d : dims) {
      const int64_t w = at::maybe_wrap_dim(d, self.dim());
      n *= self.dim() == 0 ? 1 : self.size(w);  // a 0-d tensor's dim 0 holds its one element
    }
  }
  const double dof = std::max(0.0, double(n) - (correction ? correction->toDouble() : 1.0));
  at::Tensor mean = self.mean(dims, /*keepdim=*/true);
  const at::Tensor centered = self - mean;
  const at::Tensor m2 = (centered * centered).sum(dims, /*keepdim=*/true);
  // torch's Welford pass (CPU and CUDA) gives a NaN mean where an infinity meets the running
  // mean (inf - inf): the mean is NaN where the squares' sum is (an infinity or NaN in the slice).
  mean = at::where(m2.isnan(), m2, mean);
  at::Tensor var = m2.div(dof);
  if (!keepdim) {  // the reduced dimensions dropped (views); no dims: every dimension
    var = dims.empty() ? var.squeeze() : var.squeeze(dims);
    mean = dims.empty() ? mean.squeeze() : mean.squeeze(dims);
  }
  return {var, mean};
}

at::Tensor var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
               bool keepdim) {
  return std::get<0>(oclf::device::var_mean(self, dim, correction, keepdim));
}

at::Tensor std_(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                bool keepdim) {
  return oclf::device::var(self, dim, correction, keepdim).sqrt();
}

std::tuple<at::Tensor, at::Tensor> std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction, bool keepdim) {
  auto [v, m] = oclf::device::var_mean(self, dim, correction, keepdim);
  return {v.sqrt(), m};
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  check_device(self, "input");
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const at::ScalarType type = dtype.value_or(at::isIntegralType(self.scalar_type(), true) ? at::kLong
                                                                                            : self.scalar_type());
  at::native::resize_output(out, self.sizes());
  const at::Tensor x = contiguous(self.to(type));
  at::Tensor y = out.is_contiguous() && out.scalar_type() == type ? out : empty_device(self.sizes(), type);
  if (y.numel() > 0) {
    int64_t inner = 1;
    for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
    const int64_t D = x.dim() == 0 ? 1 : x.size(d), lines = x.numel() / D;
    launch(device_kernel("gather.cl", "cumsum", type_option(y)), NDRange::linear(size_t(lines)), arg(x), arg(y),
           int(D), int(inner), int(lines));
  }
  if (!y.is_same(out)) out.copy_(y);
  return out;
}

at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = empty_device({0}, dtype.value_or(at::isIntegralType(self.scalar_type(), true)
                                                        ? at::kLong : self.scalar_type()));
  return oclf::device::cumsum_out(self, dim, dtype, out);
}

}  // namespace

REGISTER_DEVICE_OPS(m) {
  m.impl("sum.dim_IntList", sum);
  m.impl("sum.IntList_out", sum_out);
  m.impl("mean.dim", mean);
  m.impl("mean.out", mean_out);
  m.impl("prod.int_out", prod_out);
  m.impl("prod", prod_all);
  m.impl("amax", extreme<opname::max>);
  m.impl("amax.out", extreme_out<opname::max>);
  m.impl("amin", extreme<opname::min>);
  m.impl("amin.out", extreme_out<opname::min>);
  m.impl("max", extreme_all<opname::max>);
  m.impl("min", extreme_all<opname::min>);
  m.impl("max.dim", extreme_dim<opname::max>);
  m.impl("min.dim", extreme_dim<opname::min>);
  m.impl("argmax", arg_extreme<opname::argmax>);
  m.impl("argmin", arg_extreme<opname::argmin>);
  m.impl("all", logical_all<opname::all>);
  m.impl("any", logical_all<opname::any>);
  m.impl("all.dim", logical_dim<opname::all>);
  m.impl("any.dim", logical_dim<opname::any>);
  m.impl("linalg_vector_norm", vector_norm);
  m.impl("var.correction", var);
  m.impl("var_mean.correction", var_mean);
  m.impl("std.correction", std_);
  m.impl("std_mean.correction", std_mean);
  m.impl("cumsum", cumsum);
  m.impl("cumsum.out", cumsum_out);
}

}  // namespace oclf::device
