"""The opencl device's rewrites for decoding, a few rows at a time through a transformer, in
Inductor's post-grad graphs (passes.OpenCLGraphPass calls rewrite()), in this order:

1. attention whose keys and values are transformers' repeat_kv copies reads the grouped heads
   themselves (the kernels map query head h to key/value head h / n);
2. few-row 16-bit products of one input (a layer's q, k and v projections, an MLP's gate and up)
   become one torch.ops.oclf.mm_group call, up to three products a launch;
3. a gated MLP's act(x·Wg) · (x·Wu) becomes that call's `glu`: one launch, and neither the gate
   nor the up projection goes to memory;
4. a residual added to a few-row product's result becomes the call's `residual`, added as the
   kernel stores (mm_group's, or torch.ops.oclf.addmm_act's for an addmm over a k×n weight,
   transformers' Conv1D);
5. a norm that only few-row products read becomes their options, each launch normalizing its
   input rows itself: an RMS norm (transformers' RMSNorm: x · rsqrt(mean(x²) + eps) in float32,
   back to x's dtype, times its weight) before an mm_group (`rms_weight`, `rms_eps`), a layer
   norm before an addmm (addmm_act's `norm_weight`, `norm_bias`, `norm_eps`).

Inductor makes one kernel of a residual add and the norm after it; 4 and 5 leave neither, and
3 removes the activation's kernel: a Llama layer's step has three launches fewer, a GPT-2
layer's two. The options keep torch's roundings (each 16-bit intermediate rounded where torch
rounds it).
"""
from __future__ import annotations

import operator
from typing import Any

import torch

from opencl_functions import settings

from ..devices import get_device_properties
from .graph_match import (HALVES, VIEWS, activation_after, layer_norm, new_node, on_opencl, only_user, rms_norm,
                          through_views, val)

aten = torch.ops.aten
MM_GROUP = torch.ops.oclf.mm_group.default
ADDMM_ACT = torch.ops.oclf.addmm_act.default


def _part(group: torch.fx.Node, i: int) -> torch.fx.Node:
    part = group.graph.call_function(operator.getitem, (group, i))
    part.meta["val"] = val(group)[i]
    return part


def _as_shape(node: torch.fx.Node, shape: list) -> torch.fx.Node | None:
    """node viewed as `shape` (node itself if it has it), or None where no view can."""
    if list(val(node).shape) == list(shape):
        return node
    try:
        return new_node(aten.view.default, node, list(shape))
    except RuntimeError:
        return None


_ATTENTION = aten._scaled_dot_product_fused_attention_overrideable.default


