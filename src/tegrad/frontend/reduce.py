"""Reductions: ``tg.sum(expr, axis, where=None)`` and friends, and custom reducers."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import dtype as dt
from ..ir.expr import (
    ARGMAX,
    ARGMIN,
    MAX,
    MIN,
    PROD,
    SUM,
    Combiner,
    Expr,
    FixedIdentity,
    Reduce,
    Var,
    as_expr,
    cast,
    const,
)
from ..ir.tensor import unique_name


def reduce_axis(dom, name: str | None = None) -> Var:
    """A reduction variable over ``range(dom)`` or ``range(start, end)``."""
    if isinstance(dom, int):
        start, end = 0, dom
    else:
        start, end = (int(x.value) if hasattr(x, "value") else int(x) for x in dom)
    if end < start:
        raise ValueError(f"reduce_axis {name or ''}: empty or reversed domain [{start}, {end})")
    return Var.fresh(name or unique_name("rk"), start, end - start)


def _axes(axis) -> tuple[Var, ...]:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, Var) or a.extent is None:
            raise TypeError(f"reduction axis must come from tg.reduce_axis, got {a!r}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"reduction names axis {axes} more than once")
    return axes


def _where(where) -> Expr | None:
    if where is None:
        return None
    if isinstance(where, bool):
        raise TypeError("where= got a Python bool; build the condition with <, tg.equal, tg.all")
    w = as_expr(where)
    if w.dtype != "bool":
        raise TypeError(f"where= needs a condition, got {w!r} of dtype {w.dtype}")
    return w


def make_reduce(combiner: Combiner, expr, axis, where=None) -> Expr:
    source = as_expr(expr)
    if combiner.kind in ("sum", "prod") and source.dtype == "bool":
        source = cast(source, "int32")
    out_dtype = "int32" if combiner.kind in ("argmax", "argmin") else source.dtype
    return Reduce(combiner, source, _axes(axis), _where(where), out_dtype)


def sum(expr, axis, where=None) -> Expr:  # noqa: A001 - the API name
    """sum over ``axis`` (one reduce axis or a list) of ``expr`` where ``where`` holds."""
    return make_reduce(SUM, expr, axis, where)


def prod(expr, axis, where=None) -> Expr:
    """product over ``axis`` of ``expr`` where ``where`` holds."""
    return make_reduce(PROD, expr, axis, where)


def max(expr, axis, where=None) -> Expr:  # noqa: A001
    """maximum over ``axis`` of ``expr`` where ``where`` holds (ties share the gradient)."""
    return make_reduce(MAX, expr, axis, where)


def min(expr, axis, where=None) -> Expr:  # noqa: A001
    """minimum over ``axis`` of ``expr`` where ``where`` holds (ties share the gradient)."""
    return make_reduce(MIN, expr, axis, where)


def argmax(expr, axis, where=None) -> Expr:
    """index of the maximum over ``axis`` (an integer; not differentiable)."""
    return make_reduce(ARGMAX, expr, axis, where)


def argmin(expr, axis, where=None) -> Expr:
    """index of the minimum over ``axis`` (an integer; not differentiable)."""
    return make_reduce(ARGMIN, expr, axis, where)


class CommReducer:
    """A custom commutative reducer, called like ``tg.sum``."""

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str | None = None):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name or "reduce"
        self._by_dtype: dict[str, Combiner] = {}

    def combiner(self, dtype: str) -> Combiner:
        if dtype not in self._by_dtype:
            lhs = Var.fresh("x", dtype=dtype)
            rhs = Var.fresh("y", dtype=dtype)
            body = cast(as_expr(self.fcombine(lhs, rhs), lhs), dtype)
            identity = self.fidentity(dtype)
            ident = identity if isinstance(identity, Expr) else const(identity, dtype)
            self._by_dtype[dtype] = Combiner("custom", self.name, lhs, rhs, body,
                                             FixedIdentity(ident))
        return self._by_dtype[dtype]

    def __call__(self, expr, axis, where=None) -> Expr:
        source = as_expr(expr)
        if not dt.is_float(source.dtype) and not dt.is_int(source.dtype):
            raise TypeError(f"{self.name}: cannot reduce {source.dtype} values")
        return make_reduce(self.combiner(source.dtype), source, axis, where)


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str | None = None) -> CommReducer:
    """A reducer called like ``tg.sum``: ``fcombine(a, b)`` combines two values,
    ``fidentity(dtype)`` gives the identity; differentiable when ``fcombine`` is."""
    return CommReducer(fcombine, fidentity, name)
