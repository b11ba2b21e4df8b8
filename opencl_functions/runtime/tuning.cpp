// Tuning at first use, its cache file and its budget: see tuning.hpp.
#include "tuning.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "settings.hpp"

namespace oclf {

Tuning::Mode Tuning::mode() {
  const std::string value = setting("TUNE");
  if (value.empty() || value == "1") return Mode::on;
  if (value == "0") return Mode::off;
  if (value == "cache") return Mode::cached;
  if (value == "sweep") return Mode::sweep;
  throw Error(setting_variable("TUNE") + " must be 1, 0, cache or sweep, got " + value, CL_INVALID_VALUE);
}

static double budget_seconds() {
  const std::string value = setting("TUNE_BUDGET");
  if (value.empty()) return 5.0;
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || s < 0)
    throw Error(setting_variable("TUNE_BUDGET") + " must be a number of seconds >= 0, got " + value,
                CL_INVALID_VALUE);
  return s;
}

std::string Tuning::hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string Tuning::cache_folder() {
  if (std::string dir = setting("TUNE_DIR"); !dir.empty()) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/opencl_functions";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/opencl_functions";
  return "";
}

std::string Tuning::cache_path() const {
  const std::string dir = Tuning::cache_folder();
  if (dir.empty()) return "";
  std::string slug;
  for (char c : info_.device) {
    const char low = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::isalnum(static_cast<unsigned char>(low)))
      slug += low;
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  const std::string id = hash(info_.platform + "|" + info_.device + "|" + info_.version + "|" + info_.driver_version);
  return dir + "/tuning-" + slug + "-" + id.substr(0, 8) + ".tsv";
}

// Lines "key <TAB> source hash <TAB> choice <TAB> origin"; later lines win.
void Tuning::load() {
  loaded_ = true;
  const std::string path = cache_path();
  std::FILE* in = path.empty() ? nullptr : std::fopen(path.c_str(), "r");
  if (!in) return;
  char line[1024];
  while (std::fgets(line, sizeof(line), in)) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.empty() || text[0] == '#') continue;
    const size_t t1 = text.find('\t'), t2 = text.find('\t', t1 + 1), t3 = text.find('\t', t2 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos || t3 == std::string::npos) continue;
    entries_[text.substr(0, t1) + "|" + text.substr(t1 + 1, t2 - t1 - 1)] =
        Entry{text.substr(t2 + 1, t3 - t2 - 1), text.substr(t3 + 1)};
  }
  std::fclose(in);
}

const Tuning::Entry* Tuning::find(const std::string& key, const std::string& source_hash) {
  const Mode m = mode();
  if (m == Mode::off || m == Mode::sweep) return nullptr;
  if (!loaded_) load();
  auto it = entries_.find(key + "|" + source_hash);
  return it == entries_.end() ? nullptr : &it->second;
}

// mkdir -p of the folder holding `path`; false when it cannot be made.
static bool make_parent(const std::string& path) {
  for (size_t i = 1; i < path.size(); ++i) {
    if (path[i] != '/') continue;
    const std::string dir = path.substr(0, i);
    if (mkdir(dir.c_str(), 0755) != 0) {
      struct stat st {};
      if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    }
  }
  return true;
}

void Tuning::remember(const std::string& key, const std::string& source_hash, const std::string& choice) {
  if (!loaded_) load();
  const std::string origin = mode() == Mode::sweep ? "sweep" : "first use";
  entries_[key + "|" + source_hash] = Entry{choice, origin};
  ++changes_;
  const std::string path = cache_path();
  if (path.empty() || !make_parent(path)) return;  // in memory only
  struct stat st {};
  const bool fresh = stat(path.c_str(), &st) != 0;
  std::FILE* out = std::fopen(path.c_str(), "a");
  if (!out) return;
  if (fresh)
    std::fprintf(out, "# opencl_functions tuning for %s (%s, driver %s): key, kernel source hash, choice, origin\n",
                 info_.device.c_str(), info_.platform.c_str(), info_.driver_version.c_str());
  std::fprintf(out, "%s\t%s\t%s\t%s\n", key.c_str(), source_hash.c_str(), choice.c_str(), origin.c_str());
  std::fclose(out);
}

bool Tuning::may_measure() {
  const Mode m = mode();
  return m == Mode::sweep || (m == Mode::on && seconds_spent() < budget_seconds());
}

double Tuning::measure(const std::function<void()>& run, int reps) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point begin = Clock::now();
  double best = std::numeric_limits<double>::infinity();
  try {
    CL_CHECK(clFinish(device_->queue()));
    for (int r = 0; r <= reps; ++r) {
      const Clock::time_point t0 = Clock::now();
      const uint64_t kernel_ns = profiler_->kernel_ns_of(run);  // ends with a clFinish
      const double ns =
          kernel_ns > 0 ? double(kernel_ns) : std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      if (r > 0) best = std::min(best, ns);  // run 0 builds the kernels
    }
  } catch (...) {
    spend(std::chrono::duration<double>(Clock::now() - begin).count());
    throw;
  }
  spend(std::chrono::duration<double>(Clock::now() - begin).count());
  return best;
}

}  // namespace oclf