def _repeated_heads(node: Any) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(x, the nodes between) where node is x's heads each repeated n times in place, as
    transformers' repeat_kv writes it: reshape(clone(expand(unsqueeze(x, 2), (B, Hk, n, S, D))),
    (B, Hk·n, S, D)), each step used only by the next; else None."""
    if not isinstance(node, torch.fx.Node) or node.target not in VIEWS:
        return None
    chain = [node]
    at = node.args[0]
    if isinstance(at, torch.fx.Node) and at.target == aten.clone.default:
        chain.append(at)
        at = at.args[0]
    if not (isinstance(at, torch.fx.Node) and at.target == aten.expand.default):
        return None
    chain.append(at)
    unsqueeze = at.args[0]
    if not (isinstance(unsqueeze, torch.fx.Node) and unsqueeze.target == aten.unsqueeze.default
            and unsqueeze.args[1] in (2, -3)):
        return None
    chain.append(unsqueeze)
    x, grown, out = val(unsqueeze.args[0]), val(at), val(node)
    if not all(isinstance(t, torch.Tensor) for t in (x, grown, out)) or x.dim() != 4 or grown.dim() != 5:
        return None
    B, Hk, S, D = x.shape
    n = grown.shape[2]
    if list(grown.shape) != [B, Hk, n, S, D] or list(out.shape) != [B, Hk * n, S, D]:
        return None
    if any(len(c.users) != 1 for c in chain):
        return None
    return unsqueeze.args[0], chain


def _share_kv_heads(graph: torch.fx.Graph, attention: torch.fx.Node) -> bool:
    """Attention whose keys and values are repeat_kv copies of fewer heads reads the heads
    themselves: the device's attention kernels take query head h to key/value head h / n
    (grouped-query attention), so each step no longer copies the whole cache n times."""
    keys, values = (_repeated_heads(a) for a in attention.args[1:3])
    if keys is None or values is None:
        return False
    (k, k_chain), (v, v_chain) = keys, values
    if val(k).shape[1] != val(v).shape[1]:
        return False
    attention.args = (attention.args[0], k, v, *attention.args[3:])
    for dead in (*k_chain, *v_chain):
        graph.erase_node(dead)
    return True


def _product_input(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """What a few-row 16-bit product mm(x, wᵀ) on the device multiplies, as a key that products
    of one input share (x seen through its views: each linear layer reshapes the input anew),
    where its weight is read through its transpose; else None."""
    x, w = node.args[:2]
    xv, wv = val(x), val(w)
    if not all(isinstance(t, torch.Tensor) for t in (xv, wv)) or xv.device.type != "opencl":
        return None
    if xv.dtype not in HALVES or wv.dtype != xv.dtype or xv.dim() != 2 or wv.dim() != 2:
        return None
    rows = xv.shape[0]
    if not isinstance(rows, int) or rows > 8 or wv.stride(0) != 1:
        return None
    source = x.args[0] if isinstance(x, torch.fx.Node) and x.target in VIEWS else x
    return (source, tuple(xv.shape))


def _group_products(graph: torch.fx.Graph) -> bool:
    """Few-row 16-bit products of one input (a layer's query, key and value projections, an
    MLP's gate and up) become one torch.ops.oclf.mm_group call where the first of them stands,
    which runs up to three of them in one launch. The later products' weights (transposes of
    the graph's inputs, as a linear layer's) move up to it; a weight made from values computed
    after the first product leaves the group as it is."""
    groups: dict[tuple[Any, ...], list[torch.fx.Node]] = {}
    for product in graph.find_nodes(op="call_function", target=aten.mm.default):
        key = _product_input(product)
        if key is not None:
            groups.setdefault(key, []).append(product)
    changed = False
    for products in groups.values():
        if len(products) < 2:
            continue
        order = {n: i for i, n in enumerate(graph.nodes)}
        products.sort(key=order.__getitem__)
        first = products[0]
        weights = [p.args[1] for p in products]
        late = [w for w in weights if order[w] > order[first]]
        if any(order[a] >= order[first] for w in late for a in w.all_input_nodes):
            continue
        for w in late:
            first.prepend(w)
        with graph.inserting_before(first):
            grouped = new_node(MM_GROUP, first.args[0], weights)
            parts = [_part(grouped, i) for i in range(len(products))]
        for part, product in zip(parts, products):
            product.replace_all_uses_with(part)
            graph.erase_node(product)
        changed = True
    return changed


def _rows_as_on_a_gpu(node: torch.fx.Node) -> bool:
    """Whether node's device runs few-row products as GPUs do, in kernels that take the
    options (a GPU, or any device with OCLF_DEVICE_MATMUL=gpu). A CPU device runs them
    otherwise, where the options would only spell their steps out as torch operations, more
    launches than Inductor's fused kernels (the values are the same either way)."""
    v = val(_input(node))
    if not isinstance(v, torch.Tensor) or v.device.type != "opencl":
        return False
    return settings.get("DEVICE_MATMUL") == "gpu" or get_device_properties(v.device.index).type != "CPU"


def rows_mode() -> str:
    """What _rows_as_on_a_gpu reads, for the pass's cache key: the setting and the devices' types."""
    from ..devices import device_count

    return settings.get("DEVICE_MATMUL") + ":" + ",".join(get_device_properties(i).type for i in range(device_count()))


