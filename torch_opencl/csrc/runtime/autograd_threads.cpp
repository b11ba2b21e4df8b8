// Torch's autograd engine runs the backward pass of each non-CPU device on a worker
// thread of its own, one ready queue per device index. It creates those queues once, at
// the first backward pass of the process, sized by the device count of the backends
// registered at that moment. A process that ran a CPU backward pass before importing
// torch_opencl would therefore have no queues for the opencl devices, and every later
// backward pass through the device would stop on an internal assert of the engine.
// ensure_autograd_threads(), called when the device registers, adds the missing queues
// and their worker threads the way the engine does, when the engine had already started
// them without opencl; otherwise the engine's first backward pass counts it.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "autograd_threads.h"
#include "stream.h"

namespace oclf::device {

namespace {

using torch::autograd::Engine;
using torch::autograd::ReadyQueue;

// The device queues and the pool that marks the threads as started are protected members
// of the engine: a derived type may name them.
struct EngineQueues : Engine {
  static std::vector<std::shared_ptr<ReadyQueue>>& of(Engine& engine) {
    return engine.*(&EngineQueues::device_ready_queues_);
  }
  static bool started(Engine& engine) { return (engine.*(&EngineQueues::thread_pool_shared_)) != nullptr; }
};

}  // namespace

// A device's worker drops its reference to a backward pass's task after the pass has
// returned to the caller. The task holds the caller's Python context (torch stashes it for
// every backward pass), and dropping the last reference takes the GIL: at the interpreter's
// exit that ends the worker thread inside a C++ destructor, and the process aborts
// ("terminate called without an active exception"). One small backward pass on each open
// device, run from C++ with the GIL released and no Python state stashed, lets each worker
// finish the previous task first (a worker runs its tasks in turn); its own task holds no
// Python object.
void settle_autograd_threads() {
  if (in_forked_child()) return;  // the parent's workers: none here
  Engine& engine = Engine::get_default_engine();
  if (!EngineQueues::started(engine)) return;
  const int count = std::min<int>(device_count(), int(EngineQueues::of(engine).size()));
  for (int index = 0; index < count; ++index) {
    if (!Stream::is_open(index)) continue;
    at::Tensor leaf = at::ones({1}, at::TensorOptions().device(c10::DeviceType::PrivateUse1, index))
                          .requires_grad_(true);
    torch::autograd::backward({leaf.mul(2).sum()});
  }
}

void ensure_autograd_threads() {
  Engine& engine = Engine::get_default_engine();
  // Not started yet: the first backward pass starts them and counts opencl (registered
  // by now). Starting them here would make a later fork-based child unable to run autograd.
  // (Checked first: the import opens no device unless a backward pass ran before it.)
  if (!EngineQueues::started(engine)) return;
  if (!device_available()) return;
  auto& queues = EngineQueues::of(engine);
  const int needed = device_count();  // one queue per device index
  // Called from the import, before any opencl tensor exists: no backward pass can be
  // reading the queues of this device yet.
  while (int(queues.size()) < needed) {
    const int index = int(queues.size());
    queues.push_back(std::make_shared<ReadyQueue>());
    std::thread(&Engine::thread_init, &engine, index, queues.back(), true).detach();
  }
}

}  // namespace oclf::device
