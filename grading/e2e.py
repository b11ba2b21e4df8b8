"""End-to-end ResNet-50 inference (batch 1, 224×224, random weights): torch against the
same model with its layers patched onto OpenCL (utils.patching.opencl_layers), medians
of a few runs after a warm-up. On a CUDA machine torch also runs on the GPU.

    python -m grading.e2e
"""
from __future__ import annotations

import statistics
import time

import torch
import torchvision

import opencl_functions
from utils.patching import opencl_layers


def median_s(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        ref = model(x)
        torch_cpu = median_s(lambda: model(x))
        with opencl_layers():
            t0 = time.perf_counter()
            model(x)
            first = time.perf_counter() - t0
            ours = median_s(lambda: model(x))
            out = model(x)
        line = (f"ResNet-50 b1 on {opencl_functions.device_info()['device']}: torch CPU {torch_cpu * 1e3:.1f} ms, "
                f"patched {ours * 1e3:.1f} ms (first call {first * 1e3:.0f} ms), torch/ours {torch_cpu / ours:.2f}")
        if torch.cuda.is_available():
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            gpu_model, gx = model.cuda(), x.cuda()
            gpu_model(gx)

            def run_gpu():
                gpu_model(gx)
                torch.cuda.synchronize()

            torch_gpu = median_s(run_gpu)
            line += f"; torch CUDA fp32 {torch_gpu * 1e3:.1f} ms, torch_cuda/ours {torch_gpu / ours:.3f}"
    err = float((out - ref).abs().max() / ref.abs().max())
    print(f"{line}; resident {opencl_functions.resident_bytes() / 2**20:.0f} MiB; max rel error {err:.1e}")


if __name__ == "__main__":
    main()
