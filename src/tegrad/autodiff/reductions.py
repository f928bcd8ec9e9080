"""Derivatives of reductions with respect to their source, shared by both modes.

For ``y = fold_k x(k)`` (over the points ``k`` where the ``where`` clause holds):
  sum:      dy/dx(k) = 1
  max/min:  dy/dx(k) = [x(k) = y] / #{k' : x(k') = y}      (ties share equally)
  prod:     dy/dx(k) = prod_{k' != k} x(k'), from three folds over the axis:
              z = #{k' : x(k') = 0},  P = prod_{x(k') != 0} x(k'),  S = sum_{x(k') = 0} x(k')
              dy/dx(k) = P / x(k)                    z = 0
                         P                           z = 1, x(k) = 0
                         P / x(k) * S                z = 1, x(k) != 0
                         P * (S - x(k))              z = 2, x(k) = 0
                         0                           otherwise
            ``S`` is 0 in value but carries the derivative of the zero factors, so the
            partial is exact in value everywhere and its own derivative (second order)
            is exact at zeros too; third and higher derivatives at a point with two or
            more zeros in a row are not. O(n) per row (the product of the others for
            every element would be O(n^2)); away from zeros ``P / x(k)`` differs from the
            product of the others by the rounding of one division.
  custom:   dy/dx(k) = d(combine)/d(rhs)(fold_{k' != k} x(k'), x(k))
  argmax/argmin: integer valued, no derivative.
The tangent (forward mode) of a reduction is ``sum_k x_dot(k) dy/dx(k)``
(``reduce_tangent``); reverse mode scatters ``y_bar dy/dx(k)`` (``reverse.py``).
The helper folds reduce over a fresh copy of the axes (the current point ``k`` stays
free). The custom rule folds over ``k' != k``: exact for any combiner, at the cost of
one extra pass over the axis per element. Each helper is memoised on its reduction
node, so asking twice gives the same node (and shared work).
"""

from __future__ import annotations

import functools

from ..ir.expr import (
    SUM,
    Expr,
    Read,
    Reduce,
    Select,
    Var,
    binary,
    cast,
    conjunction,
    const,
    node_memo,
    split_conjunction,
)
from ..ir.tensor import make_compute
from ..ir.traverse import free_vars, substitute
from .partials import tangent


def zero(dtype: str) -> Expr:
    return const(0, dtype)


def fresh_copy(axes) -> dict[Var, Var]:
    return {a: Var.fresh(a.name, a.lo, a.extent) for a in axes}


def others_differ(ren: dict[Var, Var]) -> Expr:
    """Some fresh axis differs from its original: the point is not the current one."""
    out = None
    for old, new in ren.items():
        d = binary("ne", new, old)
        out = d if out is None else binary("or", out, d)
    return out


def per_node(fn):
    """Memoise ``fn(r, *rest)`` on the node ``r`` (so equal calls give one node, and the
    result goes when ``r`` goes)."""

    @functools.wraps(fn)
    def wrapper(r, *rest):
        memo = node_memo(r)
        key = (fn.__name__, *rest)
        if key not in memo:
            memo[key] = fn(r, *rest)
        return memo[key]

    return wrapper


@per_node
def fold_except(r: Reduce) -> Expr:
    """The reduction ``r`` over every point of its axes but the current one."""
    ren = fresh_copy(r.axes)
    src = substitute(r.source, ren)
    where = others_differ(ren)
    if r.where is not None:
        where = binary("and", substitute(r.where, ren), where)
    return Reduce(r.combiner, src, tuple(ren.values()), where, r.dtype)


def _zero_fold(r: Reduce, kind: str) -> Expr:
    """A fold over a fresh copy of the axes: ``count`` of zero sources, ``product`` of
    the non-zero ones, ``sum`` of the zero ones (0, with their derivatives)."""
    ren = fresh_copy(r.axes)
    src = substitute(r.source, ren)
    is_zero = binary("eq", src, zero(r.dtype))
    where = None if r.where is None else substitute(r.where, ren)
    if kind == "count":
        return Reduce(SUM, cast(is_zero, r.dtype), tuple(ren.values()), where, r.dtype)
    if kind == "product":
        factor = Select(is_zero, const(1, r.dtype), src, r.dtype)
        return Reduce(r.combiner, factor, tuple(ren.values()), where, r.dtype)
    term = Select(is_zero, src, zero(r.dtype), r.dtype)
    return Reduce(SUM, term, tuple(ren.values()), where, r.dtype)


@per_node
def zero_folds(r: Reduce) -> tuple[Expr, Expr, Expr]:
    """``(z, P, S)`` of the module docstring, one node each per reduction."""
    return _zero_fold(r, "count"), _zero_fold(r, "product"), _zero_fold(r, "sum")


