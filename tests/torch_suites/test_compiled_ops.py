"""What Inductor's OpInfo suite (torch's test/inductor/test_torchinductor_opinfo.py) checks, on the
opencl device: each op_db sample run through torch.compile (Inductor, with the device's
OpenCL code generation) gives the eager device's answer (float64 decides where float32
drifts). Compiling costs seconds a graph on a CPU device, so at most COMPILED_SAMPLES samples of
an op run (spread over its list); Dynamo's caches are reset before each, so no sample is
quietly run eagerly after the recompile limit. A compile error is a missing feature, a
different result a wrong answer. Tests are named as Inductor's:
test_comprehensive_add_opencl_float32.
"""
import os

import torch

# First: it imports the device, then torch's test helpers with their warnings silenced.
from .common import (FAST_COMPILED_OPS, FULL, ONLY_FOR, Missing, check, compare, not_applicable, on_device, pick,
                     seeded, to_cpu, to_device)
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

from extras.validation import opdb_child

OPS = pick(op_db, FAST_COMPILED_OPS)
COMPILED_SAMPLES = int(os.environ.get("OCLF_TORCH_SUITES_COMPILED_SAMPLES", "3" if FULL else "2"))


def _compiled(op):
    def call(inp, args, kwargs):
        return op(inp, *args, **kwargs)
    return torch.compile(call, dynamic=False)


def _inductors_own(op, sample, got) -> bool:
    """Whether torch's Inductor gives the device's compiled answer on the CPU too (its C++ back
    end): then the answer is the lowering's, every device's, not the device's code generation
    (var_mean of an empty tensor: Inductor's Welford gives the mean 0, eager NaN)."""
    try:
        torch._dynamo.reset()
        cpu = to_cpu(sample)
        own = _compiled(op)(cpu.input, cpu.args, cpu.kwargs)
    except Exception:  # noqa: BLE001  (no CPU compilation to compare with: the device's answer stands)
        return False
    finally:
        torch._dynamo.reset()
    return compare(got, own) is None


class TestInductorOpInfo(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_comprehensive(self, device, dtype, op):
        if opdb_child._not_comparable(op) is not None:
            not_applicable("the op's results are random or undefined: compiled and eager draw differently")
        seeded(op.full_name)
        samples = [s for _, s in opdb_child.spread(list(op.sample_inputs("cpu", dtype)), COMPILED_SAMPLES)]
        problems, refusals, skipped, ran = [], [], [], 0
        for i, sample in enumerate(samples):
            moved = to_device(sample)
            try:
                eager = op(moved.input, *moved.args, **moved.kwargs)
                torch.opencl.synchronize()
            except Exception as error:  # noqa: BLE001  (the eager device's refusals are TestCommon's to count)
                skipped.append(f"eager on the device raises {type(error).__name__}")
                continue
            torch._dynamo.reset()
            moved = to_device(sample)
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            try:
                got = on_device(lambda: _compiled(op)(moved.input, moved.args, moved.kwargs), "compiled: ")
            except Missing as refusal:
                refusals.append(f"sample {i}: {refusal}")
                continue
            except AssertionError as guard:
                # Raised while compiling or by a guard of the compiled graph (Inductor checks an
                # extern kernel's result layout against torch's meta function): no value was
                # computed to be wrong; the compiled form is refused.
                first = (str(guard).strip().splitlines() or [""])[0][:200]
                refusals.append(f"sample {i}: compiled: AssertionError: {first}")
                continue
            if torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs:
                skipped.append("Dynamo captured no graph (the op ran eagerly)")
                continue
            expected = torch.utils._pytree.tree_map(
                lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, eager)

            def rerun64(sample=sample):
                return opdb_child._call(op, "fn", to_cpu(sample, torch.float64))
            problem = compare(got, expected, rerun64)
            if problem and _inductors_own(op, sample, got):
                skipped.append(f"Inductor gives this answer on the CPU too ({problem[:80]})")
                continue
            ran += 1
            if problem:
                problems.append(f"sample {i} ({sample.summary()[:120]}): {problem}")
        torch._dynamo.reset()
        check(problems, refusals, ran, skipped)


instantiate_device_type_tests(TestInductorOpInfo, globals(), only_for=ONLY_FOR)
