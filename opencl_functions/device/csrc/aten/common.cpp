// Helpers shared by the opencl device's operators (see common.h).
#include "common.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/TypeProperties.h>

#include <climits>
#include <map>
#include <cstring>

namespace oclf::device {

const char* cl_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kFloat: return "float";
    case at::kLong: return "long";
    case at::kInt: return "int";
    case at::kShort: return "short";
    case at::kChar: return "char";
    case at::kByte: return "uchar";
    case at::kBool: return "uchar";
    default: break;
  }
  DEVICE_DTYPE_CHECK(false, "opencl: ", what, " has dtype ", dtype,
                   "; this kernel takes float32, int64, int32, int16, int8, uint8 and bool");
  return nullptr;
}

const char* cl_storage_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kHalf: return "half";
    case at::kBFloat16: return "bfloat";
    case at::kDouble:
      DEVICE_DTYPE_CHECK(Device::get().has_fp64(), "opencl: ", what,
                       " has dtype Double and the device has no cl_khr_fp64");
      return "double";
    default: return cl_type(dtype, what);
  }
}

const char* cl_move_type(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kHalf:
    case at::kBFloat16: return "ushort";
    case at::kDouble:
    case at::kComplexFloat: return "ulong";
    default: return cl_type(dtype, what);
  }
}

at::ScalarType compute_type(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat : dtype;
}

bool is_device(const at::Tensor& t) { return t.defined() && t.device().type() == kType; }

void check_device(const at::Tensor& t, const char* what) {
  DEVICE_CHECK(is_device(t), "opencl: ", what, " must be an opencl tensor, got ",
              t.defined() ? t.device().str() : std::string("an undefined tensor"));
}

void check_float(const at::Tensor& t, const char* what) {
  check_device(t, what);
  DEVICE_DTYPE_CHECK(t.scalar_type() == at::kFloat, "opencl: ", what, " must be float32, got ", t.scalar_type());
}

DeviceSpan span(const at::Tensor& t) {
  const size_t item = t.element_size();
  const char* first = static_cast<const char*>(t.storage().data()) + t.storage_offset() * item;
  const Location where = Allocator::get().locate(first);
  DEVICE_CHECK(where.offset / item <= size_t(INT_MAX), "opencl: tensor offset past 2^31 elements");
  return DeviceSpan{where.mem, static_cast<int>(where.offset / item)};
}

bool check_index_range(const char* op, const at::Tensor& index, int64_t size, bool negative) {
  DEVICE_CHECK_INDEX(at::isIntegralType(index.scalar_type(), /*includeBool=*/false), "opencl: ", op,
                    ": indices must be an integer tensor, got ", index.scalar_type());
  // While a graph records nothing may wait for the device: a recorded step's indices are
  // not checked (graph.h). Otherwise one read brings both bounds back.
  if (index.numel() == 0 || Device::get().recording() != nullptr) return false;
  const at::Tensor bounds = at::stack({index.min(), index.max()}).to(at::kLong).cpu();
  const int64_t low = bounds[0].item<int64_t>(), high = bounds[1].item<int64_t>();
  const int64_t floor = negative ? -size : 0;
  DEVICE_CHECK_INDEX(low >= floor && high < size, "opencl: ", op, ": index ", low < floor ? low : high,
                    " is out of bounds for a dimension of size ", size);
  return low < 0;
}

at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().device(current_device()).dtype(dtype));
}

at::Tensor contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

namespace {

struct Derived {
  uint64_t version;
  at::Tensor data;
};
std::mutex derived_mutex;
// serial of the source's allocation -> layout -> derived tensor. Never destroyed: at exit
// its tensors would be freed into a half-destroyed cache.
std::map<uint64_t, std::map<std::string, Derived>>& derived_cache() {
  static auto* cache = new std::map<uint64_t, std::map<std::string, Derived>>();
  return *cache;
}

// Called by the allocator when a storage is freed. The derived tensors are released
// outside the lock: freeing them calls back here.
void forget_derived(uint64_t serial) {
  std::map<std::string, Derived> dropped;
  std::lock_guard<std::mutex> lock(derived_mutex);
  auto found = derived_cache().find(serial);
  if (found == derived_cache().end()) return;
  dropped.swap(found->second);
  derived_cache().erase(found);
}

}  // namespace

at::Tensor derived_from(const at::Tensor& source, const std::string& layout,
                        const std::function<at::Tensor()>& make) {
  const uint64_t serial = Allocator::get().serial(source.data_ptr());
  if (serial == 0) return make();
  const std::string key = layout + " @" + std::to_string(reinterpret_cast<uintptr_t>(source.data_ptr()));
  const uint64_t version = source._version();
  {
    std::lock_guard<std::mutex> lock(derived_mutex);
    auto found = derived_cache().find(serial);
    if (found != derived_cache().end()) {
      auto entry = found->second.find(key);
      if (entry != found->second.end() && entry->second.version == version) return entry->second.data;
    }
  }
  at::Tensor made = make();
  static bool hooked = (Allocator::get().set_on_free(&forget_derived), true);
  (void)hooked;
  at::Tensor replaced;  // released after the lock, as in forget_derived
  std::lock_guard<std::mutex> lock(derived_mutex);
  Derived& slot = derived_cache()[serial][key];
  replaced = std::move(slot.data);
  slot = Derived{version, made};
  return made;
}

// ---------------------------------------------------------------------------------
// Launches

