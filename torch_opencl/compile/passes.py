"""The opencl device's pass over Inductor's post-grad graphs (registered with
register_backend_for_device): a 2-D convolution and the pointwise work after it become one
call of the device's fused convolution (torch.ops.oclf.conv2d_fused), whose kernels add a
residual and apply the activation as they store each output:

    convolution -> [per-channel affine: an eval batch norm, a bias] -> [+ residual] -> [activation]

and a product with a bias row and the activation after it (a linear layer's or transformers'
Conv1D's, then GELU in any of its spellings; float32, float16 or bfloat16) become one call
of torch.ops.oclf.addmm_act, whose product kernels apply the activation as they store C:

    addmm(bias, x, w) -> [views] -> f, f an activation written as elementwise operations

The activation is recognized by its values, not its spelling: the elementwise operations
that follow the product, depend on nothing else and end in one value (HF's NewGELU is nine
of them) are evaluated in float64 on sample points and compared with each activation the
kernels know (relu, relu6, silu, gelu, gelu_tanh, hardswish, sigmoid, tanh).

A per-channel affine (x - m) * s * g + b folds into the convolution's weights and bias
(w * a, bias * a + c, computed in the graph: parameters may change between calls); it is
folded only where the output is larger than the weights (folding reads and writes the
weights once per call, fusing saves a read and a write of the output). Every value either
chain replaces must have no other user (what a training graph saves for its backward pass
does), so gradients never need the fused call. Float32 convolutions of 4-D tensors only.

Two more rewrites serve decoding: attention whose keys and values are transformers' repeat_kv
copies reads the grouped heads themselves (the kernels map query head h to key/value head h / n),
and few-row 16-bit products of one input (a layer's q, k and v projections, an MLP's gate and
up) become one call of torch.ops.oclf.mm_group, up to three products a launch.

The pass's uuid (the hash of this package's code generator and kernel headers) is part of
Inductor's cache key, so a changed generator never reuses kernels of an older one.
"""
from __future__ import annotations

import pathlib
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

from . import decoding
from .graph_match import activation_after, new_node, on_opencl, only_user, through_views, val

aten = torch.ops.aten
_HERE = pathlib.Path(__file__).parent
_FILES = tuple(str(p) for p in sorted(_HERE.glob("*.py"))) + tuple(
    str(_HERE.parent / "kernels" / name) for name in ("compiled.h", "dtypes.h"))


def _per_channel(operand: Any, channels: int) -> bool:
    """A number, or a tensor holding one value per output channel (shape C, 1, 1 or 1, C, 1, 1)."""
    if isinstance(operand, (int, float)):
        return True
    v = val(operand)
    if not isinstance(v, torch.Tensor) or v.numel() != channels or v.dim() > 4:
        return False
    shape = list(v.shape)
    return shape[-3:] == [channels, 1, 1] if len(shape) >= 3 else False


def _activation(node: torch.fx.Node) -> str | None:
    if node.target == aten.relu.default:
        return "relu"
    if node.target == aten.hardtanh.default and list(node.args[1:]) == [0.0, 6.0]:
        return "relu6"
    if node.target == aten.silu.default:
        return "silu"
    if node.target == aten.hardswish.default:
        return "hardswish"
    if node.target == aten.gelu.default and node.kwargs.get("approximate", "none") == "none":
        return "gelu"
    return None


