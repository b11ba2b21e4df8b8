"""What the opencl device's graph passes (passes.py, decoding.py) recognize in Inductor's
post-grad graphs: a node's value, its only user, views, the activation that a run of
elementwise operations computes, and norms; and how they make a node with its value."""
from __future__ import annotations

import operator
from typing import Any

import torch
from torch._guards import detect_fake_mode

aten = torch.ops.aten
prims = torch.ops.prims
HALVES = (torch.float16, torch.bfloat16)


def val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def on_opencl(node: torch.fx.Node) -> bool:
    v = val(node.args[0]) if node.args else None
    return isinstance(v, torch.Tensor) and v.device.type == "opencl"


VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def new_node(target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """A new node target(*args, **kwargs) at the graph's insertion point (one operand at least
    a node), its value computed on the fake tensors of its operands."""
    graph = next(a for a in args if isinstance(a, torch.fx.Node)).graph
    node = graph.call_function(target, args, kwargs)

    def fake(a: Any) -> Any:
        if isinstance(a, (list, tuple)):
            return type(a)(fake(b) for b in a)
        return val(a) if isinstance(a, torch.fx.Node) else a

    fake_args, fake_kwargs = fake(list(args)), {k: fake(v) for k, v in kwargs.items()}
    with detect_fake_mode([v for v in (*fake_args, *fake_kwargs.values()) if isinstance(v, torch.Tensor)]):
        node.meta["val"] = target(*fake_args, **fake_kwargs)
    return node


def through_views(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """The last of the views that follow node one after the other, each its predecessor's only
    user, and those views."""
    views = []
    while len(node.users) == 1 and next(iter(node.users)).target in VIEWS:
        node = next(iter(node.users))
        views.append(node)
    return node, views


# Elementwise operations an activation may be written with: tensor operands from the chain,
# the rest numbers.
ELEMENTWISE = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.pow.Tensor_Scalar,
                aten.tanh.default, aten.sigmoid.default, aten.relu.default, aten.gelu.default, aten.silu.default,
                aten.erf.default, aten.exp.default, aten.neg.default, aten.reciprocal.default, aten.hardtanh.default,
                aten.hardswish.default, aten.clamp_min.default, aten.clamp_max.default, aten.clamp.default,
                aten.rsub.Scalar}
SAMPLES = torch.cat([torch.linspace(-12.0, 12.0, 4801, dtype=torch.float64),
                      torch.tensor([0.0, 1e-6, -1e-6, 3.0, -3.0, 6.0, 30.0, -30.0], dtype=torch.float64)])


def activations() -> dict[str, Any]:
    F = torch.nn.functional
    return {"relu": torch.relu, "relu6": lambda v: F.hardtanh(v, 0.0, 6.0), "silu": F.silu, "gelu": F.gelu,
            "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "hardswish": F.hardswish,
            "sigmoid": torch.sigmoid, "tanh": torch.tanh}


def tensor_args(node: torch.fx.Node) -> list:
    return [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]


def numbers_only(node: torch.fx.Node) -> bool:
    """Whether every operand that is not a node is a plain number (or None)."""
    return all(isinstance(a, (torch.fx.Node, int, float, bool, str, type(None)))
               for a in (*node.args, *node.kwargs.values()))


_CONVERT = torch.ops.prims.convert_element_type.default


def activation_after(root: torch.fx.Node) -> tuple[str, torch.fx.Node, list] | None:
    """The activation that the elementwise operations after `root` compute, the node that ends
    them and the nodes they take (or None): the operations depend on root and numbers only,
    nothing outside them reads root or any of them but the last, and their values match one
    activation the kernels know. They may work in float32 on a 16-bit root (conversions to
    float32 and back, as Inductor's decompositions write them), as the kernels compute an
    activation in float and round what they store; the last of them has root's dtype."""
    shape, dtype = getattr(val(root), "shape", None), getattr(val(root), "dtype", None)
    region: list[torch.fx.Node] = []
    inside = {root}
    node = root.next
    for _ in range(64):  # an activation's operations follow the product closely
        if node.op == "output":
            break
        v = val(node)
        convert = node.target == _CONVERT and len(node.args) == 2
        if (node.op == "call_function" and (node.target in ELEMENTWISE and numbers_only(node) or convert)
                and tensor_args(node) and all(a in inside for a in tensor_args(node))
                and isinstance(v, torch.Tensor) and v.shape == shape and v.dtype in (dtype, torch.float32)):
            region.append(node)
            inside.add(node)
        node = node.next
    for sink in reversed(region):
        if val(sink).dtype != dtype:
            continue
        taken, stack = {sink}, [sink]
        while stack:  # what the sink is computed from, back to root
            for a in tensor_args(stack.pop()):
                if a is not root and a not in taken:
                    taken.add(a)
                    stack.append(a)
        if any(u not in taken for n in taken if n is not sink for u in n.users) or any(
                u not in taken for u in root.users):
            continue
        values = {root: SAMPLES}
        ordered = [n for n in region if n in taken]
        try:
            for n in ordered:
                args = [values[a] if isinstance(a, torch.fx.Node) else a for a in n.args]
                kwargs = {k: values[a] if isinstance(a, torch.fx.Node) else a for k, a in n.kwargs.items()}
                values[n] = args[0] if n.target == _CONVERT else n.target(*args, **kwargs)
        except Exception:  # an operand form the samples do not take: not folded
            continue
        got = values[sink]
        for name, f in activations().items():
            want = f(SAMPLES)
            if torch.allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True):
                return name, sink, ordered
        return None
    return None


