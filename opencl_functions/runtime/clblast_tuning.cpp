// CLBlast's tuning parameters: see clblast_tuning.hpp.
#include "clblast_tuning.hpp"

#include <clblast.h>

#include <stdexcept>
#include <unordered_map>

namespace oclf {

KernelParameters clblast_parameters(cl_device_id device, const std::string& kernel) {
  std::unordered_map<std::string, size_t> found;
  const auto status =
      clblast::RetrieveParameters(device, kernel, clblast::Precision::kSingle, found);
  if (status != clblast::StatusCode::kSuccess || found.empty())
    throw std::invalid_argument("CLBlast has no kernel '" + kernel + "' (" +
                                clblast_status_name(static_cast<int>(status)) + ")");
  return KernelParameters(found.begin(), found.end());
}

static std::string joined(const KernelParameters& params) {
  std::string out;
  for (const auto& p : params) out += (out.empty() ? "" : ", ") + p.first;
  return out;
}

void clblast_override(cl_device_id device, const std::map<std::string, KernelParameters>& params) {
  for (const auto& [kernel, given] : params) {
    const KernelParameters current = clblast_parameters(device, kernel);
    for (const auto& p : given)
      if (!current.count(p.first))
        throw std::invalid_argument("CLBlast kernel '" + kernel + "' has no parameter '" + p.first +
                                    "' (its parameters: " + joined(current) + ")");
    for (const auto& p : current)
      if (!given.count(p.first))
        throw std::invalid_argument("CLBlast kernel '" + kernel + "': parameter '" + p.first +
                                    "' is missing (its parameters: " + joined(current) + ")");
  }
  for (const auto& [kernel, given] : params) {
    const std::unordered_map<std::string, size_t> values(given.begin(), given.end());
    CLBLAST_CHECK(clblast::OverrideParameters(device, kernel, clblast::Precision::kSingle, values));
  }
}

}  // namespace oclf
