"""Sharded and tensor-parallel training on two opencl devices, as trainers run it: torchrun
starts 2 processes, each binds its device with init_process_group(device_id=opencl:rank)
(the checks are in tests/parallel_worker.py; two devices of this platform, else PoCL's two
with POCL_DEVICES="pthread pthread"):

- FSDP2 (fully_shard) in float32: 3 Adam steps on shares of each batch give the parameters
  of one device trained on the whole batches; a model made on the meta device and initialised
  after sharding gets the values of one made on the device (DTensor's random numbers, with the
  generator's seed-and-offset state);
- FSDP2 with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): within 3 times
  torch's own bfloat16 error against float64;
- torch.distributed.checkpoint: saved after 2 steps, loaded into a fresh sharded model and
  optimizer, whose next step equals that of the model that went on;
- tensor parallelism (ColwiseParallel, RowwiseParallel): an MLP's forward and backward equal
  one device's; DTensor's uniform_ and dropout on a sharded tensor equal one device's draws.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import device_checks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def two_devices_env(ocl, opencl_device):
    return device_checks.two_devices_env(ocl)


def run_check(env: dict, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(ROOT / "tests" / "parallel_worker.py"), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert f"{args[0]} ok" in result.stdout


def test_fsdp2_trains_as_one_device(two_devices_env):
    run_check(two_devices_env, "fsdp")


def test_fsdp2_bfloat16_mixed_precision(two_devices_env):
    run_check(two_devices_env, "fsdp_bf16")


def test_distributed_checkpoint_saves_and_resumes(two_devices_env, tmp_path):
    run_check(two_devices_env, "checkpoint", str(tmp_path / "checkpoint"))


def test_tensor_parallel_mlp_and_dtensor_random_numbers(two_devices_env):
    run_check(two_devices_env, "tensor_parallel")


if not torch.distributed.is_available():
    pytestmark = pytest.mark.skip(reason="this torch has no torch.distributed")
