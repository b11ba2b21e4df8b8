"""make gpt: GPT-2 greedy generation with every linear layer on OpenCL (ocl_matmul), against torch.

Every linear layer of GPT-2 (the Conv1D modules c_attn, c_proj, c_fc and the nn.Linear lm_head)
runs through ocl_matmul inside utils.patching.opencl_layers(). The prompt is
"Hello, I'm a language model,"; the demo generates greedily with OpenCL and with torch and
prints both texts (token ids when no tokenizer is available), whether they are identical, and
tokens per second for each, after each side has generated two tokens untimed (kernel builds,
weight uploads, tuning at first use).

Weights: `gpt2` from the Hugging Face cache (get them with `hf download gpt2`, or run once
with network and --download). Without them it runs the full-size GPT-2 architecture
(GPT2Config() defaults) with seeded RANDOM weights: not a trained model, its text is noise;
what it shows is that OpenCL and torch compute the same thing.

    python inference_gpt2.py [--new-tokens 20] [--download] [--quick] [--device nvidia]
"""
from __future__ import annotations

import sys
import time
from typing import List, Tuple

import torch
from torch import nn

from extras import demo

PROMPT = "Hello, I'm a language model,"
PROMPT_IDS = [15496, 11, 314, 1101, 257, 3303, 2746, 11]  # GPT-2's tokens for PROMPT (offline fallback)
ATOL, RTOL = 1e-3, 1e-3  # on the logits of each step
SEED = 0


def load_pretrained(name: str, download: bool):
    """(model, tokenizer) from the Hugging Face cache (or the hub with download=True); either may be
    None, with the reason printed."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    try:
        model = GPT2LMHeadModel.from_pretrained(name, local_files_only=not download)
    except OSError as err:
        if download:
            print(f"{name}: could not load the trained weights: {err}")
        else:
            from huggingface_hub.constants import HF_HUB_CACHE

            print(f"{name}: trained weights are not in the Hugging Face cache ({HF_HUB_CACHE}).")
        print(f"  To get them: `hf download {name}` (older huggingface_hub: `huggingface-cli download {name}`),")
        print("  or run once with network: python inference_gpt2.py --download")
        model = None
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=not download)
    except (OSError, ValueError):
        tokenizer = None
    # A folder without vocabulary files can yield an empty tokenizer rather than an error.
    if tokenizer is not None and (len(tokenizer) < 2 or not tokenizer(PROMPT)["input_ids"]):
        tokenizer = None
    return model, tokenizer


def random_gpt2(quick: bool) -> Tuple[nn.Module, str]:
    """GPT-2's architecture with seeded random weights: full size, or for --quick a 2-layer, 128-wide
    one initialised with a larger spread (std 0.3), so that its greedy tokens vary and ties are rare."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, initializer_range=0.3) if quick else GPT2Config()
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    size = "small (2 layers, 128 wide, init std 0.3; --quick)" if quick else "full-size (GPT2Config() defaults)"
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return model, f"GPT-2 architecture, {size}, {params:.0f}M parameters, RANDOM weights (seed {SEED})"


def linear_layer_counts(model: nn.Module) -> Tuple[int, int]:
    """(Conv1D layers, nn.Linear layers) that opencl_layers() routes through ocl_matmul."""
    from transformers.pytorch_utils import Conv1D

    conv1d = sum(1 for m in model.modules() if isinstance(m, Conv1D) and type(m).forward is Conv1D.forward)
    linear = sum(1 for m in model.modules() if isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward)
    return conv1d, linear


def greedy(model: nn.Module, prompt: List[int], new_tokens: int, desc: str) -> Tuple[List[int], torch.Tensor, float]:
    """Greedy decoding with the key/value cache: (the new tokens, each step's logits (new_tokens, vocab),
    seconds including the prompt's forward pass)."""
    tokens: List[int] = []
    logits: List[torch.Tensor] = []
    x = torch.tensor([prompt])
    past = None
    start = time.perf_counter()
    for _ in demo.progress(range(new_tokens), desc):
        out = model(input_ids=x, past_key_values=past, use_cache=True)
        past = out.past_key_values
        step = out.logits[0, -1]
        tokens.append(int(step.argmax()))
        logits.append(step)
        x = torch.tensor([[tokens[-1]]])
    return tokens, torch.stack(logits), time.perf_counter() - start


