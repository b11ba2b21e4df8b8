"""What the demos share (simple_sanity_check.py, inference_resnet.py, inference_gpt2.py):
the command line (--device, --quick), the device banner, timing, the OpenCL-vs-torch
agreement checks and the exit status.

Timing: each demo runs its workload once untimed first (warm_up: program builds, weight
uploads and tuning at first use happen there, and the tuning is announced), prints what
that first call did, and times the runs after it with tuning paused (timed): the times
printed are the kernels' own, not the seconds spent tuning (opencl_functions.tuning).

Exit status of every demo: 0 when OpenCL and torch agree within tolerance (and the
demo's own checks pass), 1 when they do not, 2 when no OpenCL device can be opened, 3 when
a package or data file it needs is missing (it says, in one line, how to get it).

Progress bars go to stderr and only when it is a terminal, so a log of `make gpt` holds the
result lines alone.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple, TypeVar

import torch

T = TypeVar("T")

EXIT_AGREE, EXIT_DISAGREE, EXIT_NO_DEVICE, EXIT_MISSING = 0, 1, 2, 3


def require(module: str, package: str, purpose: str):
    """import `module`, or exit with EXIT_MISSING and one line naming the PyPI `package` to
    install for `purpose`."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        print(f"error: {purpose} needs the Python package {package}, which is not installed: run `make setup` "
              f"(it installs requirements.txt) or `.venv/bin/pip install {package}`", file=sys.stderr)
        raise SystemExit(EXIT_MISSING) from None


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every demo takes: --device and --quick."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--device",
        help='OpenCL device: "P:D" (platform:device index) or part of its name, e.g. "nvidia" or "pocl" '
        "(default: $OCLF_DEVICE or $OCL_DEVICE, else the first GPU, else the first device; see make info)",
    )
    p.add_argument("--quick", action="store_true", help="a small, fast run (what the test suite calls)")
    return p


def parse_args(p: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line; --device is put into OCLF_DEVICE before the device is first used."""
    args = p.parse_args(argv)
    if args.device:
        os.environ["OCLF_DEVICE"] = args.device
    return args


def open_device() -> dict:
    """Open the selected OpenCL device and print which it is. Exits with status 2 when none can be opened."""
    try:
        import opencl_functions as ocl

        info = ocl.device_info()
    except ImportError as err:
        print(f"error: opencl_functions is not built ({err}); run make build", file=sys.stderr)
        raise SystemExit(EXIT_NO_DEVICE)
    except Exception as err:  # OpenCLError, raised by the extension
        print(f"error: no usable OpenCL device: {err}", file=sys.stderr)
        raise SystemExit(EXIT_NO_DEVICE)
    print(f"OpenCL device: {info['device']} ({info['platform']}, {info['version']})")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s) for the torch reference")
    return info


def timed(fn: Callable[..., T], *args, **kwargs) -> Tuple[T, float]:
    """fn(*args, **kwargs) and the wall time it took, in seconds, with tuning paused (a shape
    the warm-up did not meet takes the device's default instead of being measured here)."""
    from opencl_functions import tuning

    with tuning.paused():
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        return result, time.perf_counter() - start


def warm_up(fn: Callable[[], T], what: str) -> T:
    """fn() once, untimed, before the demo times it: kernels are built and, with OCLF_TUNE=1,
    the shapes the tuning cache lacks are tuned (announced on stderr). Prints one line saying
    what this first call took, which the times printed after it leave out."""
    from opencl_functions import tuning

    result, first = tuning.warm_up(fn, what)
    print(first.note())
    return result


def max_abs_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max()) if ref.numel() else 0.0


def within_tolerance(ours: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    """|ours - ref| <= atol + rtol * |ref| everywhere (and the shapes match)."""
    if ours.shape != ref.shape:
        return False
    return bool(((ours - ref).abs() <= atol + rtol * ref.abs()).all())


@dataclass
class Checks:
    """The pass/fail results of one demo run; summary() prints them and gives the exit status."""

    failures: List[str] = field(default_factory=list)
    count: int = 0

    def add(self, ok: bool, what: str) -> bool:
        self.count += 1
        if not ok:
            self.failures.append(what)
        return ok

    def summary(self) -> int:
        if not self.failures:
            print(f"PASS: all {self.count} checks agree (OpenCL vs torch within tolerance)")
            return EXIT_AGREE
        print(f"FAIL: {len(self.failures)} of {self.count} checks failed:")
        for what in self.failures:
            print(f"  - {what}")
        return EXIT_DISAGREE


def progress(iterable, desc: str, **kwargs):
    """A tqdm progress bar on stderr, shown only when stderr is a terminal (so it never glues
    itself to result lines in a log)."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True, file=sys.stderr,
                disable=not sys.stderr.isatty(), **kwargs)


def out_dir() -> str:
    """out/ at the project root (git-ignored)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "out")
