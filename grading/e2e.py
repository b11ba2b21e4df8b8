"""End-to-end inference with the patched layers (utils.patching.opencl_layers) against
torch, on random weights (the point is time and agreement, not predictions):

- ResNet-50, batch 1, 224×224: one forward pass.
- GPT-2 (full size, GPT2Config() defaults): greedy decoding with the key/value cache, an
  8-token prompt then 16 new tokens (so mostly one-row products).

Rounds alternate torch and OpenCL, so a busy machine slows both alike; each reports the
fastest and the median of its rounds, and the ratio OpenCL time / torch time of each. The
first OpenCL call (not timed with the rounds) builds the kernels, uploads the weights and,
with OCLF_TUNE=1, tunes the shapes the tuning cache lacks. On a CUDA machine torch on the
GPU (TF32 off) is timed too.

    python -m grading.e2e [--model resnet50|gpt2|all] [--rounds N] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Dict, List

import torch
import torchvision

import opencl_functions
from utils.patching import opencl_layers

PROMPT_TOKENS, NEW_TOKENS = 8, 16


def resnet50() -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    x = torch.randn(1, 3, 224, 224)
    return lambda: model(x)


def gpt2() -> Callable[[], torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT_TOKENS))

    def generate() -> torch.Tensor:
        x, past, logits = prompt, None, []
        for _ in range(NEW_TOKENS):
            out = model(input_ids=x, past_key_values=past, use_cache=True)
            past, step = out.past_key_values, out.logits[0, -1]
            logits.append(step)
            x = step.argmax().view(1, 1)
        return torch.stack(logits)

    return generate


MODELS = {"resnet50": (resnet50, "ResNet-50 b1 224x224"),
          "gpt2": (gpt2, f"GPT-2 {PROMPT_TOKENS}-token prompt + {NEW_TOKENS} tokens")}


def seconds(fn: Callable[[], torch.Tensor]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(name: str, rounds: int) -> Dict[str, float]:
    make, label = MODELS[name]
    run = make()
    times: Dict[str, List[float]] = {"torch": [], "opencl": []}
    with torch.no_grad():
        ref = run()
        with opencl_layers():
            start = time.perf_counter()
            out = run()  # builds the kernels and uploads the weights
            first = time.perf_counter() - start
        for _ in range(rounds):
            times["torch"].append(seconds(run))
            with opencl_layers():
                times["opencl"].append(seconds(run))
    result = {key: statistics.median(values) for key, values in times.items()}
    result.update({f"{key}_min": min(values) for key, values in times.items()})
    result["first_call"] = first
    result["max_rel_error"] = float((out - ref).abs().max() / ref.abs().max())
    line = (f"{label} on {opencl_functions.device_info()['device']}: fastest (median) of {rounds} rounds: "
            f"torch CPU {result['torch_min'] * 1e3:.1f} ({result['torch'] * 1e3:.1f}) ms, "
            f"OpenCL {result['opencl_min'] * 1e3:.1f} ({result['opencl'] * 1e3:.1f}) ms, "
            f"OpenCL/torch {result['opencl_min'] / result['torch_min']:.2f}x "
            f"({result['opencl'] / result['torch']:.2f}x); first call {first * 1e3:.0f} ms")
    if torch.cuda.is_available():
        result["torch_cuda"] = cuda_seconds(make, rounds)
        line += f"; torch CUDA fp32 {result['torch_cuda'] * 1e3:.1f} ms"
    print(f"{line}; max rel error {result['max_rel_error']:.1e}", flush=True)
    return result


def cuda_seconds(make: Callable[[], Callable[[], torch.Tensor]], rounds: int) -> float:
    """Median time of the same model on the GPU with CUDA torch, TF32 off."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_default_device("cuda")
    try:
        run = make()
        with torch.no_grad():
            run()

            def synced():
                run()
                torch.cuda.synchronize()

            return statistics.median(seconds(synced) for _ in range(rounds))
    finally:
        torch.set_default_device("cpu")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=[*MODELS, "all"], default="all")
    p.add_argument("--rounds", type=int, default=9, help="alternating torch/OpenCL rounds (default 9)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for torch and PoCL (0: their defaults); set before OpenCL starts")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(args.threads)  # PoCL 3.x
        os.environ["POCL_CPU_MAX_CU_NUM"] = str(args.threads)  # later PoCL
    for name in MODELS if args.model == "all" else [args.model]:
        compare(name, args.rounds)
    print(f"resident parameters: {opencl_functions.resident_bytes() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
