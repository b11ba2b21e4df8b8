"""What the grader checks, made in the grader's own process:

- public_cases: the cases of tests.py, from the same definitions (grading.oracle);
- random_conv2d_cases / random_matmul_cases: fresh shapes and values from a new seed
  every run, so no submission can have seen them;
- model_cases: a small ResNet and a small GPT-2 built from a config with random weights;
- PERF_LAYERS: the fixed ResNet-style conv2d layers the performance step times.

Each case is a plain dict of tensors, ints and strings (what torch.load(weights_only=True)
reads back). `reference(case)` computes torch's answer; the child only ever gets inputs.
"""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

from grading import oracle as T
from grading.library import geometry

Case = Dict[str, object]

# Tolerances (grading.oracle): |out - ref| <= atol + rtol * |ref|, elementwise.
HIDDEN_TOL = T.HIDDEN_TOL
MODEL_RTOL = T.MODEL_RTOL


def _conv_case(name: str, gen: torch.Generator, batch, c_in, h, w, c_out, k_h, k_w, stride, dilation, groups,
               bias=True) -> Case:
    return {
        "op": "conv2d",
        "name": name,
        "x": torch.randn(batch, c_in, h, w, generator=gen),
        "weight": torch.randn(c_out, c_in // groups, k_h, k_w, generator=gen),
        "bias": torch.randn(c_out, generator=gen) if bias else None,
        "stride": list(stride),
        "dilation": list(dilation),
        "groups": groups,
    }


def public_cases() -> List[Case]:
    """tests.py's random conv2d configurations (test_conv2d_random_configs) and its matmul
    shapes (test_matmul_shapes), value for value, from grading.oracle as tests.py makes them;
    x is padded here, as tests.py does. Configurations whose output is all zeros (a stride
    that samples only padding) are left out: zeros from a kernel that computes nothing
    would pass them."""
    cases = []
    for seed in T.PUBLIC_CONV_SEEDS:
        x, w, b, c = T.random_conv_case(seed)
        p_h, p_w = c["padding"]
        if F.conv2d(x, w, None, c["stride"], c["padding"], c["dilation"], c["groups"]).abs().max() == 0:
            continue
        cases.append({"op": "conv2d", "name": f"test_conv2d_random_configs[{seed}]",
                      "x": F.pad(x, (p_w, p_w, p_h, p_h)), "weight": w, "bias": b, "stride": list(c["stride"]),
                      "dilation": list(c["dilation"]), "groups": c["groups"]})
    for name in T.MATMUL_SHAPES:
        a, b = T.matmul_case(name)
        cases.append({"op": "matmul", "name": f"test_matmul_shapes[{name}]", "m": a.numel() // a.shape[-1],
                      "n": b.shape[1], "k": a.shape[-1], "a": a, "a_layout": "plain", "b": b, "b_layout": "plain"})
    for name, (a, b) in T.matmul_layouts().items():  # views, as they are (torch.save keeps strides)
        cases.append({"op": "matmul", "name": f"test_matmul_layouts[{name}]", "m": a.numel() // a.shape[-1],
                      "n": b.shape[1], "k": a.shape[-1], "a": a, "a_layout": "view", "b": b, "b_layout": "view"})
    return cases


def tolerance(case: Case) -> Tuple[float, float]:
    """(atol, rtol) of a public case: tests.py's own, for the length of the sum behind each output."""
    reduction = case["weight"][0].numel() if case["op"] == "conv2d" else case["k"]
    return T.conv_tolerance(reduction)


def random_conv2d_cases(seed: int, count: int = 8) -> List[Case]:
    """Awkward shapes: sizes 1 to 40ish, odd kernels, strides, dilations and groups."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for i in range(count):
        groups = rng.choice([1, 1, 1, 2, 3])
        c_in = groups * (rng.choice([7, 11, 13]) if i == 0 else rng.randint(1, 12))  # case 0: K = C_in·k_h·k_w odd
        c_out = groups * rng.randint(1, 20)
        k_h, k_w = rng.choice([(1, 1), (3, 3), (3, 3), (5, 5), (1, 3), (3, 2), (7, 7)])
        stride = (rng.choice([1, 1, 2]), rng.choice([1, 1, 2, 3]))
        dilation = (rng.choice([1, 1, 2]), rng.choice([1, 1, 2]))
        h = geometry.span(k_h, dilation[0]) + rng.randint(0, 30)  # the kernel's span, and some
        w = geometry.span(k_w, dilation[1]) + rng.randint(0, 30)
        batch = rng.randint(1, 3)
        cases.append(_conv_case(f"conv2d_{i}", gen, batch, c_in, h, w, c_out, k_h, k_w, stride, dilation, groups,
                                bias=rng.random() < 0.75))
    return cases


# How an operand is given to ocl_matmul: the stored tensor and the view the child passes.
#   plain     stored as the operand itself (row-major)
#   t         stored transposed: the operand is stored.t() (nn.Linear's weight.t())
#   strided   stored with 3 extra columns: the operand is stored[:, :cols] (row stride > cols)
#   t_wide    stored transposed with 3 extra rows: the operand is stored.t()[:rows], rows of a
#             transposed matrix (one row of it has its elements rows + 3 apart)
#   batched   (a only) stored (2, rows/2, cols): the operand is a 3-D tensor, rows folded into M
#   view      (tests.py's layouts) the stored tensor is the view itself
LAYOUTS = ("plain", "t", "strided", "t_wide", "batched")


def stored_operand(rows: int, cols: int, layout: str, gen: torch.Generator) -> torch.Tensor:
    """The tensor to store for an operand of shape (rows, cols) given in `layout`."""
    if layout == "t":
        return torch.randn(cols, rows, generator=gen)
    if layout == "strided":
        return torch.randn(rows, cols + 3, generator=gen)
    if layout == "t_wide":
        return torch.randn(cols, rows + 3, generator=gen)
    if layout == "batched":
        return torch.randn(2, rows // 2, cols, generator=gen)
    return torch.randn(rows, cols, generator=gen)


def operand(stored: torch.Tensor, layout: str, cols: int) -> torch.Tensor:
    """The view of `stored` that the child passes (and the reference multiplies)."""
    if layout == "t":
        return stored.t()
    if layout == "strided":
        return stored[:, :cols]
    if layout == "t_wide":
        return stored.t()[: stored.shape[1] - 3]
    return stored


def random_matmul_cases(seed: int, count: int = 8) -> List[Case]:
    """Sizes 1 to 300 with every layout the interface allows: one-row and one-column
    products, either operand transposed or strided, a batched 3-D a. Case 0 is one row of a
    transposed matrix (its elements lda apart: the GEMV path of a linear layer on one token
    must pass that stride), case 1 one column of a wider matrix."""
    rng = random.Random(seed + 1)
    gen = torch.Generator().manual_seed(seed + 1)
    cases = []
    for i in range(count):
        m, n, k = (1 if rng.random() < 0.2 else rng.randint(2, 300) for _ in range(3))
        a_layout = rng.choice(LAYOUTS if m % 2 == 0 else LAYOUTS[:4])
        b_layout = rng.choice(LAYOUTS[:4])
        if i == 0:
            m, k, a_layout = 1, max(k, 17), "t_wide"
        elif i == 1:
            n, b_layout = 1, "strided"
        cases.append({"op": "matmul", "name": f"matmul_{i}", "m": m, "n": n, "k": k,
                      "a": stored_operand(m, k, a_layout, gen), "a_layout": a_layout,
                      "b": stored_operand(k, n, b_layout, gen), "b_layout": b_layout})
    return cases


def matmul_operands(case: Case):
    """(a, b) as the child passes them to ocl_matmul."""
    return (operand(case["a"], case["a_layout"], case["k"]), operand(case["b"], case["b_layout"], case["n"]))


def reference(case: Case) -> torch.Tensor:
    """torch's answer for a conv2d or matmul case (the child computes the same with OpenCL)."""
    if case["op"] == "conv2d":
        return F.conv2d(case["x"], case["weight"], case["bias"], stride=tuple(case["stride"]),
                        dilation=tuple(case["dilation"]), groups=case["groups"])
    a, b = matmul_operands(case)
    return a @ b


# ---------------------------------------------------------------------------------------
# Models

RESNET_CONFIG = {"layers": [1, 1, 1, 1], "num_classes": 10, "width_per_group": 64}
GPT2_CONFIG = {"vocab_size": 211, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4,
               "bos_token_id": 210, "eos_token_id": 210}


def build_resnet(config: Dict[str, object]) -> torch.nn.Module:
    from torchvision.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, list(config["layers"]), num_classes=config["num_classes"],
                  width_per_group=config["width_per_group"]).eval()


