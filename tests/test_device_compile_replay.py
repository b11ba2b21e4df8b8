"""torch.compile on the opencl device: each compiled graph runs as written, is recorded on
its second call and replayed after (torch_opencl/compile/replay.py). Replays
launch nothing kernel by kernel, results a caller holds keep their values, buffers derived
from weights never serve old values, a training step with a compiled optimizer copies in
only what is new each step, inputs that move are followed or recorded again, 0-dim CPU
inputs are copied in, results fed back stay right, and dropout draws new masks each replay.
Results are compared with float64 on the CPU."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_checks import close, counters, fresh_compile, replays


@pytest.fixture
def device(opencl_device, monkeypatch):
    yield from fresh_compile(opencl_device, monkeypatch)


def test_replays_run_no_host_work_per_kernel_and_held_results_keep(device):
    def f(x):
        return F.silu(x @ x.t()).softmax(-1) + x.sum()

    cf = torch.compile(f)
    inputs = [torch.randn(7, 33) for _ in range(5)]
    held = []
    for i, x in enumerate(inputs):
        launches = torch.opencl.memory_stats()["kernel_launches"] if i >= 2 else None
        held.append(cf(x.to("opencl")))
        if launches is not None:  # replays: the graph's commands, not launches one by one
            assert torch.opencl.memory_stats()["kernel_launches"] - launches <= 1
    c = counters()
    assert c["recorded"] == 1 and c["replayed"] == 3, dict(c)
    for out, x in zip(held, inputs):  # each result is still its own (moved off the recording's memory)
        close(out, f(x.double()))
    assert c["relocated"] >= 3


def test_weights_made_in_the_graph_and_parameters_changed_later(device):
    """Convolution weights computed in the graph land in buffers Inductor reuses, and
    parameters change after graphs were recorded: the device's buffers derived from a
    weight (packed copies, kept per version) must never serve old values."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 96, 1).eval()
    x = torch.randn(2, 16, 16, 16)

    def f(conv, x):
        y = F.conv2d(x, conv.weight * 2, conv.bias)
        z = F.conv2d(x, conv.weight * 3 - 1, conv.bias)  # may take the buffer of y's weights
        return y.relu() + z + conv(x)

    dev = copy.deepcopy(conv).to("opencl")
    cf = torch.compile(f)
    with torch.no_grad():
        for step in range(5):
            if step == 3:
                conv.weight.mul_(-0.5)
                dev.weight.mul_(-0.5)
            close(cf(dev, x.to("opencl")), f(copy.deepcopy(conv).double(), x.double()))
    assert counters()["replayed"] >= 1, replays()


def test_training_step_matches_eager(device):
    """Forward and backward graphs (AOTAutograd), a convolution with batch norm (running
    statistics written in place), max pooling with padding (masked loads), and a compiled
    optimizer step; four steps with new batches. The replays copy in only what is new each
    step (the batch, the loss's gradient): the backward graph reads the activations the
    forward's recording saved, and the optimizer's graph the gradients, where they are."""
    from torch_opencl.compile import replay

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.Flatten(), nn.Linear(6 * 4 * 4, 33), nn.LayerNorm(33), nn.GELU(), nn.Linear(33, 5))
    eager, compiled = copy.deepcopy(model).to("opencl"), copy.deepcopy(model).to("opencl")
    ref = copy.deepcopy(model).double()
    runs = []
    for m, dtype, dev in ((eager, torch.float32, "opencl"), (compiled, torch.float32, "opencl"),
                          (ref, torch.float64, "cpu")):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=m is not ref)
        fwd = torch.compile(m) if m is compiled else m
        step = torch.compile(opt.step) if m is compiled else opt.step
        torch.manual_seed(1)
        losses = []
        for _ in range(4):  # first run, recording, replays (or, where a gradient moved, a second recording)
            x, t = torch.randn(2, 3, 7, 7), torch.randint(0, 5, (2,))
            loss = F.cross_entropy(fwd(x.to(dev, dtype)), t.to(dev))
            loss.backward()
            step()
            opt.zero_grad()
            losses.append(loss.detach())
        runs.append(losses)
    for eager_loss, compiled_loss, ref_loss in zip(*runs):
        assert abs(compiled_loss.item() - ref_loss.item()) <= 1e-4 * max(1, abs(ref_loss.item()))
    for name, tensor in ref.state_dict().items():
        if tensor.is_floating_point():
            err = (compiled.state_dict()[name].cpu().double() - tensor).abs().max().item()
            eager_err = (eager.state_dict()[name].cpu().double() - tensor).abs().max().item()
            assert err <= max(1e-5, 10 * eager_err), (name, err, eager_err)
    assert counters()["replayed"] >= 3, replays()
    copied = sorted(t.numel() for w in replay._wrapped for rec in w.recordings.values() for t in rec.private.values())
    assert copied == [2 * 5, 2 * 3 * 7 * 7], copied


