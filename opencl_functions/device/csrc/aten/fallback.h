// The CPU fallback's record: which operators ran on the CPU, and how often.
#pragma once

#include <string>
#include <vector>

namespace oclf::device {

// "aten::name.overload count" for each operator that fell back since the last reset.
std::vector<std::string> fallback_names();
void reset_fallback_counts();

}  // namespace oclf::device
