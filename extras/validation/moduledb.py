"""torch's ModuleInfo database (module_db) on the `opencl` device, in child processes a crash
cannot hide in.

    python -m extras.validation.moduledb                         every module, at most DEFAULT_MAX_SAMPLES
                                                     samples each, spread over its list
    python -m extras.validation.moduledb --all                   every float32 training sample
    python -m extras.validation.moduledb --modules nn.LSTM -v    named modules, each sample's verdict printed

Each float32 training sample of a module (ModuleInfo's module_inputs_func with
requires_grad=True, training=True) builds the module on the CPU and a copy of it on the
device (a lazy module is moved uninitialised and materialises its parameters on the device
at its first call, as on the CPU), runs the forward pass on both, then the backward pass of
sum(output · R) for a fixed random R. One verdict per sample covers the outputs, the
gradients of the inputs and of every parameter, and the buffers after the call (batch
norm's running statistics):

    right      all of them match the CPU's (extras.validation.opdb_child's comparison: float32 tolerances, and
               on a miss the float64 module decides: the device within a few times the
               CPU's own error against it)
    refused    the device raised a Python exception the CPU did not
    wrong      a result differs, or has another shape, dtype, or a gradient where the CPU
               has none
    crashed    the process died while running it
    hung       it ran past the time limit

A run is "native" when no operator went through the CPU fallback. Children run with
OCLF_FALLBACK=silent (the fallback is allowed, wrong answers are not); the parent side
(chunks, children, resuming after the sample that killed one) is extras.validation.opdb's.
"""
from __future__ import annotations

import argparse
import collections
import copy
import json
import sys
import zlib
from pathlib import Path
from typing import List, Optional, Tuple

from extras.validation import opdb, opdb_child

# The default part: this many samples of each module, spread over its list (CrossEntropyLoss
# and its linear variant have hundreds); every module runs at least one.
DEFAULT_MAX_SAMPLES = 3
# How opdb's parent starts this module's children.
CHILD = ("extras.validation.moduledb", "--child")


def modules() -> list:
    """module_db entries that take float32."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch's test helpers warn about optional test packages
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_modules import module_db

    return [info for info in module_db if torch.float32 in info.dtypes]


def _samples(info) -> list:
    import torch

    torch.manual_seed(zlib.crc32(info.name.encode()))
    return list(info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True))


# ---------------------------------------------------------------------------------------------
# One sample: the module's forward and backward pass on one device and dtype.

def _moved(value, device: str, dtype=None):
    """value's tensors copied to device (floating ones to dtype too), keeping requires_grad."""
    import torch
    from torch.utils._pytree import tree_map

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        out = t.detach().to(device, copy=True)
        if dtype is not None and out.is_floating_point():
            out = out.to(dtype)
        return out.requires_grad_(t.requires_grad)

    return tree_map(move, value)


