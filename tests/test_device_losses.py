"""Losses public programs meet, native on the opencl device (OCLF_FALLBACK=error): binary
cross-entropy (and with logits), smooth L1, Huber, 2-D NLL, the margin and multi-label margin
losses (and torch's compositions of the device's operators: soft margin, hinge embedding,
margin ranking, cosine embedding, triplet), CTC. Each against torch on the CPU, outputs and
the input gradients (tests/device_checks.py), in every reduction, on awkward shapes, float64
and 16-bit dtypes, and torch's errors."""
import pytest
import torch
import torch.nn.functional as F

from device_checks import check, fallback_allowed, randn


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction):
    x, t = torch.sigmoid(randn(4, 7)), torch.rand(4, 7, generator=torch.Generator().manual_seed(1))
    check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), x, t, grad=(0,))
    check(lambda a, b, w: F.binary_cross_entropy(a, b, weight=w, reduction=reduction), x, t, torch.rand(7) + 0.5,
          grad=(0,))
    # inputs at 0 and 1: each log clamped at -100, as torch
    edge = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5])
    target = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.3])
    check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), edge, target, grad=False)
    check(lambda a, b: F.binary_cross_entropy(a.t(), b.t(), reduction=reduction), x, t, grad=(0,))  # strided
    check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), x[0, 0], t[0, 0], grad=(0,))  # 0-d
    dx = torch.sigmoid(randn(5, 3, dtype=torch.float64))
    check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), dx, torch.rand(5, 3, dtype=torch.float64),
          atol=1e-12, rtol=1e-10, grad=(0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits(reduction):
    x, t = randn(4, 7) * 4, torch.rand(4, 7, generator=torch.Generator().manual_seed(1))
    check(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), x, t)
    check(lambda a, b, w, p: F.binary_cross_entropy_with_logits(a, b, weight=w, pos_weight=p, reduction=reduction),
          x, t, torch.rand(7) + 0.5, torch.rand(7) + 0.5, grad=(0, 1))


