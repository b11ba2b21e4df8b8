"""Validated networks: torchvision models and transformer families, forward and backward,
with the OpenCL layers (utils.patching.opencl_layers) against plain torch, on the same
seeded random weights and the same input. Nothing is downloaded.

    python -m extras.validation.networks                    # the whole list, 1x3x64x64
    python -m extras.validation.networks --nets resnet18,vgg16 --batch 2 --size 96
    python -m extras.validation.networks --markdown docs/VALIDATION.md --section cpu-patched
    python -m extras.validation.networks --device opencl    # the opencl torch device instead
    python -m extras.validation.networks --nets llama,qwen2,t5 --batch 2 --size 24 --device opencl

The transformer families (TRANSFORMERS: Llama, Mistral, Qwen2, BERT, T5 and ViT from
transformers' configs, 2 layers, small awkward sizes) take token ids of length --size (a
second row padded, so the attention mask matters) or --size² images, and give logits.

Each network is built with seeded random weights; each BatchNorm's running mean and
variance are then set to those of its whole input for this batch (one forward in plain
torch), so activations stay at unit scale as in a trained network: with the initial mean
0 and variance 1, the activations of deep networks (densenet161, inception_v3) grow to
1e9 and float32 results are mostly rounding.
Forward and backward then run in eval mode on both sides (running statistics, Dropout
off); --mode train takes gradients with batch statistics instead, Dropout still off.

For each network it reports
  fwd rel err     max |patched - torch| / max |torch| over the output,
  bwd rel err     the largest, over parameters, of max |patched - torch| / max |torch| of
                  that parameter's gradient (the denominator at least 1e-3 of the model's
                  largest gradient), for loss = sum(output * R) with a fixed random R,
  bwd vs fp64     the same measure for the OpenCL gradients against plain torch in float64,
  torch vs fp64   and for plain torch in float32 against float64: the rounding any float32
                  implementation has on this network. A network passes when fwd rel err
                  <= 1e-4 and bwd rel err or bwd vs fp64 <= max(1e-3, 10 x torch vs fp64),
  OpenCL calls    how many conv2d / linear calls of one forward went through OpenCL,
  times           one forward + backward, patched and plain torch (wall seconds, best of
                  --repeat runs, after the checked runs that also compile the kernels).
A network whose backward error is over the tolerance while some ReLU input under 1e-5
changed sign between the two forwards is marked "ReLU flip": the gradient is
discontinuous there, and the note gives the count and the size of those inputs.
A network whose backward fails with the OpenCL layers is run backward in plain torch
too, and the table says whether torch fails as well.

--device opencl checks the opencl torch device (torch_opencl) instead of the
patched layers: a copy of the model moved there, the same input and upstream gradient
moved there, results compared on the CPU. Its "CPU fallbacks" column counts the
operator calls of one forward + backward that ran on the CPU (0: all native).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import torch
import torchvision
from torch import nn

from extras.validation.zoo import (MIN_SIZE, NETWORKS, TRANSFORMERS, build_model, build_transformer,
                                   calibrate_batchnorm, set_mode)
from utils import functional
from utils.patching import opencl_layers

FORWARD_TOL = 1e-4
BACKWARD_TOL = 1e-3
GRAD_FLOOR = 1e-3
FLIP_SIZE = 1e-5  # a ReLU input this close to zero may change sign by float32 rounding


@dataclass
class Result:
    name: str
    input_shape: tuple
    forward_error: Optional[float] = None
    backward_error: Optional[float] = None
    torch_fp32_error: Optional[float] = None
    opencl_fp64_error: Optional[float] = None
    relu_flips: int = 0
    relu_flip_size: float = 0.0
    worst_parameter: str = ""
    conv_calls: int = 0
    linear_calls: int = 0
    fallbacks: Optional[int] = None  # --device opencl: operator calls that ran on the CPU
    time_patched: Optional[float] = None
    time_torch: Optional[float] = None
    note: str = ""

    @property
    def passed(self) -> bool:
        return (
            self.forward_error is not None
            and self.forward_error <= FORWARD_TOL
            and self.backward_error is not None
            and self.opencl_fp64_error is not None
            and self.torch_fp32_error is not None
            and min(self.backward_error, self.opencl_fp64_error) <= max(BACKWARD_TOL, 10 * self.torch_fp32_error)
        )


@contextlib.contextmanager
def counting_calls(counts: Dict[str, int]) -> Iterator[None]:
    """Counts the calls of utils.functional.conv2d and .linear, which the patched layers make."""
    originals = {"conv2d": functional.conv2d, "linear": functional.linear}

    def counted(kind: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            counts[kind] += 1
            return fn(*args, **kwargs)

        return wrapper

    try:
        for kind, fn in originals.items():
            setattr(functional, kind, counted(kind, fn))
        yield
    finally:
        for kind, fn in originals.items():
            setattr(functional, kind, fn)


@contextlib.contextmanager
def recording_relu_inputs(model: nn.Module, record: List[torch.Tensor]) -> Iterator[None]:
    """Appends the input of every nn.ReLU / nn.ReLU6 call of model to record."""
    hooks = [
        m.register_forward_pre_hook(lambda _m, inputs: record.append(inputs[0].detach().cpu().clone()))
        for m in model.modules()
        if isinstance(m, (nn.ReLU, nn.ReLU6))
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def relu_flips(patched: List[torch.Tensor], plain: List[torch.Tensor]):
    """How many ReLU inputs are positive on one side and not on the other, and the largest
    |input| among them: where they differ, the two backward passes differ by a whole
    gradient element, however small the forward difference was."""
    count, largest = 0, 0.0
    for a, b in zip(patched, plain):
        differ = (a > 0) != (b > 0)
        if differ.any():
            count += int(differ.sum())
            largest = max(largest, b[differ].abs().max().item())
    return count, largest


def relative_error(actual: torch.Tensor, expected: torch.Tensor, floor: float = 0.0) -> float:
    """max |actual - expected| / max(max |expected|, floor) (absolute when both are zero)."""
    scale = max(expected.abs().max().item(), floor)
    diff = (actual - expected).abs().max().item()
    return diff / scale if scale > 0 else diff


def forward_backward(model: nn.Module, x: torch.Tensor, upstream: Optional[torch.Tensor]):
    """Output of model(x) and, when upstream is given, the parameter gradients of
    sum(output * upstream), by parameter name."""
    model.zero_grad(set_to_none=True)
    if upstream is None:
        with torch.no_grad():
            return model(x), {}
    out = model(x)
    (out * upstream).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def timed(fn: Callable[[], object], repeat: int) -> float:
    """The best of `repeat` wall times of fn(), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class Checked:
    """The side that is checked against plain torch: the model with the patched layers
    (device "patched"), or a copy of it on the opencl torch device (device "opencl").
    run() takes and returns CPU tensors."""

    def __init__(self, model: nn.Module, device: str):
        self.device = device
        if device == "opencl":
            import torch_opencl  # noqa: F401  (registers the device)

            self.model = copy.deepcopy(model).to("opencl")
        else:
            self.model = model

    def set_mode(self, mode: str) -> None:
        set_mode(self.model, mode)

    def run(self, x: torch.Tensor, upstream: Optional[torch.Tensor]):
        if self.device == "patched":
            with opencl_layers():
                return forward_backward(self.model, x, upstream)
        moved = upstream.to("opencl") if upstream is not None else None
        out, grads = forward_backward(self.model, x.to("opencl"), moved)
        result = out.cpu(), {n: g.cpu() for n, g in grads.items()}
        torch.opencl.synchronize()
        return result


