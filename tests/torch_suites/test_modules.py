"""TestModule's checks (torch's test/test_modules.py) on the opencl device, over module_db's
float32 samples: forward in training and eval mode, forward and backward against the CPU
(test_cpu_gpu_parity: outputs, input and parameter gradients, buffers), non-contiguous
inputs, channels-last modules and inputs, pickling a device module, and building one with
device= and dtype= (factory kwargs). The module and its samples are made on the CPU (seeded by
the module's name) and copied; float64 decides where float32 drifts
(extras.validation.moduledb's comparison). Tests are named as torch's:
test_cpu_gpu_parity_nn_Linear_opencl_float32.
"""
import copy
import io

import torch

# First: it imports the device, then torch's test helpers with their warnings silenced.
from .common import (FAST_MODULES, ONLY_FOR, Missing, check, compare, not_applicable, on_device, pick, seeded,
                     spread, judge_samples)
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import TrainEvalMode, module_db, modules
from torch.testing._internal.common_utils import TestCase, noncontiguous_like

from extras.validation import moduledb

MODULES = pick(module_db, FAST_MODULES)
FLOAT32 = (torch.float32,)


def _samples(info, dtype, training: bool, requires_grad: bool) -> list:
    seeded(info.name)
    return spread(list(info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=requires_grad,
                                               training=training)))


def _pair(info, sample, training: bool):
    """(module on the CPU, its copy on the device, the CPU's initial state): a lazy module gets
    its parameters from a first call on each side, then the CPU's values."""
    cpu = moduledb._build(info, sample, torch.float32).train(training)
    moved = copy.deepcopy(cpu)
    args, kwargs = moduledb._moved((sample.forward_input.args, sample.forward_input.kwargs), "cpu")
    lazy = moduledb._is_lazy(cpu)
    if lazy:
        with torch.no_grad():
            cpu(*args, **kwargs)
    initial = copy.deepcopy(cpu.state_dict())
    module = on_device(lambda: moved.to("opencl"))
    if lazy:
        with torch.no_grad():
            on_device(lambda: module(*moduledb._moved((args, kwargs), "opencl")[0],
                                     **moduledb._moved((args, kwargs), "opencl")[1]))
    module.load_state_dict(initial)
    return cpu, module, initial


def _call(module, args, kwargs, backward: bool) -> list:
    """[outputs..., gradients of the inputs and parameters needing one...] of one call."""
    torch.manual_seed(7)
    out = module(*args, **kwargs)
    outputs = moduledb._tensors(out)
    if not backward:
        return [o.detach() for o in outputs]
    wrt = [t for t in moduledb._tensors((args, kwargs)) if t.requires_grad] + [
        p for p in module.parameters() if p.requires_grad]
    floats = [o for o in outputs if o.requires_grad and o.is_floating_point()]
    grads = []
    if wrt and floats:
        generator = torch.Generator().manual_seed(11)
        loss = sum((o * torch.randn(o.shape, generator=generator).to(o.device, o.dtype)).sum() for o in floats)
        grads = ["no gradient" if g is None else g for g in torch.autograd.grad(loss, wrt, allow_unused=True)]
    return [o.detach() for o in outputs] + grads


def _against_cpu(info, samples, training: bool, backward: bool, prepare=None, reshape=None) -> None:
    """Each sample's call on the device (its inputs and module through `prepare` first: made
    non-contiguous, channels-last) against the CPU's plain call, float64 deciding on a miss."""
    problems, refusals, skipped, ran = [], [], [], 0
    for i, sample in enumerate(samples):
        args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
        try:
            cpu, module, initial = _pair(info, sample, training)
            expected = _call(cpu, *moduledb._moved((args, kwargs), "cpu"), backward)
        except Missing:
            raise
        except Exception as error:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
            skipped.append(f"the CPU raises {type(error).__name__}")
            continue

        def on_opencl():
            dargs, dkwargs = moduledb._moved((args, kwargs), "opencl")
            target = module
            if prepare is not None:
                target, dargs, dkwargs = prepare(module, dargs, dkwargs)
            return _call(target, dargs, dkwargs, backward)
        try:
            got = on_device(on_opencl)
        except Missing as refusal:
            refusals.append(f"sample {i}: {refusal}")
            continue
        ran += 1

        def rerun64():
            module64 = moduledb._build(info, sample, torch.float64).train(training)
            if moduledb._is_lazy(module64):
                with torch.no_grad():
                    module64(*moduledb._moved((args, kwargs), "cpu", torch.float64)[0],
                             **moduledb._moved((args, kwargs), "cpu", torch.float64)[1])
            module64.load_state_dict(initial)
            return _call(module64.double(), *moduledb._moved((args, kwargs), "cpu", torch.float64), backward)
        problem = compare(got, expected, rerun64)
        if problem:
            problems.append(f"sample {i} ({sample.desc or 'plain'}): {problem}")
    check(problems, refusals, ran, skipped)