def test_binary_cross_entropy_errors_and_16_bits():
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([0.5, 1.5], device="opencl"), torch.ones(2, device="opencl"))
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([float("nan")], device="opencl"), torch.ones(1, device="opencl"))
    x, t = torch.sigmoid(randn(6, 5)), torch.rand(6, 5, generator=torch.Generator().manual_seed(1))
    for dtype in (torch.float16, torch.bfloat16):
        got = F.binary_cross_entropy(x.to(dtype).to("opencl"), t.to(dtype).to("opencl"))
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().float(), F.binary_cross_entropy(x, t), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_smooth_l1_and_huber(reduction):
    x, t = randn(5, 9) * 2, randn(5, 9, seed=1)
    for beta in (0.0, 0.5, 2.0):
        check(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta), x, t)
    for delta in (0.3, 1.0, 3.0):
        check(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta), x, t)
    check(lambda a, b: F.smooth_l1_loss(a[:, ::3], b[:, 1::3], reduction=reduction), x, t)  # strided
    check(lambda a, b: F.huber_loss(a, b, reduction=reduction), randn(0, 3), randn(0, 3))  # empty
    check(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.7), x.double(), t.double(), atol=1e-12,
          rtol=1e-10)
    with pytest.raises(RuntimeError, match="negative values for beta"):
        torch.ops.aten.smooth_l1_loss(x.to("opencl"), t.to("opencl"), 1, -1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        torch.ops.aten.huber_loss(x.to("opencl"), t.to("opencl"), 1, 0.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_2d(reduction):
    x = randn(2, 5, 3, 7)
    target = torch.randint(0, 5, (2, 3, 7), generator=torch.Generator().manual_seed(2))
    target[0, 1, 2] = 4
    check(lambda a, y: F.nll_loss(F.log_softmax(a, 1), y, reduction=reduction), x, target)
    check(lambda a, y, w: F.nll_loss(F.log_softmax(a, 1), y, weight=w, ignore_index=4, reduction=reduction), x, target,
          torch.rand(5) + 0.2, grad=(0,))
    check(lambda a, y: F.cross_entropy(a, y, reduction=reduction), x.permute(0, 1, 3, 2), target.transpose(1, 2))
    check(lambda a, y: F.cross_entropy(a, y, reduction=reduction, label_smoothing=0.1), x, target)
    with pytest.raises(RuntimeError, match="size mismatch"):
        torch.ops.aten.nll_loss2d(x.to("opencl"), target[:, :2].to("opencl"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_losses(reduction):
    x = randn(6, 5)
    y = torch.randint(0, 5, (6,), generator=torch.Generator().manual_seed(3))
    for p, margin in ((1, 1.0), (2, 0.5)):
        check(lambda a, t: F.multi_margin_loss(a, t, p=p, margin=margin, reduction=reduction), x, y)
        check(lambda a, t, w: F.multi_margin_loss(a, t, p=p, margin=margin, weight=w, reduction=reduction), x, y,
              torch.rand(5) + 0.5, grad=(0,))
    check(lambda a, t: F.multi_margin_loss(a, t, reduction=reduction), x[0], y[:1])  # one sample (C)
    check(lambda a, t: F.multi_margin_loss(a.t(), t, reduction=reduction), randn(5, 6), y)  # non-contiguous
    labels = torch.tensor([[3, 0, -1, 1, 1], [0, 1, 2, 3, 4], [-1, 2, 2, 2, 2], [4, -1, 0, 0, 0], [2, 2, -1, 0, 0],
                           [1, 3, 4, -1, 3]])
    check(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x, labels)
    check(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x[1], labels[0])
    check(lambda a, t: F.multi_margin_loss(a, t, reduction=reduction), x.double(), y, atol=1e-12, rtol=1e-10)
    # torch's compositions of the device's operators
    t = torch.sign(randn(6, 5, seed=4))
    check(lambda a, b: F.soft_margin_loss(a, b, reduction=reduction), x, t, grad=(0,))
    check(lambda a, b: F.hinge_embedding_loss(a, b, margin=0.7, reduction=reduction), x, t)
    check(lambda a, b, c: F.margin_ranking_loss(a, b, c, margin=0.2, reduction=reduction), x, randn(6, 5, seed=5), t)
    check(lambda a, b: F.multilabel_soft_margin_loss(a, b, reduction=reduction), x, (t > 0).float(), grad=(0,))
    check(lambda a, b, c: F.cosine_embedding_loss(a, b, c, margin=0.1, reduction=reduction), x, randn(6, 5, seed=6),
          t[:, 0])
    with fallback_allowed():  # its pairwise distances: torch's norm.out, not native
        check(lambda a, b, c: F.triplet_margin_loss(a, b, c, reduction=reduction), x, randn(6, 5, seed=7),
              randn(6, 5, seed=8))


def test_margin_loss_errors():
    x = randn(3, 4).to("opencl")
    with pytest.raises(IndexError, match="multi_margin_loss: target 4 is out of bounds for a dimension of size 4"):
        F.multi_margin_loss(x, torch.tensor([0, 4, 1], device="opencl"))
        torch.opencl.synchronize()  # checked on the device: raised at the next wait
    with pytest.raises((RuntimeError, ValueError), match="only p == 1 and p == 2"):
        F.multi_margin_loss(x, torch.tensor([0, 3, 1], device="opencl"), p=3)
    with pytest.raises(RuntimeError, match="inconsistent target size"):
        F.multilabel_margin_loss(x, torch.zeros(3, 3, dtype=torch.long, device="opencl"))
    with pytest.raises(IndexError, match="multilabel_margin_loss: target -2 is out of bounds"):
        F.multilabel_margin_loss(x, torch.full((3, 4), -2, device="opencl")).cpu()
    # nll_loss (so cross_entropy) as torch's "Target 5 is out of bounds", ignore_index aside
    logits, y = x.log_softmax(1), torch.tensor([0, -100, 3], device="opencl")
    assert torch.allclose(F.nll_loss(logits, y).cpu(), F.nll_loss(logits.cpu(), y.cpu()), atol=1e-6)
    with pytest.raises(IndexError, match="nll_loss: target 5 is out of bounds for a dimension of size 4"):
        F.cross_entropy(x, torch.tensor([0, 5, 1], device="opencl")).item()


def log_probs(T, N, C, seed=0, dtype=torch.float32):
    return F.log_softmax(randn(T, N, C, seed=seed, dtype=dtype), -1)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_ctc_loss(reduction):
    T, N, C = 12, 4, 6
    g = torch.Generator().manual_seed(5)
    targets = torch.randint(1, C, (N, 5), generator=g)
    targets[1, :3] = torch.tensor([2, 2, 2])  # repeated labels need blanks between them
    input_lengths, target_lengths = [12, 9, 7, 1], [5, 3, 0, 1]
    fn = lambda x, t: F.ctc_loss(F.log_softmax(x, -1), t, input_lengths, target_lengths, reduction=reduction)
    check(fn, randn(T, N, C), targets)
    # concatenated targets, lengths as tensors, another blank
    flat = torch.cat([targets[b, :n] for b, n in enumerate(target_lengths)]) - 1
    check(lambda x, t: F.ctc_loss(F.log_softmax(x, -1), t, torch.tensor(input_lengths), torch.tensor(target_lengths),
                                  blank=C - 1, reduction=reduction), randn(T, N, C), flat)
    # float64 (log-probabilities given: the device's softmax kernels are float32)
    check(lambda lp, t: F.ctc_loss(lp, t, input_lengths, target_lengths, reduction=reduction),
          log_probs(T, N, C, dtype=torch.float64), targets, atol=1e-10, rtol=1e-10)


def test_ctc_loss_impossible_alignments_and_unbatched():
    # A target longer than its input: infinite loss, or 0 (and 0 gradients) with zero_infinity.
    targets = torch.tensor([[1, 2, 3, 4], [1, 1, 1, 1]])
    for zero_infinity in (False, True):
        check(lambda x, t: F.ctc_loss(F.log_softmax(x, -1), t, [3, 6], [4, 4], reduction="none",
                                      zero_infinity=zero_infinity), randn(6, 2, 5), targets)
    check(lambda x, t: F.ctc_loss(F.log_softmax(x, -1), t, [8], [3]), randn(8, 5), targets[0, :3])  # (T, C) input
    module = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    check(lambda x, t: module(F.log_softmax(x, -1), t, [10, 10], [4, 2]), randn(10, 2, 7), targets)
    with pytest.raises(RuntimeError, match="input_lengths"):
        F.ctc_loss(log_probs(5, 2, 4).to("opencl"), targets[:, :2].to("opencl"), [6, 5], [2, 2])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(log_probs(5, 2, 4).to("opencl"), targets[:, :2].to("opencl"), [5, 5], [2, 2], blank=4)


