"""TestCommon's checks (torch's test/test_ops.py) on the opencl device, over op_db: every
OpInfo's reference inputs against the CPU (and float64 where float32 drifts), its out= form,
non-contiguous inputs forward and backward, its function, method, in-place and operator
variants agreeing, its error inputs raising torch's exception, and every dtype it claims
running and agreeing with the CPU. Samples are made on the CPU (seeded per op) and copied to
the device. Tests are named as torch's: test_reference_inputs_add_opencl_float32.
"""
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

# First: it imports the device, then torch's test helpers with their warnings silenced.
from .common import (FAST_DTYPES, FAST_OPS, FULL, ONLY_FOR, Missing, WrongAnswer, check, compare, not_applicable, on_device, pick,
                     seeded, spread, to_cpu, to_device, judge_samples)
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

from extras.validation import opdb_child

OPS = pick(op_db, FAST_OPS)
ERROR_OPS = [op for op in OPS if op.error_inputs_func is not None] or OPS[:1]
FLOAT32 = (torch.float32,)


def _runs(op, variant: str, samples) -> None:
    """Each sample through opdb_child.run_one (the CPU against the device, float64 deciding)."""
    judge_samples((i, sample.summary()[:120], *opdb_child.run_one(op, variant, sample)[::2])
                  for i, sample in enumerate(samples))


def _grads(op, sample, outputs):
    """Gradients of sum(output · R) (R fixed) with respect to the sample's tensors that need one."""
    wrt = [t for t in opdb_child._tensors((sample.input, sample.args, sample.kwargs)) if t.requires_grad]
    floats = [o for o in opdb_child._tensors(outputs) if o.requires_grad and o.is_floating_point()]
    if not wrt or not floats:
        return []
    generator = torch.Generator().manual_seed(5)
    loss = sum((o * torch.randn(o.shape, generator=generator).to(o.device, o.dtype)).sum() for o in floats)
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return ["no gradient" if g is None else g for g in grads]


def _forward_backward(op, sample, dtype=None, where=None):
    """[outputs..., input gradients...] of op on a sample (moved to `where` in `dtype`)."""
    moved = to_device(sample, dtype) if where == "opencl" else to_cpu(sample, dtype)
    grad = op.supports_autograd and dtype in (None, torch.float32, torch.float64)

    def keep_grad(t):
        return t.requires_grad_(True) if grad and isinstance(t, torch.Tensor) and t.is_floating_point() else t
    moved = moved.transform(keep_grad) if grad else moved
    out = op(moved.input, *moved.args, **moved.kwargs)
    out = sample.output_process_fn_grad(out)
    return opdb_child._tensors(out) and [t.detach() for t in opdb_child._tensors(out)] + _grads(op, moved, out)


def _cpu_out_agrees(op, sample) -> bool:
    """Whether torch's out= form gives its function form's answer on the CPU: fft.ihfft2 and
    fft.ihfftn leave out= unwritten on every device (their last step,
    at::conj_physical_out(tmp, out), writes into tmp), so no device can be judged by them."""
    if opdb_child._not_comparable(op) is not None:
        return True
    try:
        plain = opdb_child._call(op, "fn", to_cpu(sample))
        if not isinstance(plain, torch.Tensor):
            return True
        out = torch.full_like(plain, 7) if not plain.dtype == torch.bool else torch.zeros_like(plain)
        opdb_child._call(op, "out", to_cpu(sample), out)
    except Exception:  # noqa: BLE001  (the device's run says what the CPU raises)
        return True
    return opdb_child._compare(out, plain) is None


def _same_order(op, sample, got, expected) -> bool:
    """sort's, argsort's and topk's results name the same elements up to ties: the values the
    device's indices pick from the input are the CPU's values (which of equal elements topk
    returns, and in which order an unstable sort leaves them, torch leaves open)."""
    where = 1 if op.name == "topk" else 0  # topk(k, dim, ...), sort(dim, ...)
    given = sample.args[where] if len(sample.args) > where and isinstance(sample.args[where], int) else -1
    dim = sample.kwargs.get("dim", given)
    indices = got[1] if isinstance(got, tuple) else got
    values = expected[0] if isinstance(expected, tuple) else sample.input.cpu().gather(dim, expected)
    if sample.input.dim() == 0:
        return False
    same_values = not isinstance(got, tuple) or torch.equal(got[0].cpu(), values)
    return same_values and torch.equal(sample.input.cpu().gather(dim, indices.cpu()), values)


