"""NaN and infinity where torch has them: torch's op_db and module_db samples with their
floating inputs salted with negative numbers, zeros, infinities and NaN, run on the CPU and on
the opencl device; the results must have NaN and infinities at the same places, and the same
finite values elsewhere (test_device_special_values.py runs it; the whole sweep is slow).

    python tests/special_values.py                  every native op and every module, all variants
    python tests/special_values.py --ops xlogy,log  named ops only (--modules nn.KLDivLoss likewise)

Salting: element k of a sample's i-th floating tensor becomes SPECIALS[(k + shift) % STRIDE]
(when that index is inside SPECIALS; the other elements keep their values), with shift =
variant + 3·i, so tensors of one sample meet different specials at one position and a 0-d
tensor takes each special in some variant. "negative" makes the element -(|x| + 0.5).

Which op_db ops: those whose name matches an aten operator the device registers natively
(extras.validation.opdb.native_aten_names, as op_db's default part picks them), less those
OpInfo itself says the CPU and a device cannot be compared for (random results).
"""
from __future__ import annotations

import copy
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extras.validation import moduledb, opdb, opdb_child  # noqa: E402

SPECIALS = ("negative", 0.0, math.inf, -math.inf, math.nan, -0.0)
STRIDE = 8  # every STRIDE elements, len(SPECIALS) of them salted and the rest as sampled
VARIANTS = STRIDE
# Finite results where both sides are finite: special inputs leave sums of few terms, so a
# looser bound than op_db's float32 one (cancellation near inf - inf guards is not drift).
ATOL, RTOL = 1e-4, 1e-3
# Ops whose integer results are positions among equal values (salting makes many: every
# STRIDE-th element is inf, -inf, 0 or -0), which torch leaves in no fixed order unless a
# sort is stable: their values are compared, their indices not.
TIES = {"sort", "argsort", "topk", "kthvalue", "mode", "median", "nanmedian", "msort", "max", "min", "argmax",
        "argmin", "cummax", "cummin"}


@dataclass
class Finding:
    """One salted run whose device result differs from the CPU's, or that only one side refused."""
    name: str
    sample: int
    variant: int
    kind: str    # "wrong" (values differ) or "refused" (the device raised, the CPU did not)
    detail: str

    def __str__(self) -> str:
        return f"{self.name} sample {self.sample} variant {self.variant}: {self.kind}: {self.detail}"


def salted(t, shift: int):
    """A copy of floating tensor t with SPECIALS salted in (see the module's text)."""
    import torch

    flat = t.detach().clone().reshape(-1)
    positions = (torch.arange(flat.numel()) + shift) % STRIDE
    for index, value in enumerate(SPECIALS):
        where = positions == index
        if value == "negative":
            flat[where] = -(flat[where].abs() + 0.5)
        else:
            flat[where] = value
    return flat.reshape(t.shape).requires_grad_(t.requires_grad)


