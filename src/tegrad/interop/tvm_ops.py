"""TVM's scalar ops in tegrad's terms: what each means, exactly.

    Div, Mod (integers)      truncate toward zero (C semantics); tegrad has floor
                             division, so: floordiv / floormod when both operands are
                             provably >= 0 (indices, almost always), else the floor
                             result moved toward zero where the signs differ
    Div, FloorMod, Mod       on floats: a / b, a - floor(a / b) b, a - trunc(a / b) b
    trunc, fmod              selects of floor and ceil
    exp2, exp10, log2,       exp and log with a constant factor; tan = sin / cos;
    log10, tan, sinh, cosh   sinh, cosh from exp
    isnan, isinf, isfinite   x != x, |x| == inf, neither
    round, nearbyint         round (half to even: TVM's llvm lowering of both, NumPy's)

``fold`` evaluates a constant expression with the ops' NumPy meaning (``numpy_ops``):
``tvm_read`` probes 2-value reducers with it to recognize argmax and argmin. ``load_tvm``
imports TVM itself, on the first call (``tvm_read``, ``tvm_write`` and ``build_tvm``).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..ir import dtype as dt
from ..ir.bounds import interval
from ..ir.expr import Binary, Cast, Const, Expr, Select, Unary, binary, const, select, unary
from ..ir.numpy_ops import BINARY, UNARY

_TVM: SimpleNamespace | None = None


def load_tvm() -> SimpleNamespace:
    """``tvm``, ``te`` and the TIR namespace (``tvm.tirx``, or ``tvm.tir`` before 0.27)."""
    global _TVM
    if _TVM is None:
        try:
            import tvm
            from tvm import te
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(
                "tg.from_tvm / tg.to_tvm need Apache TVM: pip install apache-tvm"
            ) from error
        try:
            from tvm import tirx as tir
        except ImportError:  # pragma: no cover - TVM before 0.27
            from tvm import tir
        _TVM = SimpleNamespace(tvm=tvm, te=te, tir=tir)
    return _TVM


SAME_UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid", "sin",
               "cos", "erf", "floor", "ceil")
RENAMED_UNARY = {"fabs": "abs", "abs": "abs", "round": "round", "nearbyint": "round"}
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def division(kind: str, a: Expr, b: Expr) -> Expr:
    """TVM's Div, Mod, FloorDiv, FloorMod: Div and Mod truncate on integers (C), and on
    floats Div divides, FloorMod is ``a - floor(a / b) b``, Mod ``a - trunc(a / b) b``."""
    if dt.is_float(a.dtype) or dt.is_float(b.dtype):
        q = binary("div", a, b)
        if kind == "Div":
            return q
        whole = unary("floor", q) if kind == "FloorMod" else trunc(q)
        return binary("sub", a, binary("mul", whole, b))
    if kind == "FloorDiv":
        return binary("floordiv", a, b)
    if kind == "FloorMod":
        return binary("floormod", a, b)
    ia, ib = interval(a), interval(b)
    if ia is not None and ib is not None and ia[0] >= 0 and ib[0] > 0:
        return binary("floordiv" if kind == "Div" else "floormod", a, b)
    # truncating: the floor result, moved toward zero when the signs differ
    zero = const(0, a.dtype)
    r = binary("floormod", a, b)
    neg_a = binary("lt", a, zero)
    if isinstance(b, Const):  # the usual case: a constant divisor
        differ = neg_a if b.value > 0 else unary("not", neg_a)
    else:
        differ = binary("ne", neg_a, binary("lt", b, zero))
    off = binary("and", binary("ne", r, zero), differ)
    if kind == "Div":
        q = binary("floordiv", a, b)
        return select(off, binary("add", q, const(1, q.dtype)), q)
    return select(off, binary("sub", r, b), r)


def trunc(x: Expr) -> Expr:
    """Rounding toward zero."""
    return select(binary("lt", x, const(0.0, x.dtype)), unary("ceil", x), unary("floor", x))


def composite(name: str, xs: list[Expr]) -> Expr | None:
    """TVM intrinsics without a tegrad op, as exact compositions of tegrad ops."""
    x = xs[0]
    if name in ("isnan", "isinf", "isfinite"):
        nan = binary("ne", x, x)
        if name == "isnan":
            return nan
        inf = binary("eq", unary("abs", x), const(math.inf, x.dtype))
        return inf if name == "isinf" else unary("not", binary("or", nan, inf))
    if name == "trunc":
        return trunc(x)
    if name == "fmod":
        return binary("sub", x, binary("mul", trunc(binary("div", x, xs[1])), xs[1]))
    f = dt.is_float(x.dtype) and x.dtype
    if not f:
        return None
    table = {
        "exp2": lambda: unary("exp", binary("mul", x, const(_LN2, f))),
        "exp10": lambda: unary("exp", binary("mul", x, const(_LN10, f))),
        "log2": lambda: binary("div", unary("log", x), const(_LN2, f)),
        "log10": lambda: binary("div", unary("log", x), const(_LN10, f)),
        "tan": lambda: binary("div", unary("sin", x), unary("cos", x)),
        "sinh": lambda: binary("mul", const(0.5, f),
                               binary("sub", unary("exp", x), unary("exp", unary("neg", x)))),
        "cosh": lambda: binary("mul", const(0.5, f),
                               binary("add", unary("exp", x), unary("exp", unary("neg", x)))),
    }
    build = table.get(name)
    return None if build is None else build()


def fold(e: Expr):
    """The value of a constant expression (for probing combiners)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Select):
        return fold(e.a) if fold(e.cond) else fold(e.b)
    if isinstance(e, Binary):
        return BINARY[e.op](fold(e.a), fold(e.b)).item()
    if isinstance(e, Unary):
        return UNARY[e.op](np.asarray(fold(e.a))).item()
    if isinstance(e, Cast):
        return np.asarray(fold(e.a)).astype(e.dtype).item()
    raise NotImplementedError(type(e).__name__)
