// The runtime's side of the module opencl_functions._core: the process's OpenCL devices
// (how many, which is current, their descriptions), the shared runtime's program cache,
// tuning, the launch log, CLBlast's parameters and the buffer pool. Operations are bound in
// bindings.cpp. Python reaches the devices, their memory and the launch log through
// opencl_functions/devices.py, the library and the opencl device alike.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <clblast.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/launch_log.hpp"
#include "runtime/runtime.hpp"

namespace py = pybind11;

namespace oclf::bindings {

namespace {

// A device's description; index -1 is the calling thread's current device.
py::dict device_info(int index) {
  const oclf::DeviceInfo& i = (index < 0 ? oclf::Runtime::get() : oclf::Runtime::at(index)).info();
  py::dict d;
  d["platform"] = i.platform;
  d["device"] = i.device;
  d["type"] = i.type;
  d["version"] = i.version;
  d["driver_version"] = i.driver_version;
  d["opencl_c_version"] = i.opencl_c_version;
  d["max_work_group_size"] = i.max_work_group_size;
  d["local_mem_size"] = i.local_mem_size;
  d["global_mem_size"] = i.global_mem_size;
  d["compute_units"] = i.compute_units;
  d["preferred_vector_width_float"] = i.preferred_vector_width_float;
  d["native_vector_width_float"] = i.native_vector_width_float;
  d["has_fp64"] = i.has_fp64;
  d["index"] = std::to_string(i.platform_index) + ":" + std::to_string(i.device_index);
  d["device_index"] = i.index;  // the process's index: opencl:<device_index>
  return d;
}

py::list list_devices() {
  py::list out;
  for (const auto& e : oclf::list_devices()) {
    py::dict d;
    d["index"] = std::to_string(e.platform_index) + ":" + std::to_string(e.device_index);
    d["platform"] = e.platform;
    d["device"] = e.device;
    d["type"] = e.type;
    out.append(d);
  }
  return out;
}

py::dict memory_stats() {
  oclf::Runtime& rt = oclf::Runtime::get();
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  py::dict d;
  d["bytes_in_use"] = rt.pool().bytes_in_use();
  d["bytes_pooled"] = rt.pool().bytes_pooled();
  return d;
}

// The launch log as Python data (for grading.child): per launch its program, NDRange,
// arguments and, when captured, its buffers' contents before and after.
py::list take_launch_log() {
  std::vector<oclf::LoggedLaunch> launches;
  launches = oclf::launch_log::take();  // the log has a lock of its own
  static const char* kinds[] = {"value", "buffer", "local", "unset"};
  py::list out;
  for (const oclf::LoggedLaunch& l : launches) {
    py::list args, buffers;
    for (const oclf::LoggedArg& a : l.args) {
      py::dict arg;
      arg["kind"] = kinds[a.kind];
      arg["size"] = a.size;
      arg["value"] = py::bytes(a.value);
      arg["buffer"] = a.buffer;
      args.append(arg);
    }
    for (const oclf::LoggedBuffer& b : l.buffers) {
      py::dict buffer;
      buffer["bytes"] = b.bytes;
      buffer["before"] = py::bytes(b.before);
      buffer["after"] = py::bytes(b.after);
      buffers.append(buffer);
    }
    py::dict d;
    d["path"] = l.path;
    d["source_hash"] = l.source_hash;
    d["options"] = l.options;
    d["kernel"] = l.kernel;
    d["global"] = l.global;
    d["local"] = l.local;
    d["args"] = args;
    d["buffers"] = buffers;
    d["captured"] = l.captured;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_runtime(py::module_& m) {
  m.def("device_count", &Runtime::count, "How many OpenCL devices the process has (one platform's: OCLF_DEVICE).");
  m.def("current_device", &Runtime::current, "The calling thread's current device index (opencl:<index>).");
  m.def("set_current_device", &Runtime::set_current, py::arg("index"),
        "Makes device `index` the calling thread's current one (the library's operations run there).");
  m.def(
      "program_cache",
      [](int index) {
        Runtime& rt = Runtime::at(index);
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        py::dict d;
        d["programs_built"] = rt.programs().programs_built();
        d["programs_loaded"] = rt.programs().programs_loaded();
        d["binaries_stored"] = rt.programs().binaries().stored();
        d["binaries_rejected"] = rt.programs().binaries().rejected();
        d["build_seconds"] = rt.programs().build_seconds();
        d["load_seconds"] = rt.programs().load_seconds();
        d["fixed_kernels"] = rt.programs().fixed_kernels();
        d["folder"] = oclf::ProgramCache::folder();
        return d;
      },
      py::arg("index"),
      "Device `index`'s program cache: programs built from source (programs_built) and made from\n"
      "binaries stored by earlier processes (programs_loaded), binaries written (binaries_stored)\n"
      "and stored files ignored as corrupt or refused (binaries_rejected), the seconds each way took\n"
      "(build_seconds, load_seconds), kernels kept by name\n"
      "(fixed_kernels), and the binaries' folder now ('' when OCLF_PROGRAM_CACHE is 0).");
  m.def(
      "_build_kernel",
      [](const std::string& file, const std::string& name, const std::string& options) {
        Runtime& rt = Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        rt.kernel(file, name, options);
      },
      py::arg("file"), py::arg("name"), py::arg("options") = "",
      "Makes kernel `name` of a .cl file with `options` on the current device, as host code's\n"
      "rt.kernel does (built, or loaded from the program cache), for tests of the cache.");
  m.def("device_info", &device_info, py::arg("index") = -1,
        "An OpenCL device of the process (index; -1: the current one): platform, device, version, limits.");
  m.def("list_devices", &list_devices, "Every OpenCL device, as dicts with index 'P:D', platform, device, type.");
  m.def(
      "tuning_cache_path", [] { return oclf::Runtime::get().tuning().cache_path(); },
      "The tuning cache file of the selected device ('' when no cache folder can be named).");
  m.def(
      "tuning_seconds", [] { return oclf::Runtime::get().tuning().seconds_spent(); },
      "Seconds this process spent measuring candidates (tuning at first use).");
  m.def(
      "tuning_forget",
      [] {
        oclf::Runtime& rt = oclf::Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        rt.tuning().forget();
      },
      "Forgets the tuning choices read or measured so far (the cache file is read again).");
  m.def("_launch_log_start", &oclf::launch_log::start, py::arg("capture"),
        "Starts the launch log (for the grader and make check); capture keeps buffer contents.");
  m.def("_launch_log_capture", &oclf::launch_log::set_capture, py::arg("capture"),
        "Turns the launch log's buffer capture on or off.");
  m.def("_launch_log_stop", &oclf::launch_log::stop, "Stops the launch log and forgets what it recorded.");
  m.def("_launch_log_take", &take_launch_log, "What the launch log recorded since it started or was last taken.");
  m.def("memory_stats", &memory_stats, "Device bytes held by live buffers and by the reuse pool.");
  m.def("clblast_clear_cache", [] { CLBLAST_CHECK(clblast::ClearCache()); },
        "Releases CLBlast's compiled programs (opencl_functions does at exit, before static destructors run).");
  m.def(
      "clear_pool",
      [] {
        oclf::Runtime& rt = oclf::Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        rt.pool().clear();
      },
      "Frees the pooled device buffers.");
  m.def(
      "clblast_parameters",
      [](const std::string& kernel) {
        oclf::Runtime& rt = oclf::Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        return oclf::clblast_parameters(rt.device(), kernel);
      },
      py::arg("kernel"), "CLBlast's current tuning parameters (single precision) of a kernel ('Xgemm', ...).");
  m.def(
      "clblast_override",
      [](const std::map<std::string, oclf::KernelParameters>& params) {
        oclf::Runtime& rt = oclf::Runtime::get();
        std::lock_guard<std::recursive_mutex> lock(rt.mutex());
        oclf::clblast_override(rt.device(), params);
      },
      py::arg("params"),
      "Replaces CLBlast's tuning parameters: {kernel: {parameter: value}}, each entry complete.\n"
      "Raises ValueError naming the kernel, and changes nothing, if an entry is unknown or incomplete.");
  m.def("set_default_kernel_dir", &oclf::Programs::set_default_kernel_dir,
        "Folder of the .cl files when OCLF_KERNEL_DIR (or OCL_KERNEL_DIR) is not set.");
  m.def("kernel_dir", &oclf::Programs::kernel_dir, "Folder the .cl files are read from.");
}

}  // namespace oclf::bindings
