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

Execution (``backends/host/products.py``): each read becomes a strided view of its padded
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
    """A read ``tensor[index]``; with ``phases``, of the tensor's phase planes (see
    ``phase_split``): ``index`` then starts with one form per phase and reads the phased
    dims as their plane index ``q``."""

    tensor: Tensor
    index: tuple[AffineIndex, ...]
    phases: tuple[tuple[int, int, int], ...] = ()  # (dim, S, offset): dim = S*q + a + offset


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


MIN_WIDENED = 4  # a shorter output row is not widened (``widening``)
MAX_WIDENED_WASTE = 1 / 3  # nor one that its widening makes longer by more than this


def match_contraction(t: Compute, max_widened_step: int = 4, thin: int = 0,
                      max_waste: float = MAX_WIDENED_WASTE) -> Contraction | None:
    """``t`` as a contraction, or None; an output column of a widened piece steps by at
    most ``max_widened_step`` (``Options.max_widened_step``, see ``widening``); a strided
    read of a thin output is not split into phases (``thin``: ``Options.thin_batch``, see
    ``phase_split``); a widened row is at most ``max_waste`` longer than its output row
    (``Options.max_widened_waste``)."""
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
            p = _piece(s, max_widened_step, thin, max_waste)
            if p is not None:
                pieces.append(p)
    except _NoMatch:
        return None
    disjoint = (all(s.red_vars == splits[0].red_vars for s in splits)  # no reduce residues
                or all(_apart(p, q) for k, p in enumerate(pieces) for q in pieces[k + 1:]))
    written = sum(math.prod(hi - lo + 1 for v, lo, hi in p.ranges if v in p.out_vars)
                  for p in pieces)
    covers = disjoint and written == math.prod(t.shape)
    kind = splits[0].kind if splits else "none"
    return Contraction(t.shape, body.dtype, t.dtype, tuple(pieces), disjoint, covers, kind)


def _apart(p: Piece, q: Piece) -> bool:
    """Whether pieces ``p`` and ``q`` write no element in common: along some output axis
    their indices ``c v + a`` and ``c w + b`` are of different residues modulo a shared
    ``c`` (a stride-2 transposed convolution's classes ``2 q + 0`` and ``2 q + 1``, whose
    reduce axes are split with them), or their ranges do not meet."""
    ranges = {v: (lo, hi) for v, lo, hi in (*p.ranges, *q.ranges)}
    for (pc, pk), (qc, qk) in zip(p.out_index, q.out_index, strict=True):
        if len(pc) == 1 and len(qc) == 1 and pc[0][1] == qc[0][1] and abs(pc[0][1]) > 1 \
                and (pk - qk) % pc[0][1]:
            return True
        (plo, phi), (qlo, qhi) = (index_range(f, ranges) for f in ((pc, pk), (qc, qk)))
        if phi < qlo or qhi < plo:
            return True
    return False


# --------------------------------------------------------------------------------------


def _piece(s: Split, max_widened_step: int, thin: int = 0,
           max_waste: float = MAX_WIDENED_WASTE) -> Piece | None:
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
    piece = phase_split(piece, thin)
    ranges = {v: (lo, hi) for v, lo, hi in piece.ranges}
    return replace(piece, widen=widening(piece, ranges, max_widened_step, max_waste))


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


# phase splitting -------------------------------------------------------------------------

MIN_TERM_DEPTH = 16  # the least K of each product of a looped reduction (host/products.py)


