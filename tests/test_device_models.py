"""Whole models on the opencl device with OCLF_FALLBACK=error (no operator may run on the
CPU): forward and backward of ResNet-18, MobileNetV2 (training mode: batch statistics,
dropout) and a small GPT-2, against torch in float64. Each gradient's error is measured
against the model's largest gradient and must be within a few times torch's own float32
error (the two float32 results differ from each other by rounding alone)."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torchvision


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def worst_error(model, reference, scale):
    return max(((p.grad.detach().cpu().double() - q.grad).abs().max() / scale).item()
               for p, q in zip(model.parameters(), reference.parameters()) if q.grad is not None)


def compare(model, inputs, loss_fn, no_dropout=True):
    if no_dropout:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    ref64 = copy.deepcopy(model).double()
    dev = copy.deepcopy(model).to("opencl")
    loss32 = loss_fn(model(*inputs))
    loss32.backward()
    loss64 = loss_fn(ref64(*[i.double() if i.is_floating_point() else i for i in inputs]))
    loss64.backward()
    loss = loss_fn(dev(*[i.to("opencl") for i in inputs]))
    loss.backward()
    assert all(p.grad.device.type == "opencl" for p in dev.parameters() if p.grad is not None)
    scale = max(q.grad.abs().max().item() for q in ref64.parameters() if q.grad is not None)
    torch_error = worst_error(model, ref64, scale)
    error = worst_error(dev, ref64, scale)
    assert abs(loss.item() - loss64.item()) <= 1e-4 * max(1.0, abs(loss64.item()))
    assert error <= max(1e-4, 10 * torch_error), f"gradient error {error:.2e} (torch float32: {torch_error:.2e})"


def test_resnet18_training_step():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x, t = torch.randn(2, 3, 64, 64), torch.tensor([1, 3])
    compare(model, [x], lambda y: F.cross_entropy(y, t.to(y.device)))


def test_mobilenet_v2_training_step():
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10)
    x, t = torch.randn(2, 3, 64, 64), torch.tensor([1, 3])
    compare(model, [x], lambda y: F.cross_entropy(y, t.to(y.device)))


def test_mobilenet_v2_dropout_runs_natively():
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10).to("opencl").train()
    model(torch.randn(2, 3, 32, 32).to("opencl")).sum().backward()


def test_gpt2_small_config():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 300, (2, 10))
    compare(model, [ids], lambda out: out.logits.pow(2).mean())


def test_gpt2_generation_with_cache():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    dev = copy.deepcopy(model).to("opencl")
    prompt = torch.randint(0, 300, (1, 5))
    tokens = []
    for m, ids in ((model, prompt), (dev, prompt.to("opencl"))):
        out, past, seq = None, None, []
        with torch.no_grad():
            for _ in range(6):
                out = m(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                ids = out.logits[:, -1].argmax(-1, keepdim=True)
                seq.append(ids.item())
        tokens.append(seq)
    assert tokens[1] == tokens[0]


@pytest.mark.slow
def test_bird_song_training_on_the_device(tmp_path):
    from extras import train_audio

    checkpoint = train_audio.main(["--quick", "--device", "opencl", "--checkpoint", str(tmp_path / "bird.pt"),
                                   "--plot", str(tmp_path / "curves.png")])
    assert checkpoint["history"][0]["train_loss"] > 0
    assert all(v.device.type == "cpu" for v in checkpoint["state_dict"].values())


@pytest.mark.slow
def test_validate_networks_on_the_device():
    from extras.validation import networks

    result = networks.validate("resnet18", repeat=0, device="opencl")
    assert result.passed and result.fallbacks == 0
