"""Recurrent layers on the opencl device against torch on the CPU, forward and backward: LSTM,
GRU and RNN (tanh and ReLU) with several layers, both directions, batch-first, projections,
given and missing initial states, packed sequences of unequal lengths; LSTMCell, GRUCell and
RNNCell; the fused cells themselves (kernels/rnn.cl) on awkward sizes, with a missing state
gradient, in float64, and their errors. OCLF_FALLBACK=error: each runs natively."""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils._pytree import tree_leaves, tree_map

ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


def close(got, ref, atol=ATOL, rtol=RTOL):
    got = got.detach().cpu()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
    torch.testing.assert_close(got, ref.detach(), atol=atol, rtol=rtol)


def check_module(make, *inputs, use=lambda out: out):
    """The module on the CPU and a copy on the device: outputs, the inputs' and every
    parameter's gradients of sum(use(output) · R) agree."""
    torch.manual_seed(0)
    cpu = make()
    dev = make().to("opencl")
    dev.load_state_dict(cpu.state_dict())
    results = []
    for module, device in ((cpu, "cpu"), (dev, "opencl")):
        xs = tree_map(lambda x: x.detach().clone().to(device).requires_grad_(x.is_floating_point()), inputs)
        outs = [o for o in tree_leaves(use(module(*xs))) if isinstance(o, torch.Tensor)]
        generator = torch.Generator().manual_seed(1)
        loss = sum((o * torch.randn(o.shape, generator=generator).to(device)).sum() for o in outs)
        loss.backward()
        grads = [x.grad for x in tree_leaves(xs) if x.requires_grad] + [p.grad for p in module.parameters()]
        results.append((outs, grads))
    for got, ref in zip(results[1][0] + results[1][1], results[0][0] + results[0][1]):
        close(got, ref)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("kw", [
    dict(num_layers=2),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False, bidirectional=True),
    dict(num_layers=3, batch_first=True),
])
def test_recurrent_layers(cls, kw):
    x = randn(7, 3, 5)  # (T, B, input) or, batch-first, (B=7, T=3, input)
    check_module(lambda: cls(5, 9, **kw), x)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_given_initial_state_and_an_unbatched_sequence(cls):
    layers, hidden = 2, 4
    h0 = randn(2 * layers, 3, hidden, seed=1)
    state = (h0, randn(2 * layers, 3, hidden, seed=2)) if cls is torch.nn.LSTM else h0
    check_module(lambda: cls(6, hidden, layers, bidirectional=True), randn(5, 3, 6), state)
    check_module(lambda: cls(6, hidden), randn(5, 6))  # (T, input): no batch dimension


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")  # the CPU's run
def test_lstm_with_projections_and_relu_rnn():
    check_module(lambda: torch.nn.LSTM(6, 8, 2, proj_size=3, bidirectional=True), randn(4, 2, 6))
    check_module(lambda: torch.nn.RNN(6, 8, 2, nonlinearity="relu"), randn(4, 2, 6))


@pytest.mark.parametrize("which", ["output", "h_n", "c_n"])
def test_lstm_gradient_from_one_result_only(which):
    # A result the loss does not use sends no gradient: the fused cell's backward gets None
    # for dhy or dcy.
    pick = {"output": lambda r: r[0], "h_n": lambda r: r[1][0], "c_n": lambda r: r[1][1]}[which]
    check_module(lambda: torch.nn.LSTM(5, 7, 2), randn(6, 3, 5), use=pick)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_packed_sequences_of_unequal_lengths(cls):
    lengths = torch.tensor([2, 6, 1, 4])

    def make():
        class Packed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = cls(3, 5, num_layers=2, bidirectional=True, batch_first=True)

            def forward(self, x):
                packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                out, state = self.rnn(packed)
                padded, out_lengths = pad_packed_sequence(out, batch_first=True)
                assert torch.equal(out_lengths, lengths)
                return padded, state

        return Packed()

    check_module(make, randn(4, 6, 3))


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell])
@pytest.mark.parametrize("bias", [True, False])
def test_cells(cls, bias):
    x, h = randn(7, 5), randn(7, 11, seed=1)
    state = (h, randn(7, 11, seed=2)) if cls is torch.nn.LSTMCell else h
    check_module(lambda: cls(5, 11, bias=bias), x, state)
    check_module(lambda: cls(5, 11, bias=bias), x)  # a zero state
    check_module(lambda: cls(5, 11, bias=bias), randn(5))  # unbatched


def lstm_reference(ig, hg, cx, b_ih, b_hh):
    i, f, g, o = (ig + hg + b_ih + b_hh).chunk(4, 1)
    cy = torch.sigmoid(f) * cx + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cy), cy


def gru_reference(ig, hg, hx, b_ih, b_hh):
    ir, iz, in_ = (ig + b_ih).chunk(3, 1)
    hr, hz, hn = (hg + b_hh).chunk(3, 1)
    r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
    n = torch.tanh(in_ + r * hn)
    return n + z * (hx - n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch, hidden", [(1, 1), (3, 7), (5, 33)])
def test_fused_cells_and_their_gradients(dtype, batch, hidden):
    """The fused ops directly, against the cells' formulas differentiated by autograd on the CPU."""
    for k, fused, reference in ((4, torch.ops.aten._thnn_fused_lstm_cell, lstm_reference),
                                (3, torch.ops.aten._thnn_fused_gru_cell, gru_reference)):
        args = [randn(batch, k * hidden, seed=s).to(dtype) for s in (1, 2)]
        args += [randn(batch, hidden, seed=3).to(dtype)] + [randn(k * hidden, seed=s).to(dtype) for s in (4, 5)]
        ref_args = [a.clone().requires_grad_() for a in args]
        dev_args = [a.to("opencl").requires_grad_() for a in args]
        ref = reference(*ref_args)
        got = fused(*dev_args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        outs = got[:2] if k == 4 else got[:1]
        tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-6, rtol=2e-6)
        weights = [randn(*r.shape, seed=6 + j).to(dtype) for j, r in enumerate(ref)]
        sum((r * w).sum() for r, w in zip(ref, weights)).backward()
        sum((o * w.to("opencl")).sum() for o, w in zip(outs, weights)).backward()
        for o, r in zip(outs, ref):
            close(o, r, **tol)
        for d, r in zip(dev_args, ref_args):
            close(d.grad, r.grad, **tol)


def test_fused_cells_refuse_mismatched_shapes():
    d = lambda *s: torch.zeros(*s, device="opencl")
    with pytest.raises(RuntimeError, match="input_gates and hidden_gates must be"):
        torch.ops.aten._thnn_fused_lstm_cell(d(2, 12), d(2, 12), d(2, 4))
    with pytest.raises(RuntimeError, match="the biases must be"):
        torch.ops.aten._thnn_fused_gru_cell(d(2, 12), d(2, 12), d(2, 4), d(11), d(11))
    with pytest.raises(RuntimeError, match="the state must be 2-D"):
        torch.ops.aten._thnn_fused_gru_cell(d(2, 12), d(2, 12), d(8))
