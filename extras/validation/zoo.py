"""The networks that extras.validation.networks checks, built offline with seeded random
weights: torchvision's models (NETWORKS) and transformer families from transformers'
configs (TRANSFORMERS: 2 layers, small awkward sizes), each as a module of one tensor in and
one out; calibrate_batchnorm() and set_mode() put them in the state the check runs them in.
"""
from __future__ import annotations

from typing import Dict

import torch
import torchvision
from torch import nn

NETWORKS = [
    "alexnet", "resnet18", "resnet50", "convnext_small", "vgg16", "squeezenet1_0", "googlenet",
    "densenet161", "inception_v3", "shufflenet_v2_x1_0", "mobilenet_v2", "mobilenet_v3_large",
    "mobilenet_v3_small", "resnext50_32x4d", "wide_resnet50_2", "mnasnet1_0", "efficientnet_b0",
    "efficientnet_b4", "regnet_y_400mf", "vit_b_16",
]

# Transformer families, built from transformers' configs (see build_transformer).
TRANSFORMERS = ["llama", "mistral", "qwen2", "bert", "t5", "vit_hf"]

# Smallest input side each network takes, where it differs from the default.
MIN_SIZE = {"inception_v3": 75, "alexnet": 63}


def build_model(name: str, size: int, seed: int) -> nn.Module:
    """torchvision's `name` with seeded random weights; auxiliary heads off so that the
    output is one tensor in every mode."""
    kwargs: Dict[str, object] = {}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    if name.startswith("vit_"):
        kwargs.update(image_size=size)
    torch.manual_seed(seed)
    model = torchvision.models.get_model(name, weights=None, **kwargs)
    # Initial values that would make the check vacuous: an all-zero layer (vit's head)
    # gives zero output and zero gradients upstream; convnext's layer scale of 1e-6 hides
    # its residual branches. Both are set to ordinary values.
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param.dim() >= 2 and not param.any():
                nn.init.normal_(param, std=0.02)
            elif param_name.endswith("layer_scale"):
                param.fill_(1.0)
    return model


class Logits(nn.Module):
    """A transformers model as a module of one tensor: token ids (or pixels) in, logits
    out. The attention mask and T5's decoder ids are buffers, so .to() moves them too."""

    def __init__(self, model: nn.Module, **inputs: torch.Tensor):
        super().__init__()
        self.model = model
        self.names = list(inputs)
        for key, value in inputs.items():
            self.register_buffer(key, value, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = "pixel_values" if x.is_floating_point() else "input_ids"
        return self.model(**{key: x}, **{name: getattr(self, name) for name in self.names}).logits


def build_transformer(name: str, batch: int, size: int, seed: int):
    """(Logits module, input) of a transformer family with seeded random weights: 2 layers,
    hidden size 96, 6 heads (2 key/value heads for the Llama kind), vocabulary 1000; token
    ids of length `size` with the second row's first third padded (its last third for the
    encoders), or (batch, 3, size, size) images in patches of size // 5."""
    import transformers

    torch.manual_seed(seed)
    vocab, common = 1000, dict(num_hidden_layers=2, num_attention_heads=6, intermediate_size=200)
    ids = torch.randint(3, vocab, (batch, size))
    mask = torch.ones(batch, size, dtype=torch.long)
    if name in ("llama", "mistral", "qwen2"):
        config_cls, model_cls = {
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        }[name]
        extra = dict(sliding_window=max(size // 2, 1)) if name == "mistral" else {}
        config = config_cls(vocab_size=vocab, hidden_size=96, num_key_value_heads=2, max_position_embeddings=512,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2, **common, **extra)
        if batch > 1:
            mask[1, :size // 3] = 0
        return Logits(model_cls(config), attention_mask=mask), ids
    if batch > 1:
        mask[1, size - size // 3:] = 0
    if name == "bert":
        config = transformers.BertConfig(vocab_size=vocab, hidden_size=96, max_position_embeddings=512, **common)
        return Logits(transformers.BertForMaskedLM(config), attention_mask=mask), ids
    if name == "t5":
        config = transformers.T5Config(vocab_size=vocab, d_model=96, d_kv=16, d_ff=200, num_layers=2, num_heads=6,
                                       decoder_start_token_id=0, pad_token_id=0)
        decoder_ids = torch.randint(3, vocab, (batch, max(size // 2, 1)))
        return Logits(transformers.T5ForConditionalGeneration(config), attention_mask=mask,
                      decoder_input_ids=decoder_ids), ids
    if name == "vit_hf":
        config = transformers.ViTConfig(image_size=size, patch_size=max(size // 5, 1), hidden_size=96, num_labels=10,
                                        **common)
        return Logits(transformers.ViTForImageClassification(config)), torch.randn(batch, 3, size, size)
    raise ValueError(f"unknown transformer family {name!r}; known: {TRANSFORMERS}")


def calibrate_batchnorm(model: nn.Module, x: torch.Tensor) -> None:
    """Sets every BatchNorm's running mean and variance to the mean and variance of its
    whole input (all channels together) for the batch x, in one eval-mode forward in plain
    torch. Each BatchNorm then keeps its input at unit scale while staying a well-scaled
    affine map; per-channel batch statistics of one small image would divide by near-zero
    variances and amplify rounding."""

    def set_statistics(module: nn.Module, inputs) -> None:
        (act,) = inputs
        module.running_mean.fill_(act.mean().item())
        module.running_var.fill_(act.var().item())

    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    hooks = [m.register_forward_pre_hook(set_statistics) for m in norms if m.track_running_stats]
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()


def set_mode(model: nn.Module, mode: str) -> None:
    """eval: running BatchNorm statistics, no Dropout. train: batch statistics, no Dropout."""
    model.train(mode == "train")
    for module in model.modules():
        if isinstance(module, nn.Dropout) or type(module).__name__.startswith("Dropout"):
            module.eval()
        if type(module).__name__ == "StochasticDepth":
            module.eval()
