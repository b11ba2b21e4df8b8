"""What the suites of this folder share: torch's device-generic test machinery with the opencl
device as a first-class device type, the scope (the pinned fast subset or the whole databases),
the comparison against the CPU and float64, and the exceptions a failure is sorted by.

Importing this registers the device before torch.testing._internal.common_device_type reads
which backends exist (its PrivateUse1TestBase is added to the test bases then), so
`instantiate_device_type_tests(TestX, globals(), only_for=ONLY_FOR)` makes TestXOPENCL with
tests named as torch names them (test_reference_inputs_add_opencl_float32).

    OCLF_TORCH_SUITES=fast   (default) the pinned subset: FAST_OPS, FAST_MODULES, FAST_OPTIMS,
                             at most FAST_SAMPLES samples a test (what `make test` runs)
    OCLF_TORCH_SUITES=full   every entry of op_db, module_db and optim_db, every sample
    OCLF_TORCH_SUITES_SAMPLES=N   at most N samples a test, spread over its list (0: all)

Failures are sorted (conftest.py writes the verdicts; extras/validation/torch_suites.py counts
them): WrongAnswer (an AssertionError: a result that differs from the CPU's and from float64),
Missing (the device raised where the CPU gave a result: an operator, dtype or feature it
lacks), and skips whose reason starts with NOT_APPLICABLE (the check does not apply to the
device or the sample). The CPU fallback is allowed (OCLF_FALLBACK=silent unless set);
conftest.py records which operators fell back in each test.
"""
from __future__ import annotations

import copy
import os
import re
import unittest
import warnings
import zlib
from typing import Callable, List, Optional

os.environ.setdefault("OCLF_FALLBACK", "silent")
# A failing OpInfo test raises our exception itself (WrongAnswer, Missing), not torch's plain
# Exception that names the sample (the sample is in our message already).
os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")

import torch  # noqa: E402

import torch_opencl as device  # noqa: E402,F401  (the backend exists before torch's test bases are read)

with warnings.catch_warnings():  # torch's test helpers warn about optional test packages
    warnings.simplefilter("ignore")
    from torch.testing._internal import common_device_type as cdt
    from torch.testing._internal import common_methods_invocations, common_modules, common_optimizers  # noqa: F401

if cdt.PrivateUse1TestBase not in cdt.device_type_test_bases:
    # torch.testing._internal was imported before the device was (another test file of the run)
    cdt.device_type_test_bases.append(cdt.PrivateUse1TestBase)

from extras.validation import opdb_child  # noqa: E402

DEVICE = "opencl"
ONLY_FOR = (DEVICE,)
SCOPE = os.environ.get("OCLF_TORCH_SUITES", "fast")
if SCOPE not in ("fast", "full"):
    raise ValueError(f"OCLF_TORCH_SUITES must be fast or full, got {SCOPE!r}")
FULL = SCOPE == "full"
FAST_SAMPLES = 4
MAX_SAMPLES = int(os.environ.get("OCLF_TORCH_SUITES_SAMPLES", "0" if FULL else str(FAST_SAMPLES)))
NOT_APPLICABLE = "not applicable"

# The pinned fast subset: ops with native kernels across the device's families (elementwise,
# reductions, products, shapes, indexing, nn functions), modules and optimizers.
FAST_OPS = (
    "add", "div.no_rounding_mode", "exp", "where", "clamp", "sum", "amax", "mean", "softmax", "cumsum", "addmm",
    "cat", "index_select", "gather", "nn.functional.gelu", "nn.functional.layer_norm", "nn.functional.conv2d",
    "nn.functional.cross_entropy", "sort",
)
FAST_COMPILED_OPS = ("add", "where", "softmax", "sum", "nn.functional.gelu", "nn.functional.layer_norm")
# test_dtypes in the fast subset: these of the dtypes each op claims.
FAST_DTYPES = (torch.float16, torch.int64, torch.bool)
FAST_MODULES = ("nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.ReLU", "nn.MaxPool2d",
                "nn.Embedding", "nn.GRU", "nn.CrossEntropyLoss", "nn.TransformerEncoderLayer")
FAST_OPTIMS = ("SGD", "Adam", "AdamW", "RMSprop")


class WrongAnswer(AssertionError):
    """A result that differs from the CPU's (and from float64 where float32 drifts)."""


class Missing(Exception):
    """The device raised where the CPU gave a result: an operator, dtype or feature it lacks."""


def not_applicable(why: str):
    raise unittest.SkipTest(f"{NOT_APPLICABLE}: {why}")