def validate(name: str, batch: int = 1, size: int = 64, mode: str = "eval", seed: int = 0,
             repeat: int = 2, device: str = "patched") -> Result:
    """Runs one network forward and backward, checked (patched layers, or the opencl
    device) and plain, and compares them; then times `repeat` runs of each (none when
    repeat is 0)."""
    generator = torch.Generator().manual_seed(seed + 1)
    if name in TRANSFORMERS:
        model, x = build_transformer(name, batch, size, seed)
        result = Result(name, tuple(x.shape))
    else:
        size = max(size, MIN_SIZE.get(name, 1))
        result = Result(name, (batch, 3, size, size))
        model = build_model(name, size, seed)
        x = torch.randn(result.input_shape, generator=generator)

    calibrate_batchnorm(model, x)
    checked = Checked(model, device)
    plain_relu, patched_relu = [], []
    with recording_relu_inputs(model, plain_relu):
        ref_out, _ = forward_backward(model, x, None)
    counts = {"conv2d": 0, "linear": 0}
    with counting_calls(counts), recording_relu_inputs(checked.model, patched_relu):
        out, _ = checked.run(x, None)
    result.relu_flips, result.relu_flip_size = relu_flips(patched_relu, plain_relu)
    del plain_relu, patched_relu
    result.forward_error = relative_error(out, ref_out)
    result.conv_calls, result.linear_calls = counts["conv2d"], counts["linear"]

    set_mode(model, mode)
    checked.set_mode(mode)
    upstream = torch.randn(ref_out.shape, generator=generator)
    if device == "opencl":
        import torch_opencl as opencl_device

        opencl_device.reset_fallback_ops()
    try:
        _, grads = checked.run(x, upstream)
        if device == "opencl":
            result.fallbacks = sum(opencl_device.fallback_ops().values())
    except Exception as err:  # reported in the table, with whether plain torch fails too
        try:
            forward_backward(model, x, upstream)
            result.note = f"backward fails with OpenCL only: {type(err).__name__}: {err}"
        except Exception as torch_err:
            result.note = f"backward fails in plain torch too: {type(torch_err).__name__}: {torch_err}"
        return result
    _, ref_grads = forward_backward(model, x, upstream)
    missing = sorted(set(ref_grads) ^ set(grads))
    if missing:
        result.note = f"gradients differ in which parameters have them: {missing[:3]}"
        return result
    # A gradient that vanishes analytically (a BatchNorm bias feeding a train-mode
    # BatchNorm) is rounding noise on both sides: it is measured against GRAD_FLOOR of the
    # model's largest gradient instead of its own size.
    largest = max(g.abs().max().item() for g in ref_grads.values())
    errors = {n: relative_error(grads[n], ref_grads[n], GRAD_FLOOR * largest) for n in ref_grads}
    result.worst_parameter = max(errors, key=errors.get)
    result.backward_error = errors[result.worst_parameter]
    model64 = copy.deepcopy(model).double()
    _, grads64 = forward_backward(model64, x.double() if x.is_floating_point() else x, upstream.double())
    del model64
    largest64 = max(g.abs().max().item() for g in grads64.values())
    result.torch_fp32_error = max(
        relative_error(ref_grads[n].double(), grads64[n], GRAD_FLOOR * largest64) for n in grads64
    )
    result.opencl_fp64_error = max(
        relative_error(grads[n].double(), grads64[n], GRAD_FLOOR * largest64) for n in grads64
    )

    if repeat > 0:
        result.time_patched = timed(lambda: checked.run(x, upstream), repeat)
        result.time_torch = timed(lambda: forward_backward(model, x, upstream), repeat)
    model.zero_grad(set_to_none=True)
    checked.model.zero_grad(set_to_none=True)
    return result


