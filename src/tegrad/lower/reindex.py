"""Re-indexings: a compute that only reads one tensor at moved indices, as strides.

A compute ``T[o] = S[g(o)]`` (one read, each index ``g_d`` an integer expression of the
output axes alone) moves data without computing. It needs no copy when the element it
reads lies at an address affine in ``o``; two forms, tried in this order:

    dims   every index is affine, ``g_d(o) = k_d + sum_j c_jd o_j`` (a permutation, a
           slice, a stride, a broadcast ``c_jd = 0``, a fixed index): ``T`` is ``S``'s
           array, whatever its strides ``s``, seen with strides ``t_j = sum_d c_jd s_d``
           from the element at ``k``;
    flat   the indices are not affine, but the row-major address they give is,
           ``sum_d g_d(o) R_d = k + sum_j c_j o_j`` (``R``: the row-major element strides
           of ``S``'s shape): a reshape, whose digits ``(F // R_d) % n_d`` of a flat index
           ``F`` recompose to ``F``. ``T`` is ``S``'s elements in row-major order seen with
           strides ``c_j`` from element ``k`` (a copy of them first where ``S``'s array is
           not C-ordered: as ``torch.reshape`` copies a non-contiguous tensor).

Method: each index becomes a linear form over atoms, an atom being a variable or a floor
quotient ``X // m`` of a form ``X`` by a constant ``m > 1``, by exact rules for floor
division by a positive constant (every integer ``X``, ``G`` and ``a, b, n > 0``):

    X % n = X - n (X // n)           (X // a) // b = X // (a b)
    (n G + R) // n = G + R // n      R // n = q  where q n <= R < (q + 1) n on the ranges
    (g G + R) // (g h) = G // h      where 0 <= R < g on the ranges

Equal quotients are one atom, so the address of a reshape ``(6,) -> (2, 3)`` read back,
``S[(3 i + j) // 3, (3 i + j) % 3]`` with ``R = (3, 1)``, is
``3 (i + j // 3) + (3 i + j) - 3 (i + j // 3)``, where ``j // 3 = 0`` (``0 <= j < 3``):
``3 i + j``, strides ``(3, 1)``. A form whose atoms are all variables is affine. The
rules give equal quotients one form where the divisors nest (``flatten``, a head split);
where they do not (``(2, 3, 2) -> (3, 4)`` reads ``(4 i + j) // 6`` and
``(2 i + j // 2) // 3``), the terms left are summed on the grid of their variables,
enumerated in full (a proof), and an affine sum is affine.

Limits: reads under a guard (padding), clamps, ``min``/``max`` and data-dependent indices
are no re-indexing; a negative stride (a flip) is refused, since neither BLAS nor
``torch.from_numpy`` takes one; an address whose quotients do not cancel (a transpose
then a merge of the moved axes) is a copy, as in torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import Binary, Cast, Const, Expr, Read, Unary, Var
from ..ir.tensor import Compute, Tensor

Form = tuple[dict, int]  # atom -> coefficient, constant
GRID_POINTS = 1 << 18  # the most points a group of quotient terms is enumerated on


@dataclass(frozen=True)
class Strides:
    """``T[o]`` is element ``offset + sum_j o_j coefficients[j]`` of ``source``: over its
    dims (``layout`` "dims": ``offset`` and each ``coefficients[j]`` a tuple per dim of
    ``source``), or over its row-major elements ("flat": tuples of one). Coefficients of
    axes of extent 1 are 0. ``overlapping``: two points of ``T`` may read one element
    (a broadcast), so a view of it must not be written."""

    source: Tensor
    shape: tuple[int, ...]
    layout: str
    coefficients: tuple[tuple[int, ...], ...]  # per output axis, per source dim
    offset: tuple[int, ...]
    overlapping: bool

    def describe(self) -> str:
        return f"a strided view of {self.source.name} ({self.layout})"


def match_reindexing(t: Compute) -> Strides | None:
    """``t`` as strides over the tensor it reads, or None (module docstring)."""
    body = t.body
    if (not isinstance(body, Read) or math.prod(t.shape) == 0
            or any(v.lo != 0 for v in t.axes)):
        return None
    axes = set(t.axes)
    forms = [_form(e, axes) for e in body.indices]
    if any(f is None for f in forms):
        return None
    row_major = [math.prod(body.tensor.shape[d + 1:]) for d in range(len(body.indices))]
    per_dim = [_as_affine(f) for f in forms]
    layout = "dims"
    if any(f is None for f in per_dim):
        address = _as_affine(_sum([_scaled(f, r) for f, r in zip(forms, row_major,
                                                                   strict=True)]))
        if address is None:
            return None
        layout, per_dim = "flat", [address]
    coefficients = tuple(tuple(f[0].get(v, 0) if v.extent > 1 else 0 for f in per_dim)
                         for v in t.axes)
    if any(c < 0 for row in coefficients for c in row):
        return None
    scale = row_major if layout == "dims" else [1]
    address_steps = [sum(c * r for c, r in zip(row, scale, strict=True)) for row in coefficients]
    return Strides(body.tensor, t.shape, layout, coefficients, tuple(f[1] for f in per_dim),
                   not _injective(address_steps, t.shape))


def _injective(steps: list[int], shape: tuple[int, ...]) -> bool:
    """Whether ``o -> sum_j steps_j o_j`` over ``shape`` takes each value once: with the
    axes of extent above 1 in increasing step, each step exceeds the largest address the
    smaller ones reach (a sufficient test; a broadcast's step 0 fails it)."""
    reach = 0
    for step, n in sorted((s, n) for s, n in zip(steps, shape, strict=True) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True


def _as_affine(f: Form) -> Form | None:
    """``f`` as an affine form (its atoms variables only), or None where it is not one.
    Quotient terms that the rules leave (quotients by composite divisors reached in
    another order: ``(4 i + j) // 6`` and ``(2 i + j // 2) // 3``) are decided on the
    grid of their variables, each group of terms sharing variables on its own: enumerated
    in full, a proof, up to ``GRID_POINTS`` points a group."""
    coeffs, k = f
    linear = {a: w for a, w in coeffs.items() if isinstance(a, Var)}
    groups: list[tuple[set, list]] = []
    for atom, w in coeffs.items():
        if isinstance(atom, Var):
            continue
        used = _variables(atom)
        joined = [g for g in groups if g[0] & used]
        groups = [g for g in groups if not g[0] & used]
        groups.append((used.union(*(g[0] for g in joined)),
                       [(atom, w), *(t for g in joined for t in g[1])]))
    for used, terms in groups:
        order = sorted(used, key=lambda v: v.uid)
        if math.prod(v.extent for v in order) > GRID_POINTS:
            return None
        grid = {v: np.arange(v.extent).reshape([-1 if u is v else 1 for u in order])
                for v in order}
        values = sum(w * _values(atom, grid) for atom, w in terms)
        values = np.broadcast_to(values, [v.extent for v in order])
        origin = int(values[(0,) * len(order)])
        steps = [int(values[tuple(int(u is v) for u in order)]) - origin if v.extent > 1
                 else 0 for v in order]
        if not np.array_equal(values, origin + sum(s * grid[v] for s, v in zip(
                steps, order, strict=True))):
            return None
        k += origin
        for v, step in zip(order, steps, strict=True):
            linear[v] = linear.get(v, 0) + step
    return {v: w for v, w in linear.items() if w}, k


def _variables(atom) -> set:
    (coeffs, _), _ = atom
    out = set()
    for a, _ in coeffs:
        out |= {a} if isinstance(a, Var) else _variables(a)
    return out


def _values(atom, grid: dict) -> np.ndarray:
    (coeffs, k), m = atom
    total = k + sum(w * (grid[a] if isinstance(a, Var) else _values(a, grid)) for a, w in coeffs)
    return np.floor_divide(total, m)


def _scaled(f: Form, c: int) -> Form:
    return {a: c * w for a, w in f[0].items() if c * w}, c * f[1]


def _sum(forms: list[Form]) -> Form:
    out: dict = {}
    k = 0
    for coeffs, c in forms:
        k += c
        for a, w in coeffs.items():
            out[a] = out.get(a, 0) + w
    return {a: w for a, w in out.items() if w}, k


def _form(e: Expr, axes: set) -> Form | None:
    """``e`` as a form over variables of ``axes`` and floor quotients, or None when it
    is no such expression (a read, a clamp, a select)."""
    if isinstance(e, Var):
        return ({e: 1}, 0) if e in axes else None
    if isinstance(e, Const):
        return ({}, int(e.value)) if dt.is_int(e.dtype) else None
    if isinstance(e, Cast):
        return _form(e.a, axes) if dt.is_int(e.dtype) and dt.is_int(e.a.dtype) else None
    if isinstance(e, Unary):
        a = _form(e.a, axes) if e.op == "neg" else None
        return None if a is None else _scaled(a, -1)
    if not isinstance(e, Binary):
        return None
    a = _form(e.a, axes)
    b = _form(e.b, axes)
    if a is None or b is None:
        return None
    if e.op in ("add", "sub"):
        return _sum([a, _scaled(b, 1 if e.op == "add" else -1)])
    if e.op == "mul":
        if not a[0]:
            return _scaled(b, a[1])
        return _scaled(a, b[1]) if not b[0] else None
    if e.op in ("floordiv", "floormod") and not b[0] and b[1] > 0:
        quotient = _floor(a, b[1])
        return quotient if e.op == "floordiv" else _sum([a, _scaled(quotient, -b[1])])
    return None


def _floor(f: Form, m: int) -> Form:
    """``f // m`` (``m > 0``) in a canonical form, so that equal quotients are one atom:
    the terms whose coefficients ``m`` divides leave the quotient and a remainder constant
    over its range is folded; else, for the largest divisor ``g`` of ``m`` splitting
    ``f = g G + R`` with ``0 <= R < g``, ``f // m = G // (m / g)``; a quotient of a
    quotient is one quotient; else one quotient atom."""
    if m == 1:
        return f
    coeffs, k = f
    whole = {a: w // m for a, w in coeffs.items() if w % m == 0}
    rest = {a: w for a, w in coeffs.items() if w % m}
    lifted, r = divmod(k, m)
    lo, hi = _range((rest, r))
    if lo // m == hi // m:
        return whole, lifted + lo // m
    for g in sorted((g for g in range(2, m) if m % g == 0), reverse=True):
        high = {a: w // g for a, w in coeffs.items() if w % g == 0}
        low = {a: w for a, w in coeffs.items() if w % g}
        above, below = divmod(k, g)
        lo, hi = _range((low, below))
        if high and 0 <= lo and hi < g:
            return _floor((high, above), m // g)
    if r == 0 and len(rest) == 1:
        ((atom, w),) = rest.items()
        if w == 1 and isinstance(atom, tuple):  # (X // a) // m = X // (a m)
            (coefficients, constant), a = atom
            return _sum([(whole, lifted), _floor((dict(coefficients), constant), a * m)])
    return _sum([(whole, lifted), ({(_frozen((rest, r)), m): 1}, 0)])


def _frozen(f: Form) -> tuple:
    """A form as a hashable key: equal forms give equal keys."""
    return frozenset(f[0].items()), f[1]


def _range(f: Form) -> tuple[int, int]:
    """The least and greatest value of ``f`` over its variables' ranges (bounds of each
    atom; a quotient's from its form's)."""
    lo = hi = f[1]
    for atom, w in f[0].items():
        if isinstance(atom, Var):
            a, b = atom.lo, atom.hi
        else:
            (coeffs, k), m = atom
            x, y = _range((dict(coeffs), k))
            a, b = x // m, y // m
        lo += min(w * a, w * b)
        hi += max(w * a, w * b)
    return lo, hi
