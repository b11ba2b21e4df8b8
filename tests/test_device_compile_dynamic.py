"""torch.compile on the opencl device with sizes that change: every output and every
gradient of a compiled training step against the same step in float64 on the CPU, with the
device's eager float32 beside it to say how close float32 can be.

Compiled graphs meet new sizes three ways, each a family here: `dynamic=True` (sizes are
symbols from the first call), automatic dynamic shapes (a second size recompiles the graph
with symbols, as a training loop's last, smaller batch does) and static shapes (a graph per
size). Each family trains several small models (a CNN with batch norm, residual and
pooling; a transformer block over a sequence) for a few steps with the sizes changing
between calls (batch, image size, sequence length) and the parameters updated by SGD in
between, and compiles a second model of the same code in the same process, so kernels,
recordings and caches made for one graph must not serve another wrongly.

A generated kernel that computes a size-dependent factor in an integer (a batch norm's
1/(N·H·W) under dynamic shapes) gave gradients 100 % off while the forward stayed right:
the checks below compare gradients, not only outputs."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_checks import fresh_compile
from extras.validation import accuracy


@pytest.fixture
def device(opencl_device, monkeypatch):
    yield from fresh_compile(opencl_device, monkeypatch)


class SmallCNN(nn.Module):
    """Convolutions with batch norm, a strided residual block, pooling and a linear head."""

    def __init__(self, width: int = 6, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.conv1 = nn.Conv2d(width, 2 * width, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(2 * width)
        self.conv2 = nn.Conv2d(2 * width, 2 * width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 1, 2, bias=False), nn.BatchNorm2d(2 * width))
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + self.down(x))
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


class SmallTransformer(nn.Module):
    """Embedding, a pre-norm causal attention block and an MLP, over tokens (B, T)."""

    def __init__(self, vocab: int = 23, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v.transpose(1, 2)).transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.norm2(x))
        return self.out(x)


def cnn_inputs(batch: int, size: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 5, (batch,), generator=g)


def token_inputs(batch: int, length: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 23, (batch, length), generator=g)
    return tokens, torch.randint(0, 23, (batch, length), generator=g)


def loss_of(out, target):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


# A result's largest deviation from the reference, relative to the reference's largest value
# (the accuracy sweep's measure).
relative = accuracy.error


class Runs:
    """One model three times: compiled on the device, eager on the device, float64 on the
    CPU, trained side by side; each step's outputs and gradients compared with float64."""

    def __init__(self, make, compile_kwargs: dict, lr: float = 0.05):
        torch.manual_seed(0)
        model = make().train()
        self.reference = copy.deepcopy(model).double()
        self.eager = copy.deepcopy(model).to("opencl")
        self.compiled_model = copy.deepcopy(model).to("opencl")
        self.compiled = torch.compile(self.compiled_model, **compile_kwargs)
        self.optimizers = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
                           for m in (self.reference, self.eager, self.compiled_model)]

    def step(self, x, target, what: str) -> None:
        floating = x.is_floating_point()
        ref_out = self.reference(x.double() if floating else x)
        loss_of(ref_out, target).backward()
        d = torch.device("opencl")
        outs = []
        for model in (self.eager, self.compiled):
            out = model(x.to(d))
            loss_of(out, target.to(d)).backward()
            outs.append(out)
        problems = self._compare("output", outs, ref_out)
        named = zip(self.reference.named_parameters(), self.eager.parameters(), self.compiled_model.parameters())
        for (name, ref), eager, compiled in named:
            problems += self._compare(f"{name}.grad", [eager.grad, compiled.grad], ref.grad)
        assert not problems, f"{what}:\n" + "\n".join(problems)
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad()

    @staticmethod
    def _compare(name: str, pair, ref) -> list:
        eager_error, compiled_error = relative(pair[0], ref), relative(pair[1], ref)
        # float32 against float64: the compiled step may round differently from eager, not
        # worse than a few times as much (1e-5 where eager is nearly exact).
        if compiled_error > max(4 * eager_error, 1e-5):
            return [f"  {name}: compiled {compiled_error:.2e}, eager {eager_error:.2e} (relative to float64)"]
        return []


