"""Sorting and sampling on the opencl device against torch on the CPU, with
OCLF_FALLBACK=error: sort (stable: equal keys keep their order; NaN largest), argsort, topk
on awkward sizes and dtypes along any dimension, and multinomial draws (with and without
replacement) whose frequencies follow the probabilities and never pick a category of
probability 0; bad distributions raise (at the next wait, as torch CUDA's)."""
import re

import pytest
import torch

D = "opencl"


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


SHAPES = [(1,), (7,), (33,), (3, 1000), (2, 5, 9)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_like_torch(shape, descending):
    torch.manual_seed(0)
    x = torch.randint(-4, 5, shape).float()  # many equal keys
    for dim in range(-1, -len(shape) - 1, -1):
        ref = torch.sort(x, dim=dim, descending=descending, stable=True)
        got = torch.sort(x.to(D), dim=dim, descending=descending, stable=True)
        assert torch.equal(got.values.cpu(), ref.values)
        assert torch.equal(got.indices.cpu(), ref.indices)
        assert torch.equal(torch.argsort(x.to(D), dim=dim, stable=True).cpu(), torch.argsort(x, dim=dim, stable=True))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_sort_integer_dtypes(dtype):
    x = torch.randint(0, 2 if dtype == torch.bool else 100, (4, 37)).to(dtype)
    ref = torch.sort(x, stable=True, descending=True)
    got = torch.sort(x.to(D), stable=True, descending=True)
    assert torch.equal(got.values.cpu(), ref.values) and torch.equal(got.indices.cpu(), ref.indices)


def test_sort_nan_and_strided_view():
    x = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), 0.5], [1.0, 2.0, float("nan"), -float("inf"), 2.0]])
    for descending in (False, True):
        ref = torch.sort(x, descending=descending, stable=True)
        got = torch.sort(x.to(D), descending=descending, stable=True)
        assert torch.allclose(got.values.cpu(), ref.values, atol=0, rtol=0, equal_nan=True)
        assert torch.equal(got.indices.cpu(), ref.indices)
    y = torch.randn(6, 11)
    assert torch.equal(torch.sort(y.to(D).t())[0].cpu(), torch.sort(y.t())[0])
    values, indices = torch.empty(0).to(D), torch.empty(0, dtype=torch.long).to(D)
    torch.sort(y.to(D), dim=0, out=(values, indices))
    assert torch.equal(values.cpu(), torch.sort(y, dim=0).values)


@pytest.mark.parametrize("k", [1, 5, 50])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(k, largest):
    torch.manual_seed(1)
    x = torch.randn(3, 50, 7)
    ref = torch.topk(x, k, dim=1, largest=largest)
    got = torch.topk(x.to(D), k, dim=1, largest=largest)
    assert torch.equal(got.values.cpu(), ref.values)
    assert torch.equal(got.indices.cpu(), ref.indices)  # distinct keys: the indices are determined
    with pytest.raises(RuntimeError, match="out of range"):
        torch.topk(x.to(D), 51, dim=1)


def test_multinomial_with_replacement_follows_the_probabilities():
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 2.0]])
    torch.manual_seed(0)
    draws = torch.multinomial(p.to(D), 4000, replacement=True).cpu()
    assert draws.shape == (2, 4000) and draws.dtype == torch.long
    freq = torch.stack([torch.bincount(row, minlength=4) for row in draws]).double() / 4000
    assert torch.allclose(freq, p.double() / p.double().sum(1, keepdim=True), atol=0.03)
    assert (draws != 1).all() and (draws[1] == 3).all()  # probability 0 is never drawn
    torch.manual_seed(0)
    assert torch.equal(torch.multinomial(p.to(D), 4000, replacement=True).cpu(), draws)  # seeded


def test_multinomial_without_replacement():
    torch.manual_seed(0)
    p = torch.rand(5, 33)
    p[:, 7] = 0
    draws = torch.multinomial(p.to(D), 32, replacement=False).cpu()
    assert all(sorted(row.tolist()) == [j for j in range(33) if j != 7] for row in draws)
    first = torch.multinomial(torch.tensor([1.0, 1.0, 8.0]).to(D).expand(3000, 3), 1).cpu()
    assert abs((first == 2).double().mean().item() - 0.8) < 0.03
    # More draws than categories of nonzero probability: as torch, those of probability 0 come last.
    every = torch.multinomial(p.to(D), 33, replacement=False).cpu()
    assert (every[:, -1] == 7).all() and (torch.multinomial(p, 33, replacement=False)[:, -1] == 7).all()


# The distribution's checks run on the device and raise at the next wait for it (a sampling
# loop need not wait for every draw), or at the call with OCLF_DEVICE_INDEX_CHECKS=call.
@pytest.mark.parametrize("probs, replacement, message", [
    ([[0.5, 0.5], [0.0, 0.0]], True, "sum of probabilities <= 0"),
    ([[0.5, -0.1]], True, "contains either `inf`, `nan` or element < 0"),
    ([[0.5, float("nan")]], True, "contains either `inf`, `nan` or element < 0"),
    ([[1.0, 1.0], [0.0, 0.0]], False, "sum of probabilities <= 0"),
    ([[1.0, 1.0], [0.0, float("inf")]], False, "contains either `inf`, `nan` or element < 0"),
    ([[-1.0, 0.0, 0.0]], True, "contains either `inf`, `nan` or element < 0"),  # torch's first check wins
])
def test_multinomial_rejects_bad_distributions_at_the_next_wait(probs, replacement, message, monkeypatch):
    p = torch.tensor(probs)
    with pytest.raises(RuntimeError, match="multinomial distribution|probability tensor"):
        torch.multinomial(p, 2, replacement=replacement)  # torch rejects it too (in words that vary by path)
    draws = torch.multinomial(p.to(D), 2, replacement=replacement)  # queued, not waited for
    with pytest.raises(RuntimeError, match=re.escape(message) + ".*raised at the first wait"):
        draws.cpu()
    assert torch.multinomial(torch.tensor([[0.2, 0.8]]).to(D), 1).cpu().item() in (0, 1)  # the record was reset
    monkeypatch.setenv("OCLF_DEVICE_INDEX_CHECKS", "call")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        torch.multinomial(p.to(D), 2, replacement=replacement)
