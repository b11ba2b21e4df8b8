"""Where a model's time goes on the opencl device: operators by total time, measured with
torch's profiler while OCLF_DEVICE_SYNC=1 makes every kernel finish before its operator
returns (so an operator's CPU time is its device time).

    python -m bench.profile_device [--model resnet50] [--batch 16] [--train] [--top 25]
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

import torch
import torch.nn.functional as F
import torchvision


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--train", action="store_true", help="a training step instead of inference")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    os.environ["OCLF_DEVICE_SYNC"] = "1"
    import torch_opencl  # noqa: F401  (registers the device)

    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model).to("opencl").train(args.train)
    x = torch.randn(args.batch, 3, 224, 224).to("opencl")
    target = torch.randint(0, 1000, (args.batch,)).to("opencl")

    def step() -> None:
        if args.train:
            F.cross_entropy(model(x), target).backward()
        else:
            with torch.no_grad():
                model(x)
        torch.opencl.synchronize()

    step()  # builds the kernels
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
