"""Inductor's pointwise ops as OpenCL C expressions (the `ops.*` of Inductor's loop IR).

Every operand is a CSE variable of the kernel (kernel.py) with its dtype known, so each op
picks C's operator or OpenCL's built-in function for the operand types: `%` for integers
and fmod for floats, NaN-propagating maximum/minimum for floats (torch's), Python's
rounding for integer floor division. Ops the code generator has no expression for raise
NotImplementedError naming the op when a graph needs them.
"""
from __future__ import annotations

import sympy
import torch
from torch._inductor.codegen.common import CSEVariable, OpOverrides
from torch._inductor.utils import get_bounds_index_expr
from torch._inductor.virtualized import V, ops

from .printer import compute_type, constant, is_float


try:  # torch releases that keep a float truncation as one when it is materialized
    from torch._inductor.codegen.triton import _materialize_trunc_to_float_expr
except ImportError:
    def _materialize_trunc_to_float_expr(expr: sympy.Expr, dtype: torch.dtype) -> sympy.Expr:
        return expr


def _unwrap(x):
    """The CSE variable inside an OpsValue (what ops.* return inside a kernel)."""
    return getattr(x, "value", x)


def _dtype(x) -> torch.dtype | None:
    return x.dtype if isinstance(x, CSEVariable) else None


def _floating(*args) -> bool:
    return any(is_float(_dtype(a)) for a in args)


def _all_integer(*args) -> bool:
    return all(_dtype(a) is not None and not _dtype(a).is_floating_point for a in args)


def _double(*args) -> bool:
    return any(_dtype(a) == torch.float64 for a in args)


def _one(*args) -> str:
    return "1.0" if _double(*args) else "1.0f"


def _unary(fn: str):
    def op(x):
        return f"{fn}({x})"

    op.__name__ = fn
    return staticmethod(op)


