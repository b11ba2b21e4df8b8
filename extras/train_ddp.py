"""Data-parallel training on opencl devices: DistributedDataParallel over the "oclf" backend.

    torchrun --nproc_per_node 2 -m extras.train_ddp                 # 2 processes on this machine
    torchrun --nproc_per_node 1 -m extras.train_ddp --batch 16      # the same global batch, one process
    OCLF_DEVICE=1:0 torchrun ...                                    # every process on this device

Each process opens an OpenCL device: the one OCLF_DEVICE selects, else, where the machine
has several GPUs, GPU number LOCAL_RANK (torchrun's per-machine rank), so N processes on a
machine with N GPUs use one each. Each holds a replica of a small convolutional network and trains it on its share of every
global batch; DistributedDataParallel averages the gradients through the "oclf" backend
(torch_opencl.distributed: gloo between the processes, on host copies), so
after every step all replicas hold the same parameters, those one process would hold
training on the whole global batch. The data is a fixed synthetic task (random images,
labels from a fixed random linear rule) so that runs with any number of processes see the
same global batches.

On several machines, run on each (N machines, M processes on each, machine 0 reachable at ADDR):
    torchrun --nnodes N --nproc_per_node M --node_rank R --master_addr ADDR --master_port 29500 \\
        -m extras.train_ddp
--save FILE writes rank 0's final parameters (the test compares 1 and 2 processes).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(),
        nn.Conv2d(12, 20, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(20, 5))


def global_batch(step: int, size: int):
    """The step's global batch, the same whatever the number of processes."""
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 3, 12, 12, generator=gen)
    rule = torch.randn(3 * 12 * 12, 5, generator=torch.Generator().manual_seed(7))
    return x, (x.flatten(1) @ rule).argmax(1)


def device_for_this_process() -> None:
    """Without OCLF_DEVICE, on a machine with several OpenCL GPUs: GPU number LOCAL_RANK
    (modulo their count). Set before the opencl device opens."""
    if "OCLF_DEVICE" in os.environ or "OCL_DEVICE" in os.environ or "LOCAL_RANK" not in os.environ:
        return
    import opencl_functions

    gpus = [d["index"] for d in opencl_functions.list_devices() if d["type"] == "GPU"]
    if len(gpus) > 1:
        os.environ["OCLF_DEVICE"] = gpus[int(os.environ["LOCAL_RANK"]) % len(gpus)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="global batch (split over the processes)")
    parser.add_argument("--device", default="opencl", choices=("opencl", "cpu"))
    parser.add_argument("--save", type=Path, help="write rank 0's final parameters here")
    args = parser.parse_args(argv)

    if args.device == "opencl":
        device_for_this_process()
        import torch_opencl  # noqa: F401  (registers the device and the "oclf" backend)
    dist.init_process_group("cpu:gloo,opencl:oclf" if args.device == "opencl" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} does not split over {world} processes")
    share = args.batch // world

    model = make_model().to(args.device)
    # No batch norm: its statistics would be each process's share's (torch's SyncBatchNorm is
    # CUDA's), and the replicas would no longer train as one process on the whole batch.
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x, y = global_batch(step, args.batch)
        x, y = x[rank * share:(rank + 1) * share].to(args.device), y[rank * share:(rank + 1) * share].to(args.device)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step}: loss {total.item() / world:.4f} ({world} process(es), {share} images each)")
    if args.device == "opencl":
        print(f"rank {rank}: {torch.opencl.get_device_name()}")
    if rank == 0 and args.save:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.save)
    # Every rank reaches the teardown together: a rank that tears its gloo pairs down while
    # another still writes its file can abort ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
