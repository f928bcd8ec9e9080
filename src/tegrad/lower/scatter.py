"""Scatter kernels: sums whose ``where`` pins output indices to unsolved expressions.

Matched form (what the simplifier leaves when an index map cannot be inverted)::

    T[j0, j1, ...] = sum(value(j, d), d..., where g0(j, d) == j0 && ... && rest(j, d))

An output axis ``j_m`` is *pinned* when a conjunct of ``where`` is ``j_m == g`` (either
side, through integer casts) with ``g`` free of ``j_m``: clamps ``min(max(i - 1, 0), n - 1)``,
reflections, data-dependent reads ``idx[n]``. The other output axes stay free.

Semantics used by the kernel: inside the domain of the sum ``j_m == g``, so ``j_m`` may be
replaced by ``g`` in ``value`` and ``rest``; then every point of the grid (free output
axes x reduction axes) adds ``value`` to ``T[..., g, ...]`` when ``rest`` holds and
``0 <= g < dim_m``. That is an explicit scatter-add, executed deterministically in
O(grid) instead of the O(output x grid) of evaluating the ``where`` for every output
element: as a loop nest on compiled targets (``nest_scatter.py``: each element summed
by one thread, in grid order), by ``np.bincount`` on the NumPy reference
(``backends/host/scatter.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.expr import Binary, Cast, Expr, Reduce, Var, binary, cast, const, split_conjunction
from ..ir.tensor import Compute
from ..ir.traverse import free_vars, substitute


@dataclass(frozen=True)
class Scatter:
    shape: tuple[int, ...]
    grid: tuple[Var, ...]  # free output axes, then the reduction's axes
    out_index: tuple[Expr, ...]  # per output dim: its grid variable, or the target g
    pinned: tuple[int, ...]  # output dims given by a target expression
    value: Expr
    conds: tuple[Expr, ...]  # in evaluation order, each under those before it; a target g's
    # 0 <= g < dim stands where its pin stood
    dtype: str  # the reduction's
    out_dtype: str

    def describe(self) -> str:
        return f"pins dims {self.pinned} over a grid of {len(self.grid)} axes"


def match_scatter(t: Compute) -> Scatter | None:
    if not isinstance(t, Compute):
        return None
    body = t.body
    if isinstance(body, Cast):
        body = body.a
    if not (isinstance(body, Reduce) and body.combiner.kind == "sum" and body.where is not None):
        return None
    if body.dtype == "bool":
        return None
    axes = set(t.axes)
    pinned: dict[Var, Expr] = {}
    order: list[Expr | Var] = []  # the conditions in order, a pinned axis where its pin was
    for c in split_conjunction(body.where):
        target = _pins(c, axes, pinned)
        if target is None:
            order.append(c)
        else:
            pinned[target[0]] = target[1]
            order.append(target[0])
    if not pinned:
        return None
    for _ in range(len(pinned)):  # targets may name other pinned axes: substitute them
        todo = {v: g for v, g in pinned.items() if free_vars(g) & pinned.keys()}
        if not todo:
            break
        for v, g in todo.items():
            pinned[v] = substitute(g, {w: _as(pinned[w], w) for w in pinned if w is not v})
    if any(free_vars(g) & pinned.keys() for g in pinned.values()):
        return None
    mapping = {v: _as(g, v) for v, g in pinned.items()}
    value = substitute(body.source, mapping)
    # a pin becomes the bounds of its target where it stood: a later condition (a read
    # through the same ids) may be in bounds only under it (evaluated in this order)
    extent = dict(zip(t.axes, t.shape, strict=True))
    conds: list[Expr] = []
    for c in order:
        if isinstance(c, Var):
            g = pinned[c]
            conds += [binary("le", const(0, g.dtype), g),
                      binary("lt", g, const(extent[c], g.dtype))]
        else:
            conds.append(substitute(c, mapping))
    out_index, dims = [], []
    for m, v in enumerate(t.axes):
        if v in pinned:
            out_index.append(pinned[v])
            dims.append(m)
        else:
            out_index.append(v)
    grid = tuple(v for v in t.axes if v not in pinned) + body.axes
    used = free_vars(value).union(*(free_vars(e) for e in (*conds, *out_index)))
    if not used <= set(grid):
        return None
    return Scatter(t.shape, grid, tuple(out_index), tuple(dims), value, tuple(conds), body.dtype,
                   t.dtype)


def _pins(c: Expr, axes: set, pinned: dict) -> tuple[Var, Expr] | None:
    if not (isinstance(c, Binary) and c.op == "eq" and dt.is_int(c.a.dtype)):
        return None
    for side, other in ((c.a, c.b), (c.b, c.a)):
        while isinstance(side, Cast) and dt.is_int(side.dtype):
            side = side.a
        if isinstance(side, Var) and side in axes and side not in pinned:
            if side not in free_vars(other):
                return side, other
    return None


def _as(g: Expr, v: Var) -> Expr:
    return cast(g, v.dtype)
