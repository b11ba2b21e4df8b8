// The elementwise driver: broadcasting, strides, merged dimensions, type conversion (see
// elementwise.h).
#include "elementwise.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/TypeProperties.h>

#include <c10/util/SmallVector.h>

#include <climits>
#include <unordered_map>
#include <vector>

#include "kernel_launch.h"

namespace oclf::device {

Operand::Operand(const at::Tensor& t) {
  if (!is_device(t) && t.dim() == 0 && t.device().is_cpu()) {
    number = t.item<double>();
    tensor = t;  // kept for type promotion only
  } else {
    tensor = t;
  }
}

Operand::Operand(const at::Scalar& value) : number(value.toDouble()), scalar(value) {}

at::ScalarType promoted(std::initializer_list<Operand> inputs) {
  at::native::ResultTypeState state = {};
  for (const Operand& in : inputs) {
    state = in.scalar ? at::native::update_result_type_state(*in.scalar, state)
                      : at::native::update_result_type_state(in.tensor, state);
  }
  return at::native::result_type(state);
}

namespace {

constexpr int kMaxDims = 6;  // MAX_DIMS in elementwise.cl
constexpr int kOperands = 4;

// The kernel's Layout, as elementwise.cl declares it (ints only: no padding).
struct Layout {
  cl_int ndim;
  cl_int size[kMaxDims];
  cl_int stride[kOperands][kMaxDims];
};

// Elements per work-item (strided kernels) and unrolling (the contiguous one): CPU devices
// take 16 elements a work-item, GPUs one, four at a time where contiguous.
struct Blocking {
  size_t chunk, unroll;
};
Blocking blocking(bool cpu) { return cpu ? Blocking{16, 1} : Blocking{1, 4}; }

// The kernel for one combination of operation, dtypes, numbers and layout kind, built from
// its options the first time and looked up by a short key after: building the options string
// and the program table's long key cost more than the rest of a small op's host work.
// Per thread (no lock) and per device (each has its own kernels); built kernels live as long
// as the process (Programs::kernel_fixed).
cl_kernel elementwise_kernel(const std::string& op, const at::Tensor& out, const Operand* ins, size_t nin,
                             at::ScalarType compute, const char* variant, Blocking block) {
  Stream& stream = Stream::get();
  std::string key = op;
  key += '|';
  key += variant;
  key += char('A' + stream.index());
  key += char('A' + static_cast<int>(compute));
  key += char('A' + static_cast<int>(out.scalar_type()));
  for (size_t k = 0; k < nin; ++k) {
    key += ins[k].number ? '#' : char('A' + static_cast<int>(ins[k].tensor.scalar_type()));
  }
  thread_local std::unordered_map<std::string, cl_kernel> kernels;
  auto found = kernels.find(key);
  if (found != kernels.end()) return found->second;

  const char* ct = cl_storage_type(compute);
  std::string options = "-DOP_" + op + " -DNIN=" + std::to_string(nin) + " -DCT=" + ct;
  options += std::string(" -DTO=") + cl_storage_type(out.scalar_type(), "output");
  const char* names[3] = {"A", "B", "C"};
  for (size_t k = 0; k < 3; ++k) {
    const bool present = k < nin;
    const bool number = present && ins[k].number.has_value();
    const char* type = present && !number ? cl_storage_type(ins[k].tensor.scalar_type(), "input") : ct;
    options += std::string(" -DT") + names[k] + "=" + type;
    if (number) options += std::string(" -D") + names[k] + "_SCALAR";
  }
  if (out.scalar_type() == at::kBool) options += " -DOUT_BOOL";
  options += " -DCHUNK=" + std::to_string(block.chunk) + " -DUNROLL=" + std::to_string(block.unroll);
  const cl_kernel kernel = device_kernel("elementwise.cl", variant, options);
  kernels.emplace(std::move(key), kernel);
  return kernel;
}

}  // namespace

void elementwise(const std::string& op, const at::Tensor& out, std::initializer_list<Operand> inputs,
                 at::ScalarType compute, double s0, double s1) {
  check_device(out, "output");
  if (out.numel() == 0) return;
  DEVICE_CHECK(out.numel() <= INT_MAX, "opencl: ", op, " on more than 2^31 elements is not supported");
  DEVICE_CHECK(inputs.size() <= 3, "opencl: elementwise ops take at most 3 inputs");
  c10::SmallVector<Operand, 3> ins(inputs.begin(), inputs.end());
  // Work-items write their elements in no order: an output element must be one memory
  // location, and an input either the output itself (in-place) or apart from it. A partial
  // overlap is refused, as torch refuses it; views of the output's storage that torch cannot
  // tell apart from it (strided ones) are read from a copy.
  DEVICE_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, "opencl: ", op,
              ": the output has elements that share memory (an expanded view); clone() it first");
  for (Operand& in : ins) {
    if (in.number) continue;
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, in.tensor);
    DEVICE_CHECK(overlap != at::MemOverlapStatus::Partial, "opencl: ", op,
                ": the output partly overlaps an input; clone() the input first");
    const bool same_view = in.tensor.data_ptr() == out.data_ptr() && in.tensor.strides() == out.strides();
    if (overlap == at::MemOverlapStatus::TooHard && in.tensor.is_alias_of(out) && !same_view) {
      in.tensor = in.tensor.clone();
    }
  }
  const int64_t nd = out.dim();

  // Strides of every operand in the output's shape (0 where broadcast or a number).
  using Dims = c10::SmallVector<int64_t, kMaxDims>;
  const at::IntArrayRef sizes = out.sizes();
  Dims strides[kOperands];
  for (Dims& s : strides) s.assign(nd, 0);
  for (int64_t d = 0; d < nd; ++d) strides[0][d] = out.stride(d);
  for (size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].number) continue;
    const at::Tensor& t = ins[k].tensor;
    check_device(t, "input");
    DEVICE_CHECK(t.dim() <= nd, "opencl: ", op, ": input of shape ", t.sizes(), " does not broadcast to ",
                out.sizes());
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t od = nd - t.dim() + d;
      DEVICE_CHECK(t.size(d) == sizes[od] || t.size(d) == 1, "opencl: ", op, ": input of shape ", t.sizes(),
                  " does not broadcast to ", out.sizes());
      strides[k + 1][od] = t.size(d) == 1 ? 0 : t.stride(d);
    }
  }

  // Drop dimensions of size 1, then merge neighbours that every operand walks as one.
  Dims csize;
  Dims cstride[kOperands];
  for (int64_t d = 0; d < nd; ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !csize.empty();
    for (int k = 0; k < kOperands && merge; ++k) merge = cstride[k].back() == strides[k][d] * sizes[d];
    if (merge) {
      csize.back() *= sizes[d];
      for (int k = 0; k < kOperands; ++k) cstride[k].back() = strides[k][d];
    } else {
      csize.push_back(sizes[d]);
      for (int k = 0; k < kOperands; ++k) cstride[k].push_back(strides[k][d]);
    }
  }
  bool contig = csize.size() <= 1;
  for (size_t k = 0; k < ins.size() + 1 && contig; ++k) {
    const bool number = k > 0 && ins[k - 1].number.has_value();
    contig = number || csize.empty() || cstride[k][0] == 1;
  }
  DEVICE_CHECK(contig || csize.size() <= size_t(kMaxDims), "opencl: ", op, " over ", csize.size(),
              " non-mergeable dimensions; at most ", kMaxDims, " are supported");

  compute = compute_type(compute);
  const Blocking block = blocking(is_cpu());
  const size_t chunk = block.chunk, unroll = block.unroll;

  // Rows of at least 16 elements run 2-D (row offsets once per row), shorter ones 1-D.
  const int64_t inner = csize.empty() ? 1 : csize.back();
  const bool rows = !contig && inner >= 16;
  const cl_kernel kernel = elementwise_kernel(op, out, ins.data(), ins.size(), compute,
                                              contig ? "ew_contig" : rows ? "ew_strided2" : "ew_strided", block);
  // Inputs that are numbers pass the output as their (unread) buffer, tensors 0 as their value.
  const TensorArg out_arg = arg(out);
  TensorArg in[3];
  const ScalarArg zero(0.0, compute);
  ScalarArg values[3] = {zero, zero, zero};
  for (size_t k = 0; k < 3; ++k) {
    const bool tensor = k < ins.size() && !ins[k].number;
    in[k] = tensor ? arg(ins[k].tensor) : out_arg;
    if (k < ins.size() && ins[k].number) values[k] = ScalarArg(*ins[k].number, compute);
  }
  const ScalarArg p0(s0, compute), p1(s1, compute);
  const int n = static_cast<int>(out.numel());
  NDRange range = NDRange::linear(contig ? (size_t(n) + unroll - 1) / unroll : (size_t(n) + chunk - 1) / chunk);
  if (rows) {
    // Work-groups of up to 64 along a row (a power of two, so few sizes get compiled).
    const size_t items = (size_t(inner) + chunk - 1) / chunk;
    size_t group = 1;
    while (group < items && group < 64) group *= 2;
    const size_t global[2] = {round_up(items, group), size_t(n / inner)};
    const size_t local[2] = {group, 1};
    range = NDRange(2, global, local);
  }
  if (contig) {
    launch(kernel, range, out_arg, in[0], in[1], in[2], p0, p1, values[0], values[1], values[2], n);
    return;
  }
  Layout layout{};
  layout.ndim = static_cast<cl_int>(csize.size());
  for (size_t d = 0; d < csize.size(); ++d) {
    layout.size[d] = static_cast<cl_int>(csize[d]);
    for (int k = 0; k < kOperands; ++k) {
      DEVICE_CHECK(std::abs(cstride[k][d]) <= INT_MAX, "opencl: stride past 2^31 elements");
      layout.stride[k][d] = static_cast<cl_int>(cstride[k][d]);
    }
  }
  launch(kernel, range, out_arg, in[0], in[1], in[2], p0, p1, values[0], values[1], values[2], n, layout);
}

}  // namespace oclf::device
