"""Tuning sweeps of the reference's kernels.

    python -m bench.tune                                   (make tune) the full sweep
    python -m bench.tune --models resnet50,gpt2            some of the models
    python -m bench.tune gpu 64,64,4,4,16 128,64,8,4,16    GFLOP/s per OCLF_GPU_TILE=TM,TN,WM,WN,TK
    python -m bench.tune cpu 16,8 16,14                    GFLOP/s per OCLF_CPU_BLOCK=COV,PX

The full sweep runs every layer shape of ResNet-50, MobileNetV2/EfficientNet's depthwise
convs and GPT-2's products (1, 8 and 64 tokens) once with OCLF_TUNE=sweep: the host code
measures every candidate configuration of each shape (the longer lists, no time budget)
and writes the winners to the tuning cache (runtime/tuning.hpp) as a sweep. Later runs
read them (OCLF_TUNE=1 or cache) and the benchmark reports them as "cache: sweep".
The two manual forms print a table of GFLOP/s (kernel time, resident weights) per shape
and setting over ResNet-50's convs; the defaults in opencl_functions/reference/ come from such sweeps.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Dict, List

import torch

import opencl_functions
from opencl_functions import tuning
from bench.shapes import DEPTHWISE, GPT2, RESNET50

ENV = {"gpu": "OCLF_GPU_TILE", "cpu": "OCLF_CPU_BLOCK"}
MODELS = {"resnet50": RESNET50, "depthwise": DEPTHWISE, "gpt2": GPT2}


def kernel_gflops(shape, reps: int = 7) -> float:
    x = torch.randn(1, shape.c_in, shape.h + 2 * shape.padding, shape.w + 2 * shape.padding)
    w = torch.nn.Parameter(torch.randn(shape.c_out, shape.c_in, shape.k, shape.k), requires_grad=False)
    opencl_functions.ocl_conv2d(x, w, None, shape.stride)
    best = math.inf
    for _ in range(reps):
        opencl_functions.ocl_conv2d(x, w, None, shape.stride)
        best = min(best, opencl_functions.last_kernel_time_ns())
    return shape.flops / best


def manual(path: str, settings: List[str]) -> None:
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


def sweep_one(shape) -> Dict[str, str]:
    """Runs one layer shape once (the host code measures its candidates); its choice."""
    gen = torch.Generator().manual_seed(0)
    if hasattr(shape, "groups"):
        x = torch.randn(1, shape.c_in, shape.h + 2 * shape.padding, shape.w + 2 * shape.padding, generator=gen)
        w = torch.randn(shape.c_out, shape.c_in // shape.groups, shape.k, shape.k, generator=gen)
        param = torch.nn.Parameter(w, requires_grad=False)
        opencl_functions.ocl_conv2d(x, param, None, shape.stride, 1, shape.groups)
    else:
        a = torch.randn(shape.m, shape.k, generator=gen)
        b = torch.nn.Parameter(torch.randn(shape.k, shape.n, generator=gen), requires_grad=False)
        opencl_functions.ocl_matmul(a, b)
        # A linear layer's weight (N×K, used transposed) is a shape of its own.
        wt = torch.nn.Parameter(torch.randn(shape.n, shape.k, generator=gen), requires_grad=False)
        opencl_functions.ocl_matmul(a, wt.t())
    return opencl_functions.last_choice()


def sweep(models: List[str]) -> None:
    info = opencl_functions.device_info()
    print(f"Sweep on {info['device']} ({info['platform']}), writing {opencl_functions._core.tuning_cache_path()}")
    start = time.perf_counter()
    with tuning.sweeping():
        for model in models:
            for shape in MODELS[model]:
                t0 = time.perf_counter()
                choice = sweep_one(shape)
                print(f"{model:<10}{shape.name:<16}{shape.label():<32}{choice['config']:<40}"
                      f"{time.perf_counter() - t0:6.1f} s", flush=True)
    print(f"sweep done in {time.perf_counter() - start:.0f} s")


def main(argv: List[str]) -> None:
    if argv and argv[0] in ENV:
        if len(argv) < 2:
            sys.exit(__doc__)
        manual(argv[0], argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    sweep(models)


if __name__ == "__main__":
    main(sys.argv[1:])