CNN_SIZES = [(4, 16), (3, 12), (2, 20)]   # (batch, image size) per step
TOKEN_SIZES = [(2, 7), (3, 11), (1, 5)]    # (batch, sequence length) per step
slow = pytest.mark.slow  # a compiled training step costs PoCL on 2 cores 10-20 s per new graph


@pytest.mark.parametrize("mode", [pytest.param("dynamic", marks=slow), "automatic", pytest.param("static", marks=slow)])
def test_cnn_training_with_changing_sizes(device, mode):
    kwargs = {"dynamic": True} if mode == "dynamic" else {"dynamic": False} if mode == "static" else {}
    runs = Runs(SmallCNN, kwargs)
    for i, (batch, size) in enumerate(CNN_SIZES):
        runs.step(*cnn_inputs(batch, size, seed=i), what=f"{mode} step {i}: batch {batch}, {size}x{size}")


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("automatic", marks=slow)])
def test_transformer_training_with_changing_lengths(device, mode):
    runs = Runs(SmallTransformer, {"dynamic": True} if mode == "dynamic" else {})
    for i, (batch, length) in enumerate(TOKEN_SIZES):
        runs.step(*token_inputs(batch, length, seed=i), what=f"{mode} step {i}: batch {batch}, length {length}")


def test_a_second_model_of_the_same_code_in_one_process(device):
    """Two models of one class, compiled one after the other: the second's graphs meet the
    first's kernels, recordings and caches (and automatic dynamic shapes see the class's
    code again), and each still trains right."""
    first = Runs(SmallCNN, {})
    first.step(*cnn_inputs(4, 16, seed=0), what="first model")
    second = Runs(lambda: SmallCNN(width=4, classes=3), {})
    for i, (batch, size) in enumerate([(4, 16), (2, 12)]):  # a second size: automatic dynamic shapes
        x, target = cnn_inputs(batch, size, seed=10 + i)
        second.step(x, target % 3, what=f"second model, step {i}")
    first.step(*cnn_inputs(3, 12, seed=5), what="first model again")


@pytest.mark.parametrize("dynamic", [True, pytest.param(None, marks=slow)])
def test_inference_with_changing_sizes(device, dynamic):
    """Eval mode (batch norm folded into the convolutions by the device's graph pass) over
    sizes that change, against float64."""
    torch.manual_seed(1)
    model = SmallCNN().eval()
    for module in model.modules():  # running statistics other than 0 and 1
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    reference = copy.deepcopy(model).double()
    compiled = torch.compile(copy.deepcopy(model).to("opencl"), dynamic=dynamic)
    with torch.no_grad():
        for i, (batch, size) in enumerate(CNN_SIZES):
            x, _ = cnn_inputs(batch, size, seed=20 + i)
            ref = reference(x.double())
            out = compiled(x.to("opencl"))
            assert out.shape == ref.shape
            assert relative(out, ref) < 1e-5, (batch, size, relative(out, ref))


def test_batch_norm_backward_with_symbolic_sizes(device):
    """Batch norm's backward in one compiled graph with symbolic sizes: its 1/(N·H·W) is a
    floating-point value of a generated kernel, not an integer index (it was 0)."""
    def normed(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True) * x

    compiled = torch.compile(normed, dynamic=True)
    for i, shape in enumerate([(3, 5, 7, 7), (2, 5, 9, 4)]):
        g = torch.Generator().manual_seed(i)
        x, w, b, dy = (torch.randn(s, generator=g, dtype=torch.float64) for s in (shape, shape[1], shape[1], shape))
        ref = [t.clone().requires_grad_() for t in (x, w, b)]
        normed(*ref).backward(dy)
        ours = [t.float().to("opencl").requires_grad_() for t in (x, w, b)]
        out = compiled(*ours)
        out.backward(dy.float().to("opencl"))
        assert relative(out, normed(x, w, b)) < 1e-5, shape
        for name, mine, theirs in zip("xwb", ours, ref):
            assert relative(mine.grad, theirs.grad) < 1e-5, (shape, name, relative(mine.grad, theirs.grad))
