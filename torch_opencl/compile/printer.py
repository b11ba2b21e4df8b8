"""OpenCL C for Inductor's values and index expressions: the C name of each dtype (as
stored in a buffer and as computed with), constants, and a sympy printer for index
expressions (Inductor's FloorDiv, ModularIndexing, Min/Max, Where, ...).

Index expressions are integers; Inductor's index symbols are non-negative, so `/` and
`%` print as C's where sympy can prove the dividend non-negative, else through the
Python-rounding macros of kernels/compiled.h (PY_FLOORDIV, PY_MOD).
"""
from __future__ import annotations

import math

import sympy
import torch
from sympy.printing.precedence import PRECEDENCE
from torch.utils._sympy.printers import ExprPrinter

# The type a value of each dtype is computed in inside a kernel. float16 and bfloat16
# compute in float (Inductor upcasts them, as for Triton); bool is C's bool.
COMPUTE_TYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "float",
    torch.bfloat16: "float",
    torch.int64: "long",
    torch.int32: "int",
    torch.int16: "short",
    torch.int8: "char",
    torch.uint8: "uchar",
    torch.uint16: "ushort",
    torch.uint32: "uint",
    torch.uint64: "ulong",
    torch.bool: "bool",
}

# The element type a buffer of each dtype is declared with in a kernel's signature
# (kernels/dtypes.h: half is read and written with vload_half/vstore_half_rte, bfloat is a
# ushort; bool, which OpenCL forbids in kernel arguments, is a uchar).
STORAGE_TYPE = {
    **COMPUTE_TYPE,
    torch.float16: "half",
    torch.bfloat16: "bfloat",
    torch.bool: "uchar",
}

INTEGER_TYPES = {"long", "int", "short", "char", "uchar", "ushort", "uint", "ulong", "bool"}


def compute_type(dtype: torch.dtype) -> str:
    """The OpenCL C type a value of `dtype` is computed in; NotImplementedError otherwise."""
    try:
        return COMPUTE_TYPE[dtype]
    except KeyError:
        raise NotImplementedError(f"opencl compile: no generated kernel takes {dtype} values") from None


def storage_type(dtype: torch.dtype) -> str:
    try:
        return STORAGE_TYPE[dtype]
    except KeyError:
        raise NotImplementedError(f"opencl compile: no generated kernel takes {dtype} tensors") from None


def is_float(dtype: torch.dtype | None) -> bool:
    return dtype is not None and dtype.is_floating_point


def float_literal(value: float, dtype: torch.dtype) -> str:
    """A floating-point constant of `dtype` (float or double: others compute in float)."""
    double = dtype == torch.float64
    if math.isnan(value):
        return "(double)NAN" if double else "NAN"
    if math.isinf(value):
        text = "INFINITY" if value > 0 else "(-INFINITY)"
        return f"(double){text}" if double else text
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text if double else f"{text}f"


def int_literal(value: int, ctype: str = "long") -> str:
    value = int(value)
    if value == -(2**63):
        return "(-9223372036854775807L - 1L)"
    if ctype in ("ulong", "uint") and value >= 0:
        return f"{value}UL"
    if -(2**31) <= value < 2**31 and ctype != "long":
        return str(value)
    return f"{value}L"


def constant(value, dtype: torch.dtype) -> str:
    """A constant of `dtype` as OpenCL C."""
    if dtype == torch.bool:
        return "true" if value else "false"
    if is_float(dtype):
        return float_literal(float(value), dtype)
    if isinstance(value, float):  # an integer dtype given a float (inf for max's start)
        if math.isinf(value):
            return type_limit(dtype, value > 0)
        value = int(value)
    return f"(({compute_type(dtype)}){int_literal(value, compute_type(dtype))})"