TensorArg arg(const at::Tensor& t) {
  if (t.numel() == 0 || t.storage().data() == nullptr) return {};  // nothing is read or written
  DEVICE_CHECK(is_device(t), "opencl: expected all tensors on the opencl device, got one on ", t.device(),
              " (an out= tensor, or an argument torch did not move)");
  const DeviceSpan s = span(t);
  return {s.mem, s.offset};
}

NDRange::NDRange(cl_uint dims_, const size_t* global_, const size_t* local_) : dims(dims_), driver_local(!local_) {
  for (cl_uint i = 0; i < dims; ++i) {
    global[i] = global_[i];
    if (local_) local[i] = local_[i];
  }
}

NDRange NDRange::linear(size_t n, size_t group) {
  if (Device::get().is_cpu()) group = 64;
  if (group == 0) return NDRange(1, &n, nullptr);
  const size_t global_size = round_up(n, group);
  return NDRange(1, &global_size, &group);
}

ScalarArg::ScalarArg(double value, at::ScalarType type) {
  switch (type) {
    case at::kFloat: {
      const float v = static_cast<float>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kDouble: {
      std::memcpy(bytes, &value, sizeof(value));
      size = sizeof(value);
      break;
    }
    case at::kLong: {
      const cl_long v = static_cast<cl_long>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kInt: {
      const cl_int v = static_cast<cl_int>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kShort: {
      const cl_short v = static_cast<cl_short>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kBool:
    case at::kByte:
    case at::kChar: {
      const unsigned char v = static_cast<unsigned char>(type == at::kBool ? value != 0 : value);
      bytes[0] = v;
      size = 1;
      break;
    }
    default:
      DEVICE_DTYPE_CHECK(false, "opencl: cannot compute in ", type);
  }
}

// ---------------------------------------------------------------------------------
// Elementwise

Operand::Operand(const at::Tensor& t) {
  if (!is_device(t) && t.dim() == 0 && t.device().is_cpu()) {
    number = t.item<double>();
    tensor = t;  // kept for type promotion only
  } else {
    tensor = t;
  }
}

Operand::Operand(const at::Scalar& value) : number(value.toDouble()) {
  tensor = at::scalar_to_tensor(value);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
}

at::ScalarType promoted(std::initializer_list<Operand> inputs) {
  at::native::ResultTypeState state = {};
  for (const Operand& in : inputs) state = at::native::update_result_type_state(in.tensor, state);
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

}  // namespace

void elementwise(const std::string& op, const at::Tensor& out, std::initializer_list<Operand> inputs,
                 at::ScalarType compute, double s0, double s1) {
  check_device(out, "output");
  if (out.numel() == 0) return;
  DEVICE_CHECK(out.numel() <= INT_MAX, "opencl: ", op, " on more than 2^31 elements is not supported");
  std::vector<Operand> ins(inputs);
  DEVICE_CHECK(ins.size() <= 3, "opencl: elementwise ops take at most 3 inputs");
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
  std::vector<int64_t> sizes(out.sizes().begin(), out.sizes().end());
  std::vector<std::vector<int64_t>> strides(kOperands, std::vector<int64_t>(nd, 0));
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
  std::vector<int64_t> csize;
  std::vector<std::vector<int64_t>> cstride(kOperands);
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
  const char* ct = cl_storage_type(compute);
  std::string options = "-DOP_" + op + " -DNIN=" + std::to_string(ins.size()) + " -DCT=" + ct;
  options += std::string(" -DTO=") + cl_storage_type(out.scalar_type(), "output");
  const char* names[3] = {"A", "B", "C"};
  for (size_t k = 0; k < 3; ++k) {
    const bool present = k < ins.size();
    const bool number = present && ins[k].number.has_value();
    const char* type = present && !number ? cl_storage_type(ins[k].tensor.scalar_type(), "input") : ct;
    options += std::string(" -DT") + names[k] + "=" + type;
    if (number) options += std::string(" -D") + names[k] + "_SCALAR";
  }
  if (out.scalar_type() == at::kBool) options += " -DOUT_BOOL";
  const bool cpu = Device::get().is_cpu();
  const size_t chunk = cpu ? 16 : 1, unroll = cpu ? 1 : 4;
  options += " -DCHUNK=" + std::to_string(chunk) + " -DUNROLL=" + std::to_string(unroll);

  // Rows of at least 16 elements run 2-D (row offsets once per row), shorter ones 1-D.
  const int64_t inner = csize.empty() ? 1 : csize.back();
  const bool rows = !contig && inner >= 16;
  const cl_kernel kernel =
      Device::get().kernel("elementwise.cl", contig ? "ew_contig" : rows ? "ew_strided2" : "ew_strided", options);
  // Inputs that are numbers pass the output as their (unread) buffer, tensors 0 as their value.
  TensorArg in[3];
  std::vector<ScalarArg> values;
  for (size_t k = 0; k < 3; ++k) {
    const bool tensor = k < ins.size() && !ins[k].number;
    in[k] = arg(tensor ? ins[k].tensor : out);
    values.emplace_back(k < ins.size() && ins[k].number ? *ins[k].number : 0.0, compute);
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
    launch(kernel, range, arg(out), in[0], in[1], in[2], p0, p1, values[0], values[1], values[2], n);
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
  launch(kernel, range, arg(out), in[0], in[1], in[2], p0, p1, values[0], values[1], values[2], n, layout);
}

}  // namespace oclf::device
