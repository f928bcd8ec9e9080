"""Validation of a compute definition, with errors that name the tensor and the fix.

Checked: every variable is bound (an axis of the compute or of an enclosing
reduction); no reduction re-binds an axis bound by an enclosing one; every read stays
inside its tensor. A read is in bounds when, under the conditions that guard it (the
``if_then_else`` branches and reduction ``where`` clauses on its path), each index lies
in ``[0, dim)``. Proved by interval arithmetic first; where that is too coarse, by
enumerating the index and its guards over the variables' ranges when that domain has at
most ``ENUMERATION_LIMIT`` points; and, for larger domains, by matching guards of the
form ``lo <= index < hi``. Indices read from integer tensors are checked at run time.
"""

from __future__ import annotations

import weakref

import numpy as np

from .affine import linearize, time_lag
from .bounds import ENUMERATION_LIMIT, grid_values, interval, is_pure_index
from .expr import Binary, Expr, Read, Reduce, Select, Unary, split_conjunction
from .printer import format_expr
from .tensor import Compute, Placeholder
from .traverse import children, free_vars, walk


class IRError(ValueError):
    """A malformed tensor expression."""


# Computes whose verification found reads of a placeholder's earlier rows (``P[t - c]``
# with ``t`` the first axis): valid only as scan updates (the scan runs them from row
# ``k``); the value is (placeholder, largest lag, message) for the error raised when such
# a compute is built outside a scan.
LAG_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def verify_compute(t: Compute) -> None:
    unbound = free_vars(t.body) - set(t.axes)
    if unbound:
        reduce_axes = {a for x in walk(t.body) if isinstance(x, Reduce) for a in x.axes}
        v = min(unbound, key=lambda x: x.uid)
        if v in reduce_axes:
            raise IRError(
                f"{t.name}: reduce axis {v.name} is used outside the reduction that binds it; "
                f"move the use inside tg.sum(..., axis={v.name}) (or its max/min/prod)"
            )
        raise IRError(
            f"{t.name}: variable {v.name} is not bound: it is not an axis of {t.name} "
            "and no enclosing reduction names it"
        )
    _Checker(t).go(t.body, frozenset(t.axes), ())


class _Checker:
    def __init__(self, t: Compute):
        self.t = t
        self.seen: set = set()

    def go(self, e: Expr, bound: frozenset, conds: tuple) -> None:
        key = (e, bound, conds)
        if key in self.seen:
            return
        self.seen.add(key)
        if isinstance(e, Reduce):
            for a in e.axes:
                if a in bound:
                    raise IRError(
                        f"{self.t.name}: a reduction over {a.name} is nested inside another "
                        f"reduction over {a.name}; use a second tg.reduce_axis"
                    )
                if a.extent is None:
                    raise IRError(f"{self.t.name}: reduce axis {a.name} has no domain")
            inner = bound | frozenset(e.axes)
            if e.where is not None:
                # a conjunct only matters where the others hold, so it may assume them
                parts = split_conjunction(e.where)
                for k, part in enumerate(parts):
                    self.go(part, inner, conds + tuple(parts[:k] + parts[k + 1 :]))
                conds = conds + tuple(parts)
            self.go(e.source, inner, conds)
            return
        if isinstance(e, Select):
            # as in a where clause, each conjunct of the condition may assume the others
            parts = split_conjunction(e.cond)
            for k, part in enumerate(parts):
                self.go(part, bound, conds + tuple(parts[:k] + parts[k + 1 :]))
            self.go(e.a, bound, conds + tuple(split_conjunction(e.cond)))
            self.go(e.b, bound, conds + (Unary("not", e.cond, "bool"),))
            return
        if isinstance(e, Read):
            for axis, index in enumerate(e.indices):
                try:
                    check_index(self.t.name, e, axis, index, conds)
                except IRError as error:
                    if not self._earlier_row(e, axis, index, error):
                        raise
        for c in children(e):
            self.go(c, bound, conds)


    def _earlier_row(self, e: Read, axis: int, index: Expr, error: IRError) -> bool:
        """A read ``P[t - c, ...]`` of a placeholder's earlier row, ``t`` the first axis:
        the form of a scan update's state read, out of bounds only for ``t < c``. It is
        recorded (``LAG_READS``) rather than refused; building such a compute
        anywhere but as a scan update raises the error then."""
        if axis != 0 or not isinstance(e.tensor, Placeholder) or not self.t.axes:
            return False
        lag = time_lag(index, self.t.axes[0])
        if lag is None or lag < 1 or e.tensor.shape[0] != self.t.shape[0]:
            return False
        known = LAG_READS.get(self.t)
        if known is None or lag > known[1]:
            message = (f"{error} (A read of an earlier row, {e.tensor.name}[t - {lag}], is "
                       f"valid only in a tg.scan update with state {e.tensor.name}.)")
            LAG_READS[self.t] = (e.tensor, lag, message)
        return True