_INT_LIMITS = {
    "long": ("(-9223372036854775807L - 1L)", "9223372036854775807L"),
    "int": ("(-2147483647 - 1)", "2147483647"),
    "short": ("((short)-32768)", "((short)32767)"),
    "char": ("((char)-128)", "((char)127)"),
    "uchar": ("((uchar)0)", "((uchar)255)"),
    "ushort": ("((ushort)0)", "((ushort)65535)"),
    "uint": ("0U", "4294967295U"),
    "ulong": ("0UL", "18446744073709551615UL"),
    "bool": ("false", "true"),
}


def type_limit(dtype: torch.dtype, upper: bool) -> str:
    """The largest (upper) or smallest value of dtype: +-inf for floating types."""
    if is_float(dtype):
        return float_literal(math.inf if upper else -math.inf, dtype)
    return _INT_LIMITS[compute_type(dtype)][1 if upper else 0]


class OpenCLExprPrinter(ExprPrinter):
    """Index expressions (integers, sometimes floats) as OpenCL C."""

    def _print_Integer(self, expr: sympy.Expr) -> str:
        return int_literal(int(expr), "int")

    def _print_Float(self, expr: sympy.Expr) -> str:
        if expr.is_integer:
            return int_literal(int(expr), "int")
        return float_literal(float(expr), torch.float32)

    def _print_Infinity(self, expr: sympy.Expr) -> str:
        return "INFINITY"

    def _print_NegativeInfinity(self, expr: sympy.Expr) -> str:
        return "(-INFINITY)"

    def _print_NaN(self, expr: sympy.Expr) -> str:
        return "NAN"

    def _print_Not(self, expr: sympy.Expr) -> str:
        return f"!({self._print(expr.args[0])})"

    def _print_And(self, expr: sympy.Expr) -> str:
        return self.stringify(expr.args, " && ", PRECEDENCE["And"])

    def _print_Or(self, expr: sympy.Expr) -> str:
        return self.stringify(expr.args, " || ", PRECEDENCE["Or"])

    def _nonnegative(self, *args: sympy.Expr) -> bool:
        return all(bool(a.is_nonnegative) for a in args)

    def _floordiv(self, x: sympy.Expr, div: sympy.Expr) -> str:
        xs, ds = self._print(x), self._print(div)
        if self._nonnegative(x, div):
            return f"(({xs}) / ({ds}))"
        return f"PY_FLOORDIV({xs}, {ds})"

    def _print_FloorDiv(self, expr: sympy.Expr) -> str:
        x, div = expr.args
        if not expr.is_integer:
            return f"floor(({self._print(x)}) / ({self._print(div)}))"
        return self._floordiv(x, div)

    def _print_CleanDiv(self, expr: sympy.Expr) -> str:
        return self._print_FloorDiv(expr)

    def _print_ModularIndexing(self, expr: sympy.Expr) -> str:
        x, div, mod = expr.args
        quotient = self._floordiv(x, div) if div != 1 else f"({self._print(x)})"
        if self._nonnegative(x, div, mod):
            return f"({quotient} % ({self._print(mod)}))"
        return f"PY_MOD({quotient}, {self._print(mod)})"

    def _print_PythonMod(self, expr: sympy.Expr) -> str:
        x, div = expr.args
        if self._nonnegative(x, div):
            return f"(({self._print(x)}) % ({self._print(div)}))"
        return f"PY_MOD({self._print(x)}, {self._print(div)})"

    def _print_Mod(self, expr: sympy.Expr) -> str:
        return self._print_PythonMod(expr)

    def _print_Where(self, expr: sympy.Expr) -> str:
        c, p, q = (self.parenthesize(a, PRECEDENCE["Atom"] - 0.5) for a in expr.args)
        return f"({c} ? {p} : {q})"

    def _print_Piecewise(self, expr: sympy.Expr) -> str:
        result = None
        for value, cond in reversed(expr.args):
            text = self.parenthesize(value, PRECEDENCE["Atom"] - 0.5)
            if cond == True or result is None:  # noqa: E712  (sympy's true)
                result = text
            else:
                result = f"({self._print(cond)}) ? {text} : {result}"
        return f"({result})"

    def _min_max(self, expr: sympy.Expr, op: str) -> str:
        args = [self._print(a) for a in expr.args]
        result = args[0]
        for other in args[1:]:
            result = f"(({result}) {op} ({other}) ? ({result}) : ({other}))"
        return result

    def _print_Min(self, expr: sympy.Expr) -> str:
        return self._min_max(expr, "<")

    def _print_Max(self, expr: sympy.Expr) -> str:
        return self._min_max(expr, ">")

    def _print_Abs(self, expr: sympy.Expr) -> str:
        x = self._print(expr.args[0])
        if expr.is_integer:
            return f"(({x}) < 0 ? -({x}) : ({x}))"
        return f"fabs({x})"

    def _print_Pow(self, expr: sympy.Expr) -> str:
        base, exp = expr.args
        if exp == 0.5:
            return f"sqrt((float)({self._print(base)}))"
        if exp.is_integer and int(exp) < 0:
            return f"(1.0f / ({self._print(sympy.Pow(base, -exp, evaluate=False))}))"
        return super()._print_Pow(expr)

    def _print_PowByNatural(self, expr: sympy.Expr) -> str:
        base, exp = expr.args
        if base == 2:
            return f"(1L << ({self._print(exp)}))"
        if exp.is_Integer:
            return f"({self.stringify([base] * int(exp), '*', PRECEDENCE['Mul'])})" if int(exp) else "1"
        return f"oclf_ipow({self._print(base)}, {self._print(exp)})"

    def _print_FloatPow(self, expr: sympy.Expr) -> str:
        base, exp = expr.args
        return f"pow((float)({self._print(base)}), (float)({self._print(exp)}))"

    def _print_ToFloat(self, expr: sympy.Expr) -> str:
        return f"((float)({self._print(expr.args[0])}))"

    def _print_IntTrueDiv(self, expr: sympy.Expr) -> str:
        a, b = expr.args
        return f"((float)({self._print(a)}) / (float)({self._print(b)}))"

    def _print_FloatTrueDiv(self, expr: sympy.Expr) -> str:
        return self._print_IntTrueDiv(expr)

    def _print_Rational(self, expr: sympy.Expr) -> str:
        if expr.q == 1:
            return int_literal(expr.p, "int")
        return f"({expr.p}.0f / {expr.q}.0f)"

    def _rounding(self, fn: str, expr: sympy.Expr) -> str:
        return f"((long){fn}((float)({self._print(expr.args[0])})))"

    def _print_FloorToInt(self, expr: sympy.Expr) -> str:
        return self._rounding("floor", expr)

    def _print_CeilToInt(self, expr: sympy.Expr) -> str:
        return self._rounding("ceil", expr)

    def _print_TruncToInt(self, expr: sympy.Expr) -> str:
        return self._rounding("trunc", expr)

    def _print_RoundToInt(self, expr: sympy.Expr) -> str:
        return self._rounding("rint", expr)

    def _print_floor(self, expr: sympy.Expr) -> str:
        if expr.args[0].is_integer:
            return self._print(expr.args[0])
        return self._rounding("floor", expr) if expr.is_integer else f"floor({self._print(expr.args[0])})"

    def _print_ceiling(self, expr: sympy.Expr) -> str:
        if expr.args[0].is_integer:
            return self._print(expr.args[0])
        return self._rounding("ceil", expr) if expr.is_integer else f"ceil({self._print(expr.args[0])})"

    def _print_OpaqueUnaryFn_sqrt(self, expr: sympy.Expr) -> str:
        return f"sqrt((float)({self._print(expr.args[0])}))"

    def _print_OpaqueUnaryFn_log2(self, expr: sympy.Expr) -> str:
        return f"log2((float)({self._print(expr.args[0])}))"


PRINTER = OpenCLExprPrinter()


def cexpr(expr: sympy.Expr) -> str:
    return PRINTER.doprint(expr)
