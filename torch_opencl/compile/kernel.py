"""One generated OpenCL kernel per fusion group: Inductor's scheduler decides what fuses
(SIMDScheduling, as for its Triton and Metal back ends); OpenCLKernel renders a group's
loop IR as OpenCL C.

A kernel has one range over the outputs (x) and, for reductions, one over the reduced
elements (r0_). Tensors arrive as (buffer, offset in elements) pairs, as every kernel of
the device takes them; sizes that are symbols (dynamic shapes) as 64-bit integers.

  pointwise   one work-item per element: xindex = get_global_id(0), the range rounded up
              to the work-group size and the tail returning
  reduction   serial: one work-item per output row walks the row in a loop;
              group:  one work-group of RBLOCK work-items per row, striding over it, then
                      combining through local memory (reductions.py)

Inductor's node schedule splits a reduction kernel into segments: loops over r0_ (each
ends with its reductions' combines) and code outside them (stores of reduced rows, done by
work-item 0 of a group). codegen_body() writes each segment as it closes.
"""
from __future__ import annotations

import itertools
import math
import re
from typing import Any

import sympy
import torch
from torch._inductor.codegen.common import CSEVariable, DeferredLine, IndentedBuffer
from torch._inductor.codegen.simd import SIMDKernel
from torch._inductor.virtualized import V

from .. import devices
from . import reductions
from .overrides import OpenCLOverrides
from .printer import cexpr, compute_type, storage_type

DECLARE = "@declare "            # CSE's prefix for a new variable; replaced by its C type
KERNEL_NAME = "oclf_generated_kernel"  # renamed per kernel by the scheduling's define_kernel
_DECLARATION = re.compile(re.escape(DECLARE) + r"(\w+)")
_GROUP_FENCE = "@group_fence"  # before and after a group's stores; a barrier where they need one


def device_kind() -> str:
    """"cpu" or "gpu": the current device's type."""
    return "cpu" if devices.get_device_properties().type == "CPU" else "gpu"


def _static(n: sympy.Expr) -> int | None:
    return int(n) if isinstance(n, (int, sympy.Integer)) else None


