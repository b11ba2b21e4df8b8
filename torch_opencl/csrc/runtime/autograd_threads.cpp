// Torch's autograd engine runs the backward pass of each non-CPU device on a worker
// thread of its own, one ready queue per device index. It creates those queues once, at
// the first backward pass of the process, sized by the device count of the backends
// registered at that moment. A process that ran a CPU backward pass before importing
// torch_opencl would therefore have no queues for the opencl devices, and every later
// backward pass through the device would stop on an internal assert of the engine.
// ensure_autograd_threads(), called when the device registers, adds the missing queues
// and their worker threads the way the engine does, when the engine had already started
// them without opencl; otherwise the engine's first backward pass counts it.
#include <torch/csrc/autograd/engine.h>

#include <memory>
#include <thread>
#include <vector>

#include "autograd_threads.h"
#include "device.h"

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

void ensure_autograd_threads() {
  if (!Device::available()) return;
  Engine& engine = Engine::get_default_engine();
  // Not started yet: the first backward pass starts them and counts opencl (registered
  // by now). Starting them here would make a later fork-based child unable to run autograd.
  if (!EngineQueues::started(engine)) return;
  auto& queues = EngineQueues::of(engine);
  const int needed = Device::count();  // one queue per device index
  // Called from the import, before any opencl tensor exists: no backward pass can be
  // reading the queues of this device yet.
  while (int(queues.size()) < needed) {
    const int index = int(queues.size());
    queues.push_back(std::make_shared<ReadyQueue>());
    std::thread(&Engine::thread_init, &engine, index, queues.back(), true).detach();
  }
}

}  // namespace oclf::device
