"""Scalar math, conditions and selects on expressions (API section 1, "math").

Each function also accepts whole tensors, applying itself elementwise (with
broadcasting for the binary ones), so ``tg.exp(X)`` is a new tensor.
"""

from __future__ import annotations

from functools import reduce as _fold

from ..ir.broadcast import elementwise, map_unary
from ..ir.compute import compute
from ..ir.expr import Expr, as_expr, binary, select, unary
from ..ir.expr import cast as _cast
from ..ir.expr import const as _const
from ..ir.tensor import Tensor, unique_name


def _unary(op):
    def f(x):
        if isinstance(x, Tensor):
            return map_unary(op, x)
        return unary(op, x)

    f.__name__ = op
    f.__doc__ = f"elementwise {op}"
    return f


def _binary(op):
    def f(a, b):
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return elementwise(op, a, b)
        return binary(op, a, b)

    f.__name__ = op
    return f


exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
expm1 = _unary("expm1")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
sin = _unary("sin")
cos = _unary("cos")
abs = _unary("abs")  # noqa: A001
erf = _unary("erf")
sign = _unary("sign")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
stop_gradient = _unary("stop_gradient")  # the identity, with derivative 0
maximum = _binary("max")
minimum = _binary("min")
power = _binary("pow")


def equal(a, b) -> Expr:
    """``a == b``, a condition."""
    return binary("eq", a, b)


def not_equal(a, b) -> Expr:
    """``a != b``, a condition."""
    return binary("ne", a, b)


def logical_not(a) -> Expr:
    """The negation of condition ``a``."""
    return unary("not", a)


def all(*conds) -> Expr:  # noqa: A001
    """Conjunction; ``tg.all(c1, c2)`` or ``tg.all([c1, c2])``."""
    items = (
        list(conds[0]) if len(conds) == 1 and isinstance(conds[0], (list, tuple)) else list(conds)
    )
    if not items:
        return _const(True)
    return _fold(lambda x, y: binary("and", x, y), items)


def any(*conds) -> Expr:  # noqa: A001
    """Disjunction; ``tg.any(c1, c2)`` or ``tg.any([c1, c2])``."""
    items = (
        list(conds[0]) if len(conds) == 1 and isinstance(conds[0], (list, tuple)) else list(conds)
    )
    if not items:
        return _const(False)
    return _fold(lambda x, y: binary("or", x, y), items)


def if_then_else(cond, a, b) -> Expr:
    """``a`` where ``cond`` holds, else ``b``; a read in the branch not taken may leave its
    tensor (a guarded read, such as padding)."""
    return select(cond, a, b)


def const(value, dtype: str | None = None) -> Expr:
    """A constant expression of ``dtype`` (default: from the Python value)."""
    return _const(value, dtype)


def cast(x, dtype: str):
    """``x`` converted to ``dtype``: an expression, or for a tensor a new tensor."""
    if isinstance(x, Tensor):
        return compute(x.shape, lambda *i: _cast(x[i], dtype), name=unique_name("T_cast"))
    return _cast(as_expr(x), dtype)
