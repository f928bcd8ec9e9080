"""What the loop-nest pass (``nest_build.py``) asks of an expression before placing it.

``unshadow``         fresh axes for a reduction that rebinds a variable bound around it
``eager``            may be evaluated unguarded (no reduction, every read in bounds)
``reads_in_bounds``  every affine read stays in its tensor over its variables' ranges
``condition_bounds`` the integer expressions a condition bounds (a guarded gather's index)
``column_order``     a reduction along the outer dimension of contiguous reads
``regions``          ranges of an axis on which every guard on it is constant
``specialized``      the body on one such range, its guards folded
``work_per_point``   the parallel-work estimate of one output point
``stride_ordered``   each reduction's axes ordered by their strides, the longest outermost

These are facts of the expression, not of a target: a GPU target asks the same.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import dtype as dt
from ..ir.affine import inequality, linearize, single_bound
from ..ir.bounds import form_interval, interval, is_pure_index
from ..ir.expr import (
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    conjunction,
    select,
    split_conjunction,
)
from ..ir.traverse import (
    children,
    free_vars,
    substitute,
    transform,
    walk,
    with_children,
    with_fresh_axes,
)
from ..simplify.pipeline import merge_nested_sums
from .coalesce import INT_MAX
from .cost import reduction_width
from .residue import normalize


def unshadow(e: Expr, bound: frozenset) -> Expr:
    """``e`` with every reduction that rebinds a variable already bound around it (the
    same axis object reused by a nested reduction, which inlining produces) given fresh
    axes, so that each variable names one loop."""
    memo: dict = {}

    def go(x: Expr, bound: frozenset) -> Expr:
        key = (x, bound)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if isinstance(x, Reduce):
            if bound & frozenset(x.axes):
                x = with_fresh_axes(x)
            inner = bound | frozenset(x.axes)
            out = with_children(x, tuple(go(c, inner) for c in children(x)))
        elif isinstance(x, Var | Const):
            out = x
        else:
            out = with_children(x, tuple(go(c, bound) for c in children(x)))
        memo[key] = out
        return out

    return go(e, bound)


ORDERED_KINDS = ("sum", "prod", "max", "min")  # whose axes may be visited in any order


def stride_ordered(body: Expr) -> Expr:
    """``body`` with the axes of each sum, product, max or min over 2+ axes without a
    ``where`` in order of the longest stride they take in a read of its source, the
    longest outermost (stable), so that the innermost loop is the one that reads
    contiguously. A group norm's input gradient sums ``H[n, 2 g + rho, y, x]`` over
    ``(y, x, rho)`` (the residue ``rho`` of its scatter-to-gather comes last): over
    ``(rho, y, x)`` the inner loop is 56 contiguous floats, not 2 at a stride of 3136.
    A ``where`` whose every conjunct names at most one of the axes (a transposed
    convolution's weight gradient: each output axis bounded and its residue tested on its
    own) bounds each loop alike in any order, so its axes are ordered too: over
    ``(h, w)`` rather than ``(w, h)`` the inner loop of that gradient reads 136
    contiguous floats, not 101 at a stride of 272. (An argmax's ties, a custom
    combiner's order and a ``where`` coupling two axes, whose bounds then depend on the
    order, are left as they are.)"""
    def independent(e: Reduce) -> bool:
        own = frozenset(e.axes)
        return e.where is None or all(len(free_vars(c) & own) <= 1
                                      for c in split_conjunction(e.where))

    def reorder(e: Expr) -> Expr | None:
        if not (isinstance(e, Reduce) and len(e.axes) > 1
                and e.combiner.kind in ORDERED_KINDS and independent(e)):
            return None
        longest = dict.fromkeys(e.axes, 0)
        for x in walk(e.source):
            if not isinstance(x, Read):
                continue
            for m, index in enumerate(x.indices):
                coeffs, _ = linearize(index)
                step = math.prod(x.tensor.shape[m + 1:])
                for v, c in coeffs.items():
                    if v in longest:
                        longest[v] = max(longest[v], abs(c) * step)
        order = sorted(e.axes, key=lambda a: -longest[a])
        if order == list(e.axes):
            return None
        return Reduce(e.combiner, e.source, tuple(order), e.where, e.dtype)

    return transform(body, reorder)


def column_order(body: Expr, axes, shape) -> bool:
    """True for a sum/prod/max/min over the outer dimension of reads that are contiguous
    along the last output axis: the reduce loops then go outside it (``_column_nest``)."""
    if not (isinstance(body, Reduce) and body.combiner.kind in ("sum", "prod", "max", "min")
            and body.where is None and axes and shape[-1] >= 8 and eager(body.source)):
        return False
    last, inner = axes[-1], body.axes[-1]
    both = False  # the reads that vary along both decide (per-row statistics do not)
    for x in walk(body.source):
        if not isinstance(x, Read) or not x.indices:
            continue
        strides = {}
        for m, index in enumerate(x.indices):
            coeffs, _ = linearize(index)
            step = math.prod(x.tensor.shape[m + 1:])
            for v, c in coeffs.items():
                strides[v] = strides.get(v, 0) + c * step
        if strides.get(last) and strides.get(inner):
            if strides[last] != 1:
                return False
            both = True
    return both


def eager(e: Expr, axes: frozenset | None = None) -> bool:
    """True when ``e`` may be evaluated whatever guards it sits under: no reduction, and
    every read in bounds over the full ranges of its variables. Inside the loops of a
    reduction over ``axes`` (given), a reduction over none of them counts as a value: the loop
    nest computes it once outside those loops (``ExprLowering.place``). An adaptive max
    pool's tie count, ``sum_r [x(r) == max_k x(k)]``, then masks its window's edges in a
    vectorized loop rather than branching on them."""
    return (all(not isinstance(x, Reduce) or (axes is not None and not free_vars(x) & axes)
                for x in walk(e))
            and reads_in_bounds(e))


def reads_in_bounds(e: Expr) -> bool:
    for x in walk(e):
        if isinstance(x, Read):
            for index, dim in zip(x.indices, x.tensor.shape, strict=True):
                if not is_pure_index(index) or not index_in_bounds(index, dim):
                    return False
    return True


def index_in_bounds(index: Expr, n: int) -> bool:
    """Whether an index expression stays in ``[0, n)`` over its variables' ranges."""
    iv = interval(index)
    return iv is not None and iv[0] is not None and iv[1] is not None and 0 <= iv[0] \
        and iv[1] < n


