"""What one small operator costs the host on the opencl device: microseconds per op for a
fixed list of small ops (16-element tensors and their like), ours against torch on the CPU
(and on CUDA where torch has it), beside what clEnqueueNDRangeKernel alone costs, so that
the table shows the host's work over the enqueue itself.

Each op runs `--number` times back to back and the device is synchronized once after them
(the queue runs asynchronously, as in a model's forward pass); the time per op is that span
over the count, nothing subtracted. Rounds alternate the devices, so a busy machine slows
each alike; the fastest round counts (`--stat median`: the median). "enqueue" is
torch.ops.oclf.enqueue_cost: the elementwise kernel on 16 floats with its arguments set once,
enqueued as often; "over enqueue" is ours less the enqueue call alone. "issue" is the span
before the wait over the count: the time the program itself spends per op. With the device's
submission thread (on for GPUs: OCLF_DEVICE_ASYNC) the enqueue runs on that thread, so
"issue" leaves it out while "ours" is bound by the slower of the two threads.

    python -m bench.ops [--quick] [--json FILE] [--op NAME ...] [--number N] [--rounds R]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

import opencl_functions
from opencl_functions.info import host_cpu

# An op maker takes a device ("opencl", "cpu", "cuda") and returns the op to time there.
Maker = Callable[[str], Callable[[], object]]


def _inputs(device: str) -> Dict[str, torch.Tensor]:
    """The tensors the ops read: 16 floats (x, y), a 4x4 matrix, a small batch for linear
    and conv2d, and indices; the same values on every device."""
    g = torch.Generator().manual_seed(0)
    host = {
        "x": torch.randn(16, generator=g), "y": torch.randn(16, generator=g),
        "m": torch.randn(4, 4, generator=g),
        "a": torch.randn(4, 16, generator=g), "w": torch.randn(8, 16, generator=g), "b": torch.randn(8, generator=g),
        "img": torch.randn(1, 2, 5, 5, generator=g), "k": torch.randn(3, 2, 3, 3, generator=g),
        "idx": torch.tensor([3, 0, 7, 7, 15]),
    }
    return {name: t.to(device) for name, t in host.items()}


def _op(body: Callable[[Dict[str, torch.Tensor]], object]) -> Maker:
    def make(device: str) -> Callable[[], object]:
        t = _inputs(device)
        return lambda: body(t)
    return make


def _copy_from_host(device: str) -> Callable[[], object]:
    host = torch.randn(16)
    dest = torch.empty(16, device=device)
    return lambda: dest.copy_(host)


def _empty(device: str) -> Callable[[], object]:
    return lambda: torch.empty(16, device=device)


# The ops, in table order: name -> maker.
OPS: Dict[str, Maker] = {
    "add": _op(lambda t: t["x"] + t["y"]),
    "add_ scalar": _op(lambda t: t["x"].add_(1)),
    "mul": _op(lambda t: t["x"] * t["y"]),
    "relu": _op(lambda t: torch.relu(t["x"])),
    "relu_": _op(lambda t: t["y"].relu_()),
    "sigmoid": _op(lambda t: torch.sigmoid(t["x"])),
    "sum": _op(lambda t: t["x"].sum()),
    "mean(dim=1)": _op(lambda t: t["m"].mean(1)),
    "view+contiguous": _op(lambda t: t["x"].view(4, 4).t().contiguous()),
    "cat of two": _op(lambda t: torch.cat([t["x"], t["y"]])),
    "linear 4x16x8": _op(lambda t: F.linear(t["a"], t["w"], t["b"])),
    "softmax 4x4": _op(lambda t: torch.softmax(t["m"], 1)),
    "conv2d 1x2x5x5": _op(lambda t: F.conv2d(t["img"], t["k"], padding=1)),
    "index_select": _op(lambda t: t["x"].index_select(0, t["idx"])),
    "copy_ host->device": _copy_from_host,
    "empty": _empty,
}


def _synchronizer(device: str) -> Callable[[], None]:
    if device == "opencl":
        return torch.opencl.synchronize
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def _round(op: Callable[[], object], sync: Callable[[], None], number: int) -> tuple[float, float]:
    """Seconds per op of `number` ops back to back and one wait for the device, and of the
    same span before the wait (what the program spends issuing them)."""
    sync()
    start = time.perf_counter()
    for _ in range(number):
        op()
    issued = time.perf_counter()
    sync()
    return (time.perf_counter() - start) / number, (issued - start) / number


def enqueue_cost(number: int, rounds: int, stat: Callable[[List[float]], float]) -> Dict[str, float]:
    """Nanoseconds of clEnqueueNDRangeKernel alone per launch, per launch with the wait for
    all of them (the queue's own floor), and per clSetKernelArg, on the current opencl device;
    then per call and per launch with the wait on a queue made without profiling."""
    out = torch.empty(16, device="opencl")
    out.fill_(0)  # builds the kernel
    runs = [torch.ops.oclf.enqueue_cost(out, number) for _ in range(rounds)]
    return {"call": stat([r[0] for r in runs]), "with_wait": stat([r[1] for r in runs]),
            "set_arg": stat([r[2] for r in runs]), "call_without_profiling": stat([r[3] for r in runs]),
            "with_wait_without_profiling": stat([r[4] for r in runs])}


def measure(names: List[str], devices: List[str], number: int, rounds: int,
            stat: Callable[[List[float]], float]) -> Dict[str, Dict[str, float]]:
    """Microseconds per op of each named op on each device."""
    results: Dict[str, Dict[str, float]] = {}
    for name in names:
        ops = {device: OPS[name](device) for device in devices}
        syncs = {device: _synchronizer(device) for device in devices}
        for device in devices:  # first calls build kernels and fill caches
            for _ in range(3):
                ops[device]()
            syncs[device]()
        times: Dict[str, List[float]] = {device: [] for device in devices}
        issue: Dict[str, List[float]] = {device: [] for device in devices}
        for _ in range(rounds):
            for device in devices:
                total, issued = _round(ops[device], syncs[device], number)
                times[device].append(total)
                issue[device].append(issued)
        results[name] = {device: stat(seconds) * 1e6 for device, seconds in times.items()}
        results[name].update({f"{device} issue": stat(seconds) * 1e6 for device, seconds in issue.items()
                              if device != "cpu"})
    return results


def print_table(result: Dict) -> None:
    enqueue_us = result["enqueue_ns"]["call"] / 1e3
    devices = result["devices"]
    print(f"host CPU: {result['host_cpu']}")
    print(f"OpenCL: {result['device']['device']} ({result['device']['platform']}), torch {result['torch']}")
    print(f"{result['number']} ops per round, {result['rounds']} rounds, the {result['stat']} round; microseconds per op; "
          f"submission thread {'on' if result.get('submits_async') else 'off'}")
    print(f"enqueue only (clEnqueueNDRangeKernel, 16 floats): {enqueue_us:.2f} us a call, "
          f"{result['enqueue_ns']['with_wait'] / 1e3:.2f} us a launch with the wait; "
          f"clSetKernelArg {result['enqueue_ns']['set_arg'] / 1e3:.3f} us a call; "
          f"{result['enqueue_ns']['call_without_profiling'] / 1e3:.2f} us a call and "
          f"{result['enqueue_ns']['with_wait_without_profiling'] / 1e3:.2f} us a launch with the wait "
          "on a queue without profiling")
    others = [d for d in devices if d != "opencl"]
    gpus = [d for d in others if d != "cpu"]
    header = f"{'op':<20} {'ours':>8} {'over enqueue':>13} {'issue':>8}" + "".join(f" {d:>8}" for d in others)
    header += "".join(f" {d + ' issue':>11}" for d in gpus) + "".join(f" {'ours/' + d:>11}" for d in others)
    print(header)
    print("-" * len(header))
    for name, row in result["ops"].items():
        line = f"{name:<20} {row['opencl']:>8.2f} {row['opencl'] - enqueue_us:>13.2f} {row['opencl issue']:>8.2f}"
        line += "".join(f" {row[d]:>8.2f}" for d in others)
        line += "".join(f" {row[d + ' issue']:>11.2f}" for d in gpus)
        line += "".join(f" {row['opencl'] / row[d]:>11.1f}" for d in others)
        print(line)


def main(argv: Optional[List[str]] = None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few ops per round, two rounds (for tests)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    parser.add_argument("--op", action="append", choices=list(OPS), help="time only these ops (repeatable)")
    parser.add_argument("--number", type=int, help="ops per round (default 1000; --quick 20)")
    parser.add_argument("--rounds", type=int, help="rounds per op and device (default 5; --quick 2)")
    parser.add_argument("--stat", choices=["min", "median"], default="min",
                        help="which round counts (default: the fastest)")
    args = parser.parse_args(argv)
    import torch_opencl  # noqa: F401  (registers the device)

    number = args.number or (20 if args.quick else 1000)
    rounds = args.rounds or (2 if args.quick else 5)
    stat = min if args.stat == "min" else statistics.median
    devices = ["opencl", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = args.op or list(OPS)
    ops = measure(names, devices, number, rounds, stat)
    result = {
        "host_cpu": host_cpu(),
        "device": opencl_functions.device_info(),
        "torch": torch.__version__,
        "devices": devices,
        "number": number,
        "rounds": rounds,
        "stat": args.stat,
        "enqueue_ns": enqueue_cost(number, rounds, stat),
        "submits_async": bool(torch.ops.oclf.submits_async(torch.opencl.current_device())),
        "ops": ops,
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