def test_an_input_made_anew_now_and_then_is_followed_where_it_is(device):
    """A graph input that the graph writes in place and that is made anew now and then,
    staying put between (a key/value cache each generate() makes): when it moves to a new
    storage laid out as the old one, the recording is pointed at it (no new recording), read
    and written where it is, not copied in and out around every replay; the graph's writes
    land in the tensor of the call. A new cache laid out otherwise (at another offset of its
    storage) is recorded again."""
    from torch_opencl.compile import replay

    cf = torch.compile(lambda t, cache: cache.add_(t).mul(2))
    x = torch.zeros(1, device="opencl")  # the same tensor every call, refilled
    kept = []  # the old caches stay alive: each new one gets a buffer of its own
    for generation in range(4):
        if generation < 3:
            cache = torch.zeros(5, device="opencl")
        else:
            cache = torch.zeros(6, device="opencl")[1:]  # at an offset: recorded again
        ref = torch.zeros(5)
        kept.append(cache)
        recorded, rebound = counters()["recorded"], counters()["rebound"]
        for i in range(5):
            x.fill_(i + 1.0)
            ref += i + 1.0
            out = cf(x, cache)
            assert torch.equal(cache.cpu(), ref) and torch.equal(out.cpu(), 2 * ref), replays()
        if generation in (1, 2):
            assert counters()["rebound"] - rebound == 1 and counters()["recorded"] == recorded, replays()
        if generation == 3:
            assert counters()["recorded"] - recorded == 1 and counters()["rebound"] == rebound, replays()
    for old in kept[:-1]:  # the caches of earlier generations kept what they held
        assert torch.equal(old.cpu(), torch.full((5,), 15.0))
    assert counters()["replayed"] >= 14, replays()
    for wrapper in list(replay._wrapped):
        for rec in wrapper.recordings.values():
            assert all(t.numel() != 5 for t in rec.private.values()), "the cache is copied around each replay"


def test_a_moved_input_with_derived_buffers_is_recorded_again(device):
    """An input the recording read through a buffer derived from it (a weight's transposed
    copy) and that then moves to a new tensor is recorded again, not pointed at: the derived
    buffer in the recording would be the old weight's. Either way the results are right."""
    torch.manual_seed(0)
    cf = torch.compile(lambda a, w: torch.relu(a @ w) + 1)
    a = torch.randn(5, 33)
    with torch.no_grad():
        for generation in range(3):
            w = nn.Parameter(torch.randn(33, 7).to("opencl"))  # a leaf that requires grad
            ref = torch.relu(a.double() @ w.detach().cpu().double()) + 1
            for _ in range(4):
                close(cf(a.to("opencl"), w), ref)
    assert counters()["replayed"] >= 4, replays()