def _fmt_error(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1e}"


def _fmt_time(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def rows(results: List[Result]) -> List[List[str]]:
    out = []
    for r in results:
        status = "ok" if r.passed else ("ReLU flip" if flip_explained(r) else "FAIL")
        out.append([
            r.name, "x".join(map(str, r.input_shape)), _fmt_error(r.forward_error), _fmt_error(r.backward_error),
            _fmt_error(r.opencl_fp64_error), _fmt_error(r.torch_fp32_error),
            f"{r.conv_calls}/{r.linear_calls}" if r.fallbacks is None else str(r.fallbacks),
            _fmt_time(r.time_patched), _fmt_time(r.time_torch), status,
        ])
    return out


def flip_explained(r: Result) -> bool:
    """The backward difference comes with ReLU inputs that changed sign within rounding."""
    return r.relu_flips > 0 and r.relu_flip_size < FLIP_SIZE and r.forward_error is not None


def notes(r: Result) -> List[str]:
    out = [r.note] if r.note else []
    if r.relu_flips and not r.passed:
        out.append(
            f"{r.relu_flips} ReLU input(s) of at most {r.relu_flip_size:.1e} in size are positive in one forward "
            f"and not in the other (float32 rounding); the gradients then differ by whole elements there "
            f"(worst parameter: {r.worst_parameter})"
        )
    return out


HEADER = [
    "network", "input", "fwd rel err", "bwd rel err", "bwd vs fp64", "torch vs fp64", "OpenCL conv/linear",
    "OpenCL s", "torch s", "status",
]


def text_table(results: List[Result]) -> str:
    table = [HEADER] + rows(results)
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [f"{r.name}: {note}" for r in results for note in notes(r)])


