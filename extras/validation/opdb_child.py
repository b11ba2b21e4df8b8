"""One child of the op_db run (extras.validation.opdb): runs the samples of some ops on the CPU
and on the opencl device, one JSON line in a log before each run ("start") and one after
("done"), so that the parent can name the run a crash or a hang stopped at and resume after it.

    python -m extras.validation.opdb_child --log F --keys abs,neg [--resume O,S,V]

Every float32 sample of an op (OpInfo's sample_inputs) runs on the CPU and, moved to the
device, on `opencl`; the function, its in-place variant and its out= form where OpInfo lists
them. Each run ends in one verdict (the parent adds crashed and hung):

    right      the device's result matches the CPU's (assert_close with float32 tolerances; on a
               miss, within a few times the CPU's own error against a float64 reference)
    refused    the device raised a Python exception the CPU did not (the op is refused, clearly)
    wrong      a result differs from the CPU's, or has another shape or dtype
    unchecked  OpInfo says the output cannot be compared (random, undefined): it ran, and its
               shapes and dtypes match the CPU's

A run is "native" when no operator went through the CPU fallback (fallback_ops()).
"""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from extras.validation.opdb import float32_ops, op_key

# float32 results: torch's assert_close defaults for float32 are 1.3e-6 / 1e-5; kernels that
# sum in another order (reductions, products) get a float64 second opinion instead of wider ones.
ATOL, RTOL = 1e-5, 1.3e-6
# A miss passes when the device is no further from the float64 result than this many times
# the CPU's float32 result (plus a small floor), i.e. as accurate as float32 arithmetic allows.
DRIFT_FACTOR, DRIFT_ATOL, DRIFT_RTOL = 4.0, 1e-5, 1e-4


# Ops whose values come from the device's generator (torch.Generator(device="opencl")), which
# draws other numbers than the CPU's for one seed, as CUDA's does; OpInfo skips their CPU
# comparison on CUDA by its own list, which names no other backend.
DEVICE_RANDOM = {"randn", "randn_like", "rand_like", "randint", "randint_like", "nn.functional.alpha_dropout",
                 "nn.functional.feature_alpha_dropout"}


def _not_comparable(op) -> Optional[str]:
    """OpInfo's own word that the CPU and another device cannot be compared for float32:
    a skip of TestCommon.test_compare_cpu (random outputs, undefined results)."""
    import torch
    import unittest

    for info in getattr(op, "decorators", ()):
        if not hasattr(info, "is_active"):
            continue
        if not info.is_active("TestCommon", "test_compare_cpu", "privateuse1", torch.float32, {}):
            continue
        for decorator in info.decorators:
            if decorator is unittest.expectedFailure:
                continue
            cells = [c.cell_contents for c in (getattr(decorator, "__closure__", None) or ())]
            reason = next((c for c in cells if isinstance(c, str)), "skipped")
            return reason
    if getattr(op, "is_factory_function", False) and op.name.startswith(("empty", "new_empty")):
        return "uninitialised output"
    if op.name in DEVICE_RANDOM:
        return "random: drawn from the device's own generator, as on CUDA"
    return None


def _samples(op) -> list:
    import torch

    torch.manual_seed(zlib.crc32(op_key(op).encode()))
    return list(op.sample_inputs("cpu", torch.float32, requires_grad=False))


