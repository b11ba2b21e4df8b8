// Kernel arguments and NDRanges of the device's launches (see kernel_launch.h).
#include "kernel_launch.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace oclf::device {

namespace {

// A number as an integer of the kernel's type: ±infinity saturates to the type's limits (the
// open bounds of clamp(min=...)); finite values go through int64 and wrap as torch's
// integer conversions do (uint8 + (-1) adds 255), past int64's range saturating first.
template <typename I>
I to_integer(double v) {
  if (std::isnan(v)) return 0;
  if (std::isinf(v)) return v > 0 ? std::numeric_limits<I>::max() : std::numeric_limits<I>::min();
  if (v >= 9223372036854775807.0) return static_cast<I>(std::numeric_limits<int64_t>::max());
  if (v <= -9223372036854775808.0) return static_cast<I>(std::numeric_limits<int64_t>::min());
  return static_cast<I>(static_cast<int64_t>(v));
}

}  // namespace

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
  if (is_cpu()) group = 64;
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
      const cl_long v = to_integer<cl_long>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kInt: {
      const cl_int v = to_integer<cl_int>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kShort: {
      const cl_short v = to_integer<cl_short>(value);
      std::memcpy(bytes, &v, sizeof(v));
      size = sizeof(v);
      break;
    }
    case at::kBool:
    case at::kByte:
    case at::kChar: {
      const unsigned char v = type == at::kBool   ? (value != 0)
                              : type == at::kByte ? to_integer<uint8_t>(value)
                                                  : static_cast<unsigned char>(to_integer<int8_t>(value));
      bytes[0] = v;
      size = 1;
      break;
    }
    default:
      DEVICE_DTYPE_CHECK(false, "opencl: cannot compute in ", type);
  }
}

}  // namespace oclf::device