def condition_bounds(cond: Expr) -> dict:
    """``{e: (lo, hi)}``: the integer expressions ``e`` that ``cond`` bounds, holding only
    where ``lo <= e <= hi`` (None: that side unbounded), read off its conjuncts ``k <= e``,
    ``e < k``, ``not (e < k)``, ... with ``k`` a constant. A bilinear sample reads
    ``x[iy, ix]`` under ``0 <= iy, iy <= h - 1, 0 <= ix, ix <= w - 1``: its data-dependent
    indices are in bounds wherever the read is taken."""
    found: dict = {}
    for c in split_conjunction(cond):
        negated = isinstance(c, Unary) and c.op == "not"
        test = c.a if negated else c
        if not (isinstance(test, Binary) and test.op in ("lt", "le")):
            continue
        strict = test.op == "lt"
        for k, e, e_above in ((test.a, test.b, True), (test.b, test.a, False)):
            if not isinstance(k, Const) or isinstance(e, Const) or not dt.is_int(e.dtype):
                continue
            e, k = widened(e), int(k.value)
            # e_above: k < e (k <= e); negated it is e <= k (e < k); likewise below
            above = e_above != negated
            step = (1 if strict else 0) if not negated else (0 if strict else 1)
            lo, hi = found.get(e, (None, None))
            if above:
                bound = k + step
                lo = bound if lo is None else max(lo, bound)
            else:
                bound = k - step
                hi = bound if hi is None else min(hi, bound)
            found[e] = (lo, hi)
    return found


def widened(e: Expr) -> Expr:
    """``e`` without the casts that widen an integer (``int64(i)`` of an int32 ``i``): the
    same value."""
    while (isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.a.dtype)
           and np.dtype(e.dtype).itemsize >= np.dtype(e.a.dtype).itemsize):
        e = e.a
    return e


