"""The opencl device's rewrite of a step's counters in Inductor's post-grad graphs (passes.
OpenCLGraphPass calls rewrite()): inputs of one element that the step only moves on by a
number, `copy_(counter, counter + n)` (transformers' static cache adds the step's length to a
counter per layer), become one torch.ops.oclf.add_each_ call per number and dtype, which
updates up to eight of them a launch. Inductor would make each its own kernel: a 22-layer
model's decoding step launched 23 kernels of one work-item each for them."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from .graph_match import val

aten = torch.ops.aten
ADD_EACH = torch.ops.oclf.add_each_.default
_TYPES = (torch.int64, torch.int32, torch.float32)


def _moved_on(copy: torch.fx.Node) -> tuple[torch.fx.Node, Any] | None:
    """(counter, n) where copy is copy_(counter, counter + n): counter an input of the graph
    holding one element on the device, the sum read by the copy alone; else None."""
    if copy.target != aten.copy_.default or len(copy.args) != 2 or copy.kwargs or copy.users:
        return None
    counter, total = copy.args
    if not (isinstance(counter, torch.fx.Node) and counter.op == "placeholder" and isinstance(total, torch.fx.Node)
            and total.target == aten.add.Tensor and not total.kwargs and len(total.users) == 1):
        return None
    n = next((a for a in total.args if isinstance(a, (int, float)) and not isinstance(a, bool)), None)
    cv = val(counter)
    if (n is None or set(a for a in total.args if isinstance(a, torch.fx.Node)) != {counter}
            or not isinstance(cv, torch.Tensor) or cv.device.type != "opencl" or cv.numel() != 1
            or cv.dtype not in _TYPES or val(total).dtype != cv.dtype
            or (isinstance(n, float) and cv.dtype != torch.float32)):
        return None
    return counter, n


def rewrite(graph: torch.fx.Graph) -> bool:
    """The module's rewrite; whether it applied."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    groups: dict[tuple[Any, ...], list[tuple[torch.fx.Node, torch.fx.Node]]] = defaultdict(list)
    for copy in graph.find_nodes(op="call_function", target=aten.copy_.default):
        found = _moved_on(copy)
        if found is not None:
            counter, n = found
            groups[(val(counter).dtype, type(n), n)].append((copy, counter))
    changed = False
    for (_, _, n), moves in groups.items():
        if len(moves) < 2:
            continue
        last = max((copy for copy, _ in moves), key=order.__getitem__)
        # Every other reader of a counter reads its old value: it must come before the update.
        if any(order[u] > order[last] for copy, counter in moves for u in counter.users
               if u is not copy and u is not copy.args[1]):
            continue
        with graph.inserting_before(last):
            graph.call_function(ADD_EACH, ([counter for _, counter in moves], n)).meta["val"] = None
        for copy, _ in moves:
            total = copy.args[1]
            graph.erase_node(copy)
            graph.erase_node(total)
        changed = True
    return changed

