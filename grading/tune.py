"""Sweeps the block sizes of our conv2d kernels over ResNet-50's conv shapes and prints
GFLOP/s (kernel time, resident weights) per shape and setting, with geometric means:

    python -m grading.tune gpu 64,64,4,4,16 128,64,8,4,16     # OCLF_GPU_TILE=TM,TN,WM,WN,TK
    python -m grading.tune cpu 16,8 16,14                      # OCLF_CPU_BLOCK=COV,PX

The defaults in opencl-functions.cpp come from such sweeps."""
from __future__ import annotations

import math
import os
import sys

import torch

import opencl_functions
from grading.shapes import RESNET50

ENV = {"gpu": "OCLF_GPU_TILE", "cpu": "OCLF_CPU_BLOCK"}


def kernel_gflops(shape, reps: int = 7) -> float:
    x = torch.randn(1, shape.c_in, shape.h + 2 * shape.padding, shape.w + 2 * shape.padding)
    w = torch.nn.Parameter(torch.randn(shape.c_out, shape.c_in, shape.k, shape.k), requires_grad=False)
    opencl_functions.ocl_conv2d(x, w, None, shape.stride)
    best = math.inf
    for _ in range(reps):
        opencl_functions.ocl_conv2d(x, w, None, shape.stride)
        best = min(best, opencl_functions.last_kernel_time_ns())
    return shape.flops / best


def main(argv) -> None:
    if len(argv) < 2 or argv[0] not in ENV:
        sys.exit(__doc__)
    path, settings = argv[0], argv[1:]
    os.environ["OCLF_CONV_KERNEL"] = path
    print(f"{opencl_functions.device_info()['device']}: GFLOP/s by {ENV[path]}")
    print(f"{'layer':<10}" + "".join(f"{s:>16}" for s in settings))
    logs = {s: 0.0 for s in settings}
    for shape in RESNET50:
        row = f"{shape.name:<10}"
        for s in settings:
            os.environ[ENV[path]] = s
            g = kernel_gflops(shape)
            logs[s] += math.log(g)
            row += f"{g:>16.1f}"
        print(row, flush=True)
    print(f"{'geomean':<10}" + "".join(f"{math.exp(logs[s] / len(RESNET50)):>16.1f}" for s in settings))


if __name__ == "__main__":
    main(sys.argv[1:])