def _noncontiguous(module, args, kwargs):
    def nc(t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        return noncontiguous_like(t.detach()).requires_grad_(t.requires_grad)
    return module, *torch.utils._pytree.tree_map(nc, (args, kwargs))


def _channels_last(module, args, kwargs):
    """Each 4-D tensor channels-last, each 5-D one channels-last-3d; the module by its
    parameters' rank (a Conv3d takes an unbatched 4-D input)."""
    def layout(rank):
        return {4: torch.channels_last, 5: torch.channels_last_3d}.get(rank)

    def cl(t):
        if isinstance(t, torch.Tensor) and layout(t.dim()) is not None:
            return t.detach().to(memory_format=layout(t.dim())).requires_grad_(t.requires_grad)
        return t
    ranks = {p.dim() for p in module.parameters()} & {4, 5}
    if ranks:
        module = module.to(memory_format=layout(max(ranks)))
    return module, *torch.utils._pytree.tree_map(cl, (args, kwargs))


class TestModule(TestCase):
    @modules(MODULES, allowed_dtypes=FLOAT32)
    def test_forward(self, device, dtype, module_info, training):
        _against_cpu(module_info, _samples(module_info, dtype, training, False), training, backward=False)

    @modules(MODULES, allowed_dtypes=FLOAT32, train_eval_mode=TrainEvalMode.train_only)
    def test_cpu_gpu_parity(self, device, dtype, module_info, training):
        """Forward and backward against the CPU: outputs, gradients, buffers (moduledb.run_one)."""
        judge_samples((i, sample.desc or "plain", *moduledb.run_one(module_info, sample)[::2])
                      for i, sample in enumerate(_samples(module_info, dtype, training, True)))

    @modules(MODULES, allowed_dtypes=FLOAT32, train_eval_mode=TrainEvalMode.train_only)
    def test_non_contiguous_tensors(self, device, dtype, module_info, training):
        samples = [s for s in _samples(module_info, dtype, training, True)
                   if any(t.dim() > 0 for t in moduledb._tensors(s.forward_input.args))]
        if not samples:
            not_applicable("no sample has a tensor input of one dimension or more")
        _against_cpu(module_info, samples, training, backward=True, prepare=_noncontiguous)

    @modules(MODULES, allowed_dtypes=FLOAT32, train_eval_mode=TrainEvalMode.train_only)
    def test_memory_format(self, device, dtype, module_info, training):
        samples = [s for s in _samples(module_info, dtype, training, True)
                   if any(t.dim() in (4, 5) for t in moduledb._tensors(s.forward_input.args))]
        if not samples:
            not_applicable("no 4-D or 5-D input: channels-last does not apply")
        _against_cpu(module_info, samples, training, backward=True, prepare=_channels_last)

    @modules(MODULES, allowed_dtypes=FLOAT32, train_eval_mode=TrainEvalMode.train_only)
    def test_pickle(self, device, dtype, module_info, training):
        """torch.save of a device module and torch.load give its state and its outputs."""
        problems, refusals, skipped, ran = [], [], [], 0
        for i, sample in enumerate(_samples(module_info, dtype, training, False)[:2]):
            args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
            try:
                _, module, _ = _pair(module_info, sample, training)
            except Missing as refusal:
                refusals.append(f"sample {i}: {refusal}")
                continue
            except Exception as error:  # noqa: BLE001
                skipped.append(f"the CPU raises {type(error).__name__}")
                continue

            def save_load():
                buffer = io.BytesIO()
                torch.save(module, buffer)
                buffer.seek(0)
                loaded = torch.load(buffer, weights_only=False)
                dargs, dkwargs = moduledb._moved((args, kwargs), "opencl")
                return loaded, _call(module, dargs, dkwargs, False), _call(loaded, dargs, dkwargs, False)
            try:
                loaded, before, after = on_device(save_load)
            except Missing as refusal:
                refusals.append(f"sample {i}: {refusal}")
                continue
            ran += 1
            state = [t.device.type for t in loaded.state_dict().values()]
            if any(d != "opencl" for d in state):
                problems.append(f"sample {i}: the loaded state lies on {sorted(set(state))}")
            problem = compare(after, [t.cpu() for t in before], what="outputs after loading: ") or compare(
                list(loaded.state_dict().values()), [t.cpu() for t in module.state_dict().values()], what="state: ")
            if problem:
                problems.append(f"sample {i}: {problem}")
        check(problems, refusals, ran, skipped)

    @modules(MODULES, allowed_dtypes=FLOAT32, train_eval_mode=TrainEvalMode.train_only)
    def test_factory_kwargs(self, device, dtype, module_info, training):
        """Built with device= and dtype=, every parameter and buffer is made on the device, in dtype
        where it is floating (its values come from the device's generator: not compared)."""
        sample = _samples(module_info, dtype, training, False)[0]
        args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
        try:
            module_info.module_cls(*args, **kwargs, device="cpu", dtype=torch.float64)
        except TypeError:
            not_applicable("the module takes no factory kwargs")
        module = on_device(lambda: module_info.module_cls(*moduledb._moved(args, "opencl"),
                                                          **moduledb._moved(kwargs, "opencl"), device="opencl",
                                                          dtype=dtype))
        problems = []
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.device.type != "opencl":
                problems.append(f"{name} lies on {t.device}")
            if t.is_floating_point() and t.dtype != dtype:
                problems.append(f"{name} is {t.dtype}")
        check(problems, [], 1, [])


instantiate_device_type_tests(TestModule, globals(), only_for=ONLY_FOR)