def compare(ours: List[int], ref: List[int], ours_logits: torch.Tensor, ref_logits: torch.Tensor,
            checks: demo.Checks) -> None:
    """Check the logits step by step while both sequences are the same; at a first differing token,
    accept it only when torch's logits for the two tokens tie within tolerance."""
    same_until = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), len(ref))
    steps = min(same_until + 1, len(ref))
    err = demo.max_abs_error(ours_logits[:steps], ref_logits[:steps])
    checks.add(demo.within_tolerance(ours_logits[:steps], ref_logits[:steps], ATOL, RTOL),
               f"logits differ beyond tolerance (max |diff| {err:.2e} over {steps} steps)")
    print(f"max |logit diff| over the {steps} step(s) with the same context: {err:.1e}")
    if same_until == len(ref):
        print("generated tokens: identical")
        return
    la, lb = float(ref_logits[same_until, ours[same_until]]), float(ref_logits[same_until, ref[same_until]])
    tie = abs(la - lb) <= ATOL + RTOL * abs(lb)
    checks.add(tie, f"token {same_until + 1} differs: {ours[same_until]} vs {ref[same_until]} (no near tie)")
    print(f"generated tokens: DIFFER from token {same_until + 1} on"
          + (" (torch's logits tie there within tolerance, so either choice is right)" if tie else ""))


def show(label: str, prompt: List[int], new: List[int], tokenizer) -> None:
    if tokenizer is not None:
        print(f"{label}: {tokenizer.decode(prompt + new)!r}")
    else:
        print(f"{label}: {prompt} + {new}")


def main(argv=None) -> int:
    p = demo.parser(__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2", help="Hugging Face model name or folder (default gpt2)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens to generate (default 20; 5 with --quick)")
    p.add_argument("--download", action="store_true", help="fetch the weights from the hub when not cached")
    args = demo.parse_args(p, argv)
    demo.require("transformers", "transformers", "GPT-2")
    new_tokens = args.new_tokens if args.new_tokens is not None else (5 if args.quick else 20)
    if new_tokens < 1:
        p.error(f"--new-tokens must be positive, got {new_tokens}")
    demo.open_device()
    from opencl_functions import tuning
    from utils.patching import opencl_layers

    model, tokenizer = load_pretrained(args.model, args.download)
    if model is not None:
        description = f"{args.model}, pretrained weights loaded by from_pretrained"
    else:
        model, description = random_gpt2(args.quick)
        print("Running GPT-2's architecture with random weights instead. It is NOT a trained model and its "
              "output is noise; the point is that OpenCL and torch agree.")
    model.eval()
    conv1d, linear = linear_layer_counts(model)
    print(f"model: {description}")
    print(f"on OpenCL (ocl_matmul): {conv1d} Conv1D layers and {linear} nn.Linear (lm_head)")
    if tokenizer is not None:
        prompt = tokenizer(PROMPT)["input_ids"]
    else:
        prompt = PROMPT_IDS
        print("no GPT-2 tokenizer available offline: using the prompt's hard-coded GPT-2 token ids, "
              "and output is shown as token ids")
    print(f"prompt: {PROMPT!r} = {prompt}; {new_tokens} new tokens, greedy")

    checks = demo.Checks()
    with torch.no_grad():
        # Two tokens untimed first: the prompt's products and the one-row products of each step
        # meet their kernels (builds, weight uploads, tuning at first use) there.
        with opencl_layers():
            demo.warm_up(lambda: greedy(model, prompt, 2, "OpenCL, first call"), "GPT-2's products (two tokens)")
        greedy(model, prompt, 2, "torch, first call")
        with opencl_layers(), tuning.paused():
            ours, ours_logits, t_ours = greedy(model, prompt, new_tokens, "OpenCL")
        ref, ref_logits, t_ref = greedy(model, prompt, new_tokens, "torch")

    show("OpenCL", prompt, ours, tokenizer)
    show("torch ", prompt, ref, tokenizer)
    compare(ours, ref, ours_logits, ref_logits, checks)
    print(f"tokens/s (prompt pass included, after each side's untimed first two tokens): "
          f"OpenCL {new_tokens / t_ours:.2f} ({t_ours:.2f} s), torch {new_tokens / t_ref:.2f} ({t_ref:.2f} s)")
    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