def _addmm_like(node: torch.fx.Node) -> bool:
    """A few-row 16-bit addmm(bias, x, w) (or addmm_act) on the device with a bias row and a
    k×n weight whose rows are contiguous (transformers' Conv1D: GPT-2's layers)."""
    if node.target == aten.addmm.default:
        if any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) or len(node.args) != 3:
            return False
    elif node.target != ADDMM_ACT:
        return False
    bias, x, w = (val(a) for a in node.args[:3])
    return (all(isinstance(t, torch.Tensor) for t in (bias, x, w)) and x.device.type == "opencl"
            and x.dtype in HALVES and w.dtype == x.dtype and bias.dtype == x.dtype and bias.dim() == 1
            and x.dim() == 2 and isinstance(x.shape[0], int) and x.shape[0] <= 8 and w.dim() == 2 and w.stride(1) == 1)


def _few_rows(node: torch.fx.Node) -> bool:
    """A product the options apply to: an mm_group, a plain few-row 16-bit mm(x, wᵀ), or a
    few-row addmm over a k×n weight."""
    return (node.target == MM_GROUP or (node.target == aten.mm.default and _product_input(node) is not None)
            or _addmm_like(node))


def _input(node: torch.fx.Node) -> torch.fx.Node:
    return node.args[1] if node.target in (aten.addmm.default, ADDMM_ACT) else node.args[0]


def _with(node: torch.fx.Node, x: torch.fx.Node | None = None, **options: Any) -> torch.fx.Node:
    """A new call (at the insertion point) of node's products with node's options and these,
    of x where given, else of node's input: an mm_group for an mm_group or an mm, addmm_act for
    an addmm."""
    x = _input(node) if x is None else x
    if node.target in (aten.addmm.default, ADDMM_ACT):
        bias, _, w = node.args[:3]
        activation = node.args[3] if node.target == ADDMM_ACT else "none"
        return new_node(ADDMM_ACT, bias, x, w, activation, **{**node.kwargs, **options})
    weights = node.args[1] if node.target == MM_GROUP else [node.args[1]]
    return new_node(MM_GROUP, x, list(weights), **{**node.kwargs, **options})


