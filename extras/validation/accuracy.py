"""float32 on the `opencl` device against torch's own float32, sample by sample of torch's
OpInfo (op_db) and ModuleInfo (module_db) databases.

    python -m extras.validation.accuracy                 the pinned selection (make test's)
    python -m extras.validation.accuracy --all           every float32 op and module
    python -m extras.validation.accuracy --ops sum nn.functional.conv2d --modules nn.Linear -v

Each sample is drawn once in float64 and rounded to float32; float64 on the CPU then runs
the rounded inputs (the reference), and float32 runs them on the CPU (torch's own error) and
on the device. Every floating result counts: the outputs and, where the entry has
gradients, the gradients of the inputs (and of a module's parameters) through
sum(output · R) for a fixed random R. A result's error is its largest deviation from the
reference where the reference is finite, relative to the reference's largest finite value
(NaN and infinity places are extras.validation.special_values' business). The ratio device
error / torch's error is the device's accuracy relative to torch's. A result fails when the
device's error is over twice torch's, unless torch's own is under 1e-6 (then 1e-5 bounds it);
a result torch's own float32 misses by over 1e-3 is reported, not judged (cancellation left
float32 no digits: the input gradient of a group norm over two values is one such).
Samples that either side refuses, and random entries (OpInfo's own word), are left out.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import warnings
import zlib
from typing import Iterable, List, Optional

FACTOR = 2.0          # the device's error may be this many times torch's float32 error
SMALL = 1e-6          # torch's error under this: the device's bound is ABSOLUTE_BOUND
ABSOLUTE_BOUND = 1e-5
NO_DIGITS = 1e-3      # torch's error over this: cancellation left float32 no digits to judge
MAX_SAMPLES = 4       # samples per entry, spread over its list (--all: every sample)

# The pinned selection: the operators whose results are long sums (reductions, norms and
# their backward passes, products, convolutions, losses, scatter-adds), and the modules
# built on them.
PINNED_OPS = [
    "sum", "mean", "nansum", "var", "std", "var_mean", "norm", "linalg.vector_norm", "logsumexp", "cumsum",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "nn.functional.rms_norm", "nn.functional.linear", "matmul", "mm", "addmm", "bmm", "baddbmm",
    "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.conv_transpose2d", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.kl_div", "index_add", "scatter_add",
    "nn.functional.embedding", "nn.functional.scaled_dot_product_attention", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "dist", "cdist",
]
PINNED_MODULES = ["nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.GroupNorm", "nn.Embedding",
                  "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.LSTM", "nn.GRU", "nn.CrossEntropyLoss",
                  "nn.AdaptiveAvgPool2d"]


@dataclasses.dataclass
class Result:
    kind: str       # "op" or "module"
    name: str
    sample: int
    what: str       # "output 0", "gradient 1", ...
    device: float   # error against float64, relative to the reference's largest value
    torch: float    # torch's CPU float32 error, likewise

    @property
    def ratio(self) -> float:
        return self.device / self.torch if self.torch > 0 else (0.0 if self.device == 0 else float("inf"))

    @property
    def judged(self) -> bool:
        return self.torch <= NO_DIGITS

    @property
    def failed(self) -> bool:
        if not self.judged:
            return False
        bound = max(FACTOR * self.torch, ABSOLUTE_BOUND if self.torch < SMALL else 0.0)
        return self.device > bound


def error(value, reference) -> Optional[float]:
    """value's largest deviation from reference where the reference is finite, relative to
    the reference's largest finite value; None when nothing is comparable."""
    import torch

    value, reference = value.detach().cpu().to(torch.float64), reference.detach().to(torch.float64)
    if value.shape != reference.shape:
        return None
    finite = torch.isfinite(reference)
    if not bool(finite.any()):
        return None
    scale = reference[finite].abs().max().item()
    deviation = (value - reference).abs()[finite]
    if not bool(torch.isfinite(deviation).all()):
        return float("inf")
    worst = deviation.max().item()
    return worst / scale if scale > 0 else worst