def regions(body: Expr, v: Var, n: int, max_regions: int,
            window: int = 0) -> list[tuple[int, int]] | None:
    """Ranges ``[lo, hi)`` covering ``[0, n)`` of the variable ``v`` (an output axis) on
    which every ``select`` condition that bounds ``v`` alone is constant; None when there
    is only one, or ``max_regions`` or more (``Options.max_regions``). A
    concatenation's gradient ``select(j < 256, dA[i, j], 0) + select(256 <= j, dB[i, j -
    256], 0)`` then runs as one branch-free loop per part.

    With ``window`` (``Options.unroll``), also where a reduction of at most that many
    points stops being cut by its ``where``: a padded 3x3 window ``sum_{a, b} X[i + a -
    1, j + b - 1] W[a, b] where 0 <= j + b - 1 < n`` holds for every ``b`` in ``[0, 3)``
    exactly on ``1 <= j < n - 1``, so that interior has constant bounds and is unrolled,
    and its loop over ``j`` vectorizes (a depthwise convolution, a pooling). A window
    of up to ``WINDOW_SPAN`` times that many points is cut by each of its conditions
    whose own axes hold at most ``window`` points (a 3x3x3 pooling's bounds on its
    last axis: constant on the interior, where that axis's loop is unrolled).

    Where ``v`` is read under a constant ``//`` or ``%`` (``_quotient_cuts``), also at
    each block's start, and then within each block where a guard of the body with the
    quotient folded changes (an adaptive pooling's gradient: the bins over 56 columns
    with 5 outputs start every 11 and overlap by one, so a block is its first column,
    in two bins, and the rest); up to ``BLOCKED_REGIONS`` times ``max_regions`` ranges
    there, else the guards' ranges alone."""
    cuts, limit = _guard_cuts(body, v, 0, n, window), max_regions
    if quotients := _quotient_starts(body, v, n, max_regions):
        blocked = cuts | quotients
        edges = [0, *sorted(quotients), n]
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            w, part = specialized(body, v, lo, hi)
            blocked |= _guard_cuts(part, w, lo, hi, window)
        if len(blocked) < BLOCKED_REGIONS * max_regions:  # (else the guards' ranges alone)
            cuts, limit = blocked, BLOCKED_REGIONS * max_regions
    if not cuts or len(cuts) >= limit:
        return None
    edges = [0, *sorted(cuts), n]
    return list(zip(edges[:-1], edges[1:], strict=True))


def region_limit(body: Expr, v: Var, n: int, max_regions: int) -> int:
    """How many ranges ``regions`` may split ``v`` into (one more than its cuts):
    ``max_regions``, ``BLOCKED_REGIONS`` times that where ``v`` is read under a ``//`` or
    ``%``."""
    return max_regions * (BLOCKED_REGIONS if _quotient_starts(body, v, n, max_regions) else 1)


def _quotient_starts(body: Expr, v: Var, n: int, max_regions: int) -> set[int]:
    starts: set[int] = set()
    for x in walk(body):
        starts.update(_quotient_cuts(x, v, n, BLOCKED_REGIONS * max_regions) or ())
    return starts


def _guard_cuts(body: Expr, v: Var, lo: int, hi: int, window: int) -> set[int]:
    """The values in ``(lo, hi)`` where a guard of ``body`` on ``v`` changes (``regions``)."""
    cuts = set()
    for x in walk(body):
        conds = ()
        if isinstance(x, Select):
            conds = [(c, None) for c in split_conjunction(x.cond)]
        elif (window and isinstance(x, Reduce) and x.where is not None
              and math.prod(a.extent for a in x.axes) <= WINDOW_SPAN * window):
            conds = [(c, x.axes) for c in split_conjunction(x.where)  # (a small window's)
                     if math.prod(a.extent for a in x.axes if a in free_vars(c)) <= window]
        for c, axes in conds:
            if axes is None and (point := _single_point(c, v)) is not None:
                cuts.update(b for b in (point, point + 1) if lo < b < hi)  # (its own range)
                continue
            bound = _single_bound(c, v) if axes is None else _window_bound(c, v, axes)
            if bound is not None and lo < bound < hi:
                cuts.add(bound)
    return cuts


BLOCKED_REGIONS = 4  # times Options.max_regions ranges an axis read under a quotient may have
WINDOW_SPAN = 4  # a window of up to this many times Options.unroll points (3x3x3) is cut
MIN_BLOCK = 4  # points of ``v`` in one block of a quotient that ``regions`` cuts at