def test_zero_dim_cpu_inputs_are_copied_in_for_each_replay(device):
    """0-dim CPU inputs that the graph only reads (a static key/value cache's lengths, which
    transformers makes on the CPU) are copied to the device before each replay, so the
    graph replays with the value of each call; a graph that computes with them on the CPU
    runs as written."""
    x = torch.randn(7, 33).to("opencl")
    f = torch.compile(lambda x, n: x * n.to(x.device) + 1)
    for i in range(6):
        close(f(x, torch.tensor(i + 0.5)), x.cpu().double() * (i + 0.5) + 1)
    assert counters()["replayed"] >= 3, replays()
    # A graph with no opencl input at all: the recording's copies go to the current device.
    h = torch.compile(lambda n: torch.ones(3, device="opencl") * n.to("opencl"))
    for i in range(4):
        assert h(torch.tensor(float(i))).cpu().tolist() == [float(i)] * 3

    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    counters().clear()
    g = torch.compile(lambda x, n: x * (n * 2 + 1).to(x.device))
    _, code = run_and_get_code(g, x, torch.tensor(1.0))
    assert "cpu_scalars=False" in code[0]  # the scalar's arithmetic is a CPU kernel
    for i in range(4):
        close(g(x, torch.tensor(float(i))), x.cpu().double() * (2 * i + 1))
    assert counters()["replayed"] == 0 and counters()["plain"] == 5, replays()


def test_a_state_read_in_place_then_fed_back_stays_right(device):
    """A graph that read its state in place for a few calls (replayed) and is then fed its
    own last result: the result is not read where the replay writes (the recording is not
    pointed at its own memory), and the results a caller holds survive the recording made
    again (moved off the old recording's memory first)."""
    torch.manual_seed(0)
    w = torch.randn(33, 33) / 6
    f = torch.compile(lambda s, w: torch.tanh(w @ s + s.flip(0)))
    wd, s0 = w.to("opencl"), torch.randn(33, 5)
    sd = s0.to("opencl")
    ref = torch.tanh(w.double() @ s0.double() + s0.double().flip(0))
    for _ in range(3):  # the same state tensor each call: read in place, replayed
        out = f(sd, wd)
    close(out, ref)
    held = [out]
    for _ in range(4):  # now fed its own result
        held.append(f(held[-1], wd))
        ref = torch.tanh(w.double() @ ref + ref.flip(0))
        close(held[-1], ref)
    close(held[0], torch.tanh(w.double() @ s0.double() + s0.double().flip(0)))
    assert counters()["rebound"] == 0, replays()


def test_results_fed_back_stay_right_and_stop_recording(device):
    """A graph fed its own last result (a recurrent state), and two graphs feeding each other
    across a graph break: every call right, and the recordings settle (a result handed out
    over a recording's memory moves when the next replay relocates it)."""
    def step(x, h):
        a = (h * 0.5 + x).sin()
        torch._dynamo.graph_break()
        return a.cos() * 0.9 + h * 0.1

    for fn in (lambda x, h: (h * 0.5 + x).sin(), step):
        cf = torch.compile(fn)
        x = torch.randn(33)
        h, ref = torch.zeros(33, device="opencl"), torch.zeros(33, dtype=torch.float64)
        recorded = []
        for _ in range(12):
            h, ref = cf(x.to("opencl"), h), fn(x.double(), ref)
            close(h, ref)
            recorded.append(counters()["recorded"])
        assert recorded[-1] == recorded[-5], replays()  # no recording in the last four calls
        assert counters()["replayed"] >= 4, replays()
        counters().clear()


def test_dropout_draws_new_masks_each_replay(device):
    cf = torch.compile(lambda t: F.dropout(t, 0.5, training=True))
    x = torch.ones(33, 65).to("opencl")
    masks = [cf(x).cpu() for _ in range(4)]
    assert counters()["replayed"] >= 1, replays()
    for m in masks:
        assert set(m.unique().tolist()) <= {0.0, 2.0} and 0.4 < (m == 0).float().mean().item() < 0.6
    assert not torch.equal(masks[2], masks[3])
    # A graph with no input at all that draws random numbers records and replays as well.
    made = torch.compile(lambda: F.dropout(torch.ones(33, 65, device="opencl"), 0.5, training=True))
    masks = [made().cpu() for _ in range(4)]
    assert not torch.equal(masks[2], masks[3]) and 0.4 < (masks[3] == 0).float().mean().item() < 0.6