def is_call(node: Any, target: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.target == target


def rms_norm(x: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, float, list[torch.fx.Node]] | None:
    """(h, weight, eps, the norm's nodes) where x is transformers' RMSNorm of h, as Inductor's
    graph spells it: weight · convert(h32 · rsqrt(mean(h32², -1, keepdim) + eps), h's dtype),
    h32 = convert(h, float32), a 16-bit h and a weight of its dtype and width; else None."""
    if not is_call(x, aten.mul.Tensor) or x.kwargs or len(x.args) != 2:
        return None
    for weight, back in (x.args, reversed(x.args)):
        wv = val(weight)
        if not (isinstance(wv, torch.Tensor) and wv.dim() == 1 and is_call(back, prims.convert_element_type.default)):
            continue
        scaled = back.args[0]
        if not is_call(scaled, aten.mul.Tensor) or len(scaled.args) != 2:
            continue
        for h32, r in (scaled.args, reversed(scaled.args)):
            if not (is_call(h32, prims.convert_element_type.default) and is_call(r, aten.rsqrt.default)):
                continue
            plus = r.args[0]
            if not is_call(plus, aten.add.Tensor) or len(plus.args) != 2:
                continue
            mean = next((a for a in plus.args if is_call(a, aten.mean.dim)), None)
            eps = next((a for a in plus.args if isinstance(a, (int, float))), None)
            if mean is None or eps is None or len(mean.args) < 3 or mean.args[2] is not True:
                continue
            square = mean.args[0]
            h = h32.args[0]
            hv, h32v = val(h), val(h32)
            if not (is_call(square, aten.pow.Tensor_Scalar) and square.args[0] is h32 and square.args[1] == 2
                    and isinstance(hv, torch.Tensor) and hv.dtype in HALVES and h32v.dtype == torch.float32
                    and list(mean.args[1]) in ([-1], [hv.dim() - 1]) and back.args[1] == hv.dtype
                    and wv.dtype == hv.dtype and wv.shape[0] == hv.shape[-1]):
                continue
            chain = [x, back, scaled, r, plus, mean, square]
            inside = set(chain) | {h32}
            if any(u not in inside for n in chain[1:] for u in n.users) or set(h32.users) != {square, scaled}:
                continue
            return h, weight, float(eps), [*chain, h32]
    return None


def _either(node: torch.fx.Node, first: Any) -> list[tuple[Any, Any]]:
    """node's two operands in both orders where the first test passes on the first of them."""
    if len(node.args) != 2 or node.kwargs:
        return []
    a, b = node.args
    return [(x, y) for x, y in ((a, b), (b, a)) if first(x)]


def _width_vector(node: Any, hv: torch.Tensor) -> bool:
    v = val(node)
    return isinstance(v, torch.Tensor) and v.dim() == 1 and v.shape[0] == hv.shape[-1] and v.dtype == hv.dtype


def layer_norm(x: torch.fx.Node) -> tuple[torch.fx.Node, Any, Any, float, list[torch.fx.Node]] | None:
    """(h, weight, bias, eps, the norm's nodes) where x is layer_norm(h, (width,), weight, bias,
    eps) as Inductor's decomposition spells it for a 16-bit h: convert((h32 - mean) ·
    rsqrt(var + eps) · weight + bias, h's dtype), var and mean from var_mean(h32, -1,
    correction=0, keepdim), h32 = convert(h, float32), weight and bias of h's dtype and width;
    else None."""
    if not is_call(x, prims.convert_element_type.default):
        return None
    shifted = x.args[0]
    if not is_call(shifted, aten.add.Tensor):
        return None
    for scaled_w, bias in _either(shifted, lambda a: is_call(a, aten.mul.Tensor)):
        for scaled, weight in _either(scaled_w, lambda a: is_call(a, aten.mul.Tensor)):
            for centred, r in _either(scaled, lambda a: is_call(a, aten.sub.Tensor)):
                if not is_call(r, aten.rsqrt.default) or len(centred.args) != 2:
                    continue
                h32, mean = centred.args
                plus = r.args[0]
                if not (is_call(h32, prims.convert_element_type.default) and is_call(plus, aten.add.Tensor)):
                    continue
                var = next((a for a in plus.args if isinstance(a, torch.fx.Node)), None)
                eps = next((a for a in plus.args if isinstance(a, (int, float))), None)
                moments = var.args[0] if is_call(var, operator.getitem) else None
                if (eps is None or not is_call(mean, operator.getitem) or mean.args[0] is not moments
                        or var.args[1] != 0 or mean.args[1] != 1 or not is_call(moments, aten.var_mean.correction)
                        or moments.args[0] is not h32 or moments.kwargs.get("correction") != 0
                        or moments.kwargs.get("keepdim") is not True):
                    continue
                h = h32.args[0]
                hv = val(h)
                if not (isinstance(hv, torch.Tensor) and hv.dtype in HALVES and x.args[1] == hv.dtype
                        and list(moments.args[1]) in ([-1], [hv.dim() - 1]) and _width_vector(weight, hv)
                        and _width_vector(bias, hv)):
                    continue
                chain = [x, shifted, scaled_w, scaled, centred, r, plus, var, mean, moments]
                inside = set(chain) | {h32}
                if any(u not in inside for n in chain[1:] for u in n.users) or set(h32.users) != {moments, centred}:
                    continue
                return h, weight, bias, float(eps), [*chain, h32]
    return None
