// Tuning at first use: which configuration of a kernel (block sizes, vector width, or which
// implementation) a short measurement picked for one shape on this device. Choices are kept
// for the process and in a file under the user's cache folder, one file per device and
// driver; each entry carries the hash of the kernel source it was measured with, so an
// edited kernel is measured again. Host code asks find(); on a miss, and when allowed
// (may_measure), it times its candidates with measure() and keeps the winner with remember().
//
// OCLF_TUNE (read when used): "1" (default) reads the cache and measures what it lacks within
// a budget of OCLF_TUNE_BUDGET seconds per process; "cache" reads the cache and never
// measures; "0" neither reads nor measures (every choice is the device-derived default);
// "sweep" measures every shape again with the full candidate lists, no budget, and writes
// the results as a sweep (make tune). The cache folder is OCLF_TUNE_DIR, else
// $XDG_CACHE_HOME/opencl_functions, else ~/.cache/opencl_functions; a folder that cannot be
// written leaves the choices in memory only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "device.hpp"
#include "profiling.hpp"

// Exported from _core for the opencl device's module, which links it (runtime.hpp).
#pragma GCC visibility push(default)
namespace oclf {

class Tuning {
 public:
  enum class Mode { off, cached, on, sweep };
  // One remembered choice: the configuration, and how it was found ("first use" or "sweep").
  struct Entry {
    std::string choice, origin;
  };

  Tuning(const Device* device, Profiler* profiler) : info_(device->info()), device_(device), profiler_(profiler) {}
  Tuning(const Tuning&) = delete;
  Tuning& operator=(const Tuning&) = delete;

  // OCLF_TUNE, read now; throws Error for a value it does not know.
  static Mode mode();
  // The choice kept for `key` measured with the kernel source of hash `source_hash`, or
  // nullptr (always nullptr when OCLF_TUNE=0, and in a sweep).
  const Entry* find(const std::string& key, const std::string& source_hash);
  // Keeps a choice in memory and appends it to the cache file.
  void remember(const std::string& key, const std::string& source_hash, const std::string& choice);
  // Whether a measurement may start now: OCLF_TUNE is 1 with budget left, or sweep.
  bool may_measure();
  // Nanoseconds of the fastest of `reps` runs of run() after one untimed run (which builds
  // its kernels), each run followed by clFinish: the kernel time of its launches by their
  // profiling events, as the benchmark counts it (a GPU's wall clock for a 20 µs layer is
  // mostly launch and wait, and noisy), or the wall clock when run() records no event (the
  // opencl device's own queue). The operation's own kernel time is left as it was; the
  // time spent counts against the budget.
  double measure(const std::function<void()>& run, int reps);

  // What the last operation used ("rows VW=16 RN=4") and where it came from
  // ("defaults", "tuned now", "cache: first use", "cache: sweep", "setting"), for the benchmark.
  void note(const std::string& config, const std::string& origin) {
    last_config_ = config;
    last_origin_ = origin;
  }
  const std::string& last_config() const { return last_config_; }
  const std::string& last_origin() const { return last_origin_; }
  void clear_note() { last_config_.clear(), last_origin_.clear(); }

  // The cache folder: OCLF_TUNE_DIR, else $XDG_CACHE_HOME/opencl_functions, else
  // ~/.cache/opencl_functions ("" when none can be named). Program binaries are kept beside.
  static std::string cache_folder();
  // The cache file for this device and driver ("" when no cache folder can be named).
  std::string cache_path() const;
  // Seconds spent measuring in this process; any thread may read it while a measurement runs
  // (opencl_functions.tuning's announcement does, from a thread of its own).
  double seconds_spent() const { return spent_s_.load(std::memory_order_relaxed); }
  // Forgets what was read or measured (the next find() reads the file again).
  void forget() { loaded_ = false, entries_.clear(), ++changes_; }
  // Counts the changes to the choices kept (remember, forget): a caller that keeps what it
  // derived from find() (the opencl device's plans) plans again when it moves.
  uint64_t changes() const { return changes_; }
  // FNV-1a hash of a text, as 16 hex digits (kernel sources, device descriptions).
  static std::string hash(const std::string& text);

 private:
  void load();
  const DeviceInfo& info_;
  const Device* device_;
  Profiler* profiler_;
  bool loaded_ = false;
  std::map<std::string, Entry> entries_;  // by key + "|" + source hash
  std::atomic<double> spent_s_{0.0};  // written under the runtime's lock, read from anywhere
  void spend(double s) { spent_s_.store(spent_s_.load(std::memory_order_relaxed) + s, std::memory_order_relaxed); }
  uint64_t changes_ = 0;
  std::string last_config_, last_origin_;
};

}  // namespace oclf
#pragma GCC visibility pop
