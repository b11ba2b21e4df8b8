"""TestOptim's checks (torch's test/test_optim.py) on the opencl device, over optim_db: every
configuration torch lists for an optimizer (optim_inputs_func, with the global flags of
_get_optim_inputs_including_global_cliquey_kwargs: foreach on and off; fused where the
OptimizerInfo names the device, which none does) takes STEPS steps on parameters of awkward
shapes on the device, and its parameters and state after each step are the CPU's, the
for-loop implementation's (float64 decides where float32 drifts). Each step calls a closure
(LBFGS needs one; the others call it once) whose loss is a fixed smooth function of the
parameters. Tests are named as torch's: test_foreach_matches_cpu_Adam_opencl_float32.
"""
import copy

import torch

# First: it imports the device, then torch's test helpers with their warnings silenced.
from .common import FAST_OPTIMS, ONLY_FOR, Missing, check, compare, not_applicable, on_device, pick, seeded
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import (_get_optim_inputs_including_global_cliquey_kwargs, optim_db,
                                                       optims)
from torch.testing._internal.common_utils import TestCase

OPTIMS = pick(optim_db, FAST_OPTIMS)
STEPS = 3
SHAPES = ((7, 3), (5,), (1, 1), (2, 33))  # Muon takes matrices only: the 2-D ones
FLOAT32 = [torch.float32]
# Optimizers whose state is not compared, only their parameters: LBFGS reaches the minimum of
# the test's function within its first step (20 inner iterations), and its state then holds
# gradients there, rounding noise on every float32 device (the CPU's is 5x off float64 too).
PARAMETERS_ONLY = {"LBFGS"}


def _params(info, dtype):
    seeded(info.name)
    shapes = [s for s in SHAPES if len(s) == 2] if info.optim_cls.__name__ == "Muon" else SHAPES
    return [torch.randn(s, dtype=dtype) for s in shapes]


def _moved(kwargs: dict, where: str, dtype=None) -> dict:
    def move(v):
        if isinstance(v, torch.Tensor):
            v = v.to(where)
            return v.to(dtype) if dtype is not None and v.is_floating_point() else v
        if isinstance(v, tuple):
            return tuple(move(x) for x in v)
        return v
    return {k: move(v) for k, v in kwargs.items()}


def _run(info, kwargs: dict, where: str, dtype) -> list:
    """[parameters..., state tensors...] after each of STEPS steps of the optimizer."""
    params = [p.to(where).requires_grad_(True) for p in _params(info, dtype)]
    weights = [torch.linspace(-1, 1, p.numel(), dtype=dtype).reshape(p.shape).to(where) for p in params]
    optimizer = info.optim_cls(params, **kwargs)

    def closure():
        optimizer.zero_grad()
        loss = sum((w * p).sum() + 0.5 * (p * p * (1 + w.abs())).sum() + torch.sin(p).sum()
                   for p, w in zip(params, weights))
        loss.backward()
        return loss
    trace = []
    for _ in range(STEPS):
        optimizer.step(closure)
        state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        if info.optim_cls.__name__ in PARAMETERS_ONLY:
            state = []
        trace += [p.detach().clone() for p in params] + [t.detach().clone().reshape(t.shape) for t in state]
    return trace


def _configs(info, dtype, foreach: bool) -> list:
    every = _get_optim_inputs_including_global_cliquey_kwargs("opencl", dtype, info, skip=("differentiable",))
    return [c for c in every if bool(c.kwargs.get("foreach", False)) == foreach]


def _against_cpu(info, dtype, foreach: bool) -> None:
    if info.only_supports_sparse_grads:
        not_applicable("the optimizer takes sparse gradients only (the device holds dense tensors)")
    configs = _configs(info, dtype, foreach)
    if not configs:
        not_applicable("no configuration of this kind (the optimizer has no foreach implementation)")
    problems, refusals, ran = [], [], 0
    for config in configs:
        reference = dict(_moved(config.kwargs, "cpu"), foreach=False) if "foreach" in config.kwargs else \
            _moved(config.kwargs, "cpu")
        expected = _run(info, copy.deepcopy(reference), "cpu", dtype)
        try:
            got = on_device(lambda: _run(info, _moved(config.kwargs, "opencl"), "opencl", dtype))
        except Missing as refusal:
            refusals.append(f"{config.desc}: {refusal}")
            continue
        ran += 1
        problem = compare(got, expected, lambda: _run(info, _moved(reference, "cpu", torch.float64), "cpu",
                                                      torch.float64))
        if problem:
            problems.append(f"{config.desc} {config.kwargs}: {problem}")
    check(problems, refusals, ran, [])


class TestOptim(TestCase):
    @optims(OPTIMS, dtypes=FLOAT32)
    def test_forloop_matches_cpu(self, device, dtype, optim_info):
        _against_cpu(optim_info, dtype, foreach=False)

    @optims(OPTIMS, dtypes=FLOAT32)
    def test_foreach_matches_cpu(self, device, dtype, optim_info):
        _against_cpu(optim_info, dtype, foreach=True)


instantiate_device_type_tests(TestOptim, globals(), only_for=ONLY_FOR)
