"""Recorded steps of the opencl device (torch_opencl.graph, runtime/graph.{h,cpp}):
a replay with new inputs gives what running the step gives, for inference and for whole
training steps (forward, backward, fused optimizer); what a step may not do while
recording (wait for the device) raises and leaves nothing behind; the graph's memory is
its own until it is released."""
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture(params=["command buffers", "enqueues"])
def device(opencl_device, monkeypatch, request):
    """Each test twice: recordings made into command buffers where the device has them
    (PoCL does), and replayed as plain enqueues (as on NVIDIA)."""
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    monkeypatch.setenv("OCLF_GRAPH_COMMAND_BUFFERS", "1" if request.param == "command buffers" else "0")
    return opencl_device


def test_command_buffers_where_the_device_has_them(device):
    x = torch.randn(100).to("opencl")
    with device.graph() as g:
        y = (x * 2).exp() + x
    g.replay()
    g.replay()                                          # enqueued again while the last may still run
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).exp() + x.cpu())
    available = device.Graph.command_buffers_available()
    if "Portable Computing Language" in torch.opencl.get_device_name():
        assert available                                # so the tests run both paths here
    wanted = os.environ["OCLF_GRAPH_COMMAND_BUFFERS"] == "1"
    assert g.counts()["command_buffers"] == (1 if available and wanted else 0)


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 10, 3, padding=1), nn.BatchNorm2d(10), nn.ReLU(),
                         nn.Conv2d(10, 14, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(14, 7), nn.GELU(), nn.Linear(7, 5))


def batch(step):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(6, 3, 11, 13, generator=gen), torch.randint(0, 5, (6,), generator=gen)


def test_replay_with_new_inputs_gives_what_running_gives(device):
    model = small_net().eval().to("opencl")
    static = batch(0)[0].to("opencl")
    with torch.no_grad():
        model(static)
        with device.graph() as g:
            out = model(static)
        assert g.counts()["launches"] > 5
        for step in (1, 2, 3):
            x = batch(step)[0].to("opencl")
            static.copy_(x)
            g.replay()
            torch.testing.assert_close(out.cpu(), model(x).cpu(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", [
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3, fused=True),
    lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True),
], ids=["sgd", "adam"])
def test_replayed_training_steps_train_as_running_them(device, optimizer):
    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    eager = small_net().to("opencl")
    eager_opt = optimizer(list(eager.parameters()))
    losses = [step(eager, eager_opt, *(t.to("opencl") for t in batch(i))).item() for i in range(6)]

    model = small_net().to("opencl")
    opt = optimizer(list(model.parameters()))
    for i in range(2):                                   # warm-up: state made, first-use work done
        step(model, opt, *(t.to("opencl") for t in batch(i)))
    x, y = (t.to("opencl") for t in batch(2))
    with device.graph() as g:
        loss = step(model, opt, x, y)                    # step 2 runs while it is recorded
    replayed = [loss.item()]
    for i in range(3, 6):
        new_x, new_y = batch(i)
        x.copy_(new_x.to("opencl"))
        y.copy_(new_y.to("opencl"))
        g.replay()
        replayed.append(loss.item())
    assert replayed == pytest.approx(losses[2:], rel=1e-5, abs=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[1].running_var.cpu(), eager[1].running_var.cpu(), rtol=1e-5, atol=1e-6)


def test_waiting_for_the_device_while_recording_raises_and_leaves_nothing(device):
    x = torch.randn(5, 4).to("opencl")
    with pytest.raises(RuntimeError, match="waits for the device while a graph records"):
        with device.graph():
            y = x * 2
            y.sum().item()
    with pytest.raises(RuntimeError, match="waits for the device while a graph records"):
        with device.graph():
            (x + 1).cpu()
    # recording again, and running as usual, both work afterwards
    torch.testing.assert_close((x * 3).cpu(), x.cpu() * 3)
    with device.graph() as g:
        z = x * 4
    g.replay()
    torch.testing.assert_close(z.cpu(), x.cpu() * 4)


def test_one_graph_records_at_a_time(device):
    with device.graph():
        with pytest.raises(RuntimeError, match="one records at a time"):
            with device.graph():
                pass


