"""Contractions: sums of products of affine, zero-padded reads, run as BLAS calls.

Matched form (after residue splitting, ``residue.py``)::

    T[i...] = cast?( sum( c * R1[f1(i, k)] * select(g, R2[f2(i, k)], 0) * ..., k..., where w ) )

* every index ``f`` is affine in the variables with integer coefficients;
* every condition (the conjuncts of ``w`` and of the select guards ``g``) is either
  - a bound on one variable alone (``k < 2``, ``1 <= i``): the variable's range shrinks
    (an output axis outside its range gets zero), or
  - a bound on an index of a read ``R`` in the product that zero padding of ``R`` makes
    true by itself: ``f_m(R) >= -d`` or ``f_m(R) <= dim_m - 1 + d`` with ``d >= 0``.

Why the second kind may be dropped: the verifier proved every read in bounds when all
conditions hold, so there the padded product is the true one; where such a condition
fails, the read it names is out of its bounds, its padded value is 0, so the product is
0, as the masked reduction (or the select) says. (The one difference: ``0 * inf`` is nan
where a masked sum would skip the term.)

Execution (``backends/numpy_kernels.py``): each read becomes a strided view of its padded
array with one dimension per variable (stride ``sum_m coeff_m * stride_m``; negative
coefficients flip, a variable in two index positions walks a diagonal), then one matmul
per piece (``np.matmul`` on views arranged as batch x M x K and batch x K x N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir import dtype as dt
from ..ir.affine import linearize
from ..ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, split_conjunction
from ..ir.tensor import Compute, Tensor
from .residue import Split, split_axes

AffineIndex = tuple[tuple[tuple[Var, int], ...], int]  # ((var, coeff), ...), constant


@dataclass(frozen=True)
class Factor:
    tensor: Tensor
    index: tuple[AffineIndex, ...]


@dataclass(frozen=True)
class Piece:
    """``out[out_index(out_vars)] (+)= scale * sum over red_vars of prod(factors)``."""

    factors: tuple[Factor, ...]
    scale: float
    out_vars: tuple[Var, ...]
    red_vars: tuple[Var, ...]
    ranges: tuple[tuple[Var, int, int], ...]  # every variable: lo, hi (inclusive)
    out_index: tuple[AffineIndex, ...]
    widen: tuple | None = None  # (x, P, ((factor position, dim), ...)): see ``widening``


@dataclass(frozen=True)
class Contraction:
    shape: tuple[int, ...]
    dtype: str  # accumulation dtype (the reduction's)
    out_dtype: str
    pieces: tuple[Piece, ...]
    disjoint: bool  # pieces write disjoint regions (only output axes were split)
    covers: bool  # ... and together every element
    split: str  # "none", "aligned", "residue"

    def describe(self) -> str:
        wide = ", rows widened" if any(p.widen for p in self.pieces) else ""
        return f"{len(self.pieces)} piece(s), split {self.split}{wide}"


class _NoMatch(Exception):
    pass


def match_contraction(t: Compute) -> Contraction | None:
    if not isinstance(t, Compute):
        return None
    body = t.body
    if isinstance(body, Cast) and dt.is_float(body.dtype) and dt.is_float(body.a.dtype):
        body = body.a
    if not (isinstance(body, Reduce) and body.combiner.kind == "sum" and dt.is_float(body.dtype)):
        return None
    where = body.where if body.where is not None else Const(True, "bool")
    splits = split_axes(t.axes, body.axes, (body.source, where))
    if splits is None:
        return None
    pieces = []
    try:
        for s in splits:
            p = _piece(s)
            if p is not None:
                pieces.append(p)
    except _NoMatch:
        return None
    disjoint = all(s.red_vars == splits[0].red_vars for s in splits)  # no reduce residues
    written = sum(math.prod(hi - lo + 1 for v, lo, hi in p.ranges if v in p.out_vars)
                  for p in pieces)
    covers = disjoint and written == math.prod(t.shape)
    kind = splits[0].kind if splits else "none"
    return Contraction(t.shape, body.dtype, t.dtype, tuple(pieces), disjoint, covers, kind)


# --------------------------------------------------------------------------------------


def _piece(s: Split) -> Piece | None:
    """The piece, None when it is identically zero; raises _NoMatch."""
    source, where = s.exprs
    factors: list[tuple[Tensor, list[tuple[dict, int]]]] = []
    guards: list[Expr] = []
    scale = _factors(source, factors, guards)
    if scale == 0 or not factors:
        if scale == 0:
            return None
        raise _NoMatch
    variables = (*s.out_vars, *s.red_vars)
    ranges = {v: [v.lo, v.lo + v.extent - 1] for v in variables}
    for _, index in factors:
        for coeffs, _k in index:
            if not set(coeffs) <= set(ranges):
                raise _NoMatch
    for cond in (*split_conjunction(where), *guards):
        if not _apply_condition(cond, ranges, factors):
            return None
    if any(lo > hi for lo, hi in ranges.values()):
        return None
    piece = Piece(
        factors=tuple(Factor(tensor, tuple(_freeze(f) for f in index))
                      for tensor, index in factors),
        scale=scale,
        out_vars=s.out_vars,
        red_vars=s.red_vars,
        ranges=tuple((v, lo, hi) for v, (lo, hi) in ranges.items()),
        out_index=tuple(_freeze(f) for f in s.out_index),
    )
    return replace(piece, widen=widening(piece, {v: tuple(r) for v, r in ranges.items()}))


def _freeze(form) -> AffineIndex:
    coeffs, k = form
    return tuple(sorted(coeffs.items(), key=lambda vc: vc[0].uid)), int(k)


def _factors(e: Expr, factors: list, guards: list) -> float:
    """Collect the reads of the product ``e``; returns its constant factor."""
    if isinstance(e, Binary) and e.op == "mul":
        return _factors(e.a, factors, guards) * _factors(e.b, factors, guards)
    if isinstance(e, Binary) and e.op == "div" and isinstance(e.b, Const) and e.b.value != 0:
        return _factors(e.a, factors, guards) / float(e.b.value)
    if isinstance(e, Unary) and e.op == "neg":
        return -_factors(e.a, factors, guards)
    if isinstance(e, Const) and e.dtype != "bool":
        return float(e.value)
    if isinstance(e, Cast) and dt.is_float(e.dtype) and e.a.dtype != "bool":
        return _factors(e.a, factors, guards)
    if isinstance(e, Select):
        if _is_zero(e.b):
            guards.extend(split_conjunction(e.cond))
            return _factors(e.a, factors, guards)
        if _is_zero(e.a):
            guards.append(Unary("not", e.cond, "bool"))
            return _factors(e.b, factors, guards)
        raise _NoMatch
    if isinstance(e, Read) and e.dtype != "bool":
        index = []
        for i in e.indices:
            coeffs, k = linearize(i)
            if not all(isinstance(a, Var) for a in coeffs):
                raise _NoMatch
            index.append((coeffs, k))
        factors.append((e.tensor, index))
        return 1.0
    raise _NoMatch


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.dtype != "bool" and e.value == 0


def _inequality(cond: Expr):
    """``cond`` as (coeffs, k, op) meaning ``sum coeffs*atoms + k  (>= 0 | == 0)``."""
    negate = False
    if isinstance(cond, Unary) and cond.op == "not":
        negate, cond = True, cond.a
    if not (isinstance(cond, Binary) and cond.op in ("lt", "le", "eq") and dt.is_int(cond.a.dtype)):
        raise _NoMatch
    if cond.op == "eq":
        if negate:
            raise _NoMatch
        coeffs, k = linearize(cond.b - cond.a)
        return coeffs, k, "eq"
    a, b = (cond.b, cond.a) if negate else (cond.a, cond.b)
    # lt: b - a - 1 >= 0; le: b - a >= 0; negated: not(a < b) = b <= a, not(a <= b) = b < a
    strict = (cond.op == "lt") != negate
    coeffs, k = linearize(b - a)
    return coeffs, k - (1 if strict else 0), "ge"


def _apply_condition(cond: Expr, ranges: dict, factors: list) -> bool:
    """Use ``cond``: shrink a range or accept it as implied by padding. False when it is
    constantly false. Raises _NoMatch when it is neither."""
    if isinstance(cond, Const) and cond.dtype == "bool":
        return bool(cond.value)
    coeffs, k, op = _inequality(cond)
    if not all(isinstance(a, Var) for a in coeffs):
        raise _NoMatch
    if not coeffs:
        return k == 0 if op == "eq" else k >= 0
    if len(coeffs) == 1:
        ((v, c),) = coeffs.items()
        if v not in ranges:
            raise _NoMatch
        r = ranges[v]
        if op == "eq":
            if k % c:
                return False
            value = -k // c
            r[0], r[1] = max(r[0], value), min(r[1], value)
        elif c > 0:  # v >= ceil(-k / c)
            r[0] = max(r[0], -(k // c))
        else:  # v <= floor(k / -c)
            r[1] = min(r[1], k // -c)
        return True
    if op == "eq":
        raise _NoMatch
    g = math.gcd(*coeffs.values())
    coeffs = {v: c // g for v, c in coeffs.items()}
    k = k // g  # sum c*v + k >= 0  <=>  sum (c/g)*v + floor(k/g) >= 0
    neg = {v: -c for v, c in coeffs.items()}
    for tensor, index in factors:
        for m, (ic, ik) in enumerate(index):
            if ic == coeffs and k >= ik:  # f_m >= ik - k, weaker than f_m >= 0
                return True
            if ic == neg and ik + k >= tensor.shape[m] - 1:  # f_m <= ik + k
                return True
    raise _NoMatch


# row widening ----------------------------------------------------------------------------


def index_range(form: AffineIndex, ranges: dict) -> tuple[int, int]:
    """Smallest and largest value of an affine index over the variables' ranges."""
    coeffs, k = form
    lo = hi = k
    for v, c in coeffs:
        a, b = c * ranges[v][0], c * ranges[v][1]
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def widening(p: Piece, ranges: dict):
    """Row widening, for an im2col-style read ``X[..., y + r, x + s]`` (stride 1):
    give ``x`` the extent of the padded row width ``P`` so that ``(y, x)`` become one
    dimension of length ``ext(y) * P`` in every factor that reads them, and the copy that
    lays the operand out for BLAS moves long contiguous rows instead of rows of ``ext(x)``.
    The ``P - ext(x)`` extra columns read the next row: for an output ``x`` they land in
    columns that are dropped; for a reduced ``x`` a factor that reads plain ``x + k``,
    padded with zeros to width ``P``, cancels them. Returns ``(x, P, ((factor position,
    dim), ...))`` for the pair that wastes least, or None."""
    best = None
    for f in p.factors:
        if len(f.index) < 2:
            continue
        last, before = f.index[-1][0], f.index[-2][0]
        for x, cx in last:
            for y, cy in before:
                if cx == 1 and cy == 1 and x is not y:
                    got = _widen_pair(p, ranges, x, y)
                    if got is not None and (best is None or got[1] < best[1]):
                        best = got
    return best


