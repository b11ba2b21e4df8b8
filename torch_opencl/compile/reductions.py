"""The OpenCL C of a generated kernel's reductions (kernel.py calls `emit`).

A reduction kernel computes one output row x per work-group (group mode: RBLOCK work-items
stride over the reduced elements, then combine through local memory in log2(RBLOCK)
steps) or per work-item (serial mode: one work-item walks the whole row; rows small or
laid out along x). Each reduction has

  - accumulators, declared before the loop over the reduced elements (`prefix`),
  - an update inside that loop (`update`),
  - for group mode, a tree over local memory after the loop (`combine`), whose slot 0
    every work-item then reads: the reduction's value, at kernel scope.

Semantics follow torch: max/min propagate NaN; argmax/argmin return the first index of
the extreme value and treat NaN as extreme; welford keeps (mean, m2, weight) and merges
partial results by Chan's formula.

Floating sums and Welford's statistics accumulate in levels, as torch's cascaded sums do:
each work-item adds its elements into a partial that joins the next level every 16
elements, that one the next every 256, and so on to the total (a Chan merge for Welford),
so a row of n elements one work-item walks (serial mode, every row on a CPU device) rounds
like 16·LEVELS + n / 16^LEVELS additions rather than n: a 50,001-element row's sum 8 times,
its variance 20 times torch's float32 error in one accumulator, torch's own error in levels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .printer import compute_type, constant, is_float, type_limit


LEVELS = 3  # partials below a work-item's total: of 16, 256 and 4096 elements


@dataclass
class ReductionCode:
    prefix: list[str] = field(default_factory=list)   # before the loop (accumulators)
    update: list[str] = field(default_factory=list)   # inside the loop
    scratch: list[str] = field(default_factory=list)  # __local arrays (group mode)
    combine: list[str] = field(default_factory=list)  # after the loop
    results: list[str] = field(default_factory=list)  # C expressions of the values


def _max_pick(a: str, b: str, floating: bool, op: str) -> str:
    """a op b ? a : b, where NaN wins (torch.max and torch.min propagate it)."""
    if floating:
        return f"((({a}) != ({a}) || ({a}) {op} ({b})) ? ({a}) : ({b}))"
    return f"(({a}) {op} ({b}) ? ({a}) : ({b}))"


def _combine_expr(kind: str, a: str, b: str, floating: bool) -> str:
    if kind == "sum":
        return f"({a}) + ({b})"
    if kind == "prod":
        return f"({a}) * ({b})"
    if kind == "max":
        return _max_pick(a, b, floating, ">")
    if kind == "min":
        return _max_pick(a, b, floating, "<")
    if kind == "any":
        return f"({a}) || ({b})"
    if kind == "xor_sum":
        return f"({a}) ^ ({b})"
    raise NotImplementedError(f"opencl compile: reduction {kind!r}")


def _initial(kind: str, dtype: torch.dtype) -> str:
    if kind in ("sum", "xor_sum"):
        return constant(0, dtype)
    if kind == "prod":
        return constant(1, dtype)
    if kind == "any":
        return "false"
    if kind == "max":
        return type_limit(dtype, upper=False)
    if kind == "min":
        return type_limit(dtype, upper=True)
    raise NotImplementedError(f"opencl compile: reduction {kind!r}")


def _tree(code: ReductionCode, rblock: int, body: list[str]) -> None:
    """The local-memory tree: `body` combines slot lid with slot lid + s."""
    code.combine.append("barrier(CLK_LOCAL_MEM_FENCE);")
    code.combine.append(f"for (int s = {rblock // 2}; s > 0; s >>= 1) {{")
    code.combine.append("  if (lid < s) {")
    code.combine.extend(f"    {line}" for line in body)
    code.combine.append("  }")
    code.combine.append("  barrier(CLK_LOCAL_MEM_FENCE);")
    code.combine.append("}")


def _cascade(code: ReductionCode, count: str, add: list[str], merge, reset) -> None:
    """The update of a cascaded accumulation: `add` puts an element into level 0; after each
    16^(k+1) elements level k joins level k + 1 (merge(k + 1, k)) and starts again (reset(k));
    level LEVELS is the total. After the loop every level joins the next."""
    code.prefix.append(f"uint {count} = 0u;")
    code.update.extend(add)
    code.update.append(f"++{count};")
    for k in range(LEVELS):
        pad = "  " * k
        code.update.append(f"{pad}if (({count} & {16 ** (k + 1) - 1}u) == 0u) {{")
        code.update.extend(f"{pad}  {line}" for line in merge(k + 1, k) + reset(k))
    for k in reversed(range(LEVELS)):
        code.update.append("  " * k + "}")
    code.combine.append("{")
    for k in range(LEVELS):
        code.combine.extend(f"  {line}" for line in merge(k + 1, k))
    code.combine.append("}")


def simple(n: int, kind: str, dtype: torch.dtype, value: str, group: bool, rblock: int) -> ReductionCode:
    """sum, prod, max, min, any, xor_sum of `value` into one `dtype` result."""
    ctype = compute_type(dtype)
    floating = is_float(dtype)
    acc = f"acc{n}"
    code = ReductionCode()
    code.prefix.append(f"{ctype} {acc} = {_initial(kind, dtype)};")
    if kind == "sum" and floating:
        level = [f"part{n}_{k}" for k in range(LEVELS)] + [acc]
        code.prefix.extend(f"{ctype} {p} = {_initial(kind, dtype)};" for p in level[:-1])
        _cascade(code, f"count{n}", [f"{level[0]} = {level[0]} + ({ctype})({value});"],
                 lambda dst, src: [f"{level[dst]} = {level[dst]} + {level[src]};"],
                 lambda k: [f"{level[k]} = {_initial(kind, dtype)};"])
    else:
        code.update.append(f"{acc} = {_combine_expr(kind, acc, f'({ctype})({value})', floating)};")
    if not group:
        code.results.append(acc)
        return code
    red = f"red{n}"
    code.scratch.append(f"__local {ctype} {red}[{rblock}];")
    code.combine.append(f"{red}[lid] = {acc};")
    _tree(code, rblock, [f"{red}[lid] = {_combine_expr(kind, f'{red}[lid]', f'{red}[lid + s]', floating)};"])
    code.results.append(f"{red}[0]")
    return code


def _arg_take(kind: str, va: str, ia: str, vb: str, ib: str, floating: bool) -> str:
    """Whether (vb, ib) replaces (va, ia): a more extreme value, or an equal one at a
    smaller index; NaN is the most extreme (the first NaN wins)."""
    op = ">" if kind == "argmax" else "<"
    plain = f"(({vb}) {op} ({va}) || (({vb}) == ({va}) && ({ib}) < ({ia})))"
    if not floating:
        return plain
    return f"((({vb}) != ({vb})) ? (({va}) == ({va}) || ({ib}) < ({ia})) : (({va}) == ({va}) && {plain}))"


def arg(n: int, kind: str, src_dtype: torch.dtype, index_ctype: str, value: str, rindex: str, group: bool,
        rblock: int) -> ReductionCode:
    """argmax / argmin: the reduction index (r0_index) of the extreme value."""
    vtype = compute_type(src_dtype)
    floating = is_float(src_dtype)
    acc, idx = f"acc{n}", f"idx{n}"
    start = type_limit(src_dtype, upper=(kind == "argmin"))
    code = ReductionCode()
    code.prefix.append(f"{vtype} {acc} = {start};")
    code.prefix.append(f"{index_ctype} {idx} = {type_limit(torch.int64, upper=True)};")
    code.update.append(f"if ({_arg_take(kind, acc, idx, f'({vtype})({value})', rindex, floating)}) {{")
    code.update.append(f"  {acc} = ({vtype})({value});")
    code.update.append(f"  {idx} = {rindex};")
    code.update.append("}")
    if not group:
        code.results.append(idx)
        return code
    vals, idxs = f"redv{n}", f"redi{n}"
    code.scratch.append(f"__local {vtype} {vals}[{rblock}];")
    code.scratch.append(f"__local {index_ctype} {idxs}[{rblock}];")
    code.combine.append(f"{vals}[lid] = {acc};")
    code.combine.append(f"{idxs}[lid] = {idx};")
    take = _arg_take(kind, f"{vals}[lid]", f"{idxs}[lid]", f"{vals}[lid + s]", f"{idxs}[lid + s]", floating)
    _tree(code, rblock, [f"if ({take}) {{", f"  {vals}[lid] = {vals}[lid + s];", f"  {idxs}[lid] = {idxs}[lid + s];",
                         "}"])
    code.results.append(f"{idxs}[0]")
    return code


def _chan(mean_a: str, m2_a: str, w_a: str, mean_b: str, m2_b: str, w_b: str, tmp: str, ctype: str) -> list[str]:
    """(mean_a, m2_a, w_a) merged with (mean_b, m2_b, w_b) in place (Chan et al.)."""
    zero = constant(0, torch.float64 if ctype == "double" else torch.float32)
    return [
        f"const {ctype} {tmp}_w = {w_a} + {w_b};",
        f"const {ctype} {tmp}_d = {mean_b} - {mean_a};",
        f"const {ctype} {tmp}_f = {tmp}_w == {zero} ? {zero} : {w_b} / {tmp}_w;",
        f"{mean_a} = {mean_a} + {tmp}_d * {tmp}_f;",
        f"{m2_a} = {m2_a} + {m2_b} + {tmp}_d * {tmp}_d * {w_a} * {tmp}_f;",
        f"{w_a} = {tmp}_w;",
    ]


def welford(n: int, dtype: torch.dtype, values: tuple[str, ...], group: bool, rblock: int) -> ReductionCode:
    """welford_reduce (values: one value) or welford_combine (values: mean, m2, weight of
    partial results) into (mean, m2, weight)."""
    ctype = compute_type(dtype)
    zero = constant(0, dtype)
    mean, m2, w = f"mean{n}", f"m2_{n}", f"weight{n}"
    # (mean, m2, weight) of each level of the cascade; the last is the work-item's total
    level = [(f"mean{n}_{k}", f"m2_{n}_{k}", f"weight{n}_{k}") for k in range(LEVELS)] + [(mean, m2, w)]
    code = ReductionCode()
    code.prefix.extend(f"{ctype} {name} = {zero};" for stats in level for name in stats)
    pm, pq, pw = level[0]
    if len(values) == 1:
        v = f"v{n}"
        add = [
            f"{{ const {ctype} {v} = ({ctype})({values[0]});",
            f"  {pw} = {pw} + {constant(1, dtype)};",
            f"  const {ctype} {v}_d = {v} - {pm};",
            f"  {pm} = {pm} + {v}_d / {pw};",
            f"  {pq} = {pq} + {v}_d * ({v} - {pm}); }}",
        ]
    else:
        vm, vm2, vw = (f"({ctype})({x})" for x in values)
        add = ["{", *("  " + line for line in _chan(pm, pq, pw, vm, vm2, vw, f"c{n}", ctype)), "}"]
    _cascade(code, f"count{n}", add,
             lambda dst, src: ["{", *("  " + line for line in _chan(*level[dst], *level[src], f"l{n}", ctype)), "}"],
             lambda k: [f"{name} = {zero};" for name in level[k]])
    if not group:
        code.results.extend([mean, m2, w])
        return code
    arrays = [f"redm{n}", f"redq{n}", f"redw{n}"]
    for a, acc in zip(arrays, (mean, m2, w)):
        code.scratch.append(f"__local {ctype} {a}[{rblock}];")
        code.combine.append(f"{a}[lid] = {acc};")
    ma, qa, wa = (f"{a}[lid]" for a in arrays)
    mb, qb, wb = (f"{a}[lid + s]" for a in arrays)
    _tree(code, rblock, _chan(ma, qa, wa, mb, qb, wb, f"t{n}", ctype))
    code.results.extend(f"{a}[0]" for a in arrays)
    return code