def phase_split(p: Piece, thin: int = 0) -> Piece:
    """A strided convolution's input read ``X[..., S*h + r, S*w + s]`` as a read of its
    phase planes, so that each kernel offset reads a unit-stride shifted view.

    Math: write the reduced ``r = S*r' + a + lo_r`` with ``a`` in ``[0, S)``. Then
    ``S*h + r + k = S*(h + r' + (lo_r + k) // S) + a + o`` with ``o = (lo_r + k) mod S``:
    the index is ``S*q + a + o`` with ``q = h + r' + (lo_r + k) // S`` affine with unit
    coefficients, so plane ``a`` (the elements ``S*q + a + o``, a strided copy of ``X``) is
    read at ``q``. The new ranges of ``(r', a)`` cover ``S * ceil(ext(r) / S)`` values:
    more than ``r``'s when ``S`` does not divide its extent. Those extra values must give
    zero: another factor reads ``r`` alone and ends at its last element (the weight
    ``W[k, c, r, s]``), so its zero padding cancels them (and ``host/products.py`` skips
    products that read only it).

    Applied to a factor index ``S*v + ... + r`` (``S >= 2`` the gcd of the coefficients
    besides ``r``'s, which is 1) when the reduced variables left unsplit are at least
    ``MIN_TERM_DEPTH`` deep: the split offsets then run as a looped reduction over shifted
    views (``host/products._looped``) instead of an im2col copy of ``X`` at stride ``S``.

    Not applied to small images: where the strided output variables span fewer than
    ``thin`` points and another factor (the weight) is larger than ``X``, the im2col copy
    of ``X`` is the small one, and the split would pad the weight's ``r`` to ``S *
    ceil(ext(r) / S)`` (a copy of the weight, 16 taps for 9, on every call)."""
    ranges = {v: (lo, hi) for v, lo, hi in p.ranges}
    for k in range(len(p.factors)):
        plan = _phase_plan(p, k, ranges)
        if not plan:
            continue
        if _thin_read(p, k, plan, ranges, thin):
            return p
        split = {r for _, _, r in plan}
        if math.prod(hi - lo + 1 for v, (lo, hi) in ranges.items()
                     if v in p.red_vars and v not in split) < MIN_TERM_DEPTH:
            return p
        return _apply_phases(p, k, plan, ranges)
    return p


def _thin_read(p: Piece, k: int, plan, ranges: dict, thin: int) -> bool:
    """Whether factor ``k``'s strided reads (``plan``) are of a thin output, and another
    factor is larger (``phase_split``)."""
    f = p.factors[k]
    strided = {v for dim, _, _ in plan for v, c in f.index[dim][0]
               if v in p.out_vars and c != 1}
    points = math.prod(ranges[v][1] - ranges[v][0] + 1 for v in strided)
    size = math.prod(f.tensor.shape)
    return bool(strided) and points < thin and any(
        math.prod(g.tensor.shape) > size for g in p.factors if g is not f)


def _phase_plan(p: Piece, k: int, ranges: dict) -> list[tuple[int, int, Var]]:
    """``(dim, S, r)`` for each index of factor ``k`` that a split of reduced ``r`` makes
    a phase-plane read."""
    f = p.factors[k]
    plan, seen = [], set()
    for m, (coeffs, _) in enumerate(f.index):
        units = [v for v, c in coeffs if c == 1 and v in p.red_vars]
        if len(units) != 1:
            continue
        r = units[0]
        others = [c for v, c in coeffs if v is not r]
        step = math.gcd(*others) if others else 0
        lo, hi = ranges[r]
        uses = sum(r in dict(c) for c, _ in f.index)
        if step < 2 or hi == lo or r in seen or uses != 1:
            continue
        if (hi - lo + 1) % step and not _cancelled(p, k, r, hi):
            continue
        plan.append((m, step, r))
        seen.add(r)
    return plan


def _cancelled(p: Piece, k: int, r: Var, hi: int) -> bool:
    """True when a factor other than ``k`` reads ``r`` alone at an index that ends at its
    last element, so that values of ``r`` beyond ``hi`` read its zero padding."""
    return any(j != k and coeffs == ((r, 1),) and c + hi == g.tensor.shape[m] - 1
               for j, g in enumerate(p.factors) for m, (coeffs, c) in enumerate(g.index))


