// The Python module torch_opencl._C. Importing it registers the device (the
// static registrations of runtime/ and aten/); the helpers below are torch operators
// (torch.ops.oclf.*), so no Python binding library is needed, but for survey() (survey.cpp),
// a plain function of the module: it runs before every replay of a compiled graph.
#include <Python.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "check.h"
#include "aten/fallback.h"
#include "runtime/allocator.h"
#include "runtime/autograd_threads.h"
#include "runtime/stream.h"
#include "runtime/generator.h"
#include "runtime/graph.h"
#include "survey.h"

namespace oclf::device {

namespace {

// A device index from Python: -1 is the current device.
int device_index(int64_t index) { return index < 0 ? Runtime::current() : static_cast<int>(index); }

void synchronize(int64_t index) {
  if (device_available()) Stream::at(device_index(index)).synchronize();
}

// [allocated, reserved, peak allocated, buffers created, allocations, cache hits,
//  kernel launches, programs built, peak reserved, live buffers, cached buffers, frees,
//  buffers released, bytes read to the host] of one device (torch_opencl/stats.py
//  names them)
std::vector<int64_t> memory_stats(int64_t index) {
  const int i = device_index(index);
  const MemoryStats s = Allocator::get().memory(i).stats();
  Stream& stream = Stream::at(i);
  return {int64_t(s.allocated),       int64_t(s.reserved),       int64_t(s.peak_allocated),
          int64_t(s.buffers_created), int64_t(s.allocations),    int64_t(s.cache_hits),
          int64_t(stream.launches()),    int64_t(stream.programs_built()),
          int64_t(s.peak_reserved),   int64_t(s.live_buffers),   int64_t(s.cached_buffers),
          int64_t(s.frees),           int64_t(s.buffers_released), int64_t(stream.bytes_to_host())};
}

// Whether the device enqueues from its submission thread (runtime/submitter.h).
bool submits_async(int64_t index) { return Stream::at(device_index(index)).submits_async(); }

// Whether this process was forked after it opened a device (which it then cannot use).
bool in_bad_fork() { return in_forked_child(); }

void reset_peak_memory_stats(int64_t index) { Allocator::get().memory(device_index(index)).reset_peak(); }
void reset_accumulated_memory_stats(int64_t index) {
  Allocator::get().memory(device_index(index)).reset_accumulated();
}

// The fallback's record (aten/fallback.h): operator names, and for each four numbers in
// order: calls, nanoseconds, bytes to the host, bytes to the device.
std::tuple<std::vector<std::string>, std::vector<int64_t>> fallback_record_op(bool whole) {
  std::vector<std::string> names;
  std::vector<int64_t> numbers;
  for (const auto& [name, r] : fallback_record(whole)) {
    names.push_back(name);
    numbers.insert(numbers.end(), {r.calls, r.nanoseconds, r.bytes_to_host, r.bytes_to_device});
  }
  return {names, numbers};
}

void empty_cache() { Allocator::get().emptyCache(); }

int64_t bucket_bytes(int64_t bytes) { return int64_t(Allocator::bucket(size_t(bytes))); }

// Kernel timing (Stream::start_timing): the kernels' names, operators and global sizes, and
// their device times in nanoseconds, in launch order.
void kernel_timing_start(int64_t index) { Stream::at(device_index(index)).start_timing(); }

std::tuple<std::vector<std::string>, std::vector<std::string>, std::vector<std::string>, std::vector<int64_t>>
kernel_timing_stop(int64_t index) {
  std::vector<std::string> kernels, ops, globals;
  std::vector<int64_t> ns;
  for (const KernelTime& t : Stream::at(device_index(index)).stop_timing()) {
    kernels.push_back(t.kernel);
    ops.push_back(t.op);
    globals.push_back(t.global);
    ns.push_back(int64_t(t.ns));
  }
  return {kernels, ops, globals, ns};
}

// The devices' default generators (runtime/generator.h), for torch.opencl.manual_seed & co.
void manual_seed(int64_t index, int64_t seed) {
  at::Generator g = default_generator(device_index(index));
  std::lock_guard<std::mutex> lock(g.mutex());
  g.unsafeGetGeneratorImpl()->set_current_seed(static_cast<uint64_t>(seed));
}

int64_t seed(int64_t index) {
  at::Generator g = default_generator(device_index(index));
  std::lock_guard<std::mutex> lock(g.mutex());
  return static_cast<int64_t>(g.unsafeGetGeneratorImpl()->seed());
}

int64_t initial_seed(int64_t index) {
  at::Generator g = default_generator(device_index(index));
  std::lock_guard<std::mutex> lock(g.mutex());
  return static_cast<int64_t>(g.unsafeGetGeneratorImpl()->current_seed());
}

at::Tensor get_rng_state(int64_t index) {
  at::Generator g = default_generator(device_index(index));
  std::lock_guard<std::mutex> lock(g.mutex());
  return at::Tensor::wrap_tensor_impl(g.unsafeGetGeneratorImpl()->get_state());
}

void set_rng_state(int64_t index, const at::Tensor& state) {
  at::Generator g = default_generator(device_index(index));
  std::lock_guard<std::mutex> lock(g.mutex());
  g.unsafeGetGeneratorImpl()->set_state(*state.unsafeGetTensorImpl());
}

// Graphs (runtime/graph.h) by number, for torch_opencl.Graph.
std::mutex graphs_mutex;
std::map<int64_t, std::unique_ptr<Graph>>& graphs() {
  static std::map<int64_t, std::unique_ptr<Graph>> all;
  return all;
}

Graph& graph(int64_t id) {
  std::lock_guard<std::mutex> lock(graphs_mutex);
  auto found = graphs().find(id);
  DEVICE_CHECK(found != graphs().end(), "opencl: graph ", id, " does not exist (released, or never recorded)");
  return *found->second;
}

int64_t graph_record() {
  static int64_t next = 1;
  auto made = std::make_unique<Graph>();
  Stream::at(made->device()).begin_recording(made.get());
  std::lock_guard<std::mutex> lock(graphs_mutex);
  graphs().emplace(next, std::move(made));
  return next++;
}

void graph_end(int64_t id) {
  Graph& g = graph(id);
  Stream& stream = Stream::at(g.device());
  DEVICE_CHECK(stream.recording() == &g, "opencl: graph ", id, " is not recording");
  stream.end_recording();
  g.finish();
}

void graph_replay(int64_t id) { graph(id).replay(); }

void graph_release(int64_t id) {
  std::unique_ptr<Graph> gone;
  {
    std::lock_guard<std::mutex> lock(graphs_mutex);
    auto found = graphs().find(id);
    if (found == graphs().end()) return;
    gone = std::move(found->second);
    graphs().erase(found);
  }
  Stream& stream = Stream::at(gone->device());
  if (stream.recording() == gone.get()) stream.end_recording();
}

// Points graph `id` at new buffers (Graph::rebind): olds[i] becomes news[i], as handles.
bool graph_rebind(int64_t id, const std::vector<int64_t>& olds, const std::vector<int64_t>& news) {
  DEVICE_CHECK(olds.size() == news.size(), "opencl: graph_rebind: ", olds.size(), " old buffers and ", news.size(),
               " new ones");
  std::vector<std::pair<cl_mem, cl_mem>> moves;
  for (size_t i = 0; i < olds.size(); ++i)
    moves.emplace_back(reinterpret_cast<cl_mem>(uintptr_t(olds[i])), reinterpret_cast<cl_mem>(uintptr_t(news[i])));
  return graph(id).rebind(moves);
}

// [kernel launches, copies, host writes, library calls, command buffers, bytes of its memory pool]
std::vector<int64_t> graph_counts(int64_t id) {
  Graph& g = graph(id);
  const Graph::Counts c = g.counts();
  return {int64_t(c.launches), int64_t(c.copies),          int64_t(c.writes),
          int64_t(c.calls),    int64_t(c.command_buffers), int64_t(Allocator::get().memory(g.device()).pool_bytes(g.pool()))};
}

}  // namespace

TORCH_LIBRARY(oclf, m) {
  m.def("synchronize(int device) -> ()", &synchronize);
  m.def("memory_stats(int device) -> int[]", &memory_stats);
  m.def("submits_async(int device) -> bool", &submits_async);
  m.def("in_bad_fork() -> bool", &in_bad_fork);
  m.def("empty_cache() -> ()", &empty_cache);
  m.def("reset_peak_memory_stats(int device) -> ()", &reset_peak_memory_stats);
  m.def("reset_accumulated_memory_stats(int device) -> ()", &reset_accumulated_memory_stats);
  m.def("bucket_bytes(int bytes) -> int", &bucket_bytes);
  m.def("fallback_ops() -> str[]", &fallback_names);
  m.def("reset_fallback_ops() -> ()", &reset_fallback_counts);
  m.def("fallback_record(bool whole) -> (str[], int[])", &fallback_record_op);
  m.def("ensure_autograd_threads() -> ()", &ensure_autograd_threads);
  m.def("kernel_timing_start(int device) -> ()", &kernel_timing_start);
  m.def("kernel_timing_stop(int device) -> (str[], str[], str[], int[])", &kernel_timing_stop);
  m.def("manual_seed(int device, int seed) -> ()", &manual_seed);
  m.def("seed(int device) -> int", &seed);
  m.def("initial_seed(int device) -> int", &initial_seed);
  m.def("get_rng_state(int device) -> Tensor", &get_rng_state);
  m.def("set_rng_state(int device, Tensor state) -> ()", &set_rng_state);
  m.def("graph_record() -> int", &graph_record);
  m.def("graph_end(int id) -> ()", &graph_end);
  m.def("graph_replay(int id) -> ()", &graph_replay);
  m.def("graph_release(int id) -> ()", &graph_release);
  m.def("graph_counts(int id) -> int[]", &graph_counts);
  m.def("graph_rebind(int id, int[] olds, int[] news) -> bool", &graph_rebind);
  m.def("graph_command_buffers_available() -> bool", &Graph::command_buffers_available);
}

}  // namespace oclf::device

// At the interpreter's exit (an atexit handler of the package): nothing to raise to any more,
// and the GIL let go while the autograd workers and the queues finish, so that no thread left
// running waits on it.
static PyObject* finish_at_exit(PyObject*, PyObject*) {
  Py_BEGIN_ALLOW_THREADS
  try {
    oclf::device::settle_autograd_threads();
  } catch (...) {
  }
  try {
    oclf::device::finish_at_exit();
  } catch (...) {
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// The module's own functions: those called too often for an operator's boxing, and the one
// the interpreter's exit calls.
static PyMethodDef module_methods[] = {
    {"survey", oclf::device::survey, METH_VARARGS,
     "survey(args, cpu_scalars): a compiled graph's arguments' signature, addresses and versions (survey.cpp)"},
    {"finish_at_exit", finish_at_exit, METH_NOARGS,
     "finish_at_exit(): every open device's waiting commands enqueued and run to the end (atexit)"},
    {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C",
                                        "The opencl device's native part (operators in torch.ops.oclf).", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&module_def); }