def markdown_table(results: List[Result]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    bullets = [f"- {r.name}: {note}" for r in results for note in notes(r)]
    return "\n".join(lines + ([""] + bullets if bullets else []))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extras.validation.networks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default=",".join(NETWORKS),
                        help=f"comma-separated torchvision names, or transformer families: {','.join(TRANSFORMERS)}")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, default=64, help="input side (raised to what a network needs)")
    parser.add_argument("--mode", choices=["eval", "train"], default="eval", help="BatchNorm mode for backward")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per side, best kept (0: no timing)")
    parser.add_argument("--markdown", help="also write the markdown table to this file; with --section, "
                        "into that section of it (docs/VALIDATION.md)")
    parser.add_argument("--section", help="the table's name in the --markdown file (cpu-patched, cpu-device, ...)")
    parser.add_argument("--device", choices=["patched", "opencl"], default="patched",
                        help="what is checked: the patched layers (default) or the opencl torch device")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.nets.split(",") if n.strip()]
    unknown = [n for n in names if n not in torchvision.models.list_models() and n not in TRANSFORMERS]
    if unknown:
        parser.error(f"--nets: unknown torchvision models or transformer families {unknown}")

    results = []
    for name in names:
        start = time.perf_counter()
        try:
            result = validate(name, args.batch, args.size, args.mode, args.seed, args.repeat, args.device)
        except Exception as err:  # one broken network must not hide the others
            traceback.print_exc()
            result = Result(name, (args.batch, 3, args.size, args.size), note=f"{type(err).__name__}: {err}")
        results.append(result)
        print(f"{name}: fwd {_fmt_error(result.forward_error)} bwd {_fmt_error(result.backward_error)} "
              f"vs fp64 {_fmt_error(result.opencl_fp64_error)} torch vs fp64 {_fmt_error(result.torch_fp32_error)} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)

    if args.device == "opencl":
        HEADER[HEADER.index("OpenCL conv/linear")] = "CPU fallbacks"
        HEADER[HEADER.index("OpenCL s")] = "device s"
    print()
    print(text_table(results))
    markdown = markdown_table(results)
    print()
    print(markdown)
    if args.markdown and args.section:
        from opencl_functions import device_info
        from bench.doc_tables import write_section

        write_section(Path(args.markdown), args.section, markdown, device_info()["device"])
    elif args.markdown:
        Path(args.markdown).write_text(markdown + "\n")
    return 0 if all(r.passed or flip_explained(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