def _apply_phases(p: Piece, k: int, plan, ranges: dict) -> Piece:
    subst, ranges = {}, dict(ranges)
    for _, step, r in plan:
        lo, hi = ranges.pop(r)
        q = Var.fresh(f"{r.name}q", 0, -(-(hi - lo + 1) // step))
        # fewer taps than the stride (a stride-3 convolution of 2 taps): a phase per tap,
        # not per residue (a plane of zero weights copied and multiplied for nothing)
        phases = min(step, hi - lo + 1)
        a = Var.fresh(f"{r.name}a", 0, phases)
        subst[r] = (q, a, step, lo)
        ranges[q], ranges[a] = (0, q.extent - 1), (0, phases - 1)

    def rewrite(form: AffineIndex) -> AffineIndex:
        coeffs, c = dict(form[0]), form[1]
        for r, (q, a, step, lo) in subst.items():
            if r in coeffs:
                cr = coeffs.pop(r)
                coeffs[q], coeffs[a] = coeffs.get(q, 0) + cr * step, coeffs.get(a, 0) + cr
                c += cr * lo
        return _freeze((coeffs, c))

    factors = [replace(f, index=tuple(rewrite(form) for form in f.index)) for f in p.factors]
    phased, phase_forms, phases = list(factors[k].index), [], []
    for m, step, r in plan:
        q, a, _, _ = subst[r]
        coeffs, c = dict(phased[m][0]), phased[m][1]
        del coeffs[a]
        phased[m] = _freeze(({v: cv // step for v, cv in coeffs.items()}, c // step))
        phase_forms.append(_freeze(({a: 1}, 0)))
        phases.append((m, step, c % step))
    factors[k] = replace(factors[k], index=(*phase_forms, *phased), phases=tuple(phases))
    red = []
    for v in p.red_vars:
        red.extend(subst[v][:2] if v in subst else (v,))
    return replace(p, factors=tuple(factors), red_vars=tuple(red),
                   ranges=tuple((v, lo, hi) for v, (lo, hi) in ranges.items()))


# row widening ----------------------------------------------------------------------------


def index_range(form: AffineIndex, ranges: dict) -> tuple[int, int]:
    """Smallest and largest value of an affine index over the variables' ranges."""
    coeffs, k = form
    lo = hi = k
    for v, c in coeffs:
        a, b = c * ranges[v][0], c * ranges[v][1]
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def widening(p: Piece, ranges: dict, max_step: int = 4, waste: float = MAX_WIDENED_WASTE):
    """Row widening, for an im2col-style read ``X[..., y + r, x + s]`` (stride 1):
    give ``x`` the extent of the padded row width ``P`` so that ``(y, x)`` become one
    dimension of length ``ext(y) * P`` in every factor that reads them, and the copy that
    lays the operand out for BLAS moves long contiguous rows instead of rows of ``ext(x)``.
    The ``P - ext(x)`` extra columns read the next row and land in output columns that are
    dropped. (A reduced ``x``, a weight gradient's, is not widened: its other factor would
    need a widened copy too, and ``host/products._overlap_layout`` copies the input three
    times in rows of ``ext(x)``, where im2col copied it nine times.) An output column may
    step by up to ``max_step`` (``dX[.., 2y + a, 2x + b]``, a residue class of a stride-2
    input gradient: its product, written to a temporary anyway, loops over the two shifted
    taps instead of copying them im2col-style; ``benchmarks/bench_ab.py --knob widen --case
    conv2d_s2`` measures it). A row of ``n`` columns is widened by at most ``n // 8 + 2``
    columns and by at most ``waste`` of ``n`` (``Options.max_widened_waste``, a third:
    4x4 images' rows of 4 widened to 6 made a 3x3 convolution's products half as large
    again, more than the im2col copy saves; ResNet-18's ``layer3`` 3x3 convolution, 256
    channels, fwd+bwd 9.5 ms widened and 8.0 unwidened, 1 thread, one A/B run of
    ``bench_layers`` rows), and a row of fewer than ``MIN_WIDENED`` not at all: at 2 x 2,
    the widened row of 4 doubled a 3 x 3 convolution's product to save an im2col copy that
    is small beside it, and a weight gradient's 3 taps widened to 4 came out in a layout
    that cost a copy of the whole weight (ResNet-18's ``layer4`` weight gradient: 16 ms,
    3.3 ms unwidened, torch 10, 1 thread).
    Returns ``(x, P, ((factor position, dim), ...))`` for the pair that wastes least, or
    None."""
    best = None
    for f in p.factors:
        if len(f.index) < 2:
            continue
        last, before = f.index[-1][0], f.index[-2][0]
        for x, cx in last:
            for y, cy in before:
                if cx == 1 and cy == 1 and x is not y:
                    got = _widen_pair(p, ranges, x, y, max_step, waste)
                    if got is not None and (best is None or got[1] < best[1]):
                        best = got
    return best


def _widen_pair(p: Piece, ranges, x, y, max_step: int, waste: float):
    if x not in p.out_vars:
        return None
    dims, overlap = {}, False
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
    if not overlap:
        return None  # nothing is copied im2col-style: widening would only add work
    tail = [dict(c) for c, _ in p.out_index[-2:]]
    if (len(dims) != 1 or y not in p.out_vars or [list(c) for c in tail] != [[y], [x]]
            or not 1 <= tail[1][x] <= max_step or tail[0][y] < 1):
        return None
    width = max(hi - lo + 1 for lo, hi in (index_range(p.factors[k].index[m], ranges)
                                           for k, m in dims.items()))
    n = ranges[x][1] - ranges[x][0] + 1
    if (width <= n or n < MIN_WIDENED or width > n + n // 8 + 2  # (see the docstring)
            or width - n > waste * n):
        return None
    return x, width, tuple(dims.items())
