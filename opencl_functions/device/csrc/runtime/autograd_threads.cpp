// Torch's autograd engine runs the backward pass of each non-CPU device on a worker
// thread of its own, one ready queue per device index. It creates those queues once, at
// the first backward pass of the process, sized by the device count of the backends
// registered at that moment. A process that ran a CPU backward pass before importing
// opencl_functions.device would therefore have no queue for opencl:0, and every later
// backward pass through the device would stop on an internal assert of the engine.
// ensure_autograd_threads(), called when the device registers, starts the engine's
// device threads now (so the queues count opencl) and, when they had already started
// without it, adds the missing queues and their worker threads the way the engine does.
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

// The device queues are a protected member of the engine: a derived type may name them.
struct EngineQueues : Engine {
  static std::vector<std::shared_ptr<ReadyQueue>>& of(Engine& engine) {
    return engine.*(&EngineQueues::device_ready_queues_);
  }
};

}  // namespace

void ensure_autograd_threads() {
  if (!Device::available()) return;
  Engine& engine = Engine::get_default_engine();
  engine.initialize_device_threads_pool();  // no-op once started; otherwise counts opencl now
  auto& queues = EngineQueues::of(engine);
  const int needed = 1;  // one device, index 0
  // Called from the import, before any opencl tensor exists: no backward pass can be
  // reading the queues of this device yet.
  while (int(queues.size()) < needed) {
    const int index = int(queues.size());
    queues.push_back(std::make_shared<ReadyQueue>());
    std::thread(&Engine::thread_init, &engine, index, queues.back(), true).detach();
  }
}

}  // namespace oclf::device
