"""Fused inference models: fewer, fatter kernels for convolutional networks in eval mode.

    model = torchvision.models.resnet50(weights=...).eval()
    fused = torch_opencl.fuse(model).to("opencl")
    with torch.no_grad():
        y = fused(x.to("opencl"))            # the same values as model(x), in fewer launches

`fuse(model)` traces the model with torch.fx and rewrites each convolution with what follows
it into one call of `torch.ops.oclf.conv2d_fused`:

    Conv2d -> BatchNorm2d (eval)        the batch norm folded into the weights and bias
           -> + residual                added as the kernel stores each output
           -> ReLU | ReLU6 | SiLU | GELU | Hardswish      applied there too

so a ResNet bottleneck's conv, batch norm, addition and ReLU are one kernel instead of four.
Each step is taken only when the value before it has no other user. The result is a
`torch.fx.GraphModule`; the model itself is left as it was. It is for inference: batch norm
is folded with its running statistics (the model must be in eval mode), and the fused
convolution has no gradient. On the opencl device the fused op runs the reference's
convolution kernels with an epilogue (float32); elsewhere, and for other dtypes, it runs as
the separate operations, so a fused model gives the same values on any device.
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

__all__ = ["fuse"]

_ACTIVATION_MODULES = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.Hardswish: "hardswish"}
_ACTIVATION_FUNCTIONS = {F.relu: "relu", torch.relu: "relu", torch.relu_: "relu", F.relu6: "relu6",
                         F.silu: "silu", F.hardswish: "hardswish", F.gelu: "gelu"}
_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu"}
_ADDS = {operator.add, operator.iadd, torch.add}


def fuse(model: nn.Module) -> torch.fx.GraphModule:
    """`model` (in eval mode) with its convolutions fused with their batch norm, residual
    addition and activation (see the module's text). Raises ValueError for a model in
    training mode, and one naming torch.fx's complaint for a model it cannot trace."""
    if model.training:
        raise ValueError("fuse() folds batch norm with its running statistics, for inference: call "
                         "model.eval() first")
    try:
        # A private copy: the graph module shares its submodules with what it traced.
        gm = torch.fx.symbolic_trace(copy.deepcopy(model))
    except Exception as err:  # torch.fx raises a variety of errors for untraceable code
        raise ValueError(f"fuse() needs a model that torch.fx can trace; tracing {type(model).__name__} "
                         f"failed: {err}") from err
    modules = dict(gm.named_modules())
    fused = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and _fusable_conv(modules.get(node.target)):
            fused += _fuse_from(gm, modules, node, fused)
    gm.delete_all_unused_submodules()
    gm.graph.lint()
    gm.recompile()
    return gm


def _fusable_conv(m: Optional[nn.Module]) -> bool:
    return (type(m) is nn.Conv2d and m.padding_mode == "zeros" and not isinstance(m.padding, str)
            and m.weight.dim() == 4)


def _only_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _foldable_bn(m: Optional[nn.Module], conv: nn.Conv2d) -> bool:
    return (type(m) is nn.BatchNorm2d and not m.training and m.track_running_stats and m.affine
            and m.running_mean is not None and m.num_features == conv.out_channels)


def _activation(node: torch.fx.Node, modules: Dict[str, nn.Module]) -> Optional[str]:
    """The activation `node` applies to its first argument, or None."""
    if node.op == "call_module":
        m = modules.get(node.target)
        if type(m) is nn.GELU:
            return "gelu" if m.approximate == "none" else None
        return _ACTIVATION_MODULES.get(type(m))
    if node.op == "call_function" and node.target in _ACTIVATION_FUNCTIONS and len(node.args) == 1:
        if node.target is F.gelu and node.kwargs.get("approximate", "none") != "none":
            return None
        if set(node.kwargs) - {"inplace", "approximate"}:
            return None
        return _ACTIVATION_FUNCTIONS[node.target]
    if node.op == "call_method" and node.target in _ACTIVATION_METHODS and len(node.args) == 1 and not node.kwargs:
        return _ACTIVATION_METHODS[node.target]
    return None


def _residual(node: torch.fx.Node, value: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The other operand when `node` adds a tensor to `value` (a + b, a += b, torch.add(a, b)),
    or None."""
    is_add = ((node.op == "call_function" and node.target in _ADDS)
              or (node.op == "call_method" and node.target in ("add", "add_")))
    if not is_add or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    in_place = node.target in (operator.iadd, "add_")
    # An in-place addition must update `value` itself (a fresh output), never the other tensor.
    other = b if a is value else a if (b is value and not in_place) else None
    if not isinstance(other, torch.fx.Node) or other is value:
        return None
    return other


def _fuse_from(gm: torch.fx.GraphModule, modules: Dict[str, nn.Module], conv_node: torch.fx.Node,
               index: int) -> int:
    """Fuses what follows the convolution `conv_node`; returns 1 when it made a fused call."""
    conv: nn.Conv2d = modules[conv_node.target]
    if len(conv_node.args) != 1 or conv_node.kwargs:
        return 0
    chain = [conv_node]
    value = conv_node
    nxt = _only_user(value)
    if nxt is not None and nxt.op == "call_module" and _foldable_bn(modules.get(nxt.target), conv):
        conv = fuse_conv_bn_eval(conv, modules[nxt.target])
        chain.append(nxt)
        value = nxt
        nxt = _only_user(value)
    residual = _residual(nxt, value) if nxt is not None else None
    if residual is not None:
        chain.append(nxt)
        value = nxt
        nxt = _only_user(value)
    activation = _activation(nxt, modules) if nxt is not None else None
    if activation is not None:
        chain.append(nxt)
    if len(chain) == 1:
        return 0  # a convolution alone: nothing to gain
    # The fused weights, without gradients (the module is the traced copy's, or a folded one).
    name = f"fused_conv{index}"
    conv.requires_grad_(False)
    gm.add_submodule(name, conv)
    last = chain[-1]
    with gm.graph.inserting_before(last):
        weight = gm.graph.get_attr(f"{name}.weight")
        bias = gm.graph.get_attr(f"{name}.bias") if conv.bias is not None else None
        args: Tuple[Any, ...] = (conv_node.args[0], weight, bias, residual, list(conv.stride), list(conv.padding),
                                 list(conv.dilation), conv.groups, activation or "none")
        call = gm.graph.call_function(torch.ops.oclf.conv2d_fused, args)
    last.replace_all_uses_with(call)
    for node in reversed(chain):
        gm.graph.erase_node(node)
    return 1
