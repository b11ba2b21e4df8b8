// The C++ reader of settings: see settings.hpp.
#include "settings.hpp"

#include <cstdlib>
#include <cstring>

namespace oclf {

namespace {

// Older names that still work: the aliases that opencl_functions/settings.py's table gives the
// settings read here (the README's table of settings shows them; tests/test_config.py keeps
// the two lists alike).
struct Alias {
  const char* name;
  const char* old_name;
};
constexpr Alias kAliases[] = {
    {"DEVICE", "OCL_DEVICE"}, {"KERNEL_DIR", "OCL_KERNEL_DIR"}, {"FALLBACK", "OCL_FALLBACK"}};

}  // namespace

std::string setting_variable(const char* name) {
  const std::string full = std::string("OCLF_") + name;
  if (const char* value = std::getenv(full.c_str()); value && *value) return full;
  for (const Alias& alias : kAliases)
    if (std::strcmp(alias.name, name) == 0)
      if (const char* value = std::getenv(alias.old_name); value && *value) return alias.old_name;
  return full;
}

std::string setting(const char* name) {
  const char* value = std::getenv(setting_variable(name).c_str());
  return value ? value : "";
}

}  // namespace oclf