def prod_partial(r: Reduce) -> Expr:
    """``prod_{k' != k} x(k')`` from ``z``, ``P`` and ``S`` (module docstring).

    The divisions use ``x(k)`` with its zeros replaced by 1: where ``x(k) = 0`` they are
    not selected, but the partial may also be evaluated at points no term maps to (a
    gather's guard then multiplies it by 0), and ``P / 0 * 0`` would be nan there."""
    z, p, s = zero_folds(r)
    x, dtype = r.source, r.dtype

    def when(cond, then, other):
        return Select(cond, then, other, dtype)

    def zeros_are(n):
        return binary("eq", z, const(n, dtype))
    x_zero = binary("eq", x, zero(dtype))
    p_over_x = binary("div", p, when(x_zero, const(1, dtype), x))
    return when(zeros_are(0), p_over_x,
                when(zeros_are(1), when(x_zero, p, binary("mul", p_over_x, s)),
                     when(binary("and", zeros_are(2), x_zero),
                          binary("mul", p, binary("sub", s, x)), zero(dtype))))


@per_node
def count_ties(r: Reduce) -> Expr:
    """#{k' : source(k') == r}, computed over a fresh copy of the axes."""
    ren = fresh_copy(r.axes)
    hit = cast(binary("eq", substitute(r.source, ren), r), r.dtype)
    where = None if r.where is None else substitute(r.where, ren)
    return Reduce(SUM, hit, tuple(ren.values()), where, r.dtype)


@per_node
def stored_extreme(r: Reduce, guards: tuple[Expr, ...] = ()) -> Reduce:
    """``r`` (a max or min) over stored copies of its source values.

    Winners are found by testing ``source(k) == max``. That test is exact only when both
    sides come from the same stored numbers: a source recomputed elsewhere (simplified
    differently, or summed in another order) can miss the maximum by one rounding and
    leave no winner at all. A plain read is already stored; any other source is
    materialised once as ``extreme.source`` (over the variables it uses), and the max is
    taken again over that tensor. ``guards`` are the conditions under which the source
    is read (its scope's ``where`` clauses); elsewhere the stored value is 0, unused.
    """
    if isinstance(r.source, Read):
        return r
    conds = guards + (tuple(split_conjunction(r.where)) if r.where is not None else ())
    body = r.source if not conds else Select(conjunction(conds), r.source, zero(r.dtype), r.dtype)
    order = sorted(free_vars(body), key=lambda v: v.uid)
    axes = tuple(Var.fresh(v.name, 0, v.extent) for v in order)
    shift = {v: a + v.lo if v.lo else a for v, a in zip(order, axes, strict=True)}
    stored = make_compute(
        tuple(v.extent for v in order), axes, substitute(body, shift), "extreme.source"
    )
    values = Read(stored, tuple(v - v.lo if v.lo else v for v in order), r.dtype)
    return Reduce(r.combiner, values, r.axes, r.where, r.dtype)


def reduce_partial(r: Reduce, guards: tuple[Expr, ...] = ()) -> Expr | None:
    """d r / d source(k), an expression in the reduction's axes."""
    kind = r.combiner.kind
    one = const(1, r.dtype)
    if kind == "sum":
        return one
    if kind in ("max", "min"):
        exact = stored_extreme(r, guards)
        hit = Select(binary("eq", exact.source, exact), one, zero(r.dtype), r.dtype)
        return binary("div", hit, count_ties(exact))
    if kind == "prod":
        return prod_partial(r)
    if kind == "custom":
        comb = r.combiner
        rest = fold_except(r)
        d_rhs = derivative_wrt(comb.combine, comb.rhs)
        return substitute(d_rhs, {comb.lhs: rest, comb.rhs: r.source})
    return None


def derivative_wrt(e: Expr, v: Var) -> Expr:
    """d e / d v for a scalar expression of a float variable (a custom reducer's
    combiner); a reduction inside it (a combiner may hold one) by ``reduce_tangent``."""
    return tangent(e, lambda x: const(1, v.dtype) if x is v else None, reduce_tangent)


def reduce_tangent(r: Reduce, go) -> Expr | None:
    """The tangent of ``r`` given ``go(source)``, the tangent of its source (None: zero):
    ``sum_k x_dot(k) dy/dx(k)``, a plain sum of tangents for a sum."""
    d = go(r.source)
    if d is None:
        return None
    if r.combiner.kind == "sum":
        return Reduce(SUM, d, r.axes, r.where, r.dtype)
    p = reduce_partial(r)
    if p is None:
        return None
    # p mentions r itself (a max's winner test), which binds r's axes: sum over copies
    ren = fresh_copy(r.axes)
    where = None if r.where is None else substitute(r.where, ren)
    return Reduce(SUM, substitute(d * p, ren), tuple(ren.values()), where, r.dtype)
