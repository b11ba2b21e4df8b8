"""DistributedDataParallel with mixed precision on two opencl devices, as GPT trainers run
it: torchrun starts 2 processes, each finds its device through torch.accelerator, trains a
small GPT on its share of every batch (DistributedSampler) with autocast in float16, a
GradScaler and clipped gradients, and checks itself (tests/ddp_amp_worker.py): the replicas
stay equal, the run lies as close to float64 as torch's own autocast on the CPU, and a
snapshot resumes exactly. Two devices of this platform, else PoCL's two with
POCL_DEVICES="pthread pthread"."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import device_checks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def two_devices_env(ocl, opencl_device):
    return device_checks.two_devices_env(ocl)


def test_ddp_with_autocast_and_grad_scaler_on_two_devices(two_devices_env, tmp_path):
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(ROOT / "tests" / "ddp_amp_worker.py"), str(tmp_path)],
                            cwd=ROOT, env=two_devices_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "ddp_amp ok" in result.stdout, result.stdout[-3000:]
    assert (tmp_path / "snapshot.pt").stat().st_size > 0


if not torch.distributed.is_available():
    pytestmark = pytest.mark.skip(reason="this torch has no torch.distributed")