def _widen_pair(p: Piece, ranges, x, y):
    dims, overlap, pure = {}, False, False
    for k, f in enumerate(p.factors):
        where = [(m, dict(coeffs)) for m, (coeffs, _) in enumerate(f.index)]
        has_x = [m for m, c in where if x in c]
        has_y = [m for m, c in where if y in c]
        if not has_x and not has_y:
            continue
        last = len(f.index) - 1
        if has_x != [last] or has_y != [last - 1]:
            return None
        if where[last][1][x] != 1 or where[last - 1][1][y] != 1:
            return None
        dims[k] = last
        overlap |= len(where[last][1]) > 1
        pure |= len(where[last][1]) == 1
    if not overlap:
        return None  # nothing is copied im2col-style: widening would only add work
    if x in p.out_vars:
        tail = [dict(c) for c, _ in p.out_index[-2:]]
        if len(dims) != 1 or y not in p.out_vars or tail != [{y: 1}, {x: 1}]:
            return None
    elif not (x in p.red_vars and y in p.red_vars and pure):
        return None
    width = max(hi - lo + 1 for lo, hi in (index_range(p.factors[k].index[m], ranges)
                                           for k, m in dims.items()))
    n = ranges[x][1] - ranges[x][0] + 1
    if width <= n or width > n + n // 8 + 2:  # at most ~12% more work
        return None
    return x, width, tuple(dims.items())