def _in_cpus_dtypes(op, sample, got, expected):
    """The device's results in the CPU's dtypes where they differ from those only as torch's
    meta functions say a device other than the CPU differs (native_layer_norm's and
    native_batch_norm's mean and rstd of 16-bit inputs stay float32 off the CPU, as on CUDA);
    else `got` as it is, to be judged as it is."""
    leaves, spec = tree_flatten(got)
    wanted = tree_flatten(expected)[0]
    tensors = [(g, e) for g, e in zip(leaves, wanted) if isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor)]
    if len(leaves) != len(wanted) or all(g.dtype == e.dtype for g, e in tensors):
        return got
    try:
        meta = to_cpu(sample).transform(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t)
        meta_dtypes = [t.dtype for t in opdb_child._tensors(op(meta.input, *meta.args, **meta.kwargs))]
    except Exception:  # noqa: BLE001  (no meta function: judged as it is)
        return got
    if meta_dtypes != [g.dtype for g, _ in tensors]:
        return got
    cast = [g.to(e.dtype) if isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) else g
            for g, e in zip(leaves, wanted)]
    return tree_unflatten(cast, spec)


class TestCommon(TestCase):
    @ops(OPS, allowed_dtypes=FLOAT32)
    def test_reference_inputs(self, device, dtype, op):
        seeded(op.full_name)
        _runs(op, "fn", spread(list(op.reference_inputs("cpu", dtype))))

    @ops(OPS, allowed_dtypes=FLOAT32)
    def test_out(self, device, dtype, op):
        if not op.supports_out:
            not_applicable("the op has no out= form")
        seeded(op.full_name)
        samples = [s for s in spread(list(op.sample_inputs("cpu", dtype))) if _cpu_out_agrees(op, s)]
        if not samples:
            not_applicable("torch's own out= form differs from its function form on the CPU")
        _runs(op, "out", samples)
        # An out= tensor of another size is resized to the result's, as on the CPU.
        for sample in samples if opdb_child._not_comparable(op) is None else []:
            expected = opdb_child._call(op, "fn", to_cpu(sample))
            if not isinstance(expected, torch.Tensor):
                continue
            moved = to_device(sample)
            out = torch.empty(0, dtype=expected.dtype, device="opencl")
            on_device(lambda: op(moved.input, *moved.args, **moved.kwargs, out=out), "out= of size 0: ")
            problem = compare(out, expected, what="out= of size 0 resized: ")
            if problem:
                raise WrongAnswer(problem)
            break

    @ops(OPS, allowed_dtypes=FLOAT32)
    def test_noncontiguous_samples(self, device, dtype, op):
        seeded(op.full_name)
        problems, refusals, skipped, ran = [], [], [], 0
        for i, sample in enumerate(spread(list(op.sample_inputs("cpu", dtype)))):
            sample = sample.noncontiguous()
            try:
                expected = _forward_backward(op, sample)
            except Exception as error:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
                skipped.append(f"the CPU raises {type(error).__name__}")
                continue
            try:
                got = on_device(lambda: _forward_backward(op, sample, where="opencl"))
            except Missing as refusal:
                refusals.append(f"sample {i}: {refusal}")
                continue
            ran += 1
            if opdb_child._not_comparable(op) is None:
                problem = compare(got, expected, lambda: _forward_backward(op, sample, torch.float64))
                if problem:
                    problems.append(f"sample {i} ({sample.summary()[:120]}): {problem}")
        check(problems, refusals, ran, skipped)

    @ops(OPS, allowed_dtypes=FLOAT32)
    def test_variant_consistency_eager(self, device, dtype, op):
        """The function, method, in-place and operator forms give one answer on the device, the CPU's."""
        variants = [(name, fn) for name, fn in (("method", op.method_variant), ("inplace", op.inplace_variant),
                                                 ("operator", op.operator_variant)) if fn is not None]
        if not variants:
            not_applicable("the op has only its function form")
        if opdb_child._not_comparable(op) is not None:
            not_applicable("the op's results are random or undefined")
        seeded(op.full_name)
        problems, refusals, skipped, ran = [], [], [], 0
        for i, sample in enumerate(spread(list(op.sample_inputs("cpu", dtype)))):
            try:
                expected = opdb_child._call(op, "fn", to_cpu(sample))
            except Exception as error:  # noqa: BLE001
                skipped.append(f"the CPU raises {type(error).__name__}")
                continue
            for name, fn in variants:
                if name == "operator" and sample.kwargs:
                    continue  # Python's operators take no keyword arguments
                if name == "inplace" and (sample.broadcasts_input or not isinstance(expected, torch.Tensor)
                                          or expected.dtype != sample.input.dtype):
                    continue
                moved = to_device(sample)
                try:
                    got = on_device(lambda: fn(moved.input, *moved.args, **moved.kwargs))
                except Missing as refusal:
                    refusals.append(f"sample {i} {name}: {refusal}")
                    continue
                ran += 1
                problem = compare(got, expected, what=f"{name}: ")
                if problem:
                    problems.append(f"sample {i} ({sample.summary()[:100]}): {problem}")
        check(problems, refusals, ran, skipped)

    @ops(ERROR_OPS, dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        """Each error input the CPU refuses raises torch's exception type on the device too
        (an exception of another type, or none, is a wrong answer)."""
        if op.error_inputs_func is None:
            not_applicable("the op has no error inputs")
        problems, ran, skipped = [], 0, []
        # Made on the device as torch makes them: an out= that aliases an input must stay one.
        for i, (on_cpu, error_input) in enumerate(zip(op.error_inputs("cpu"), op.error_inputs("opencl"))):
            sample = on_cpu.sample_input
            try:
                op(sample.input, *sample.args, **sample.kwargs)
                skipped.append("the CPU raises nothing")
                continue
            except on_cpu.error_type:
                pass
            except Exception:  # noqa: BLE001  (the CPU itself raises another type: torch's sample, not ours)
                skipped.append("the CPU raises another type")
                continue
            moved = error_input.sample_input
            ran += 1
            try:
                op(moved.input, *moved.args, **moved.kwargs)
                torch.opencl.synchronize()
                problems.append(f"error input {i}: nothing raised, torch raises {error_input.error_type.__name__} "
                                f"({error_input.error_regex[:80]})")
            except error_input.error_type:
                pass  # the device's own messages (prefixed "opencl:") may word it otherwise
            except Exception as error:  # noqa: BLE001
                problems.append(f"error input {i}: {type(error).__name__} ({str(error)[:120]}), torch raises "
                                f"{error_input.error_type.__name__}")
        check(problems, [], ran, skipped)

    @ops(OPS, dtypes=OpDTypes.supported, allowed_dtypes=None if FULL else FAST_DTYPES)
    def test_dtypes(self, device, dtype, op):
        """Each dtype the OpInfo claims (the CPU's claim: the OpInfo names none for opencl) runs on
        the device and gives the CPU's answer (float64's where it drifts)."""
        seeded(op.full_name)
        samples = list(op.sample_inputs("cpu", dtype))[:3]
        problems, refusals, skipped, ran = [], [], [], 0
        for i, sample in enumerate(samples):
            try:
                expected = opdb_child._call(op, "fn", to_cpu(sample))
            except Exception as error:  # noqa: BLE001
                skipped.append(f"the CPU raises {type(error).__name__}")
                continue
            moved = to_device(sample)
            try:
                got = on_device(lambda: op(moved.input, *moved.args, **moved.kwargs))
            except Missing as refusal:
                refusals.append(f"sample {i}: {refusal}")
                continue
            ran += 1
            if opdb_child._not_comparable(op) is not None:
                continue
            as64 = dtype.is_floating_point and dtype != torch.float64

            def rerun64(sample=sample):
                return opdb_child._call(op, "fn", to_cpu(sample, torch.float64))
            problem = compare(_in_cpus_dtypes(op, sample, got, expected), expected, rerun64 if as64 else None)
            if problem and op.name in ("sort", "argsort", "topk") and _same_order(op, moved, got, expected):
                problem = None  # equal elements picked or ordered otherwise: torch leaves that open
            if problem:
                problems.append(f"sample {i} ({sample.summary()[:100]}): {problem}")
        check(problems, refusals, ran, skipped)


instantiate_device_type_tests(TestCommon, globals(), only_for=ONLY_FOR)