def _fuse_one(graph: torch.fx.Graph, conv: torch.fx.Node) -> bool:
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = conv.args
    out = val(conv)
    if (transposed or any(output_padding) or len(stride) != 2 or not isinstance(out, torch.Tensor)
            or out.dim() != 4 or out.dtype != torch.float32 or out.device.type != "opencl"):
        return False
    channels = out.shape[1]
    chain, affine = [conv], []  # affine: (op, operand) steps after the convolution
    node = only_user(conv)
    while node is not None and node.target in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor):
        if node.args[0] is not chain[-1] or node.kwargs or len(node.args) != 2 or not _per_channel(node.args[1],
                                                                                                  channels):
            break
        affine.append((node.target, node.args[1]))
        chain.append(node)
        node = only_user(node)
    weight_elems = val(w).numel() if val(w) is not None else out.numel()
    if affine and out.numel() < 1.5 * weight_elems:
        return False  # folding costs more traffic (weights) than fusing saves (the output)
    residual = None
    if node is not None and node.target == aten.add.Tensor and len(node.args) == 2 and not node.kwargs:
        other = node.args[1] if node.args[0] is chain[-1] else node.args[0] if node.args[1] is chain[-1] else None
        ov = val(other)
        if isinstance(ov, torch.Tensor) and ov.shape == out.shape and ov.dtype == out.dtype and other is not chain[-1]:
            residual = other
            chain.append(node)
            node = only_user(node)
    activation = _activation(node) if node is not None else None
    if activation is not None:
        chain.append(node)
    if len(chain) == 1:
        return False
    last = chain[-1]
    fake_mode = detect_fake_mode([out])

    def call(target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = graph.call_function(target, args, kwargs)
        with fake_mode:
            node.meta["val"] = target(*[val(a) if isinstance(a, torch.fx.Node) else a for a in args], **kwargs)
        return node

    def combine(acc: Any, op: Any, value: Any) -> Any:
        """acc op value for a scale (mul, div) or a shift (add, sub); None is no value yet."""
        numbers = not isinstance(acc, torch.fx.Node) and not isinstance(value, torch.fx.Node)
        if acc is None:
            if op in (aten.mul.Tensor, aten.add.Tensor):
                return value
            if op == aten.sub.Tensor:
                return -value if numbers else call(aten.neg.default, value)
            return 1.0 / value if numbers else call(aten.reciprocal.default, value)
        if numbers:
            return {aten.add.Tensor: acc + value, aten.sub.Tensor: acc - value, aten.mul.Tensor: acc * value,
                    aten.div.Tensor: acc / value}[op]
        if isinstance(acc, torch.fx.Node):
            return call(op, acc, value)
        flipped = combine(None, op, value)  # acc is a number, value a node
        return call(aten.add.Tensor if op in (aten.add.Tensor, aten.sub.Tensor) else aten.mul.Tensor, flipped, acc)

    with graph.inserting_before(last):
        scale, shift = None, b
        for op, operand in affine:
            flat = call(aten.view.default, operand, [channels]) if isinstance(operand, torch.fx.Node) else operand
            if op in (aten.add.Tensor, aten.sub.Tensor):
                shift = combine(shift, op, flat)
            else:
                scale = combine(scale, op, flat)
                if shift is not None:
                    shift = combine(shift, op, flat)
        if isinstance(scale, torch.fx.Node):
            w = call(aten.mul.Tensor, w, call(aten.view.default, scale, [channels, 1, 1, 1]))
        elif scale is not None:
            w = call(aten.mul.Tensor, w, scale)
        if shift is not None and not isinstance(shift, torch.fx.Node):
            shift = call(aten.full.default, [channels], float(shift), dtype=torch.float32, device=out.device)
        fused = call(torch.ops.oclf.conv2d_fused.default, x, w, shift, residual, list(stride), list(padding),
                     list(dilation), groups, activation or "none")
    last.replace_all_uses_with(fused)
    for dead in reversed(chain):
        graph.erase_node(dead)
    return True


# ---- a product and its activation -----------------------------------------------------

# The products whose kernels apply an activation: float32 (reference/matmul.cl) and 16-bit
# (kernels/gemm16.cl).
_PRODUCT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _fold_activation(graph: torch.fx.Graph, product: torch.fx.Node) -> bool:
    """addmm(bias, x, w) [-> views] -> an activation becomes addmm_act (see the module's text)."""
    if len(product.args) != 3 or any(product.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")):
        return False
    bias, x, w = product.args
    out, bv = val(product), val(bias)
    if (not isinstance(out, torch.Tensor) or out.dtype not in _PRODUCT_DTYPES or out.device.type != "opencl"
            or out.dim() != 2 or not isinstance(bv, torch.Tensor) or bv.dim() != 1 or bv.dtype != out.dtype):
        return False
    root, views = through_views(product)
    found = activation_after(root)
    if found is None:
        return False
    name, sink, taken = found
    with graph.inserting_before(sink):
        result = fused = new_node(torch.ops.oclf.addmm_act.default, bias, x, w, name)
        if views:
            result = new_node(aten.view.default, fused, list(val(sink).shape))
    sink.replace_all_uses_with(result)
    for dead in reversed([product, *views, *taken]):
        if not dead.users:
            graph.erase_node(dead)
    return True


def keep_convolutions_nchw() -> None:
    """Inductor's layout optimization turns a graph with convolutions channels-last
    (GraphLowering.decide_layout_opt: on for most training graphs and many inference ones,
    whatever the device). The device's convolution kernels read and write NCHW, so there it
    only adds a copy before and after each convolution, and reductions over channels-last
    tensors (a training graph's batch norms) read across rows: a ResNet-50 training step
    compiled took 1.8x its eager time. Graphs whose convolutions run on the opencl device keep
    their layouts; every other graph is decided as before. Idempotent."""
    from torch._inductor.graph import GraphLowering

    decide = GraphLowering.decide_layout_opt
    if getattr(decide, "_keeps_opencl_nchw", False):
        return

    def decide_layout_opt(gm: torch.fx.GraphModule, *, is_inference: bool) -> bool:
        convs = gm.graph.find_nodes(op="call_function", target=aten.convolution.default)
        if any(on_opencl(n) for n in convs):
            return False
        return decide(gm, is_inference=is_inference)

    decide_layout_opt._keeps_opencl_nchw = True  # type: ignore[attr-defined]
    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)  # type: ignore[method-assign]


class OpenCLGraphPass(CustomGraphModulePass):
    def __call__(self, gm: torch.fx.GraphModule) -> None:
        changed = False
        for conv in list(gm.graph.find_nodes(op="call_function", target=aten.convolution.default)):
            changed |= _fuse_one(gm.graph, conv)
        for product in list(gm.graph.find_nodes(op="call_function", target=aten.addmm.default)):
            changed |= _fold_activation(gm.graph, product)
        changed |= decoding.rewrite(gm.graph)
        if changed:
            gm.graph.eliminate_dead_code()
            gm.recompile()

    def uuid(self) -> bytes:
        """Inductor's cache key: the package's code, and what decides the decoding rewrites'
        options (whether few-row products run as on a GPU: decoding.rows_mode())."""
        return get_hash_for_files(_FILES, extra="torch_opencl.compile:" + decoding.rows_mode())
