// Checks of the opencl device with messages built without iostreams. TORCH_CHECK joins its
// message through an ostringstream, and where torch runs on a libstdc++ older than the one
// the extension was compiled for (the H100 image), writing a number through a stream there
// crashes the process: every rejected input would end in a segfault. These macros take
// TORCH_CHECK's arguments and join them with std::to_string and snprintf instead; the
// message is only built when the check fails.
//   DEVICE_CHECK(cond, "opencl: cat: ", n, " tensors")        c10::Error (RuntimeError)
//   DEVICE_CHECK_INDEX / _TYPE / _VALUE / _NOT_IMPLEMENTED     IndexError, TypeError, ...
//   message(...)                                               the joined text itself
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace oclf::device {

namespace message_detail {

inline void append(std::string& s, const char* v) { s += v ? v : "(null)"; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, std::string_view v) { s.append(v.data(), v.size()); }
inline void append(std::string& s, char v) { s += v; }
inline void append(std::string& s, bool v) { s += v ? "true" : "false"; }
template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                           !std::is_same_v<T, char>, int> = 0>
void append(std::string& s, T v) {
  s += std::to_string(v);
}
inline void append(std::string& s, double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  s += text;
}
inline void append(std::string& s, float v) { append(s, double(v)); }
inline void append(std::string& s, c10::ScalarType v) { s += c10::toString(v); }
inline void append(std::string& s, const c10::SymInt& v) {
  if (auto known = v.maybe_as_int()) append(s, *known);
  else s += "(symbolic)";
}
template <typename T>
void append(std::string& s, c10::ArrayRef<T> v) {
  s += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    append(s, v[i]);
  }
  s += ']';
}
template <typename T>
void append(std::string& s, const std::vector<T>& v) {
  append(s, c10::ArrayRef<T>(v));
}
inline void append(std::string& s, const c10::Device& d) { s += d.str(); }

}  // namespace message_detail

// The arguments joined into one string (numbers, dtypes, sizes, devices and text).
template <typename... Args>
std::string message(const Args&... args) {
  std::string s;
  (message_detail::append(s, args), ...);
  return s;
}

}  // namespace oclf::device

#define DEVICE_CHECK(cond, ...) TORCH_CHECK(cond, ::oclf::device::message(__VA_ARGS__))
#define DEVICE_CHECK_INDEX(cond, ...) TORCH_CHECK_INDEX(cond, ::oclf::device::message(__VA_ARGS__))
#define DEVICE_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, ::oclf::device::message(__VA_ARGS__))
#define DEVICE_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, ::oclf::device::message(__VA_ARGS__))
#define DEVICE_CHECK_NOT_IMPLEMENTED(cond, ...) \
  TORCH_CHECK_NOT_IMPLEMENTED(cond, ::oclf::device::message(__VA_ARGS__))