class OpenCLOverrides(OpOverrides):
    """OpenCL C for each op; Inductor's own decompositions (OpDecompositions) cover the
    rest (square, erfc, log10, ...)."""

    @staticmethod
    def constant(value, dtype: torch.dtype) -> str:
        return constant(value, dtype)

    @staticmethod
    def to_dtype(x, dtype: torch.dtype, src_dtype: torch.dtype | None = None, use_compute_types: bool = True) -> str:
        if dtype == torch.bool:
            return f"(({x}) != 0)"
        ctype = compute_type(dtype)
        if dtype == torch.float16:
            return f"oclf_round_half((float)({x}))"
        if dtype == torch.bfloat16:
            return f"oclf_round_bfloat((float)({x}))"
        return f"(({ctype})({x}))"

    @staticmethod
    def to_dtype_bitcast(x, dtype: torch.dtype, src_dtype: torch.dtype) -> str:
        if dtype in (torch.float16, torch.bfloat16) or src_dtype in (torch.float16, torch.bfloat16):
            raise NotImplementedError("opencl compile: bit casts of 16-bit floats")
        return f"as_{compute_type(dtype)}(({compute_type(src_dtype)})({x}))"

    @staticmethod
    def _index_as(expr: sympy.Expr, dtype: torch.dtype, computed: torch.dtype) -> CSEVariable:
        """expr's text cast once to dtype: a kernel variable of type `computed`."""
        kernel = V.kernel
        text = OpenCLOverrides.to_dtype(kernel.index_to_str(kernel.prepare_indexing(expr)), dtype)
        return kernel.cse.generate(kernel.compute, text, bounds=get_bounds_index_expr(expr), dtype=computed)

    @staticmethod
    def index_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        """An index expression as a value of `dtype`. Integer dtypes compute it in the
        kernel's index type; a floating one takes the expression's own value, cast once (a
        symbolic 1/(N·H·W), a batch norm's mean factor under dynamic shapes, must not pass
        through an integer on the way), as Inductor's Triton kernels do."""
        expr = _materialize_trunc_to_float_expr(expr, dtype)
        if is_float(dtype):
            return OpenCLOverrides._index_as(expr, dtype, torch.float64 if dtype == torch.float64 else torch.float32)
        kernel = V.kernel
        var = kernel.cse.generate(kernel.compute, kernel.index_to_str(kernel.prepare_indexing(expr)),
                                  bounds=get_bounds_index_expr(expr), dtype=kernel.get_index_dtype_as_torch_dtype())
        return ops.to_dtype(var, dtype)

    @staticmethod
    def value_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        """Like index_expr, with an integer `dtype` honoured from the start: the value is
        computed in that type, not in the kernel's (possibly 32-bit) index type."""
        if is_float(dtype) or dtype == torch.bool:
            return OpenCLOverrides.index_expr(expr, dtype)
        return OpenCLOverrides._index_as(expr, dtype, dtype)

    @staticmethod
    def masked(mask, body, other) -> str:
        # Loads under the mask read only where it holds (kernel.load); the body's value is
        # then replaced by `other` where it does not.
        with V.kernel.mask_loads(mask, other) as new_mask:
            result = _unwrap(body())
        if isinstance(other, float) and not is_float(result.dtype):
            other = int(other) if other == other and abs(other) != float("inf") else other
        fill = ops.constant(other, result.dtype)
        return _unwrap(ops.where(new_mask, result, fill))

    @staticmethod
    def where(cond, a, b) -> str:
        return f"(({cond}) ? ({a}) : ({b}))"

    @staticmethod
    def maximum(a, b) -> str:
        if _all_integer(a, b):
            return f"(({a}) > ({b}) ? ({a}) : ({b}))"
        return f"((({a}) != ({a}) || ({a}) > ({b})) ? ({a}) : ({b}))"

    @staticmethod
    def minimum(a, b) -> str:
        if _all_integer(a, b):
            return f"(({a}) < ({b}) ? ({a}) : ({b}))"
        return f"((({a}) != ({a}) || ({a}) < ({b})) ? ({a}) : ({b}))"

    @staticmethod
    def abs(x) -> str:
        return f"fabs({x})" if _floating(x) else f"(({x}) < 0 ? -({x}) : ({x}))"

    @staticmethod
    def neg(x) -> str:
        return f"(-({x}))"

    @staticmethod
    def sign(x) -> str:
        if _floating(x):
            return f"sign({x})"
        return f"((({x}) > 0) - (({x}) < 0))"

    @staticmethod
    def signbit(x) -> str:
        return f"(signbit({x}) != 0)" if _floating(x) else f"(({x}) < 0)"

    @staticmethod
    def truediv(a, b) -> str:
        return f"(({a}) / ({b}))"

    @staticmethod
    def int_truediv(a, b) -> str:
        return f"((float)({a}) / (float)({b}))"

    @staticmethod
    def floordiv(a, b) -> str:
        if _floating(a, b):
            return f"floor(({a}) / ({b}))"
        return f"PY_FLOORDIV({a}, {b})"

    @staticmethod
    def truncdiv(a, b) -> str:
        if _floating(a, b):
            return f"trunc(({a}) / ({b}))"
        return f"(({a}) / ({b}))"

    @staticmethod
    def mod(a, b) -> str:
        return f"fmod({a}, {b})" if _floating(a, b) else f"(({a}) % ({b}))"

    @staticmethod
    def fmod(a, b) -> str:
        return OpenCLOverrides.mod(a, b)

    @staticmethod
    def remainder(a, b) -> str:
        if _floating(a, b):
            # torch's form: fmod moved by b where the signs differ, so remainder(x, ±inf) is x or
            # ±inf (a - floor(a / b) * b is NaN there), as the eager kernel (elementwise.cl).
            m = f"fmod({a}, {b})"
            return f"(({m}) != 0 && (({b}) < 0) != (({m}) < 0) ? ({m}) + ({b}) : ({m}))"
        return f"PY_MOD({a}, {b})"

    @staticmethod
    def pow(a, b) -> str:
        if _all_integer(a, b):
            return f"oclf_ipow({a}, {b})"
        return f"pow({a}, {b})"

    @staticmethod
    def sigmoid(x) -> str:
        one = _one(x)
        return f"({one} / ({one} + exp(-({x}))))"

    @staticmethod
    def rsqrt(x) -> str:
        return f"rsqrt({x})"

    @staticmethod
    def reciprocal(x) -> str:
        return f"({_one(x)} / ({x}))"

    @staticmethod
    def round(x) -> str:
        return f"rint({x})"

    @staticmethod
    def isnan(x) -> str:
        return f"(isnan({x}) != 0)" if _floating(x) else "false"

    @staticmethod
    def isinf(x) -> str:
        return f"(isinf({x}) != 0)" if _floating(x) else "false"

    @staticmethod
    def logical_and(a, b) -> str:
        return f"(({a}) && ({b}))"

    @staticmethod
    def logical_or(a, b) -> str:
        return f"(({a}) || ({b}))"

    @staticmethod
    def logical_xor(a, b) -> str:
        return f"((({a}) != 0) != (({b}) != 0))"

    @staticmethod
    def logical_not(a) -> str:
        return f"(!({a}))"

    @staticmethod
    def bitwise_not(x) -> str:
        return f"(!({x}))" if _dtype(x) == torch.bool else f"(~({x}))"

    @staticmethod
    def bitwise_left_shift(a, b) -> str:
        return f"(({a}) << ({b}))"

    @staticmethod
    def bitwise_right_shift(a, b) -> str:
        return f"(({a}) >> ({b}))"

    @staticmethod
    def fma(a, b, c) -> str:
        return f"fma({a}, {b}, {c})"

    @staticmethod
    def copysign(a, b) -> str:
        return f"copysign({a}, {b})"

    @staticmethod
    def atan2(a, b) -> str:
        return f"atan2({a}, {b})"

    @staticmethod
    def hypot(a, b) -> str:
        return f"hypot({a}, {b})"

    @staticmethod
    def nextafter(a, b) -> str:
        return f"nextafter({a}, {b})"

    @staticmethod
    def load_seed(name: str, offset) -> str:
        return f"{V.kernel.args.input(name)}[{offset}]"

    @staticmethod
    def rand(seed, offset) -> str:
        return f"oclf_rand({seed}, {offset})"

    @staticmethod
    def randn(seed, offset) -> str:
        return f"oclf_randn({seed}, {offset})"

    @staticmethod
    def randint64(seed, offset, low, high) -> str:
        return f"oclf_randint64({seed}, {offset}, {low}, {high})"


for _name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin",
              "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "floor",
              "ceil", "trunc"):
    setattr(OpenCLOverrides, _name, _unary(_name))
