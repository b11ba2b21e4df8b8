"""torch.distributed on the opencl device (the "oclf" backend, torch_opencl/distributed.py),
run as users run it: torchrun starting processes on this machine, each with its own PoCL device.

- every collective of torch's interface on opencl tensors, and SyncBatchNorm against
  BatchNorm over the whole batch, checked in 2 processes (tests/distributed_worker.py);
- DistributedDataParallel: 2 processes, each on half of every global batch, end with the
  parameters of 1 process trained on the whole batches (extras/train_ddp.py), which moved
  away from their initial values."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def torchrun(processes: int, *args: str, fallback: str = "error") -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OCLF_FALLBACK": fallback}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc_per_node={processes}", *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result.stdout


def test_every_collective_on_opencl_tensors_in_two_processes(opencl_device):
    # SyncBatchNorm drops processes with empty shares by boolean indexing, which may run on the CPU
    assert "collectives ok" in torchrun(2, str(ROOT / "tests" / "distributed_worker.py"), fallback="silent")


def test_two_processes_train_as_one_over_the_global_batch(opencl_device, tmp_path):
    from extras.train_ddp import make_model

    steps = ["--steps", "3", "--batch", "12"]
    torchrun(1, "-m", "extras.train_ddp", *steps, "--save", str(tmp_path / "one.pt"))
    log = torchrun(2, "-m", "extras.train_ddp", *steps, "--save", str(tmp_path / "two.pt"))
    assert "2 process(es), 6 images each" in log
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    initial = make_model().state_dict()
    for name, value in one.items():
        moved = (value - initial[name]).abs().max().item()
        assert moved > 1e-3, f"{name} did not train ({moved:.1e})"
        torch.testing.assert_close(two[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_backend_is_registered_for_the_device(opencl_device):
    import torch.distributed as dist

    assert "oclf" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["opencl"] == "oclf"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    # registered with devices=["opencl"]: torch's default for the device
    assert dist.get_default_backend_for_device("opencl") == "oclf"
    assert dist.get_default_backend_for_device(torch.device("opencl", 0)) == "oclf"


if not torch.distributed.is_available():
    pytestmark = pytest.mark.skip(reason="this torch has no torch.distributed")
