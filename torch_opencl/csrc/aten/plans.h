// Plans of the opencl device's products and convolutions, kept per call shape: the planning
// of one product or convolution (the candidate configurations, the kernel files' hashes, the
// tuning cache's lookup, a first-use measurement) runs once for each shape and settings; a
// later call of the same shape runs the configuration kept. A change to the tuning cache's
// choices (one measured, the cache forgotten) drops every plan kept, and the settings that
// steer planning are part of each plan's key, so a changed OCLF_* variable plans again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace oclf::device::plans {

// A kept plan: the configuration ("rows VW=4 ...", "cpu COV=8 PX=8"; "clblast" leaves a
// product to CLBlast), where it came from (tuning.hpp's origins) and, for convolutions,
// whether it names a depthwise kernel.
struct Plan {
  std::string config, origin;
  bool depthwise = false;
};

// A plan's key: the operation, its sizes and the settings it was planned under.
class Key {
 public:
  explicit Key(const char* op);
  Key& operator<<(int64_t value);
  Key& operator<<(const std::string& text);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// The plan kept under `key` (with the tuning mode and the kernel folder added to it), else
// make()'s, kept.
Plan remembered(Key key, const std::function<Plan()>& make);

// How many plans were made (not found kept) in this process, for tests.
uint64_t made();

}  // namespace oclf::device::plans
