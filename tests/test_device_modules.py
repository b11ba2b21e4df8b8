"""torch's ModuleInfo database on the opencl device (extras/validation/moduledb.py): every module of
module_db builds, runs forward and backward on its float32 training samples (at most
DEFAULT_MAX_SAMPLES each, every module at least one; the whole database is the slow test)
in child processes, and gives the CPU's outputs, input and parameter gradients and buffers:
nothing refused, wrong, crashed or hung. The CPU fallback is allowed; wrong answers are not."""
from types import SimpleNamespace

import pytest
import torch

from extras.validation import moduledb


def _check(report) -> None:
    print(moduledb.summary(report))
    bad = [r for r in report.records if r.verdict in ("refused", "wrong", "crashed", "hung")]
    assert not bad, "\n".join(f"{r.verdict}: {r.op} sample {r.sample}: {r.detail}" for r in bad)
    counted = {r.op for r in report.records if r.verdict == "right"}
    missing = [info.name for info in moduledb.modules() if info.name not in counted]
    assert not missing, f"modules without a sample that ran: {missing}"


def test_default_part_of_module_db(opencl_device):
    names = [info.name for info in moduledb.modules()]
    assert len(names) > 100
    _check(moduledb.run(names, max_samples=moduledb.DEFAULT_MAX_SAMPLES))


@pytest.mark.slow
def test_whole_module_db(opencl_device):
    _check(moduledb.run([info.name for info in moduledb.modules()]))


def test_a_crash_is_caught_and_blamed_on_its_sample(opencl_device):
    records = moduledb.run_chunk(["nn.ReLU", "nn.Tanh"], crash_at="nn.ReLU#0", max_samples=2)
    crashed = [r for r in records if r.verdict == "crashed"]
    assert [(r.op, r.sample) for r in crashed] == [("nn.ReLU", 0)], records
    assert "SIGSEGV" in crashed[0].detail
    # The chunk went on after it: ReLU's other sample and Tanh's have verdicts.
    rest = [(r.op, r.verdict) for r in records if r.verdict != "crashed"]
    assert rest == [("nn.ReLU", "right"), ("nn.Tanh", "right"), ("nn.Tanh", "right")], records


class _Shifted(torch.nn.Module):
    """A linear layer that adds one on the device: a wrong answer the sweep must see."""

    def __init__(self, n, shift_on="opencl"):
        super().__init__()
        self.linear = torch.nn.Linear(n, n)
        self.shift_on = shift_on

    def forward(self, x):
        y = self.linear(x)
        return y + 1 if x.device.type == self.shift_on else y


class _Refusing(_Shifted):
    def forward(self, x):
        if x.device.type == "opencl":
            raise ValueError("no such kernel")
        return super().forward(x)


def _sample(n):
    args = SimpleNamespace(args=(torch.randn(3, n, requires_grad=True),), kwargs={})
    return SimpleNamespace(constructor_input=SimpleNamespace(args=(n,), kwargs={}), forward_input=args)


@pytest.mark.parametrize("cls, verdict", [(_Shifted, "wrong"), (_Refusing, "refused"),
                                          (lambda n: _Shifted(n, shift_on="nowhere"), "right")])
def test_verdicts_of_one_sample(opencl_device, cls, verdict):
    info = SimpleNamespace(name=f"test.{verdict}", module_cls=cls)
    assert moduledb.run_one(info, _sample(5))[0] == verdict