def check_index(owner: str, read: Read, axis: int, index: Expr, conds: tuple) -> None:
    dim = read.tensor.shape[axis]
    if not is_pure_index(index):
        return  # data-dependent: checked when the kernel runs
    iv = interval(index)
    if iv is not None and iv[0] >= 0 and iv[1] < dim:
        return
    guards = [c for c in conds if is_pure_index(c)]
    variables = _closure(free_vars(index), guards)
    size = 1
    for v in variables:
        size *= v.extent if v.extent is not None else ENUMERATION_LIMIT + 1
    if size <= ENUMERATION_LIMIT:
        order = sorted(variables, key=lambda v: v.uid)
        values = grid_values(index, order)
        ok = np.ones(values.shape, dtype=bool)
        for g in guards:
            if free_vars(g) <= set(order):
                ok &= grid_values(g, order).astype(bool)
        bad = ok & ((values < 0) | (values >= dim))
        if not bad.any():
            return
        point = np.argwhere(bad)[0]
        at = ", ".join(f"{v.name}={v.lo + p}" for v, p in zip(order, point, strict=True))
        _raise(owner, read, axis, index, dim, f"it is {values[tuple(point)]} at {at}")
    lo, hi = _guarded_range(index, guards, iv)
    if lo is not None and hi is not None and lo >= 0 and hi < dim:
        return
    _raise(
        owner, read, axis, index, dim, f"its values lie in [{lo}, {hi}] as far as tegrad can prove"
    )


def _raise(owner, read, axis, index, dim, detail) -> None:
    raise IRError(
        f"{owner}: read {format_expr(read)} can leave the bounds of {read.tensor.name}: "
        f"index {axis} ({format_expr(index)}) must lie in [0, {dim}) but {detail}. "
        "Guard the read with tg.if_then_else(...) or a reduction's where=, or clamp the index."
    )


def _closure(variables: frozenset, guards: list[Expr]) -> set:
    out = set(variables)
    changed = True
    while changed:
        changed = False
        for g in guards:
            fv = free_vars(g)
            if fv & out and not fv <= out:
                out |= fv
                changed = True
    return out


def _guarded_range(index: Expr, guards: list[Expr], iv):
    """Bounds of ``index`` from guards ``a <= b`` / ``a < b`` whose difference is
    ``+-(index) + constant``."""
    lo, hi = (None, None) if iv is None else iv
    coeffs, k = linearize(index)
    for g in guards:
        if not (isinstance(g, Binary) and g.op in ("lt", "le")):
            continue
        ga, gk = linearize(g.b - g.a)  # constraint: ga . atoms + gk >= (1 if lt else 0)
        need = 1 if g.op == "lt" else 0
        if ga == coeffs:  # index - k + gk >= need
            bound = need - gk + k
            lo = bound if lo is None else max(lo, bound)
        elif ga == {a: -c for a, c in coeffs.items()}:  # -(index - k) + gk >= need
            bound = gk - need + k
            hi = bound if hi is None else min(hi, bound)
    return lo, hi
