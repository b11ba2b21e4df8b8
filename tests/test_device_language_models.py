"""Word-level language models trained on the opencl device as the usual recipe trains them,
against the same steps on the CPU: an embedding, a recurrent stack (tanh RNN, LSTM, GRU;
the LSTM also with its decoder's weight tied to the embedding) or a causal Transformer
encoder, a decoder to log-probabilities, NLL loss; truncated backpropagation through time
over a token stream laid out as columns, the hidden state carried from batch to batch and
detached, gradients clipped by norm, plain SGD written out by hand (or AdamW) with the rate
cut after a few steps, then an evaluation pass without gradients. Losses, parameters and
the evaluation's loss lie as close to a float64 run as torch's own float32 run does.

Sampling as a generator script does it: one word at a time, the state carried, the
temperature-scaled weights drawn from with torch.multinomial; each step's weights are the
CPU model's for the same words, every word is in the vocabulary, and a seed repeats them."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from device_checks import assert_trained_as_accurately

VOCAB, BATCH, BPTT = 29, 5, 7
RUNS = [("opencl", torch.float32), ("cpu", torch.float32), ("cpu", torch.float64)]


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


class LanguageModel(nn.Module):
    """(seq, batch) token ids -> (seq * batch, VOCAB) log-probabilities, and the next state."""

    def __init__(self, kind, emsize=12, nhid=12, layers=2, tied=False):
        super().__init__()
        self.kind = kind
        self.encoder = nn.Embedding(VOCAB, emsize)
        if kind == "Transformer":
            layer = nn.TransformerEncoderLayer(emsize, nhead=2, dim_feedforward=nhid, dropout=0.0)
            self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            position = torch.arange(64, dtype=torch.float32)[:, None]
            rates = torch.exp(torch.arange(0, emsize, 2, dtype=torch.float32) * (-math.log(1e4) / emsize))
            table = torch.zeros(64, 1, emsize)
            table[:, 0, 0::2], table[:, 0, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            self.register_buffer("positions", table)
            nhid = emsize
        else:
            cells = {"RNN_TANH": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}
            self.body = cells[kind](emsize, nhid, layers)
        self.decoder = nn.Linear(nhid, VOCAB)
        if tied:
            self.decoder.weight = self.encoder.weight
        with torch.no_grad():
            self.encoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()

    def initial_state(self, batch):
        weight = self.decoder.weight
        if self.kind == "Transformer":
            return None
        zeros = weight.new_zeros(self.body.num_layers, batch, self.body.hidden_size)
        return (zeros, zeros.clone()) if self.kind == "LSTM" else zeros

    def forward(self, tokens, state):
        x = self.encoder(tokens)
        if self.kind == "Transformer":
            n = tokens.shape[0]
            mask = torch.log(torch.tril(torch.ones(n, n, device=x.device, dtype=x.dtype)))  # -inf above the diagonal
            x = self.body(x * math.sqrt(x.shape[-1]) + self.positions[:n], mask=mask)
        else:
            x, state = self.body(x, state)
        return F.log_softmax(self.decoder(x).view(-1, VOCAB), dim=1), state


def detached(state):
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else (None if state is None else state.detach())


def token_stream(length, seed=3):
    """Each token (3 * previous + 5 + 0 or 1) mod VOCAB: a stream a small model learns."""
    noise = torch.randint(0, 2, (length,), generator=torch.Generator().manual_seed(seed))
    tokens = [1]
    for n in noise[1:].tolist():
        tokens.append((3 * tokens[-1] + 5 + n) % VOCAB)
    return torch.tensor(tokens)


def as_columns(tokens, batch):
    """The stream cut into `batch` columns read top to bottom: (length // batch, batch)."""
    rows = tokens.numel() // batch
    return tokens.narrow(0, 0, rows * batch).view(batch, -1).t().contiguous()


def train(kind, device, dtype, steps=6, tied=False, adamw=False):
    torch.manual_seed(0)
    model = LanguageModel(kind, tied=tied).to(device, dtype)
    data = as_columns(token_stream(BATCH * (steps * BPTT + 1)), BATCH).to(device)
    held_out = as_columns(token_stream(3 * 11 + 1, seed=4), 3).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3) if adamw else None
    lr, state, losses = 2.0, model.initial_state(BATCH), []
    model.train()
    for step, i in enumerate(range(0, steps * BPTT, BPTT)):
        tokens, targets = data[i:i + BPTT], data[i + 1:i + 1 + BPTT].reshape(-1)
        state = detached(state)
        model.zero_grad()
        out, state = model(tokens, state)
        loss = F.nll_loss(out, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        if opt is not None:
            opt.step()
        else:
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        if step == steps // 2:
            lr /= 4.0
        losses.append(loss.detach())
    model.eval()
    total, state = torch.zeros((), device=device, dtype=dtype), model.initial_state(3)
    with torch.no_grad():
        for i in range(0, held_out.shape[0] - 1, 4):
            tokens = held_out[i:i + 4]
            targets = held_out[i + 1:i + 1 + tokens.shape[0]]
            out, state = model(tokens[:targets.shape[0]], state)
            total += targets.shape[0] * F.nll_loss(out, targets.reshape(-1))
    result = {"losses": torch.stack(losses), "evaluation": total / (held_out.shape[0] - 1)}
    result.update((name, p.detach()) for name, p in model.named_parameters())
    return result


@pytest.mark.parametrize("kind, options", [
    ("RNN_TANH", {}), ("LSTM", {}), ("GRU", {}), ("LSTM", {"tied": True}), ("Transformer", {}),
    ("Transformer", {"adamw": True}),
], ids=["rnn_tanh", "lstm", "gru", "lstm_tied", "transformer", "transformer_adamw"])
def test_language_model_trains_as_on_the_cpu(kind, options):
    runs = [train(kind, device, dtype, **options) for device, dtype in RUNS]
    if options.get("tied"):
        assert "decoder.weight" not in runs[0]  # one parameter, listed once
    losses = runs[0]["losses"].cpu()
    assert losses.isfinite().all() and losses[-2:].mean() < losses[:2].mean(), losses
    assert_trained_as_accurately(runs)


def sample(model, device, dtype, words, temperature, reference=None, seed=5):
    """Words drawn one at a time (the Transformer reads the whole text so far); with a
    reference model, each step's weights checked against its weights for the same words."""
    torch.manual_seed(seed)
    tokens = torch.full((1, 1), 7, dtype=torch.long, device=device)
    state, ref_state, drawn = model.initial_state(1), None if reference is None else reference.initial_state(1), []
    with torch.no_grad():
        for _ in range(words):
            out, state = model(tokens, state)
            weights = out[-1].div(temperature).exp()
            word = torch.multinomial(weights, 1)[0]
            if reference is not None:
                ref_out, ref_state = reference(tokens.cpu(), ref_state)
                torch.testing.assert_close(weights.cpu().double(), ref_out[-1].div(temperature).exp(),
                                           rtol=1e-5, atol=1e-7)
                assert weights[word].item() > 0
            if model.kind == "Transformer":
                tokens = torch.cat([tokens, word.view(1, 1)])
            else:
                tokens.fill_(word.item())
            drawn.append(word.item())
    return drawn


@pytest.mark.parametrize("kind", ["RNN_TANH", "LSTM", "GRU", "Transformer"])
def test_sampling_word_by_word_follows_the_cpu_model(kind):
    torch.manual_seed(0)
    cpu = LanguageModel(kind).double().eval()
    model = LanguageModel(kind).eval()
    model.load_state_dict(cpu.state_dict())
    model.to("opencl")
    words = sample(model, "opencl", torch.float32, 13, 0.8, reference=cpu)
    assert all(0 <= w < VOCAB for w in words) and len(set(words)) > 1, words
    assert sample(model, "opencl", torch.float32, 13, 0.8) == words  # the same seed, the same words
    assert sample(model, "opencl", torch.float32, 13, 0.8, seed=6) != words