def _results(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """What reads node's products: the mm or addmm itself, or an mm_group's getitem per product
    (None where another kind of user reads the group)."""
    if node.target != MM_GROUP:
        return [node]
    parts = sorted(node.users, key=lambda u: u.args[1] if u.target == operator.getitem else -1)
    if len(parts) != len(val(node)) or any(u.target != operator.getitem or u.args[1] != i
                                               for i, u in enumerate(parts)):
        return None
    return parts


def _outputs(new: torch.fx.Node, count: int) -> list[torch.fx.Node]:
    """new's results as _results lists them (new an mm_group or addmm_act)."""
    return [new] if new.target == ADDMM_ACT else [_part(new, i) for i in range(count)]


def _gate(graph: torch.fx.Graph, group: torch.fx.Node) -> bool:
    """mm_group(x, [w_a, w_b]) whose results meet as act(a) · b (either way round, through
    views) becomes mm_group(x, [w_gate, w_up], glu=act): one result, each work-group column
    computing both products of its column."""
    parts = _results(group)
    if parts is None or len(parts) != 2 or group.kwargs or not _rows_as_on_a_gpu(group):
        return False
    weights = group.args[1]
    for gate, up in ((0, 1), (1, 0)):
        found = activation_after(through_views(parts[gate])[0])
        if found is None:
            continue
        name, sink, taken = found
        product = only_user(sink)
        up_end, _ = through_views(parts[up])
        if (product is None or product.target != aten.mul.Tensor or product.kwargs
                or set(product.args) != {sink, up_end} or only_user(up_end) is not product
                or val(product).shape != val(sink).shape):
            continue
        with graph.inserting_before(product):
            fused = _part(new_node(MM_GROUP, group.args[0], [weights[gate], weights[up]], glu=name), 0)
            result = _as_shape(fused, list(val(product).shape))
        if result is None:
            continue
        product.replace_all_uses_with(result)
        return True
    return False


def _add_residual(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """A few-row product of one result (an mm, an mm_group of one product or a gated pair, an
    addmm) whose result, through views, is added to a tensor of its shape becomes that product
    with the tensor as its `residual`."""
    if not _few_rows(node) or "residual" in node.kwargs or not _rows_as_on_a_gpu(node):
        return False
    parts = _results(node)
    if parts is None or len(parts) != 1:
        return False
    end, _ = through_views(parts[0])
    add = only_user(end)
    if add is None or add.target != aten.add.Tensor or add.kwargs or len(add.args) != 2 or end not in add.args:
        return False
    other = add.args[1] if add.args[0] is end else add.args[0]
    ov, out = val(other), val(add)
    if (other is end or not isinstance(ov, torch.Tensor) or ov.shape != val(end).shape or ov.dtype != out.dtype
            or out.shape != ov.shape):
        return False
    with graph.inserting_before(add):
        residual = _as_shape(other, list(val(parts[0]).shape))
        if residual is None:
            return False
        result = _as_shape(_outputs(_with(node, residual=residual), 1)[0], list(out.shape))
    if result is None:
        return False
    add.replace_all_uses_with(result)
    return True


def _normalize_input(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """A few-row product whose input is, through views read by it alone, a norm that nothing
    else reads takes the norm's input and parameters instead: an RMS norm before an mm or
    mm_group (rms_weight), a layer norm before an addmm (norm_weight, norm_bias)."""
    if (not _few_rows(node) or "rms_weight" in node.kwargs or "norm_weight" in node.kwargs
            or not _rows_as_on_a_gpu(node)):
        return False
    x = _input(node)
    while isinstance(x, torch.fx.Node) and x.target in VIEWS:
        if len(x.users) != 1:
            return False
        x = x.args[0]
    results = _results(node)
    if len(x.users) != 1 or results is None:
        return False
    if _addmm_like(node):
        found = layer_norm(x)
        if found is None:
            return False
        h, weight, bias, eps, _ = found
        options = dict(norm_weight=weight, norm_bias=bias, norm_eps=eps)
    else:
        found = rms_norm(x)
        if found is None:
            return False
        h, weight, eps, _ = found
        options = dict(rms_weight=weight, rms_eps=eps)
    with graph.inserting_before(node):
        rows = _as_shape(h, list(val(_input(node)).shape))
        if rows is None:
            return False
        parts = _outputs(_with(node, rows, **options), len(results))
    for old, new in zip(results, parts):
        old.replace_all_uses_with(new)
    return True


def _products(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for target in (aten.mm.default, MM_GROUP, aten.addmm.default, ADDMM_ACT)
            for n in graph.find_nodes(op="call_function", target=target)]


def rewrite(graph: torch.fx.Graph) -> bool:
    """The rewrites of the module's text, on one graph; whether any applied (the graph then has
    dead nodes to eliminate)."""
    changed = False
    for attention in list(graph.find_nodes(op="call_function", target=_ATTENTION)):
        changed |= on_opencl(attention) and _share_kv_heads(graph, attention)
    changed |= _group_products(graph)
    gated = False
    for group in list(graph.find_nodes(op="call_function", target=MM_GROUP)):
        gated |= _gate(graph, group)
    if gated:
        graph.eliminate_dead_code()  # (the pairs replaced, so the residual's product has one user)
    added = False
    for node in _products(graph):
        added |= _add_residual(graph, node)
    if added:
        graph.eliminate_dead_code()
    normalized = False
    for node in _products(graph):
        if node.users:
            normalized |= _normalize_input(graph, node)
    return changed or gated or added or normalized