def _floating(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0]
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.layout == torch.strided]


def _cast(value, dtype, device: str = "cpu", grad: bool = False):
    """value's tensors on device, floating ones in dtype (and requiring gradients when grad)."""
    import torch
    from torch.utils._pytree import tree_map

    def cast(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if t.is_floating_point():
            return t.to(device, dtype).requires_grad_(grad)
        return t.to(device)

    return tree_map(cast, value)


def _with_gradients(outputs: list, inputs: list) -> list:
    """outputs, then the gradients of inputs through sum(output · R) (R fixed per shape)."""
    import torch

    wanted = [o for o in outputs if o.requires_grad]
    wrt = [t for t in inputs if t.requires_grad]
    if not wanted or not wrt:
        return [o.detach() for o in outputs]
    generator = torch.Generator().manual_seed(11)
    loss = sum((o * torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.device, o.dtype)).sum()
               for o in wanted)
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [o.detach() for o in outputs] + [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, wrt)]


# ---- op_db ----------------------------------------------------------------------------------

def _op_samples(op) -> list:
    import torch

    torch.manual_seed(zlib.crc32(op.name.encode()))
    return list(op.sample_inputs("cpu", torch.float64, requires_grad=False))


def _op_run(op, sample, dtype, device: str, seed: int = 7) -> list:
    import torch

    grad = bool(op.supports_autograd)
    value = _cast((sample.input, sample.args, sample.kwargs), dtype, device, grad)
    inp, args, kwargs = value
    if "device" in kwargs:
        kwargs = dict(kwargs, device=torch.device(device))
    torch.manual_seed(seed)
    outputs = _floating(op(inp, *args, **kwargs))
    return _with_gradients(outputs, _floating(value)) if grad else outputs