def test_memory_of_the_graph_is_not_handed_to_later_tensors(device):
    x = torch.randn(64, 33).to("opencl")
    with device.graph() as g:
        tmp = x.exp()                                   # freed while recording: stays the graph's
        out = tmp.sum(1) + x.mean(1)
        del tmp
    assert g.counts()["pool_bytes"] > 0
    # allocations of the same sizes after recording must get other buffers
    others = [torch.full((64, 33), 7.0, device="opencl") for _ in range(4)]
    g.replay()
    torch.testing.assert_close(out.cpu(), x.cpu().exp().sum(1) + x.cpu().mean(1))
    assert all(bool((o == 7.0).all()) for o in others)


def test_copies_host_writes_and_clblast_calls_are_replayed(device):
    a, b = torch.randn(3, 20, 30).to("opencl"), torch.randn(3, 30, 9).to("opencl")
    dst = torch.empty(3, 20, 9, device="opencl")
    with device.graph() as g:
        prod = torch.bmm(a, b)                          # CLBlast's batched product
        dst.copy_(prod)                                 # a copy between buffers
        shifted = dst + torch.tensor([1.0, 2.0, 3.0]).to("opencl").view(3, 1, 1)  # a constant written from the host
    counts = g.counts()
    assert counts["calls"] >= 1 and counts["copies"] >= 1 and counts["writes"] >= 1, counts
    new_a = torch.randn(3, 20, 30)
    a.copy_(new_a.to("opencl"))
    g.replay()
    want = torch.bmm(new_a, b.cpu())
    torch.testing.assert_close(dst.cpu(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(shifted.cpu(), want + torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1), rtol=1e-4, atol=1e-4)


def test_released_graph_memory_returns_to_the_cache(device):
    x = torch.randn(1000).to("opencl")
    with device.graph() as g:
        y = (x * 2).exp()
    held = g.counts()["pool_bytes"]
    reserved = torch.opencl.memory_reserved()
    del y
    g.reset()
    assert g.counts() == {} and held > 0
    assert torch.opencl.memory_reserved() == reserved   # cached for reuse, not lost
    with pytest.raises(RuntimeError, match="no finished recording"):
        g.replay()


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_copy_as_torch(device, dim):
    x = torch.randn(4, 5, 6)
    idx = torch.tensor([3, 0, 1])
    shape = list(x.shape)
    shape[dim] = len(idx)
    src = torch.randn(shape)
    y = x.to("opencl")
    y.index_copy_(dim, idx.to("opencl"), src.to("opencl"))
    torch.testing.assert_close(y.cpu(), x.index_copy(dim, idx, src), rtol=0, atol=0)


def test_a_recorded_decoding_step_generates_torchs_tokens(device):
    """GPT-2 with transformers' StaticCache: one decoding step recorded (the next token is
    chosen on the device and fed back), replayed token after token."""
    from transformers import GPT2Config, GPT2LMHeadModel, StaticCache

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=48, n_head=4, vocab_size=97, n_positions=64, bos_token_id=0, eos_token_id=0,
                        initializer_range=0.5)            # large weights: distinct logits, varied tokens
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 97, (1, 5))
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=10, do_sample=False)[0, 5:].tolist()
        model.to("opencl")
        cache = StaticCache(config=config, max_cache_len=24)
        out = model(input_ids=prompt.to("opencl"), past_key_values=cache, use_cache=True)
        token = out.logits[0, -1].argmax().view(1, 1)
        tokens = [int(token.item())]
        out = model(input_ids=token, past_key_values=cache, use_cache=True)   # a step before recording
        token = out.logits[0, -1].argmax().view(1, 1)
        tokens.append(int(token.item()))
        with device.graph() as g:
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            token.copy_(out.logits[0, -1].argmax().view(1, 1))
        tokens.append(int(token.item()))
        for _ in range(7):
            g.replay()
            tokens.append(int(token.item()))
    assert tokens == expected
    assert len(set(tokens)) > 4


def test_integer_indexing_is_recorded_without_waiting(device):
    """Indexing checks its indices with one read when it runs; while recording it cannot wait."""
    x = torch.randn(6, 5).to("opencl")
    idx = torch.tensor([4, 0, -1]).to("opencl")
    with device.graph() as g:
        y = x[idx] * 2
    idx.copy_(torch.tensor([1, 1, 2]))
    g.replay()
    torch.testing.assert_close(y.cpu(), x.cpu()[torch.tensor([1, 1, 2])] * 2)
    with pytest.raises(RuntimeError, match="waits for the device"):
        with device.graph():
            x[x > 0]                                    # its size depends on the values
