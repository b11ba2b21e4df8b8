"""Benchmark: our conv2d and matmul against torch and OpenCL baselines, in one run.

    python -m bench.layers --out DIR [--quick] [--threads N] [--stat min|median] [--replay]
    python -m bench.layers --out DIR --only graded      the grader's five layers (~20 s)
    python -m bench.layers --out DIR --layer l3.c2      layers whose name holds this text

For ResNet-50's conv shapes, depthwise shapes (MobileNetV2, EfficientNet) and GPT-2's
matmul shapes (1, 8 and 64 tokens) it times:
  ours       opencl_functions.ocl_conv2d / ocl_matmul: kernel time (OpenCL profiling
             events) and wall time (transfers and host code included); weights are
             parameters, resident on the device as in a patched model;
  torch      oneDNN on the CPU (wall time); on a CUDA machine, cuDNN/cuBLAS fp32 with
             TF32 off, GPU time of a CUDA graph of repeats (inputs already on the GPU);
  clblast    matmul through CLBlast alone (OCLF_MATMUL=clblast), kernel time;
  convgemm   CLBlast's Convgemm (groups=1 only), kernel time;
  naive      one output per work-item, kernel time;
  tiled      the tiled kernel of conv2d.cl, the assignment's (the reference's host code with
             OCLF_CONV_KERNEL=tiled; in the handout, the student's own kernel), kernel time.
  replayed   (--replay) the layer on the opencl device (torch.nn.functional.conv2d / @ on
             device tensors), recorded 20 times in one graph (torch_opencl.graph)
             and replayed: device time between two events around the replay, per call, so
             the host's cost of enqueueing shows where the device waits for it (the same
             measure as torch's CUDA graph on a CUDA machine).
ours, ours_wall, torch (and clblast) are timed in alternation, round after round, so a busy
machine slows them alike; the baselines after them. Each is warmed up first (the first call
builds kernels and, with OCLF_TUNE=1, tunes the layer's shape: never inside the timed
rounds). The fastest run counts (--stat median: the median). Each row also records the
configuration our call used and where it came from (defaults, tuned now, the tuning cache
of a first use or of a sweep, a setting). Writes DIR/bench.json and DIR/bench.png (GFLOP/s
per layer), prints a table and geometric means of time ratios.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from tqdm import tqdm

import opencl_functions
from opencl_functions import tuning
from bench import baselines
from bench.shapes import DEPTHWISE, GPT2, GRADED, QUICK_CONV, QUICK_DEPTHWISE, QUICK_GPT2, RESNET50, ConvShape, MatmulShape
from opencl_functions.info import host_cpu

METHODS = ["ours", "ours_wall", "replayed", "torch", "clblast", "convgemm", "naive", "tiled"]
# Time ratios reported as geometric means: (numerator, denominator) → "num/den".
RATIOS = [("torch", "ours"), ("torch", "ours_wall"), ("torch", "replayed"), ("clblast", "ours"),
          ("convgemm", "ours"), ("naive", "ours"), ("tiled", "ours"), ("torch", "clblast"), ("torch", "convgemm"),
          ("torch", "naive"), ("torch", "tiled")]


class Timer:
    """Times functions that return nanoseconds: each warmed up, then repeated in alternation,
    round after round (BURST runs of each per round, so each side's threads are awake as in
    its own loop, and a busy machine slows all alike), for at least min_reps and at most
    max_reps rounds, or until budget_s seconds have passed; per function the fastest run, or
    the median (stat)."""

    BURST = 3

    def __init__(self, warmup: int, min_reps: int, max_reps: int, budget_s: float, stat: str = "min"):
        self.warmup, self.min_reps, self.max_reps, self.budget_s = warmup, min_reps, max_reps, budget_s
        self.stat = statistics.median if stat == "median" else min

    def all(self, fns: Dict[str, Callable[[], float]]) -> Dict[str, float]:
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        samples: Dict[str, List[float]] = {name: [] for name in fns}
        start = time.perf_counter()
        rounds = 0
        while rounds < self.max_reps and (rounds < self.min_reps or time.perf_counter() - start < self.budget_s):
            for name, fn in fns.items():
                samples[name] += [fn() for _ in range(self.BURST if len(fns) > 1 else 1)]
            rounds += 1
        return {name: self.stat(values) for name, values in samples.items()}

    def __call__(self, fn: Callable[[], float]) -> float:
        return self.all({"fn": fn})["fn"]


class TorchRunner:
    """Times torch's own implementation on the CPU (perf_counter) or on CUDA (CUDA events)."""

    def __init__(self, device: str):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.benchmark = True

    def describe(self) -> str:
        if self.device.type == "cuda":
            return f"torch {torch.__version__} CUDA on {torch.cuda.get_device_name(self.device)}, fp32, TF32 off"
        mkldnn = torch.backends.mkldnn.is_available()
        return f"torch {torch.__version__} CPU ({torch.get_num_threads()} threads, mkldnn={mkldnn})"

    def to(self, *tensors: torch.Tensor):
        return [t.to(self.device) for t in tensors]

    def timer(self, fn: Callable[[], object]) -> Callable[[], float]:
        """A function returning the time of one fn() in ns. On CUDA, fn is captured
        GRAPH_REPS times in a CUDA graph and the replay is timed with CUDA events, so the
        time is the GPU's (as ours is the kernels'), not the host's launch latency."""
        if self.device.type != "cuda":
            return lambda: _wall_ns(fn)
        for _ in range(3):  # lets cudnn.benchmark pick its algorithm before the capture
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_REPS):
                fn()
        return _replay_timer(graph.replay, torch.cuda.Event)