class OpenCLKernel(SIMDKernel):
    overrides = OpenCLOverrides  # type: ignore[assignment]
    suffix = ";"
    newvar_prefix = DECLARE
    allow_block_ptr = False
    kexpr = staticmethod(cexpr)
    sexpr = staticmethod(cexpr)

    def __init__(self, tiling: dict[str, sympy.Expr], **kwargs: Any) -> None:
        super().__init__(tiling, **kwargs)
        self.acc_ids = itertools.count()
        self.loop_prefix = IndentedBuffer()   # accumulators, before the next loop over r0_
        self.loop_indexing = IndentedBuffer()  # r0_ index variables, inside the loop
        self.loop_suffix = IndentedBuffer()   # combines and reduced values, after the loop
        self.scratch: list[str] = []          # __local arrays, at kernel scope
        self.kept: set[CSEVariable] = set()   # variables at kernel scope (outlive loops)
        self.uses_double = False
        self.checks_indices = False           # check_bounds used: the kernel takes the index record
        self.kept_indices: set[tuple[str, str]] = set()  # (variable, size) checked in the open scope
        self.variables: dict[str, CSEVariable] = {}  # every CSE variable by name (for its C type)
        self.is_cpu = device_kind() == "cpu"
        self.mode, self.rblock = self._choose_mode()

    # ---- shape of the launch --------------------------------------------------------
    def _choose_mode(self) -> tuple[str, int]:
        if not self.features.is_reduction():
            return "pointwise", 1
        x, r = _static(self.numels["x"]), _static(self.numels["r0_"])
        if r is not None and r <= 16:
            return "serial", 1
        hint = str(getattr(self.features, "get_reduction_hint", lambda: "")())
        many_rows = x is None or x >= 32
        if many_rows and (self.is_cpu or "OUTER" in hint):
            return "serial", 1
        largest = 64 if self.is_cpu else 256
        rblock = largest if r is None else min(largest, 1 << max(1, math.ceil(math.log2(r))))
        return "group", rblock

    def group_size(self) -> int:
        """Work-items per group for pointwise and serial launches."""
        return 64 if self.is_cpu else 256

    # ---- Inductor's hooks -----------------------------------------------------------
    def should_use_persistent_reduction(self) -> bool:
        return False  # every reduction loops over its row (codegen_body closes each loop)

    def should_use_cooperative_reduction(self) -> bool:
        return False

    def want_no_x_dim(self) -> bool:
        return False

    def create_cse_var(self, name: str, *args: Any, **kwargs: Any) -> CSEVariable:
        var = super().create_cse_var(name, *args, **kwargs)
        self.variables[name] = var
        return var

    def dtype_to_str(self, dtype: torch.dtype) -> str:
        return compute_type(dtype)

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        """An index read through a tensor: kept inside [0, size) before the access that uses
        it (indirect loads and stores come after it, in compute), one outside written to the
        device's index record and raised at the next wait for the device, as the eager
        operators' checks are (kernels/compiled.h: KEEP_INDEX_IN)."""
        name = str(expr)
        if not (lower or upper) or not isinstance(expr, sympy.Symbol) or name not in self.variables:
            return  # only a plain index variable can be kept in range
        self.checks_indices = True
        size_text = self.index_to_str(self.rename_indexing(size))
        if (name, size_text) not in self.kept_indices:  # each access through it asks again
            self.kept_indices.add((name, size_text))
            self.compute.writeline(f"KEEP_INDEX_IN({name}, ({size_text}));")

    def device_assert_async(self, cond: CSEVariable, msg: str) -> None:
        return

    def _note_dtype(self, dtype: torch.dtype) -> None:
        if dtype == torch.float64:
            self.uses_double = True

    # ---- loads and stores ----------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        var = self.args.input(name)
        index = self.prepare_indexing(index)
        dtype = V.graph.get_dtype(name)
        self._note_dtype(dtype)
        text = f"READ({storage_type(dtype)}, {var}, {self.index_to_str(index)})"
        result = dtype
        if dtype == torch.bool:
            text = f"({text} != 0)"
        elif dtype in (torch.float16, torch.bfloat16):
            result = torch.float32
        buffer = self.loads
        if self._load_mask is not None:  # after the mask is computed
            text = f"(({self._load_mask}) ? ({text}) : ({compute_type(result)})0)"
            buffer = self.compute
        return self.cse.generate(buffer, text, dtype=result)

    def _write(self, name: str, index: sympy.Expr, value: CSEVariable, mode: Any) -> str:
        var = self.args.output(name)
        index_text = self.index_to_str(self.prepare_indexing(index))
        dtype = V.graph.get_dtype(name)
        self._note_dtype(dtype)
        if mode is None:
            return f"WRITE({storage_type(dtype)}, {var}, {index_text}, {value});"
        if mode == "atomic_add":
            if dtype == torch.float32:
                return f"oclf_atomic_add_float(&{var}[{index_text}], {value});"
            if dtype == torch.int32:
                return f"oclf_atomic_add_int(&{var}[{index_text}], {value});"
        raise NotImplementedError(f"opencl compile: a {mode} store of {dtype}")

    def store(self, name: str, index: sympy.Expr, value: CSEVariable, mode: Any = None) -> None:
        line = self._write(name, index, value, mode)
        if self.inside_reduction:
            self.compute.writeline(DeferredLine(name, line))  # inside the loop over r0_
        else:
            self.stores.writeline(DeferredLine(name, self._once(line)))

    def store_reduction(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        prior = self.inside_reduction
        self.inside_reduction = False
        try:
            line = self._write(name, index, value, None)
        finally:
            self.inside_reduction = prior
        self.stores.writeline(DeferredLine(name, self._once(line)))

    def _once(self, line: str) -> str:
        """A store outside the loops of a group: work-item 0 writes the row's value."""
        return f"if (lid == 0) {line}" if self.mode == "group" else line

    # ---- reductions ----------------------------------------------------------------
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any) -> Any:
        key = (src_dtype, reduction_type, value)
        if key in self.cse.reduction_cache:
            return self.cse.reduction_cache[key]
        result = self._reduction(dtype, src_dtype, reduction_type, value)
        self.cse.reduction_cache[key] = result
        return result

    def _reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, kind: str, value: Any) -> Any:
        n = next(self.acc_ids)
        group = self.mode == "group"
        self._note_dtype(dtype)
        self._note_dtype(src_dtype)
        if kind in ("argmax", "argmin"):
            code = reductions.arg(n, kind, src_dtype, compute_type(dtype), str(value), "r0_index", group,
                                  self.rblock)
            types = [dtype]
        elif kind in ("welford_reduce", "welford_combine"):
            values = tuple(str(v) for v in value) if isinstance(value, tuple) else (str(value),)
            acc_dtype = torch.float64 if dtype == torch.float64 else torch.float32
            code = reductions.welford(n, acc_dtype, values, group, self.rblock)
            types = [acc_dtype] * 3
        else:
            acc_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
            if kind == "any":
                acc_dtype = torch.bool
            code = reductions.simple(n, kind, acc_dtype, str(value), group, self.rblock)
            types = [acc_dtype]
        self.loop_prefix.writelines(code.prefix)
        self.compute.writelines(code.update)
        self.scratch.extend(code.scratch)
        self.loop_suffix.writelines(code.combine)
        results = [self.cse.generate(self.loop_suffix, text, dtype=t) for text, t in zip(code.results, types)]
        self.kept.update(results)
        return tuple(results) if len(results) > 1 else results[0]

    # ---- indexing and segments -----------------------------------------------------
    def codegen_iteration_ranges_entry(self, entry: Any) -> None:
        line = f"const {self.index_dtype} {entry.name} = {self.sexpr(self.rename_indexing(entry.expr))};"
        (self.loop_indexing if entry.is_reduction else self.indexing_code).writeline(line)

    def codegen_body(self) -> None:
        """Writes the pending segment: a loop over r0_ (inside a reduction) with its
        accumulators before and combines after, or straight-line code."""
        loop = self.inside_reduction and self.features.is_reduction()
        if loop:
            self.body.splice(self.loop_prefix)
            if self.loads or self.compute or self.loop_indexing:
                start, step = ("lid", str(self.rblock)) if self.mode == "group" else ("0", "1")
                self.body.writeline(f"for ({self.index_dtype} r0_index = {start}; r0_index < r0_numel; "
                                    f"r0_index += {step}) {{")
                with self.body.indent():
                    self.body.splice(self.loop_indexing)
                    self.body.splice(self.loads)
                    self.body.splice(self.compute)
                self.body.writeline("}")
            self.body.splice(self.loop_suffix)
            self._splice_stores()
            # What the loop defined is out of scope now: only kernel-scope values stay.
            self.cse.invalidate(set(self.kept))
            for tree in self.range_trees:
                if tree.is_reduction:
                    for node in self.range_tree_nodes.values():
                        if node.root is tree:
                            node.cache_clear()
        else:
            self.body.splice(self.loads)
            self.body.splice(self.compute)
            self._splice_stores()
            self.kept.update(self._cached_vars())
        for buffer in (self.loads, self.compute, self.stores, self.loop_prefix, self.loop_indexing,
                       self.loop_suffix):
            buffer.clear()
        self.kept_indices.clear()

    def _splice_stores(self) -> None:
        """The segment's stores. In a group, work-item 0 writes values every work-item holds:
        where the kernel also reads a buffer it writes (a step's index moved on in place),
        barriers keep every work-item's reads of it before that write and later segments'
        after it (_GROUP_FENCE, resolved in codegen_kernel once every buffer is known)."""
        fenced = self.mode == "group" and bool(self.stores)
        if fenced:
            self.body.writeline(_GROUP_FENCE)
        self.body.splice(self.stores)
        if fenced:
            self.body.writeline(_GROUP_FENCE)

    def _reads_what_it_writes(self) -> bool:
        written = {name for name, arg in self.args.output_buffers.items() if str(arg) != "REMOVED"}
        return bool(written & set(self.args.input_buffers)) or any(
            str(arg) != "REMOVED" for arg in self.args.inplace_buffers.values())

    def _cached_vars(self) -> set[CSEVariable]:
        cache = getattr(self.cse, "_cache", {})
        return {v for v in cache.values() if isinstance(v, CSEVariable)}

    # ---- the kernel's source and its launch -----------------------------------------
    def _arguments(self) -> list[tuple[str, str, Any]]:
        """(inner name, outer name, TensorArg or SizeArg) in the kernel's argument order."""
        arg_defs, call_args, precompile_args, _ = self.args.python_argdefs()
        return [(getattr(d, "name", str(d)), str(c), p) for d, c, p in zip(arg_defs, call_args, precompile_args)]

    def _symbolic_numels(self) -> list[Any]:
        return [t for t in self.range_trees if _static(t.numel) is None]

    def codegen_kernel(self, name: str | None = None) -> str:
        self.codegen_body()
        code = IndentedBuffer()
        code.writeline('#include "compiled.h"')
        params, views = [], []
        for inner, _, arg in self._arguments():
            if hasattr(arg, "dtype"):
                ctype = storage_type(arg.dtype)
                self._note_dtype(arg.dtype)
                params.append(f"__global {ctype}* {inner}_base, int {inner}_offset")
                views.append(f"__global {ctype}* {inner} = {inner}_base + {inner}_offset;")
            else:
                params.append(f"long {inner}")
        for tree in self._symbolic_numels():
            params.append(f"long {tree.prefix}numel")
        if self.checks_indices:  # appended by generated_launch (csrc/aten/generated.cpp)
            params.append("__global long* oclf_record, long oclf_code")
        code.writeline(f"__kernel void {name or KERNEL_NAME}(")
        with code.indent():
            for i, p in enumerate(params):
                code.writeline(p + ("," if i + 1 < len(params) else ""))
        code.writeline(") {")
        with code.indent():
            for tree in self.range_trees:
                if _static(tree.numel) is not None:
                    code.writeline(f"const long {tree.prefix}numel = {_static(tree.numel)}L;")
            code.writelines(views)
            code.writelines(self.scratch)
            if self.mode == "group":
                code.writeline(f"const {self.index_dtype} xindex = get_group_id(0);")
                code.writeline("const int lid = get_local_id(0);")
            else:
                code.writeline(f"const {self.index_dtype} xindex = get_global_id(0);")
                code.writeline("if (xindex >= xnumel) return;")
            code.splice(self.indexing_code)
            code.splice(self.body)
        code.writeline("}")
        fence = "barrier(CLK_GLOBAL_MEM_FENCE);" if self._reads_what_it_writes() else ""
        fences = rf"^( *){re.escape(_GROUP_FENCE)}\n(?: *{re.escape(_GROUP_FENCE)}\n)*"  # a run: one barrier
        source = self._declare(re.sub(fences, rf"\g<1>{fence}\n" if fence else "", code.getvalue(), flags=re.M))
        if self.uses_double:
            source = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + source
        return source

    def _declare(self, source: str) -> str:
        """Replaces each variable's DECLARE mark by its C type."""
        def declared(match: re.Match) -> str:
            var = self.variables.get(match.group(1))
            if var is None or var.dtype is None:
                raise NotImplementedError(f"opencl compile: no dtype known for {match.group(1)} in\n{source}")
            self._note_dtype(var.dtype)
            return f"{compute_type(var.dtype)} {match.group(1)}"

        return _DECLARATION.sub(declared, source)

    def call_kernel(self, name: str, node: Any = None, deallocate_ws: bool = True) -> None:
        wrapper = V.graph.wrapper_code
        tensors, scalars, written = [], [], []
        for inner, outer, arg in self._arguments():
            if hasattr(arg, "dtype"):
                if inner.startswith(("out_ptr", "in_out_ptr")):
                    written.append(len(tensors))
                tensors.append(outer)
            else:
                scalars.append(outer)
        for tree in self._symbolic_numels():
            expr = tree.numel if isinstance(tree.numel, sympy.Symbol) else \
                wrapper.generate_numel_expr(name, tree).inner
            scalars.append(wrapper.codegen_python_sizevar(expr) if hasattr(wrapper, "codegen_python_sizevar")
                           else str(expr))
        xnumel = self.range_trees[0].numel
        x_text = wrapper.codegen_python_sizevar(xnumel) if _static(xnumel) is None else str(_static(xnumel))
        if self.mode == "group":
            global_size, local_size = f"({x_text}) * {self.rblock}", str(self.rblock)
        else:
            g = self.group_size()
            global_size, local_size = f"-(-({x_text}) // {g}) * {g}", str(g)
        wrapper.writeline(f"{name}.run([{', '.join(tensors)}], [{', '.join(scalars)}], "
                          f"[{global_size}], [{local_size}], {tuple(written)!r})")