def _tensors(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _compare(device_value, cpu_value, rerun64=None, atol: float = ATOL, rtol: float = RTOL,
             drift_rtol: float = DRIFT_RTOL) -> Optional[str]:
    """None when the results agree, else what differs: within atol + rtol·|CPU|, or else (floating
    results) no further from the float64 result than DRIFT_FACTOR times the CPU's own error, plus
    DRIFT_ATOL + drift_rtol·|float64| (wider tolerances for 16-bit dtypes come from the caller)."""
    import torch
    from torch.utils._pytree import tree_flatten

    dev_leaves, dev_spec = tree_flatten(device_value)
    cpu_leaves, cpu_spec = tree_flatten(cpu_value)
    if len(dev_leaves) != len(cpu_leaves):
        return f"{len(dev_leaves)} results, the CPU gives {len(cpu_leaves)}"
    ref64 = None
    for i, (d, c) in enumerate(zip(dev_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor) != isinstance(d, torch.Tensor):
            return f"result {i}: {type(d).__name__}, the CPU gives {type(c).__name__}"
        if not isinstance(c, torch.Tensor):
            if d != c and not (isinstance(c, float) and c != c and d != d):
                return f"result {i}: {d!r}, the CPU gives {c!r}"
            continue
        d = d.detach().cpu()
        c = c.detach()
        if d.shape != c.shape or d.dtype != c.dtype:
            return f"result {i}: {d.dtype}{list(d.shape)}, the CPU gives {c.dtype}{list(c.shape)}"
        try:
            torch.testing.assert_close(d, c, atol=atol, rtol=rtol, equal_nan=True, check_stride=False)
            continue
        except AssertionError as miss:
            first = str(miss).strip().splitlines()
        if not c.is_floating_point() or rerun64 is None:
            return f"result {i}: " + " ".join(first[:4])
        if ref64 is None:
            try:
                ref64 = tree_flatten(rerun64())[0]
            except Exception:  # noqa: BLE001  (no float64 form of this sample)
                return f"result {i}: " + " ".join(first[:4])
        r = ref64[i].detach().to(torch.float64)
        both_nan = torch.isnan(d) & torch.isnan(c)
        d64, c64 = d.to(torch.float64).masked_fill(both_nan, 0), c.to(torch.float64).masked_fill(both_nan, 0)
        r = r.masked_fill(both_nan, 0)
        same_inf = torch.isinf(d64) & (d64 == c64)
        err_dev = (d64 - r).abs().masked_fill(same_inf, 0)
        err_cpu = (c64 - r).abs().masked_fill(same_inf, 0)
        bound = DRIFT_FACTOR * err_cpu + DRIFT_ATOL + drift_rtol * r.abs().masked_fill(same_inf, 0)
        if not bool((err_dev <= bound).all()):
            worst = int((err_dev - bound).argmax())
            return (f"result {i}: at flat index {worst} the device gives {d.flatten()[worst].item()!r}, "
                    f"the CPU {c.flatten()[worst].item()!r}, float64 {r.flatten()[worst].item()!r}")
    return None


def _variants(op) -> List[str]:
    out = ["fn"]
    if op.inplace_variant is not None:
        out.append("inplace")
    if op.supports_out:
        out.append("out")
    return out


def _call(op, variant: str, sample, out=None):
    if variant == "inplace":
        return op.inplace_variant(sample.input, *sample.args, **sample.kwargs)
    if variant == "out":
        return op(sample.input, *sample.args, **sample.kwargs, out=out)
    return op(sample.input, *sample.args, **sample.kwargs)


def _on_device(sample):
    """The sample with a factory's `device` argument pointing at the device too."""
    import torch

    if "device" in sample.kwargs:
        sample.kwargs = dict(sample.kwargs, device=torch.device("opencl"))
    return sample


class _Reached:
    """The aten operators a call dispatches (as the device's registrations name them, e.g.
    "sum.dim_IntList"), kept in `names`: a TorchDispatchMode, which sees the operators that
    reach the backend, after torch's composite ones have decomposed."""

    def __init__(self, names: set):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.names = names

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                names.add(func.name().split("::", 1)[-1] if func.namespace == "aten" else func.name())
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def run_one(op, variant: str, sample, reached: Optional[set] = None) -> Tuple[str, bool, str]:
    """(verdict, native, detail) of one variant of one sample; `reached` gets the aten
    operators its device call dispatched."""
    import torch
    import torch_opencl as device

    def to(where, dtype=None):
        def move(t):
            if isinstance(t, torch.dtype):
                return t
            t = t.detach().to(where, copy=True)
            return t.to(dtype) if dtype is not None and t.is_floating_point() else t
        return move

    if variant == "inplace" and sample.broadcasts_input:
        return "skip", True, "the in-place form cannot broadcast its input"
    cpu_sample = sample.transform(to("cpu"))
    try:
        if variant == "out":
            plain = _call(op, "fn", sample.transform(to("cpu")))
            if not isinstance(plain, torch.Tensor):
                return "skip", True, "out= checked for single-tensor results"
            cpu_out = torch.empty_like(plain)
            expected = _call(op, "out", cpu_sample, cpu_out)
            if _compare(expected, plain) is not None:
                # fft.ihfft2 and fft.ihfftn leave out= unwritten on every device (their last
                # step, at::conj_physical_out(tmp, out), writes into the temporary)
                return "skip", True, "torch's out= form differs from its function form on the CPU"
        else:
            expected = _call(op, variant, cpu_sample)
    except Exception as error:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
        return "skip", True, f"the CPU raises {type(error).__name__}"

    dev_sample = _on_device(sample.transform(to("opencl")))
    device.reset_fallback_ops()
    reached = _Reached(set() if reached is None else reached)
    try:
        if variant == "out":
            # Judged as called plainly: under a TorchDispatchMode (how `reached` watches) torch
            # runs some composite out= forms (linalg.matrix_rank, fft.ihfftn) through their
            # functional form and never fills `out`, on the CPU's fallback path too. The
            # operators reached are then taken from a second call, watched.
            dev_out = torch.empty(cpu_out.shape, dtype=cpu_out.dtype, device="opencl")
            got = _call(op, "out", dev_sample, dev_out)
            if got is not dev_out and got.data_ptr() != dev_out.data_ptr():
                return "wrong", not device.fallback_ops(), "out= returned another tensor than out"
            with reached:
                _call(op, "out", _on_device(sample.transform(to("opencl"))),
                      torch.empty(cpu_out.shape, dtype=cpu_out.dtype, device="opencl"))
        else:
            with reached:
                got = _call(op, variant, dev_sample)
        torch.opencl.synchronize()
    except Exception as error:  # noqa: BLE001  (any Python exception is a refusal, and is recorded)
        return refusal(error)
    native = not device.fallback_ops()
    detail = ",".join(sorted(device.fallback_ops()))

    reason = _not_comparable(op)
    if reason is not None:
        shapes = [(t.shape, t.dtype) for t in _tensors(got)]
        if shapes != [(t.shape, t.dtype) for t in _tensors(expected)]:
            return "wrong", native, f"shapes or dtypes differ ({reason})"
        return "unchecked", native, reason

    def rerun64():
        s64 = sample.transform(to("cpu", torch.float64))
        if variant == "out":
            return _call(op, "fn", s64)
        result = _call(op, variant, s64)
        return (result, s64.input) if variant == "inplace" else result

    if variant == "inplace":
        got, expected = (got, dev_sample.input), (expected, cpu_sample.input)
    problem = _compare(got, expected, rerun64)
    if problem is None and variant != "inplace":
        # Inputs the op must not change (an out-of-place op writing into its input is wrong).
        problem = _compare(_tensors((dev_sample.input, dev_sample.args, dev_sample.kwargs)),
                           _tensors((cpu_sample.input, cpu_sample.args, cpu_sample.kwargs)))
        problem = problem and f"changed an input: {problem}"
    if problem:
        return "wrong", native, problem
    return "right", native, detail


def refusal(error: Exception) -> Tuple[str, bool, str]:
    """The verdict of a run the device refused with `error`: (refused, native, the exception's
    type and first line)."""
    import torch_opencl as device

    message = str(error).strip().splitlines()[0] if str(error).strip() else "(no message)"
    return "refused", not device.fallback_ops(), f"{type(error).__name__}: {message[:300]}"


def spread(samples: list, most: int) -> List[tuple]:
    """(index, sample) pairs: all of them, or `most` spread evenly over the list (0: no limit)."""
    if not most or len(samples) <= most:
        return list(enumerate(samples))
    picked = sorted({round(k * (len(samples) - 1) / (most - 1)) for k in range(most)}) if most > 1 else [0]
    return [(k, samples[k]) for k in picked]


def run_logged(keys: List[str], log: Path, resume: Optional[Tuple[int, int, int]], crash_at: str, max_samples: int,
               find: Callable[[str], object], samples_of: Callable[[object], list],
               variants_of: Callable[[object], List[str]], run: Callable[[object, str, object], tuple]) -> None:
    """The children's loop (op_db's here, module_db's in extras.validation.moduledb): each key's
    samples (spread to `max_samples`) in each of its variants, from `resume` (key, sample,
    variant positions) on, one log line before each run ("start") and one after ("done",
    with run(item, variant, sample)'s verdict, native, detail and extra fields). `crash_at`
    ("key#sample"): that sample's first variant reads address 0 (how the tests prove that a
    crash is caught and blamed on its sample)."""
    import ctypes
    import warnings

    import torch_opencl  # noqa: F401

    warnings.simplefilter("ignore")
    with log.open("a", buffering=1) as out:
        for o, key in enumerate(keys):
            if resume and o < resume[0]:
                continue
            item = find(key)
            variants = variants_of(item)
            try:
                samples = samples_of(item)
            except Exception as error:  # noqa: BLE001
                out.write(json.dumps({"event": "done", "op": key, "o": o, "s": -1, "v": variants[0], "verdict": "skip",
                                      "native": True, "detail": f"no samples: {error}"[:300]}) + "\n")
                continue
            for s, sample in spread(samples, max_samples):
                for v, variant in enumerate(variants):
                    if resume and (o, s, v) <= resume:
                        continue
                    where = {"op": key, "o": o, "s": s, "v": variant, "vi": v}
                    out.write(json.dumps({"event": "start", **where}) + "\n")
                    if crash_at == f"{key}#{s}" and v == 0:
                        ctypes.string_at(0)  # a read of address 0: a real segmentation fault
                    verdict, native, detail, *extra = run(item, variant, sample)
                    out.write(json.dumps({"event": "done", **where, "verdict": verdict, "native": native,
                                          "detail": detail, **(extra[0] if extra else {})}) + "\n")


def child(keys: List[str], log: Path, resume: Optional[Tuple[int, int, int]], crash_at: str = "",
          max_samples: int = 0) -> None:
    """Runs the given ops' samples (run_logged), noting the aten operators each run reached."""
    by_key = {op_key(op): op for op in float32_ops()}

    def run(op, variant: str, sample) -> tuple:
        reached: set = set()
        return (*run_one(op, variant, sample, reached), {"aten": sorted(reached)})

    run_logged(keys, log, resume, crash_at, max_samples, by_key.__getitem__, _samples, _variants, run)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extras.validation.opdb_child",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="comma-separated op keys (extras.validation.opdb.op_key)")
    parser.add_argument("--log", required=True, help="the log to append to")
    parser.add_argument("--resume", help="op,sample,variant positions of the last run started: resume after it")
    parser.add_argument("--crash-at", default="", help="op#sample whose function form crashes (the tests' crash)")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per op, spread over its list (0: all)")
    args = parser.parse_args(argv)
    resume = tuple(int(x) for x in args.resume.split(",")) if args.resume else None
    child(args.keys.split(","), Path(args.log), resume, args.crash_at, args.max_samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