def salt(value, variant: int):
    """value (a sample's input, arguments or keywords) with each floating tensor salted."""
    import torch
    from torch.utils._pytree import tree_map

    count = [0]

    def one(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        count[0] += 1
        return salted(t, variant + 3 * (count[0] - 1))

    return tree_map(one, value)


def compare(device_value, cpu_value, indices: bool = True) -> Optional[str]:
    """None when the device's results have the CPU's NaN and infinities at the same places and
    its finite values within ATOL + RTOL·|cpu|, else what differs first; integer results are
    compared exactly, unless `indices` is False (positions among ties, TIES)."""
    import torch
    from torch.utils._pytree import tree_flatten

    dev, cpu = tree_flatten(device_value)[0], tree_flatten(cpu_value)[0]
    if len(dev) != len(cpu):
        return f"{len(dev)} results, the CPU gives {len(cpu)}"
    for i, (d, c) in enumerate(zip(dev, cpu)):
        if not isinstance(c, torch.Tensor) or not isinstance(d, torch.Tensor):
            if isinstance(c, float) and isinstance(d, float) and math.isnan(c) and math.isnan(d):
                continue
            if d != c:
                return f"result {i}: {d!r}, the CPU gives {c!r}"
            continue
        d, c = d.detach().cpu(), c.detach()
        if d.shape != c.shape or d.dtype != c.dtype:
            return f"result {i}: {d.dtype}{list(d.shape)}, the CPU gives {c.dtype}{list(c.shape)}"
        if not (c.is_floating_point() or c.is_complex()):
            if indices and not torch.equal(d, c):
                k = int((d != c).reshape(-1).nonzero()[0])
                return f"result {i}: at flat index {k} {d.reshape(-1)[k].item()!r}, the CPU {c.reshape(-1)[k].item()!r}"
            continue
        wide = torch.complex128 if c.is_complex() else torch.float64
        d, c = d.to(wide), c.to(wide)
        checks = [("NaN", torch.isnan(d), torch.isnan(c))]
        if not c.is_complex():
            checks += [("+inf", d == math.inf, c == math.inf), ("-inf", d == -math.inf, c == -math.inf)]
        for what, on_device, on_cpu in checks:
            if not torch.equal(on_device, on_cpu):
                k = int((on_device != on_cpu).reshape(-1).nonzero()[0])
                return (f"result {i}: {what} at other places: at flat index {k} the device gives "
                        f"{d.reshape(-1)[k].item()!r}, the CPU {c.reshape(-1)[k].item()!r}")
        finite = torch.isfinite(d) & torch.isfinite(c)
        miss = finite & ((d - c).abs() > ATOL + RTOL * c.abs())
        if bool(miss.any()):
            k = int(miss.reshape(-1).nonzero()[0])
            return f"result {i}: at flat index {k} the device gives {d.reshape(-1)[k].item()!r}, the CPU {c.reshape(-1)[k].item()!r}"
    return None


def _run(name: str, sample: int, variant: int, on_cpu: Callable, on_device: Callable,
         indices: bool = True) -> Optional[Finding]:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = on_cpu()
        except Exception:  # noqa: BLE001  (a salted sample the CPU refuses says nothing of the device)
            return None
        try:
            got = on_device()
            got = [t.cpu() if isinstance(t, torch.Tensor) else t for t in opdb_child._tensors(got)] \
                if not isinstance(got, (float, int, bool)) else got
            torch.opencl.synchronize()
        except Exception as error:  # noqa: BLE001  (the device refusing what the CPU ran is a finding)
            return Finding(name, sample, variant, "refused", f"{type(error).__name__}: {str(error)[:200]}")
    cpu_tensors = opdb_child._tensors(expected) if not isinstance(expected, (float, int, bool)) else expected
    problem = compare(got, cpu_tensors, indices)
    return Finding(name, sample, variant, "wrong", problem) if problem else None


# ---------------------------------------------------------------------------------------------
# op_db

def native_ops(names: Optional[List[str]] = None) -> list:
    """op_db's float32 ops with a native registration (or those named), comparable on a device."""
    native = opdb.native_aten_names()
    out = []
    for op in opdb.float32_ops():
        if names is not None:
            if op.name in names or opdb.op_key(op) in names:
                out.append(op)
            continue
        if not (opdb._candidate_names(op) & native) or op.name in opdb_child.DEVICE_RANDOM:
            continue
        if "sparse" in op.name:
            continue  # refused on the device by design (csrc/aten/sparse.cpp)
        if opdb_child._not_comparable(op):
            continue
        out.append(op)
    return out


def sweep_op(op, variants: range, max_samples: int = 0) -> Iterator[Finding]:
    """The findings of one op's samples (the first max_samples, 0: all), salted each way."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's sample makers warn (sparse CSR is beta, ...)
        samples = opdb_child._samples(op)
    if max_samples:
        samples = samples[:max_samples]
    for s, sample in enumerate(samples):
        for variant in variants:
            parts = (sample.input, sample.args, sample.kwargs)
            if not all(t.layout == torch.strided for t in opdb_child._tensors(parts)):
                break  # sparse samples: the device refuses them (test_device_torch_utils.py)
            parts = salt(parts, variant)

            def on_cpu(parts=parts):
                x, args, kwargs = copy.deepcopy(parts)
                return op(x, *args, **kwargs)

            def on_device(parts=parts):
                x, args, kwargs = moduledb._moved(parts, "opencl")
                if "device" in kwargs:
                    kwargs = dict(kwargs, device="opencl")
                return op(x, *args, **kwargs)

            found = _run(opdb.op_key(op), s, variant, on_cpu, on_device, indices=op.name not in TIES)
            if found:
                yield found


# ---------------------------------------------------------------------------------------------
# module_db

def modules(names: Optional[List[str]] = None) -> list:
    """module_db's float32 modules (or those named); lazy modules left out (their parameters
    take the salted input's shape only at the first call)."""
    out = []
    for info in moduledb.modules():
        if names is not None and info.name not in names:
            continue
        if moduledb._is_lazy(info.module_cls.__new__(info.module_cls)):
            continue
        out.append(info)
    return out


def sweep_module(info, variants: range, max_samples: int = 0) -> Iterator[Finding]:
    """The findings of one module's samples: the forward input salted, parameters as built;
    outputs, input and parameter gradients and buffers compared (moduledb.evaluate)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = moduledb._samples(info)
    if max_samples:
        samples = samples[:max_samples]
    for s, sample in enumerate(samples):
        for variant in variants:
            salted_sample = copy.copy(sample)
            salted_sample.forward_input = copy.copy(sample.forward_input)
            fi = salted_sample.forward_input
            fi.args, fi.kwargs = salt((sample.forward_input.args, sample.forward_input.kwargs), variant)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cpu_module = moduledb._build(info, sample, torch.float32)
            except Exception:  # noqa: BLE001
                break
            # The device's copy is made before the CPU's call changes the buffers.
            device_module = copy.deepcopy(cpu_module)

            def on_cpu(m=cpu_module, smp=salted_sample):
                return moduledb.evaluate(m, smp, "cpu", torch.float32)

            def on_device(m=device_module, smp=salted_sample):
                return moduledb.evaluate(m.to("opencl"), smp, "opencl", torch.float32)

            found = _run(info.name, s, variant, on_cpu, on_device)
            if found:
                yield found


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    import torch_opencl  # noqa: F401

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated op_db names (default: every native op)")
    parser.add_argument("--modules", help="comma-separated module_db names (default: every module)")
    parser.add_argument("--variants", type=int, default=VARIANTS)
    parser.add_argument("--max-samples", type=int, default=0)
    args = parser.parse_args(argv)
    chosen_ops = native_ops(args.ops.split(",") if args.ops else None) if args.ops or not args.modules else []
    chosen_modules = modules(args.modules.split(",") if args.modules else None) if args.modules or not args.ops \
        else []
    findings = []
    for op in chosen_ops:
        for found in sweep_op(op, range(args.variants), args.max_samples):
            print(found, flush=True)
            findings.append(found)
    for info in chosen_modules:
        for found in sweep_module(info, range(args.variants), args.max_samples):
            print(found, flush=True)
            findings.append(found)
    print(f"{len(chosen_ops)} ops, {len(chosen_modules)} modules: {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