# Calls recorded in one graph (torch's CUDA graph, the opencl device's graph) per timed replay.
GRAPH_REPS = 20


def _replay_timer(replay: Callable[[], object], event: Callable[..., object]) -> Callable[[], float]:
    """A function returning the time per call of a graph of GRAPH_REPS calls: `event`
    (torch.cuda.Event, torch.opencl.Event) recorded around one replay, on the device's clock."""
    start, end = event(enable_timing=True), event(enable_timing=True)

    def run() -> float:
        start.record()
        replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6 / GRAPH_REPS

    return run


def _wall_ns(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _kernel_ns(fn: Callable[[], object]) -> float:
    fn()
    return opencl_functions.last_kernel_time_ns()


def _max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / (1 + max |ref|): 0 for exact, ~1e-6 for float32 rounding."""
    return float((out - ref).abs().max() / (1 + ref.abs().max()))


def _with_env(name: str, value: str, fn: Callable[[], object]) -> object:
    """fn() with environment variable `name` set to `value` (the host code reads settings when used)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        return fn()
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _tiled_kernel_ns(x: torch.Tensor, w: torch.Tensor, args: Dict) -> float:
    """Kernel time of the tiled kernel through the host code's own launch (OCLF_CONV_KERNEL)."""
    return _with_env("OCLF_CONV_KERNEL", "tiled",
                     lambda: _kernel_ns(lambda: opencl_functions.ocl_conv2d(x, w, None, **args)))


def replayed_timer(fn: Callable[[], object]) -> Callable[[], float]:
    """A function returning the time per call of fn (device tensors inside) recorded
    GRAPH_REPS times in one opencl graph and replayed, by events on the device's queue."""
    import torch_opencl  # noqa: F401  (torch.opencl)

    for _ in range(3):  # first-use work (kernel builds, tuning) before the recording
        fn()
    torch.opencl.synchronize()
    with torch_opencl.graph() as graph:
        for _ in range(GRAPH_REPS):
            fn()
    return _replay_timer(graph.replay, torch.opencl.Event)


FIRST_CALLS: List[tuning.FirstCall] = []  # what each layer's untimed first call did


def _first_call(fn: Callable[[], torch.Tensor]) -> Tuple[torch.Tensor, Dict[str, str]]:
    """Our first call of a layer, untimed (it builds kernels and may tune the shape, announced
    once: tuning.warm_up), and where its configuration came from."""
    out, first = tuning.warm_up(fn, "the benchmark's layers")
    FIRST_CALLS.append(first)
    return out, opencl_functions.last_choice()


def _choice(ours: Callable[[], object], first: Dict[str, str]) -> Dict[str, str]:
    """The configuration of one more call of ours, with the origin the first call reported
    (a shape tuned in this run reads "tuned now", not the cache it went to)."""
    ours()
    last = opencl_functions.last_choice()
    return {"config": last["config"], "origin": first["origin"] if first["config"] else last["origin"]}


def bench_conv(s: ConvShape, torch_runner: TorchRunner, fast: Timer, slow: Timer, replay: bool = False) -> Dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, s.c_in, s.h + 2 * s.padding, s.w + 2 * s.padding, generator=gen)
    w = torch.randn(s.c_out, s.c_in // s.groups, s.k, s.k, generator=gen) / math.sqrt(s.c_in // s.groups * s.k**2)
    args = dict(stride=(s.stride, s.stride), dilation=(s.dilation, s.dilation), groups=s.groups)
    ref = F.conv2d(x, w, None, padding=0, **args)
    # Ours runs as in a patched model: the weight is a parameter, resident on the device.
    param = torch.nn.Parameter(w, requires_grad=False)
    out, first = _first_call(lambda: opencl_functions.ocl_conv2d(x, param, None, **args))
    xd, wd = torch_runner.to(x, w)
    timers = {
        "ours": lambda: _kernel_ns(lambda: opencl_functions.ocl_conv2d(x, param, None, **args)),
        "ours_wall": lambda: _wall_ns(lambda: opencl_functions.ocl_conv2d(x, param, None, **args)),
        "torch": torch_runner.timer(lambda: F.conv2d(xd, wd, None, padding=0, **args)),
    }
    if replay:
        xo, wo = x.to("opencl"), torch.nn.Parameter(w.to("opencl"), requires_grad=False)
        timers["replayed"] = replayed_timer(lambda: F.conv2d(xo, wo, None, padding=0, **args))
    times = fast.all(timers)
    choice = _choice(lambda: opencl_functions.ocl_conv2d(x, param, None, **args), first)
    if s.groups == 1:
        times["convgemm"] = slow(lambda: baselines.clblast_convgemm(x, w, args["stride"], args["dilation"])[1])
    times["naive"] = slow(lambda: baselines.naive_conv2d(x, w, None, **args)[1])
    times["tiled"] = slow(lambda: _tiled_kernel_ns(x, w, args))
    return {"max_rel_error": _max_rel_error(out, ref), "times_ns": times, **choice}


def bench_matmul(s: MatmulShape, torch_runner: TorchRunner, fast: Timer, replay: bool = False) -> Dict:
    """x (M, K) @ W (K, N) with W a resident parameter, as GPT-2's Conv1D layers call it."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(s.m, s.k, generator=gen)
    b = torch.nn.Parameter(torch.randn(s.k, s.n, generator=gen) / math.sqrt(s.k), requires_grad=False)
    out, first = _first_call(lambda: opencl_functions.ocl_matmul(a, b))
    ad, bd = torch_runner.to(a, b.detach())
    clblast = lambda: _with_env("OCLF_MATMUL", "clblast", lambda: _kernel_ns(lambda: opencl_functions.ocl_matmul(a, b)))
    clblast()  # builds CLBlast's kernels outside the timed rounds
    timers = {
        "ours": lambda: _kernel_ns(lambda: opencl_functions.ocl_matmul(a, b)),
        "ours_wall": lambda: _wall_ns(lambda: opencl_functions.ocl_matmul(a, b)),
        "torch": torch_runner.timer(lambda: ad @ bd),
        "clblast": clblast,
    }
    if replay:
        ao, bo = a.to("opencl"), torch.nn.Parameter(b.detach().to("opencl"), requires_grad=False)
        timers["replayed"] = replayed_timer(lambda: ao @ bo)
    times = fast.all(timers)
    choice = _choice(lambda: opencl_functions.ocl_matmul(a, b), first)
    return {"max_rel_error": _max_rel_error(out, a @ b.detach()), "times_ns": times, **choice}


def launch_floor(torch_runner: TorchRunner, fast: Timer) -> Dict[str, float]:
    """The time each side reports for a 1×1·1×1 product, i.e. for a kernel that does nothing:
    what every layer's time includes before any work (OpenCL profiling events on one side, a
    CUDA graph's time per call or a CPU call on the other)."""
    a = torch.ones(1, 1)
    b = torch.nn.Parameter(torch.ones(1, 1), requires_grad=False)
    opencl_functions.ocl_matmul(a, b)
    ad, bd = torch_runner.to(a, b.detach())
    return fast.all({
        "ours": lambda: _kernel_ns(lambda: opencl_functions.ocl_matmul(a, b)),
        "torch": torch_runner.timer(lambda: ad @ bd),
    })


def geomean_ratios(rows: List[Dict]) -> Dict[str, Optional[float]]:
    """Geometric mean over rows of times[num] / times[den] for each pair in RATIOS."""
    result: Dict[str, Optional[float]] = {}
    for num, den in RATIOS:
        logs = [math.log(r["times_ns"][num] / r["times_ns"][den]) for r in rows
                if r["times_ns"].get(num) and r["times_ns"].get(den)]
        result[f"{num}/{den}"] = math.exp(sum(logs) / len(logs)) if logs else None
    return result


def print_table(title: str, rows: List[Dict]) -> None:
    print(f"\n{title}  (GFLOP/s; ours = kernel time, ours_wall = with transfers; our configuration and its origin)")
    header = f"{'layer':<16}{'shape':<30}" + "".join(f"{m:>10}" for m in METHODS) + f"{'err':>9}  config (origin)"
    print(header)
    for r in rows:
        cells = ""
        for m in METHODS:
            t = r["times_ns"].get(m)
            cells += f"{r['flops'] / t:>10.1f}" if t else f"{'-':>10}"
        config = f"{r['config']} ({r['origin']})" if r.get("config") else "-"
        print(f"{r['name']:<16}{r['label']:<30}{cells}{r['max_rel_error']:>9.1e}  {config}")


def print_yours(rows: List[Dict]) -> None:
    """The rows in the terms of the assignment: your conv2d's whole call and its kernel,
    the naive kernel and torch, in ms, and your speed-ups."""
    if not rows:
        return
    print("\nYour conv2d (ms): the whole call (host code, copies, kernel) and its kernel alone; the naive kernel "
          "and torch")
    print(f"{'layer':<18}{'yours, call':>12}{'kernel':>10}{'naive':>10}{'torch':>10}{'vs naive':>10}{'vs torch':>10}")
    for r in rows:
        t = r["times_ns"]
        print(f"{r['name']:<18}{t['ours_wall'] / 1e6:12.3f}{t['ours'] / 1e6:10.3f}{t['naive'] / 1e6:10.3f}"
              f"{t['torch'] / 1e6:10.3f}{t['naive'] / t['ours_wall']:9.1f}×{t['torch'] / t['ours_wall']:9.2f}×")
    print("vs naive: the naive kernel's time over your whole call (the grader's ladder starts there); "
          "a call much slower than its kernel spends its time in host code and copies.")


def plot(groups: Dict[str, List[Dict]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 4.5 * len(groups)), squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], groups.items()):
        width = 0.8 / len(METHODS)
        for i, m in enumerate(METHODS):
            xs = [j + i * width for j, r in enumerate(rows) if r["times_ns"].get(m)]
            ys = [r["flops"] / r["times_ns"][m] for r in rows if r["times_ns"].get(m)]
            if xs:
                ax.bar(xs, ys, width, label=m)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels([r["name"] for r in rows], rotation=60, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(name)
        ax.legend(fontsize=8, ncol=len(METHODS))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for bench.json and bench.png")
    parser.add_argument("--quick", action="store_true", help="a few shapes, few repeats (for tests)")
    parser.add_argument("--torch-device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where torch's reference runs (auto: CUDA when available)")
    parser.add_argument("--stat", choices=["min", "median"], default="min",
                        help="what counts of each layer's timed runs (default: the fastest)")
    parser.add_argument("--only", choices=["resnet50", "depthwise", "gpt2", "graded"], action="append",
                        help="bench only these groups (repeatable; default: all but graded)")
    parser.add_argument("--layer", action="append",
                        help="bench only the layers whose name holds this text (repeatable; see bench/shapes.py)")
    parser.add_argument("--replay", action="store_true",
                        help="also time each layer on the opencl device, recorded and replayed (column 'replayed')")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for torch and PoCL (0: their defaults); set before OpenCL starts")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    FIRST_CALLS.clear()
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(args.threads)  # PoCL 3.x
        os.environ["POCL_CPU_MAX_CU_NUM"] = str(args.threads)  # later PoCL

    if args.replay:
        importlib.import_module("torch_opencl")  # registers the opencl device
    torch_device = args.torch_device
    if torch_device == "auto":
        torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    runner = TorchRunner(torch_device)
    if args.quick:
        fast, slow = Timer(1, 2, 3, 0.0, args.stat), Timer(1, 1, 1, 0.0, args.stat)
        conv_shapes, dw_shapes, mm_shapes = QUICK_CONV, QUICK_DEPTHWISE, QUICK_GPT2
    else:
        fast, slow = Timer(2, 5, 20, 0.6, args.stat), Timer(1, 3, 5, 0.2, args.stat)
        conv_shapes, dw_shapes, mm_shapes = RESNET50, DEPTHWISE, GPT2

    wanted = args.only or (["resnet50", "depthwise", "gpt2", "graded"] if args.layer else
                           ["resnet50", "depthwise", "gpt2"])
    if args.layer:  # every shape of the groups, not the quick subset
        conv_shapes, dw_shapes, mm_shapes = RESNET50, DEPTHWISE, GPT2
    work = [("resnet50", s) for s in conv_shapes] + [("depthwise", s) for s in dw_shapes]
    work += [("gpt2", s) for s in mm_shapes] + [("graded", s) for s in GRADED]
    work = [(group, s) for group, s in work if group in wanted]
    if args.layer:
        work = [(group, s) for group, s in work if any(text in s.name for text in args.layer)]
        if not work:
            parser.error(f"--layer {args.layer}: no layer of {wanted} has such a name (see bench/shapes.py)")
    groups: Dict[str, List[Dict]] = {name: [] for name in ["resnet50", "depthwise", "gpt2", "graded"]
                                     if any(group == name for group, _ in work)}
    for group, s in tqdm(work, desc="bench", unit="layer", disable=None):  # no bar when not on a terminal
        if isinstance(s, ConvShape):
            row = bench_conv(s, runner, fast, slow, args.replay)
        else:
            row = bench_matmul(s, runner, fast, args.replay)
        row.update(name=s.name, label=s.label(), flops=s.flops, shape=vars(s))
        groups[group].append(row)

    info = opencl_functions.device_info()
    floor = launch_floor(runner, fast)
    result = {
        "device": info,
        "torch": runner.describe(),
        "host_cpu": host_cpu(),
        "date": datetime.date.today().isoformat(),
        "quick": args.quick,
        "stat": args.stat,
        "launch_floor_ns": floor,
        "groups": groups,
        "geomean": {name: geomean_ratios(rows) for name, rows in groups.items()},
        "first_calls": {"seconds": sum(f.seconds for f in FIRST_CALLS),
                        "tuning_seconds": sum(f.tuning_s for f in FIRST_CALLS)},
    }
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    title = f"{info['device']} ({info['platform']}) vs {result['torch']}"
    plot(groups, os.path.join(args.out, "bench.png"), title)

    print(f"\nOpenCL: {title}")
    print(f"Host CPU: {result['host_cpu']}")
    print(f"Launch floor (a 1x1 product, no work): ours {floor['ours'] / 1e3:.2f} us, "
          f"torch {floor['torch'] / 1e3:.2f} us; a layer cannot take less")
    for name, rows in groups.items():
        print_table(name, rows)
    if "graded" in groups or args.layer:
        print_yours([row for rows in groups.values() for row in rows if "naive" in row["times_ns"]])
    print(f"\nFirst calls, untimed, before each layer's rounds: {result['first_calls']['seconds']:.1f} s, of which "
          f"tuning {result['first_calls']['tuning_seconds']:.1f} s (at most {tuning.budget():g} s a process, "
          f"OCLF_TUNE_BUDGET); the times above leave them out")
    print("\nGeometric means of time ratios (>1: the denominator is faster)")
    for name, ratios in result["geomean"].items():
        text = ", ".join(f"{k} {v:.3g}" for k, v in ratios.items() if v is not None)
        print(f"  {name}: {text}")
    return result


if __name__ == "__main__":
    main()
