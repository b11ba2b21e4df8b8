"""Transformer families from transformers' configs (random weights, 2 layers, awkward
sizes) on the opencl device with OCLF_FALLBACK=error, so no operator of their forward or
backward pass runs on the CPU: Llama, Mistral (with a sliding window), Qwen2 (grouped
key/value heads, RMSNorm, rotary embeddings, gated SiLU MLPs, padding masks), BERT, T5
(relative position bias) and ViT. Logits and the gradients of a few parameters are compared
with the same model in float64 on the CPU: the device's error must be within a few times
torch's own float32 error (both differ from float64 by rounding alone). Llama's and Qwen2's
greedy generate() with a KV cache, on a left-padded batch of two prompts, must give torch's
CPU float32 tokens."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

VOCAB = 211


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def padded_ids(batch=2, length=11, pad_left=3, pad_right=0):
    """Token ids and an attention mask; the second row padded on the left or the right."""
    ids = torch.randint(3, VOCAB, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad_left:
        mask[1, :pad_left] = 0
        ids[1, :pad_left] = 0
    if pad_right:
        mask[1, length - pad_right:] = 0
        ids[1, length - pad_right:] = 0
    return ids, mask


def decoder(name, **extra):
    """A causal language model of the Llama kind: 6 query heads over 2 key/value heads."""
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[name]
    config = config_cls(vocab_size=VOCAB, hidden_size=60, intermediate_size=92, num_hidden_layers=2,
                        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.1, **extra)
    return model_cls(config).eval()


def llama_like(name, **extra):
    torch.manual_seed(0)
    ids, mask = padded_ids()
    return decoder(name, **extra), dict(input_ids=ids, attention_mask=mask)


def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=60, num_hidden_layers=2, num_attention_heads=5,
                                     intermediate_size=92, max_position_embeddings=64)
    ids, mask = padded_ids(pad_left=0, pad_right=4)
    return transformers.BertForMaskedLM(config).eval(), dict(input_ids=ids, attention_mask=mask,
                                                             token_type_ids=(ids > 100).long())


def t5():
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=VOCAB, d_model=60, d_kv=12, d_ff=92, num_layers=2, num_heads=5,
                                   relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0)
    ids, mask = padded_ids(pad_left=0, pad_right=4)
    return transformers.T5ForConditionalGeneration(config).eval(), dict(
        input_ids=ids, attention_mask=mask, decoder_input_ids=torch.randint(3, VOCAB, (2, 7)))


def vit():
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=30, patch_size=6, num_channels=3, hidden_size=60, num_hidden_layers=2,
                                    num_attention_heads=5, intermediate_size=92, num_labels=7)
    return transformers.ViTForImageClassification(config).eval(), dict(pixel_values=torch.randn(2, 3, 30, 30))


FAMILIES = {
    "llama": lambda: llama_like("llama"),
    "mistral": lambda: llama_like("mistral", sliding_window=5),
    "qwen2": lambda: llama_like("qwen2"),
    "bert": bert,
    "t5": t5,
    "vit": vit,
}


def to(inputs, device, double=False):
    return {k: (v.double() if double and v.is_floating_point() else v).to(device) for k, v in inputs.items()}


def run(model, inputs):
    """Logits and gradients of the mean squared logits."""
    logits = model(**inputs).logits
    logits.pow(2).mean().backward()
    return logits.detach().cpu().double()


def measure(name):
    """The worst error of the device and of torch's float32 against float64, relative to the
    largest magnitude: (logits, gradients) for each."""
    model, inputs = FAMILIES[name]()
    ref64 = copy.deepcopy(model).double()
    dev = copy.deepcopy(model).to("opencl")
    logits64 = run(ref64, to(inputs, "cpu", double=True))
    logits32 = run(model, inputs)
    logits_dev = run(dev, to(inputs, "opencl"))
    assert all(p.grad.device.type == "opencl" for p in dev.parameters() if p.grad is not None)

    named = dict(ref64.named_parameters())
    # Three matrices: the first (the embeddings), one from the middle layers, the last (the head).
    names = [n for n, q in named.items() if q.grad is not None and q.dim() == 2]
    names = [names[0], names[len(names) // 2], names[-1]]
    scale = max(named[n].grad.abs().max().item() for n in names)

    def grad_error(m):
        params = dict(m.named_parameters())
        return max((params[n].grad.detach().cpu().double() - named[n].grad).abs().max().item() / scale
                   for n in names)

    top = logits64.abs().max().item()
    return ((logits_dev - logits64).abs().max().item() / top, grad_error(dev),
            (logits32 - logits64).abs().max().item() / top, grad_error(model))


@pytest.mark.parametrize("name", FAMILIES)
def test_forward_and_backward_match_float64(name):
    logits_err, grad_err, torch_logits_err, torch_grad_err = measure(name)
    assert logits_err <= max(2e-6, 10 * torch_logits_err), (logits_err, torch_logits_err)
    assert grad_err <= max(2e-6, 10 * torch_grad_err), (grad_err, torch_grad_err)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_generate_with_cache_matches_torch(name):
    torch.manual_seed(1)
    model = decoder(name)
    ids, mask = padded_ids(length=9, pad_left=4)
    kwargs = dict(max_new_tokens=7, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        dev = copy.deepcopy(model).to("opencl")
        out = dev.generate(input_ids=ids.to("opencl"), attention_mask=mask.to("opencl"), **kwargs)
    assert out.device.type == "opencl"
    assert torch.equal(out.cpu(), ref)
    assert ref.shape[1] > ids.shape[1]


def test_sampling_generate_runs_natively():
    """top-k and top-p sampling (sort, topk, multinomial) with no operator on the CPU; the
    device's random numbers differ from the CPU's draws, so only the tokens' range is checked."""
    torch.manual_seed(2)
    dev = decoder("llama").to("opencl")
    ids, mask = padded_ids(length=6, pad_left=2)
    with torch.no_grad():
        out = dev.generate(input_ids=ids.to("opencl"), attention_mask=mask.to("opencl"), max_new_tokens=4,
                           do_sample=True, top_k=20, top_p=0.9, temperature=0.8, pad_token_id=0)
    new = out.cpu()[:, ids.shape[1]:]
    assert new.shape == (2, 4) and bool(((new >= 0) & (new < VOCAB)).all())