def pick(entries: list, pinned) -> list:
    """entries of a database (op_db by full_name, module_db and optim_db by name) in the scope,
    each a copy without torch's expectedFailure decorators: those expect torch's own test body
    to fail (a CUDA quirk, a check ours does not make), and ours must not pass a wrong answer
    off as expected. torch's skips stay (a "skipped" verdict, with torch's reason)."""
    names = set(pinned)
    chosen = [e for e in entries if FULL or getattr(e, "full_name", None) in names or _name(e) in names]
    return [_without_expected_failures(e) for e in chosen]


def _without_expected_failures(entry):
    kept = []
    for info in getattr(entry, "decorators", ()) or ():
        inner = getattr(info, "decorators", None)
        if inner is not None and unittest.expectedFailure in inner:
            continue
        kept.append(info)
    entry = copy.copy(entry)
    entry.decorators = tuple(kept)
    return entry


def _name(entry) -> str:
    if hasattr(entry, "optim_cls"):
        return entry.optim_cls.__name__
    return getattr(entry, "name", "")


def spread(samples: list) -> list:
    """At most MAX_SAMPLES of them, spread evenly over the list (0: all)."""
    return [s for _, s in opdb_child.spread(samples, MAX_SAMPLES)]


def seeded(key: str) -> None:
    torch.manual_seed(zlib.crc32(key.encode()))


def to_device(sample, dtype=None):
    """A CPU SampleInput's tensors copied to the device (a factory's `device` argument too)."""
    def move(t):
        if isinstance(t, torch.dtype):
            return t
        t = t.detach().to(DEVICE, copy=True)
        return t.to(dtype) if dtype is not None and t.is_floating_point() else t
    return opdb_child._on_device(sample.transform(move))


def to_cpu(sample, dtype=None):
    def move(t):
        if isinstance(t, torch.dtype):
            return t
        t = t.detach().to("cpu", copy=True)
        return t.to(dtype) if dtype is not None and t.is_floating_point() else t
    return sample.transform(move)


def on_device(call: Callable, what: str = ""):
    """call() on the device; a Python exception it raises is a Missing (the device refused)."""
    try:
        result = call()
        torch.opencl.synchronize()
        return result
    except (unittest.SkipTest, AssertionError):
        raise
    except Exception as error:  # noqa: BLE001  (any refusal is recorded with its type and first line)
        first = (str(error).strip().splitlines() or ["(no message)"])[0][:300]
        raise Missing(f"{what}{type(error).__name__}: {first}") from error


def compare(got, expected, rerun64: Optional[Callable] = None, what: str = "") -> Optional[str]:
    """None when the device's results agree with the CPU's (opdb_child's comparison: float32
    tolerances, then float64 decides), else what differs; other dtypes at assert_close's
    default tolerances for them, with a float64 floor of two of their epsilons."""
    dtypes = {t.dtype for t in opdb_child._tensors(expected) if t.is_floating_point() or t.is_complex()}
    low = [d for d in dtypes if d in (torch.float16, torch.bfloat16)]
    if not low:
        problem = opdb_child._compare(got, expected, rerun64)
    else:
        eps = max(torch.finfo(d).eps for d in low)
        problem = opdb_child._compare(got, expected, rerun64, atol=1e-5, rtol=2 * eps, drift_rtol=2 * eps)
    return f"{what}{problem}" if problem else None


# Refusals that are torch's own rules for every device but the CPU, not something the device
# lacks: (a pattern searched in the refusal, why).
TORCH_RULES = [
    (r"tensor_split expected tensor_indices_or_sections to be on cpu",
     "torch's rule: split points given as a tensor must lie on the CPU (CUDA refuses them too)"),
]


def check(problems: List[str], refusals: List[str], ran: int, skipped: List[str]) -> None:
    """Ends a test that went through several samples: a wrong answer first, then a refusal,
    then a skip when no sample ran (every one was not applicable: torch's rules included)."""
    for pattern, why in TORCH_RULES:
        ruled = [r for r in refusals if re.search(pattern, r)]
        refusals = [r for r in refusals if r not in ruled]
        skipped = skipped + [why] * len(ruled)
    if problems:
        raise WrongAnswer(f"{len(problems)} sample(s) differ; first: " + " | ".join(problems[:3]))
    if refusals:
        raise Missing(f"{len(refusals)} sample(s) refused; first: " + " | ".join(refusals[:2]))
    if not ran:
        not_applicable(skipped[0] if skipped else "no samples")


def judge_samples(results) -> None:
    """check() over (index, description, verdict, detail) of samples run through a runner's
    run_one (extras.validation.opdb_child's or moduledb's)."""
    problems, refusals, skipped, ran = [], [], [], 0
    for i, description, verdict, detail in results:
        if verdict == "wrong":
            problems.append(f"sample {i} ({description}): {detail}")
        elif verdict == "refused":
            refusals.append(f"sample {i}: {detail}")
        elif verdict == "skip":
            skipped.append(detail)
        else:
            ran += 1
    check(problems, refusals, ran, skipped)
