"""End-to-end timings of whole models on random weights (the point is time and
agreement, not predictions), in two modes:

- patched (default): the patched layers (utils.patching.opencl_layers), tensors on the
  host. ResNet-18 and ResNet-50 at batch 1 (224×224, one forward pass) and GPT-2 generation.
- device: the opencl torch device (torch_opencl), tensors on the device.
  ResNet-18 inference at batch 1, ResNet-50 inference at batch 1 and 16, MobileNetV2 (depthwise
  convolutions) at batch 1, one ResNet-50 training step at batch 16
  (forward, cross-entropy, backward, SGD with momentum), and GPT-2 generation.
- replay: the device's runs recorded once (torch_opencl.graph()) and replayed:
  the same kernels without Python, dispatcher, allocation or argument setting. GPT-2's
  whole generation is one recording: its cache grows token by token, but the same way in
  every run (the prompt's length is fixed and greedy decoding stays on the device).

- compile (--compile): torch.compile(model) on the opencl device (fused kernels generated
  per graph, each graph replayed), and on a CUDA machine torch CUDA's torch.compile in
  its default mode and with mode="reduce-overhead" (CUDA graphs) in the same run. GPT-2
  compiled generates as transformers documents for torch.compile (`generate` with a static
  key/value cache, the model's forward compiled: one graph for the prompt, one per step).

--fuse runs the inference models on the device as torch_opencl.fuse() makes them:
each convolution with its batch norm folded in and its residual addition and ReLU in the
same kernel (torch, on the CPU and on CUDA, runs the model as it is).

GPT-2 is full size (GPT2Config() defaults): greedy decoding with the key/value cache, an
8-token prompt then 16 new tokens (so mostly one-row products).

Rounds alternate torch on the CPU and OpenCL, so a busy machine slows both alike (on a GPU
the device's rounds run back to back, as torch CUDA's do); each
reports the fastest and the median of its rounds, and the ratio OpenCL time / torch time of
each. The first OpenCL call (not timed with the rounds: opencl_functions.tuning.warm_up) builds
the kernels, uploads the weights and, with OCLF_TUNE=1, tunes the shapes the tuning cache lacks
(announced on stderr); each line gives its time and the seconds of it spent tuning. On a CUDA machine
torch on the GPU is timed too, as bench.peers runs it (cuDNN's autotuner on, TF32 off, 16-bit
convolutional models in NCHW and channels_last), and the OpenCL speed over its fair peer: eager
CUDA beside the plain runs, the same workload captured once in a CUDA graph and replayed
beside the replayed ones, torch.compile's default, reduce-overhead and max-autotune modes
beside ours compiled. Each row also counts its FLOPs (bench.peaks, on the CPU, once per model)
and gives each time as a share of the device's peak; --json records the rows for bench.report.

    python -m bench.models [--mode patched|device|replay|compile|all ...] [--model NAME|all ...] [--rounds N]
                           [--threads N] [--dtype float32|float16|bfloat16] [--fuse] [--compile] [--json FILE]
                           [--cuda-compile-modes default,reduce-overhead,max-autotune] [--cuda-timeout S]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
import torchvision

import opencl_functions
from opencl_functions import tuning
from bench import peaks, peers, record
from opencl_functions.info import host_cpu
from utils.patching import opencl_layers

PROMPT_TOKENS, NEW_TOKENS = 8, 16
# The inference models' and GPT-2's weights and activations off the CPU (--dtype): float16
# and bfloat16 halve the memory traffic (and on CUDA run on tensor cores); torch on the CPU,
# the reference, stays float32. The training step stays float32.
DTYPE = torch.float32
# --fuse: inference on the opencl device through torch_opencl.fuse().
FUSE = False
# The compile mode: torch.compile's mode for the model ("default", "reduce-overhead", "max-autotune"), or
# None to run it as it is. Set per run by compare_device and in the CUDA timing process.
COMPILE_MODE = None
# The memory format of the inference models off the opencl device: "nchw", or "channels_last"
# (set by bench.peers' child for 16-bit convolutional models on CUDA).
MEMORY_FORMAT = "nchw"
# torch CUDA's compile modes timed beside ours compiled, and the seconds each child may take.
CUDA_COMPILE_MODES = peers.COMPILE_MODES
CUDA_TIMEOUT = 600.0


def compiled(model: Callable) -> Callable:
    """model (a module, or a function such as a module's forward) under torch.compile in
    COMPILE_MODE, or itself when no compile mode is set."""
    if COMPILE_MODE is None:
        return model
    return torch.compile(model) if COMPILE_MODE == "default" else torch.compile(model, mode=COMPILE_MODE)

# A model maker takes a device ("cpu", "opencl", "cuda") and returns a function that runs
# the workload once there and returns its result on that device.
Maker = Callable[[str], Callable[[], torch.Tensor]]


def inference(arch: str, batch: int) -> Maker:
    def make(device: str) -> Callable[[], torch.Tensor]:
        torch.manual_seed(0)
        model = torchvision.models.get_model(arch).eval()
        if FUSE and device == "opencl":
            import torch_opencl

            model = torch_opencl.fuse(model)
        model = model.to(device)
        x = torch.randn(batch, 3, 224, 224).to(device)
        if device != "cpu":
            model, x = model.to(DTYPE), x.to(DTYPE)
        if MEMORY_FORMAT == "channels_last" and device != "opencl":
            model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
        model = compiled(model)

        def run() -> torch.Tensor:
            with torch.no_grad():
                return model(x)

        return run

    return make


def resnet50_training(batch: int) -> Maker:
    """One SGD step; returns the loss. Each call trains on: the weights move every step
    on every device alike, so the first steps agree."""

    def make(device: str) -> Callable[[], torch.Tensor]:
        torch.manual_seed(0)
        model = torchvision.models.resnet50().train().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        model = compiled(model)
        x = torch.randn(batch, 3, 224, 224).to(device)
        target = torch.randint(0, 1000, (batch,)).to(device)

        def run() -> torch.Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            return loss.detach()

        return run

    return make


def gpt2_generation(device: str) -> Callable[[], torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval().to(device)
    if device != "cpu":
        model = model.to(DTYPE)
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT_TOKENS)).to(device)
    if COMPILE_MODE is not None:
        # Compiled as transformers documents it: a static key/value cache, so that the prompt
        # and every later step each keep one shape (one graph each), and the forward compiled.
        model.forward = compiled(model.forward)

        def generate_compiled() -> torch.Tensor:
            with torch.no_grad():
                out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static",
                                     output_logits=True, return_dict_in_generate=True,
                                     pad_token_id=model.config.eos_token_id)
            return torch.stack([step[0].float() for step in out.logits])

        return generate_compiled

    def generate() -> torch.Tensor:
        x, past, logits = prompt, None, []
        with torch.no_grad():
            for _ in range(NEW_TOKENS):
                out = model(input_ids=x, past_key_values=past, use_cache=True)
                past, step = out.past_key_values, out.logits[0, -1]
                logits.append(step.float())
                x = step.argmax().view(1, 1)
        return torch.stack(logits)

    return generate


MODELS: Dict[str, Dict[str, object]] = {
    "resnet18": {"make": inference("resnet18", 1), "label": "ResNet-18 b1 224x224", "fusable": True,
                 "dtyped": True, "conv": True, "modes": ("patched", "device", "replay", "compile")},
    "resnet50": {"make": inference("resnet50", 1), "label": "ResNet-50 b1 224x224", "fusable": True,
                 "dtyped": True, "conv": True, "modes": ("patched", "device", "replay", "compile")},
    "resnet50_b16": {"make": inference("resnet50", 16), "label": "ResNet-50 b16 224x224", "fusable": True,
                     "dtyped": True, "conv": True, "modes": ("device", "replay", "compile")},
    "mobilenet_v2": {"make": inference("mobilenet_v2", 1), "label": "MobileNetV2 b1 224x224", "fusable": True,
                     "dtyped": True, "conv": True, "modes": ("device", "replay", "compile")},
    "resnet50_train_b16": {"make": resnet50_training(16), "label": "ResNet-50 training step b16",
                           "modes": ("device", "replay", "compile")},
    "gpt2": {"make": gpt2_generation, "label": f"GPT-2 {PROMPT_TOKENS}-token prompt + {NEW_TOKENS} tokens",
             "dtyped": True, "modes": ("patched", "device", "replay", "compile")},
}


FLOPS: Dict[str, int] = {}  # per model: one run's FLOPs, counted once per process


def flops(name: str) -> int:
    """FLOPs of one run of model `name` (a forward pass, a training step's forward and
    backward, a whole generation), counted on the CPU on a model of its own."""
    global COMPILE_MODE
    if name not in FLOPS:
        mode, COMPILE_MODE = COMPILE_MODE, None
        try:
            FLOPS[name] = peaks.count_flops(MODELS[name]["make"]("cpu"))
        finally:
            COMPILE_MODE = mode
    return FLOPS[name]


def seconds(fn: Callable[[], object], sync: Callable[[], None] = lambda: None) -> float:
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().float().cpu(), ref.detach().float().cpu()
    return float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def compare_patched(name: str, rounds: int) -> Dict[str, float]:
    spec = MODELS[name]
    run = spec["make"]("cpu")
    times: Dict[str, List[float]] = {"torch": [], "opencl": []}
    with torch.no_grad():
        ref = run()
        with opencl_layers():  # the first call builds the kernels, uploads the weights, tunes
            out, first = tuning.warm_up(run, f"{spec['label']}'s layers")
        for _ in range(rounds):
            times["torch"].append(seconds(run))
            with opencl_layers():
                times["opencl"].append(seconds(run))
    return report(name, "patched", times, first, max_rel_error(out, ref), rounds)


def recorded(run: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """`run` recorded once (after the call that did its first-use work) and replayed."""
    import torch_opencl

    with torch_opencl.graph() as g:
        out = run()

    def replay() -> torch.Tensor:
        g.replay()
        return out

    replay.graph = g
    return replay


def compare_device(name: str, rounds: int, replay: bool = False, compile: bool = False) -> Dict[str, float]:
    import torch_opencl  # noqa: F401  (registers the opencl device)

    global COMPILE_MODE
    spec = MODELS[name]
    run_cpu = spec["make"]("cpu")
    COMPILE_MODE = "default" if compile else None
    try:
        run_dev = spec["make"]("opencl")
    finally:
        COMPILE_MODE = None
    sync = torch.opencl.synchronize
    ref = run_cpu()

    def first_run() -> torch.Tensor:  # builds the kernels (compiles the graphs), tunes; weights are there
        result = run_dev()
        sync()
        return result

    out, first = tuning.warm_up(first_run, f"{spec['label']} on the device")
    if compile:
        # The second call records each compiled graph, the third replays it (checked); the
        # CPU reference runs as often, so a training step's results stay in step.
        run_cpu()
        run_dev()
        ref, out = run_cpu(), run_dev()
        sync()
    if replay:
        # The recording runs the workload once more, and the checked replay once again (a
        # training step trains each time): the CPU reference runs as often, so the compared
        # results stay in step.
        run_dev = recorded(run_dev)
        run_cpu()
        out = run_dev()
        ref = run_cpu()
        sync()
    error = max_rel_error(out, ref)
    times: Dict[str, List[float]] = {"torch": [], "opencl": []}
    threads = torch.get_num_threads()
    if opencl_functions.device_info()["type"] != "CPU":
        # A GPU shares nothing with torch's CPU rounds: its rounds run back to back, as torch
        # CUDA's do (after a CPU round the GPU has idled and lowered its clocks, and a light
        # workload such as GPT-2's one-token steps runs before they rise again).
        times["torch"] = [seconds(run_cpu) for _ in range(rounds)]
        times["opencl"] = [seconds(run_dev, sync) for _ in range(rounds)]
        return report(name, "compile" if compile else "replay" if replay else "device", times, first, error, rounds)
    for _ in range(rounds):
        times["torch"].append(seconds(run_cpu))
        # The device needs no torch threads; on a CPU OpenCL device, torch's idle OpenMP
        # workers would spin on the cores PoCL runs on (as opencl_layers() avoids too).
        torch.set_num_threads(1)
        try:
            times["opencl"].append(seconds(run_dev, sync))
        finally:
            torch.set_num_threads(threads)
    return report(name, "compile" if compile else "replay" if replay else "device", times, first, error, rounds)


def report(name: str, mode: str, times: Dict[str, List[float]], first: tuning.FirstCall, error: float,
           rounds: int) -> Dict[str, float]:
    spec = MODELS[name]
    # --dtype applies on the device (the patched layers run float32 on the CPU's tensors).
    dtype = str(DTYPE).removeprefix("torch.") if spec.get("dtyped") and mode != "patched" else "float32"
    label = spec["label"] + (f" {dtype}" if name == "gpt2" or dtype != "float32" else "")
    fused = bool(FUSE and spec.get("fusable") and mode != "patched")
    if fused:
        label += ", fused"
    result = {key: statistics.median(values) for key, values in times.items()}
    result.update({f"{key}_min": min(values) for key, values in times.items()})
    result["first_call"], result["first_call_tuning"] = first.seconds, first.tuning_s
    result["max_rel_error"] = error
    result.update(model=name, mode=mode, label=label, dtype=dtype, fused=fused, rounds=rounds, flops=flops(name))
    device = opencl_functions.device_info()["device"]
    where = {"device": "on the opencl device", "replay": "on the opencl device, replayed",
             "compile": "on the opencl device, torch.compile", "patched": "with the patched layers"}[mode]
    line = (f"{label} {where} ({device}): "
            f"fastest (median) of {rounds} rounds: "
            f"torch CPU {result['torch_min'] * 1e3:.1f} ({result['torch'] * 1e3:.1f}) ms, "
            f"OpenCL {result['opencl_min'] * 1e3:.1f} ({result['opencl'] * 1e3:.1f}) ms, "
            f"OpenCL/torch {result['opencl_min'] / result['torch_min']:.2f}x "
            f"({result['opencl'] / result['torch']:.2f}x); first call (untimed) {first.seconds * 1e3:.0f} ms, "
            f"{first.tuning_s:.1f} s of it tuning")
    if torch.cuda.is_available():
        result.update(peers.measure(name, mode, rounds, dtype, bool(spec.get("conv")), CUDA_COMPILE_MODES,
                                    CUDA_TIMEOUT))
        line += "; " + peers.describe(result, result["opencl"])
    device_peaks = peaks.lookup(device)

    def share(seconds: float) -> str:
        return peaks.percent(peaks.fraction(result["flops"], seconds, device_peaks, dtype))

    line += f"; {result['flops'] / 1e9:.2f} GFLOP a run, OpenCL {share(result['opencl'])} of the {dtype} peak"
    if result.get("peer"):
        line += f", the peer {share(result[result['peer']])}"
    print(f"{line}; max rel error {error:.1e}", flush=True)
    return result


def cuda_only(args: argparse.Namespace) -> Dict[str, object]:
    """The child of bench.peers: one workload's torch times on --peer-device, as JSON."""
    global COMPILE_MODE
    COMPILE_MODE = args.cuda_compile or None
    spec = MODELS[args.cuda_only]

    def make(memory_format: str) -> Callable[[], torch.Tensor]:
        global MEMORY_FORMAT
        MEMORY_FORMAT = memory_format
        return spec["make"](args.peer_device)

    variants = args.cuda_variants.split(",") if args.cuda_variants else ["eager"]
    formats = args.cuda_formats.split(",") if args.cuda_formats else ["nchw"]
    # torch.compile: the first call compiles, the next ones record CUDA graphs where the mode has them.
    return peers.time_variants(make, args.peer_device, args.rounds, variants, formats,
                               warmups=3 if COMPILE_MODE else 1)


def main(argv=None) -> Dict[str, Dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["patched", "device", "replay", "compile", "all"], action="append",
                   help="repeatable (default: patched)")
    p.add_argument("--model", choices=[*MODELS, "all"], action="append", help="repeatable (default: all)")
    p.add_argument("--rounds", type=int, default=9, help="alternating torch/OpenCL rounds (default 9)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for torch and PoCL (0: their defaults); set before OpenCL starts")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="the inference models' and GPT-2's dtype on the OpenCL device and on CUDA (the CPU "
                        "reference and the training step stay float32)")
    p.add_argument("--fuse", action="store_true",
                   help="inference on the device with fused convolutions (torch_opencl.fuse)")
    p.add_argument("--compile", action="store_true",
                   help="--mode compile: torch.compile on the device, beside torch CUDA's compile modes")
    p.add_argument("--json", help="record each row into this file as it is measured (bench.record, bench.report)")
    p.add_argument("--cuda-compile-modes", default=",".join(peers.COMPILE_MODES),
                   help="torch CUDA's compile modes timed in compile mode, comma-separated (default: all three)")
    p.add_argument("--cuda-timeout", type=float, default=600.0,
                   help="seconds each torch CUDA process may take (default 600); one that outlives it is reported")
    p.add_argument("--cuda-only", metavar="NAME", help="internal: print one model's torch times as JSON")
    p.add_argument("--cuda-variants", default="", help="internal: with --cuda-only, eager,graph")
    p.add_argument("--cuda-formats", default="", help="internal: with --cuda-only, nchw,channels_last")
    p.add_argument("--cuda-compile", metavar="MODE", default="", help="internal: with --cuda-only, compiled")
    p.add_argument("--peer-device", default="cuda", help="internal: with --cuda-only, where torch runs")
    args = p.parse_args(argv)
    global DTYPE, FUSE, CUDA_COMPILE_MODES, CUDA_TIMEOUT
    DTYPE = getattr(torch, args.dtype)
    FUSE = args.fuse
    if args.cuda_only:
        print(json.dumps(cuda_only(args)))
        return {}
    CUDA_COMPILE_MODES = [m for m in args.cuda_compile_modes.split(",") if m]
    unknown = sorted(set(CUDA_COMPILE_MODES) - set(peers.COMPILE_MODES))
    if unknown:
        p.error(f"--cuda-compile-modes: {unknown} not among {list(peers.COMPILE_MODES)}")
    CUDA_TIMEOUT = args.cuda_timeout
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(args.threads)  # PoCL 3.x
        os.environ["POCL_CPU_MAX_CU_NUM"] = str(args.threads)  # later PoCL
    chosen = args.mode or ["patched"]
    modes = ["compile"] if args.compile else [m for m in ("patched", "device", "replay", "compile")
                                              if m in chosen or "all" in chosen]
    names = list(MODELS) if not args.model or "all" in args.model else args.model
    print(f"host CPU: {host_cpu()}")
    results = {}
    where = record.machine() if args.json else None
    for mode in modes:
        for name in names:
            if mode not in MODELS[name]["modes"]:
                continue
            if mode == "patched":
                result = compare_patched(name, args.rounds)
            else:
                result = compare_device(name, args.rounds, replay=mode == "replay", compile=mode == "compile")
            results[f"{mode}:{name}"] = result
            if args.json:
                key = f"{mode}:{name}:{result['dtype']}" + (":fused" if result["fused"] else "")
                before = record.load(args.json).get(key)
                if mode == "compile" and before and before["machine"]["cuda"] == where["cuda"]:
                    result = peers.keep_other_modes(before, result, CUDA_COMPILE_MODES)
                record.save(args.json, "models", key, {**result, "machine": where})
    if "patched" in modes:
        print(f"resident parameters: {opencl_functions.resident_bytes() / 2**20:.0f} MiB")
    return results


if __name__ == "__main__":
    main()