def _quotient_cuts(x: Expr, v: Var, n: int, limit: int) -> list[int] | None:
    """Where ``x``, a ``(m v + k) // S`` or ``% S`` of ``v`` alone (``m != 0``), changes
    block along ``[0, n)``; None past ``limit`` of them. On each range between them the
    quotient is one constant and the remainder ``m v + k - S b`` affine (``specialized``
    folds both): an adaptive pooling's gradient reads its bins' values at ``[j // 11]``,
    unchanged over 11 columns; where ``m >= S`` each value may start a block (its
    forward's bins start at ``(56 i) // 5``). Blocks of fewer than ``MIN_BLOCK`` points
    are not cut (a stride-2 convolution's gradient reads ``[(j + 1) // 2 - t]``: regions
    of 2 points would only cost)."""
    if not (isinstance(x, Binary) and x.op in ("floordiv", "floormod")
            and isinstance(x.b, Const) and dt.is_int(x.b.dtype) and int(x.b.value) > 1):
        return None
    coeffs, k = linearize(x.a)
    m, size = coeffs.get(v, 0), int(x.b.value)
    if list(coeffs) != [v] or m == 0 or abs(m) < size < MIN_BLOCK * abs(m):
        return None  # (blocks of 2 or 3 points: a strided conv's gradient, unsplit)
    if m > 0:  # the blocks started in (0, n): at ceil((S b - k) / m)
        first, last = k // size + 1, (m * (n - 1) + k) // size
        starts = lambda b: -((k - size * b) // m)  # noqa: E731
    else:  # falling (a roll's gradient, ``(k - v) % S``): below S b from (k - S b) // |m| + 1
        first, last = (m * (n - 1) + k) // size + 1, k // size
        starts = lambda b: (k - size * b) // -m + 1  # noqa: E731
    if last - first + 1 > limit * max(1, abs(m) // size + 1):
        return None  # (more blocks than ``|m| // size + 1`` can start at any one value)
    made = sorted({starts(b) for b in range(first, last + 1)})
    return made if len(made) <= limit else None


def _single_bound(c: Expr, v: Var) -> int | None:
    """The first value where the truth of ``c`` changes along ``v``, when ``c`` is an
    inequality in ``v`` alone, ``m v + k >= 0``: it holds from ``ceil(-k / m)`` on
    (``m > 0``) or up to ``floor(k / -m)``."""
    bound = single_bound(c)
    if bound is None or bound[0] is not v:
        return None
    _, m, k = bound
    return _turn(m, k)


def _single_point(c: Expr, v: Var) -> int | None:
    """The one value of ``v`` where ``c`` holds, when ``c`` is ``m v + k == 0`` over
    ``v`` alone (a replicate pad's gradient: ``select(j == 0, ...)`` for the edge)."""
    if not (isinstance(c, Binary) and c.op == "eq" and dt.is_int(c.a.dtype)):
        return None
    coeffs, k = linearize(c.a - c.b)
    if list(coeffs) != [v] or k % coeffs[v]:
        return None
    return -k // coeffs[v]


def _turn(m: int, k: int) -> int:
    """Where ``m v + k >= 0`` starts (``m > 0``: ``ceil(-k / m)``) or stops (``m < 0``:
    one past ``floor(k / -m)``) holding along ``v``."""
    return -(k // m) if m > 0 else k // -m + 1


def _window_bound(c: Expr, v: Var, axes) -> int | None:
    """The first value where ``c`` (``m v + sum_a c_a a + k >= 0`` over ``v`` and the
    reduce ``axes`` only) starts or stops holding for every point of the axes: ``m v +
    k + min_a sum c_a a >= 0``, a bound in ``v`` alone (``_single_bound``'s)."""
    form = inequality(c)
    if form is None or form[0].get(v, 0) == 0:
        return None
    coeffs, k = form
    rest = {a: m for a, m in coeffs.items() if a is not v}
    if any(a not in axes for a in rest):
        return None
    low = form_interval(rest, 0)
    if low is None or low[0] is None:
        return None
    return _turn(coeffs[v], k + low[0])


def specialized(body: Expr, v: Var, lo: int, hi: int,
                w: Var | None = None) -> tuple[Var, Expr]:
    """A variable ranging over ``[lo, hi)`` (``w``, or a new one) and ``body`` with it
    for ``v``, every ``select`` condition that is constant on that range folded away (and
    the zeros of the branches dropped; a sum of a sum then becomes one sum over both axes, which a
    column-order nest takes), and every conjunct of a reduction's ``where`` that holds on
    all of it dropped (a bias gradient of concatenated parts, each a sum ``where 0 <= j -
    512``: with none left it runs in column order)."""
    w = Var.fresh(v.name, lo, hi - lo) if w is None else w

    def fold(e: Expr) -> Expr | None:
        if isinstance(e, Reduce) and e.where is not None:  # (a region's where: no test)
            kept = [c for c in split_conjunction(e.where) if _constant_truth(c) is not True]
            if len(kept) < len(split_conjunction(e.where)):
                return Reduce(e.combiner, e.source, e.axes, conjunction(kept) if kept else None,
                              e.dtype)
            return None
        if isinstance(e, Binary) and e.op == "add":  # a folded branch's zero
            if _is_zero(e.a) and e.b.dtype == e.dtype:
                return e.b
            if _is_zero(e.b) and e.a.dtype == e.dtype:
                return e.a
        if not isinstance(e, Select):
            return None
        kept = []
        for c in split_conjunction(e.cond):
            truth = _constant_truth(c)
            if truth is False:
                return e.b
            if truth is None:
                kept.append(c)
        if not kept:
            return e.a
        return None if len(kept) == len(split_conjunction(e.cond)) else select(
            conjunction(kept), e.a, e.b)

    part = transform(normalize(substitute(body, {v: w})), fold)
    merged = merge_nested_sums(part)
    return w, part if merged is None else merged


def _constant_truth(c: Expr) -> bool | None:
    if not (isinstance(c, Binary) and c.op in ("lt", "le", "eq", "ne")
            and c.a.dtype.startswith("int")):
        return None
    iv = interval(c.b - c.a)
    if iv is None or iv[0] is None or iv[1] is None:
        return None
    if c.op in ("eq", "ne"):  # equal exactly when the difference is 0 throughout
        if iv[0] == iv[1] == 0 or iv[0] > 0 or iv[1] < 0:
            return (iv[0] == iv[1] == 0) == (c.op == "eq")
        return None
    need = 1 if c.op == "lt" else 0
    if iv[0] >= need:
        return True
    if iv[1] < need:
        return False
    return None


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.dtype != "bool" and e.value == 0


LIBRARY_CALLS = frozenset({"exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "erf",
                           "sigmoid"})  # unary ops that are a math library's calls
TRANSCENDENTAL_COST = 8  # a library call (exp, tanh, ...) weighs this many additions


def work_per_point(body: Expr) -> int:
    """The parallel-work estimate of one output point: its widest reduction, weighted by
    the transcendental functions in the body (each the cost of ~``TRANSCENDENTAL_COST``
    additions: an LSTM step's gates are worth two threads at 8K points)."""
    calls = sum(1 for x in walk(body) if isinstance(x, Unary) and x.op in LIBRARY_CALLS)
    return reduction_width(body) * (1 + TRANSCENDENTAL_COST * calls)


def flattened(body: Expr, a: Var, b: Var) -> tuple[Expr, Var] | None:
    """``(body over m, m)`` where the body of two neighbouring output axes ``a``, ``b``
    (``b`` the last, ``n_b`` points) uses them only together, as ``c (n_b a + b)`` in its
    integer affine parts, and at least once under a ``//`` or ``%`` (a roll of the
    flattened array read in its shape: ``X[(n_b a + b + s) % L]``): the point ``(a, b)``
    is ``m = n_b a + b`` of the row-major output, so ``a = 0, b = m`` over ``[0, n_a
    n_b)`` gives the same values at the same addresses, and the loop over ``m`` can be
    cut where the ``%`` wraps (``regions``), where one row is the most that ``(a, b)``
    could cut. None where either is used on its own (a bias ``B[a]``, a guard on ``b``),
    or with no ``//`` or ``%`` (``coalesce.py`` merges such loops once built)."""
    nb = b.extent
    if a.lo or b.lo or a.extent * nb > INT_MAX:
        return None
    memo: dict = {}
    divided = []

    def flat(e: Expr) -> bool:
        if e in memo:
            return memo[e]
        if e is a or e is b:
            found = False
        elif dt.is_int(e.dtype) and not isinstance(e, Const):
            coeffs, _ = linearize(e)
            atoms = [x for x in coeffs if x is not a and x is not b]
            if coeffs.get(a, 0) != nb * coeffs.get(b, 0):
                found = False
            elif atoms == [e]:  # (not affine itself: its operands are)
                found = all(flat(c) for c in children(e))
                if (isinstance(e, Binary) and e.op in ("floordiv", "floormod")
                        and {a, b} & free_vars(e)):
                    divided.append(e)
            else:
                found = all(flat(x) for x in atoms)
        else:
            found = all(flat(c) for c in children(e))
        memo[e] = found
        return found

    if not flat(body) or not divided:
        return None
    m = Var.fresh(b.name, 0, a.extent * nb)
    return substitute(body, {a: Const(0, a.dtype), b: m}), m