def _tensors(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _is_lazy(module) -> bool:
    import torch

    return isinstance(module, torch.nn.modules.lazy.LazyModuleMixin)


def _build(info, sample, dtype):
    """The module of a sample on the CPU, seeded by its class name, its constructor's floating
    tensors in dtype (FractionalMaxPool's samples come as float64); a lazy one is returned
    uninitialised."""
    import torch

    torch.manual_seed(zlib.crc32(info.name.encode()) + 1)
    args, kwargs = _moved((sample.constructor_input.args, sample.constructor_input.kwargs), "cpu", dtype)
    return info.module_cls(*args, **kwargs).to(dtype).train()


def evaluate(module, sample, device: str, dtype) -> list:
    """[outputs..., gradients of the inputs and parameters..., buffers...] of one training
    call of `module` (already on `device` and in `dtype`) on the sample's forward input,
    backward through sum(output · R) with R fixed; a missing gradient is the string
    "no gradient"."""
    import torch

    args, kwargs = _moved((sample.forward_input.args, sample.forward_input.kwargs), device, dtype)
    torch.manual_seed(7)  # random operators (FractionalMaxPool) draw alike on both devices
    out = module(*args, **kwargs)
    outputs = _tensors(out)
    wrt = [t for t in _tensors((args, kwargs)) if t.requires_grad] + [p for p in module.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(11)
    loss = None
    for o in outputs:
        if o.requires_grad and o.is_floating_point():
            r = torch.randn(o.shape, generator=generator).to(device, o.dtype)
            term = (o * r).sum()
            loss = term if loss is None else loss + term
    grads = [None] * len(wrt)
    if loss is not None and wrt:
        grads = list(torch.autograd.grad(loss, wrt, allow_unused=True))
    grads = ["no gradient" if g is None else g for g in grads]
    buffers = [b for b in module.buffers()]
    return [o.detach() for o in outputs] + grads + [b.detach() for b in buffers]


def run_one(info, sample) -> Tuple[str, bool, str]:
    """(verdict, native, detail) of one sample."""
    import torch
    import torch_opencl as device

    try:
        cpu = _build(info, sample, torch.float32)
        lazy = _is_lazy(cpu)
        moved = copy.deepcopy(cpu)  # a lazy module still uninitialised
        if lazy:
            with torch.no_grad():  # materialise the CPU module's parameters, kept for the device
                args, kwargs = _moved((sample.forward_input.args, sample.forward_input.kwargs), "cpu")
                cpu(*args, **kwargs)
        initial = copy.deepcopy(cpu.state_dict())
        expected = evaluate(cpu, sample, "cpu", torch.float32)
    except Exception as error:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
        return "skip", True, f"the CPU raises {type(error).__name__}"

    device.reset_fallback_ops()
    try:
        module = moved.to("opencl")
        if lazy:
            with torch.no_grad():  # parameters materialise on the device, then take the CPU's values
                args, kwargs = _moved((sample.forward_input.args, sample.forward_input.kwargs), "opencl")
                module(*args, **kwargs)
        module.load_state_dict(initial)
        got = evaluate(module, sample, "opencl", torch.float32)
        torch.opencl.synchronize()
    except Exception as error:  # noqa: BLE001  (any Python exception is a refusal, and is recorded)
        return opdb_child.refusal(error)
    native = not device.fallback_ops()
    detail = ",".join(sorted(device.fallback_ops()))

    def rerun64():
        module64 = _build(info, sample, torch.float64)
        if lazy:
            with torch.no_grad():
                args, kwargs = _moved((sample.forward_input.args, sample.forward_input.kwargs), "cpu", torch.float64)
                module64(*args, **kwargs)
        module64.load_state_dict(initial)
        return evaluate(module64.to(torch.float64), sample, "cpu", torch.float64)

    problem = opdb_child._compare(got, expected, rerun64)
    if problem:
        return "wrong", native, problem
    return "right", native, detail


# ---------------------------------------------------------------------------------------------
# The child: the samples of some modules, one log line before each and one after, in the
# event format of extras.validation.opdb's parent.

def child(keys: List[str], log: Path, resume: Optional[Tuple[int, int, int]], crash_at: str = "",
          max_samples: int = 0) -> None:
    """Runs the named modules' samples (opdb_child.run_logged), each in one variant, "train"."""
    by_name = {info.name: info for info in modules()}
    opdb_child.run_logged(keys, log, resume, crash_at, max_samples, by_name.__getitem__, _samples,
                          lambda info: ["train"], lambda info, variant, sample: run_one(info, sample))


# ---------------------------------------------------------------------------------------------
# The parent: extras.validation.opdb's chunks and children, with this module's children.

def run(keys: List[str], jobs: int = 2, max_samples: int = 0, verbose: bool = False) -> opdb.Report:
    """Runs the named modules (ModuleInfo names, "nn.LSTM"), `jobs` children at a time, at most
    `max_samples` samples each (0: all)."""
    return opdb.run(keys, jobs=jobs, max_samples=max_samples, verbose=verbose, child=CHILD)


def run_chunk(keys: List[str], crash_at: str = "", max_samples: int = 0) -> List[opdb.Record]:
    return opdb.run_chunk(keys, crash_at=crash_at, max_samples=max_samples, child=CHILD)


def summary(report: opdb.Report) -> str:
    c = report.counts()
    natives = sum(1 for r in report.records if r.verdict == "right" and r.native)
    lines = [
        f"module_db on opencl: {len(report.ops())} modules, {sum(c.values())} samples in {report.seconds:.0f} s",
        "  " + ", ".join(f"{v} {c[v]}" for v in opdb.VERDICTS if v != "unchecked"),
        f"  native (no CPU fallback) among the right: {natives}/{c['right']}",
    ]
    fallbacks = collections.Counter(op for r in report.records if r.verdict == "right" and r.detail
                                    for op in r.detail.split(","))
    if fallbacks:
        lines.append("  through the CPU fallback (samples): " +
                     ", ".join(f"{k} {n}" for k, n in fallbacks.most_common()))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extras.validation.moduledb", description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every float32 training sample")
    parser.add_argument("--modules", help="comma-separated ModuleInfo names (nn.LSTM,nn.Conv3d)")
    parser.add_argument("--jobs", type=int, default=2, help="children at a time")
    parser.add_argument("--json", help="write the counts and per-module verdicts here")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    parser.add_argument("--crash-at", default="", help=argparse.SUPPRESS)
    parser.add_argument("--max-samples", type=int, default=None,
                        help=f"samples per module (default: {DEFAULT_MAX_SAMPLES}, all with --all or --modules; "
                             "0: all)")
    args = parser.parse_args(argv)

    if args.child:
        resume = tuple(int(x) for x in args.resume.split(",")) if args.resume else None
        child(args.keys.split(","), Path(args.log), resume, args.crash_at, args.max_samples or 0)
        return 0

    names = [info.name for info in modules()]
    if args.modules:
        wanted = args.modules.split(",")
        names = [n for n in names if n in wanted or n.split(".", 1)[-1] in wanted]
    whole = args.all or args.modules
    most = args.max_samples if args.max_samples is not None else 0 if whole else DEFAULT_MAX_SAMPLES
    report = run(names, jobs=args.jobs, max_samples=most, verbose=args.verbose)
    print(summary(report))
    for r in report.records:
        if r.verdict in ("refused", "wrong", "crashed", "hung"):
            print(f"  {r.verdict}: {r.op} sample {r.sample}: {r.detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json("module_db"), indent=1) + "\n")
    return 1 if any(r.verdict in ("refused", "wrong", "crashed", "hung") for r in report.records) else 0


if __name__ == "__main__":
    sys.exit(main())