def build_gpt2(config: Dict[str, object]) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**config, attn_implementation="eager")).eval()


def model_case(kind: str, seed: int) -> Case:
    """A model with random weights (and, for ResNet, random batch-norm statistics) and an input."""
    torch.manual_seed(seed)
    if kind == "resnet":
        model = build_resnet(RESNET_CONFIG)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
        inputs = torch.randn(2, 3, 37, 41)
        config = RESNET_CONFIG
    else:
        model = build_gpt2(GPT2_CONFIG)
        inputs = torch.randint(0, GPT2_CONFIG["vocab_size"], (2, 19))
        config = GPT2_CONFIG
    return {"op": kind, "name": kind, "config": dict(config), "state_dict": model.state_dict(), "input": inputs}


def model_reference(case: Case) -> torch.Tensor:
    model = build_resnet(case["config"]) if case["op"] == "resnet" else build_gpt2(case["config"])
    model.load_state_dict(case["state_dict"])
    with torch.no_grad():
        out = model(case["input"])
    return out if case["op"] == "resnet" else out.logits


# ---------------------------------------------------------------------------------------
# Performance: ResNet-18-style layers at batch 1, at a quarter of ImageNet's resolution
# (inputs already padded).
# (name, batch, c_in, h, w, c_out, k, stride)
PERF_LAYERS = [
    ("64→64 3x3 28²", 1, 64, 30, 30, 64, 3, 1),
    ("64→128 3x3/2 14²", 1, 64, 30, 30, 128, 3, 2),
    ("64→128 1x1/2 14²", 1, 64, 28, 28, 128, 1, 2),
    ("128→128 3x3 14²", 1, 128, 16, 16, 128, 3, 1),
    ("256→256 3x3 7²", 1, 256, 9, 9, 256, 3, 1),
]


def perf_inputs(index: int, seed: int) -> Case:
    """Layer `index` of PERF_LAYERS with fresh inputs made from `seed` (the grader draws a new
    seed for every timed run, so no run can reuse an earlier one's output)."""
    name, batch, c_in, h, w, c_out, k, stride = PERF_LAYERS[index]
    gen = torch.Generator().manual_seed(seed)
    case = _conv_case(name, gen, batch, c_in, h, w, c_out, k, k, (stride, stride), (1, 1), 1)
    case["weight"] = case["weight"] / (c_in * k * k) ** 0.5
    return case
