"""What the opencl device's graph passes (passes.py, decoding.py) recognize in Inductor's
post-grad graphs: a node's value, its only user, views, and the activation that a run of
elementwise operations computes."""
from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def on_opencl(node: torch.fx.Node) -> bool:
    v = val(node.args[0]) if node.args else None
    return isinstance(v, torch.Tensor) and v.device.type == "opencl"


VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
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