def _reseeds(op) -> bool:
    """Whether OpInfo seeds torch's generators inside the call (its random factories, such as
    randint, are wrapped so): the device then draws from its own stream, as CUDA does."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def op_results(op, max_samples: int = MAX_SAMPLES) -> Iterable[Result]:
    import torch

    from extras.validation import opdb_child

    if opdb_child._not_comparable(op) is not None or _reseeds(op):
        return
    samples = _op_samples(op)
    for index, sample in opdb_child.spread(samples, max_samples) if max_samples else enumerate(samples):
        rounded = _cast((sample.input, sample.args, sample.kwargs), torch.float32)
        sample.input, sample.args, sample.kwargs = rounded
        yield from _compare("op", op.name, index,
                            lambda dtype, device, seed=7: _op_run(op, sample, dtype, device, seed))


# ---- module_db ------------------------------------------------------------------------------

def _module_run(info, sample, state: dict, dtype, device: str, seed: int = 7) -> list:
    import torch

    from extras.validation import moduledb

    module = moduledb._build(info, sample, dtype)
    module.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    module = module.to(device)
    args, kwargs = _cast((sample.forward_input.args, sample.forward_input.kwargs), dtype, device, True)
    torch.manual_seed(seed)
    outputs = _floating(module(*args, **kwargs))
    wrt = _floating((args, kwargs)) + [p for p in module.parameters() if p.requires_grad]
    return _with_gradients(outputs, wrt)


def module_results(info, max_samples: int = MAX_SAMPLES) -> Iterable[Result]:
    import torch

    from extras.validation import moduledb, opdb_child

    if issubclass(info.module_cls, torch.nn.modules.lazy.LazyModuleMixin):
        return  # parameters made at the first call: nothing to copy between the three runs
    samples = moduledb._samples(info)
    for index, sample in opdb_child.spread(samples, max_samples) if max_samples else enumerate(samples):
        try:
            state = copy.deepcopy(moduledb._build(info, sample, torch.float32).state_dict())
        except Exception:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
            continue
        yield from _compare("module", info.name, index,
                            lambda dtype, device, seed=7: _module_run(info, sample, state, dtype, device, seed))


# ---- both -----------------------------------------------------------------------------------

def _compare(kind: str, name: str, index: int, run) -> Iterable[Result]:
    import torch

    try:
        reference = run(torch.float64, "cpu")
        ours32 = run(torch.float32, "cpu")
        other_seed = run(torch.float64, "cpu", seed=8)
    except Exception:  # noqa: BLE001  (no float64 or float32 form on the CPU: nothing to judge)
        return
    if len(other_seed) != len(reference) or any(
            a.shape != b.shape or not torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(reference, other_seed)):
        return  # random results (the device draws from a stream of its own, as CUDA does)
    try:
        device = run(torch.float32, "opencl")
    except Exception:  # noqa: BLE001  (a refusal: the op_db and module_db runners report those)
        return
    if len(device) != len(reference):
        yield Result(kind, name, index, f"{len(device)} floating results, float64 gives {len(reference)}",
                     float("inf"), 0.0)
        return
    outputs = len(device)
    for i, (d, c, r) in enumerate(zip(device, ours32, reference)):
        dev_error, torch_error = error(d, r), error(c, r)
        if dev_error is None or torch_error is None:
            continue
        yield Result(kind, name, index, f"result {i} of {outputs}", dev_error, torch_error)


def select_ops(names: Optional[List[str]]) -> list:
    from extras.validation import opdb

    ops = opdb.float32_ops()
    if names is None:
        return ops
    by_name = {op.name: op for op in ops}
    return [by_name[n] for n in names if n in by_name]


def select_modules(names: Optional[List[str]]) -> list:
    from extras.validation import moduledb

    infos = moduledb.modules()
    if names is None:
        return infos
    return [info for info in infos if info.name in names]


def run(ops: list, modules: list, max_samples: int = MAX_SAMPLES, verbose: bool = False) -> List[Result]:
    import os

    os.environ.setdefault("OCLF_FALLBACK", "silent")
    import torch_opencl  # noqa: F401  (registers the device)

    results: List[Result] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in ops:
            found = list(op_results(op, max_samples))
            results += found
            if verbose:
                print(line_of(op.name, found), flush=True)
        for info in modules:
            found = list(module_results(info, max_samples))
            results += found
            if verbose:
                print(line_of(info.name, found), flush=True)
    return results


def line_of(name: str, results: List[Result]) -> str:
    if not results:
        return f"{name:44s} nothing compared"
    worst = max(results, key=lambda r: r.ratio)
    failed = sum(r.failed for r in results)
    return (f"{name:44s} {len(results):3d} results  worst ratio {worst.ratio:6.2f} "
            f"(device {worst.device:.1e}, torch {worst.torch:.1e})" + (f"  {failed} FAILED" if failed else ""))


def table(results: List[Result]) -> str:
    """One line per op or module: results compared, the worst ratio, failures."""
    names: dict = {}
    for r in results:
        names.setdefault((r.kind, r.name), []).append(r)
    lines = [f"{'op or module':44s} results  worst ratio device/torch (errors against float64)"]
    for (kind, name), found in sorted(names.items(), key=lambda item: -max(r.ratio for r in item[1])):
        lines.append(line_of(name, found))
    failed = [r for r in results if r.failed]
    unjudged = sum(not r.judged for r in results)
    lines.append(f"{len(names)} ops and modules, {len(results)} results ({unjudged} without float32 digits), "
                 f"{len(failed)} over the bound")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every float32 op and module, every sample")
    parser.add_argument("--ops", nargs="*", help="op_db names")
    parser.add_argument("--modules", nargs="*", help="module_db names (nn.Linear, ...)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.all:
        ops, modules, most = select_ops(None), select_modules(None), 0
    elif args.ops is not None or args.modules is not None:
        ops, modules, most = select_ops(args.ops or []), select_modules(args.modules or []), MAX_SAMPLES
    else:
        ops, modules, most = select_ops(PINNED_OPS), select_modules(PINNED_MODULES), MAX_SAMPLES
    results = run(ops, modules, most, args.verbose)
    print(table(results))
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
