"""Reductions of a loop nest: their loops, bounds, guards and shared passes.

A reduction placed in a block opens one loop per axis there, with its accumulator
declared before. A conjunct of the ``where`` that is affine in one reduce axis with
coefficient ``c`` (``c k + R >= 0`` or ``== 0``, ``R`` over variables bound outside that
loop) becomes a bound of its loop (``k >= ceil(-R / c)`` for ``c > 0``,
``k <= floor(R / -c)`` for ``c < 0``, ``k = -c R`` for ``c = +-1`` and ``==``): the
guards of a gather-form convolution or pooling backward cost nothing per element. So
does ``k == v`` for an integer value ``v`` the loop does not change, read from data (a
class index picked by ``sum_c [c = t[n]] x[n, c]``): the loop visits ``max(lo, v) <= k
< min(hi, v + 1)``, one point or none (``Options.value_bounds``). A sum's last axes
that neither its source nor a conjunct left over uses are no loops: ``sum_{k in [lo,
hi)} x = max(0, hi - lo) x`` (``counted_axes``, ``Options.count_sums``). The
other conjuncts test each point: branch-free (``Accumulate.mask``) when the source is
safe to evaluate anyway, else in a ``Guard`` at the loop of the last axis they use.

A small window (at most ``Options.unroll`` points, constant bounds: a pooling's 2x2, a
3x3 stencil) is unrolled, so that the loop around it, over outputs, vectorizes instead.
A conjunct on one axis alone (``2 t + 1 < 3``: a residue class's taps) is a constant
bound; a conjunct left over is a mask there, not a guard (a max pool gradient's tie
test ``X[p] == m``). A padded window's bounds are constant inside the borders: the
loop nest runs that interior as a region of its own (``nest_facts.regions``).

A 0-d kernel's sum (a loss's mean, a sum over all dims) shares its first loop out over
threads, each with its own accumulators, added up in thread order (``Loop.partials``).

Sibling reductions (the same ranges, no ``where``, placed in the same block, independent
of each other) share one loop: a layer-norm backward reads each row once for its three
sums. The innermost loop of float sums and products, and of max/min, vectorizes with the
accumulators carried as reductions (``Loop.simd_reductions``), which keeps the order of a
float sum a target may reassociate only when told (no ``-ffast-math``), where its axis
has at least ``SIMD_MIN_EXTENT`` points. A float32 sum over short rows, inside another of
its loops, runs in masked vectors whose lanes are summed once, after all its loops
(``nest_lanes.py``, ``Options.lanes``).
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir.affine import linearize
from ..ir.expr import Binary, Cast, Expr, Reduce, Unary, Var
from ..ir.traverse import free_vars, substitute, walk
from ..ir.verify import split_conjunction
from . import nest_lanes
from .coalesce import mentions
from .nest import (
    Accumulate,
    Accumulator,
    ArgAccumulator,
    Block,
    FoldLanes,
    Guard,
    LaneAccumulator,
    Let,
    Loop,
    RestoreNaN,
)
from .nest_facts import eager, reads_in_bounds, work_per_point
from .nest_forms import (
    Affine,
    Apply,
    CeilDiv,
    Count,
    FloorDiv,
    IMax,
    IMin,
    Lit,
    Negated,
    Next,
    Ref,
    Scaled,
)
from .nest_values import ExprLowering
from .strides import gathers_along

FUSABLE = ("sum", "prod", "max", "min")  # reductions that may share a loop
SIMD_KINDS = ("sum", "prod", "max", "min")  # carried as reductions by a vectorized loop
# a reduction loop of fewer points stays scalar: its vector loop's set-up and tail cost
# more than they save (a depthwise 3x3 weight gradient of 7x7 images, rows of at most 7:
# 2.3 ms vectorized, 1.1 ms scalar, 384 channels, N=8, 1 thread)
SIMD_MIN_EXTENT = 8


def nan_flagged(e: Reduce) -> bool:
    """A float max/min: NumPy's propagates NaN, kept as a flag beside the accumulator."""
    return e.combiner.kind in ("max", "min") and dt.is_float(e.dtype)


class ReduceLowering(ExprLowering):
    """``ExprLowering`` with its reductions."""

    def reduce(self, e: Reduce) -> Ref:
        kind = e.combiner.kind
        here = self.stack[-1]
        acc = self.fresh("acc")
        shadowed = {a: self.vars.get(a) for a in e.axes}  # a nested reduction may reuse an axis
        names = {a: self.bind(a, "r") for a in e.axes}
        bounds, rest, points = self.loop_bounds(e, names)
        if kind in ("argmax", "argmin"):
            start = e.axes[0].lo if len(e.axes) == 1 else 0
            here.items.append(ArgAccumulator(acc, e.dtype, e.source.dtype, start))
        else:
            here.items.append(accumulator(e, acc))
        siblings = self.siblings(e)
        self.emitting.update([e, *siblings])  # not a sibling of anything they contain
        for r in siblings:
            siblings[r] = self.fresh("acc")
            here.items.append(accumulator(r, siblings[r]))
        deepest = {}  # conjunct -> position of the last own axis it uses (-1: none)
        for c in rest:
            used = [k for k, a in enumerate(e.axes) if a in free_vars(c)]
            deepest[c] = used[-1] if used else -1
        counted = (counted_axes(e, bounds, rest, names) if self.options.count_sums
                   and not siblings and not self.threaded(e) else ())
        looped = e.axes[:len(e.axes) - len(counted)]
        last = len(looped) - 1
        own = frozenset(e.axes)
        predicate = (kind in ("sum", "prod", "max", "min") and eager(e.source, own)
                     and all(eager(c, own) for c in rest))
        opened: list[Block] = []

        def guard(conds):
            if not conds:
                return
            block = Guard(conds=tuple(self.value(c) for c in conds))
            self.stack.append(block)
            opened.append(block)

        guard([c for c in rest if deepest[c] == -1])
        # constant bounds over at most ``unroll`` points, every other conjunct a mask
        unroll = (bool(looped) and all(predicate and deepest[c] == last for c in rest)
                  and all(isinstance(b, int) for a in looped for b in bounds[a])
                  and math.prod(max(0, bounds[a][1] - bounds[a][0]) for a in looped)
                  <= self.options.unroll)
        partials = () if unroll or not self.threaded(e) else tuple(
            (name, r.dtype, accumulator(r, name).identity, r.combiner.kind, nan_flagged(r))
            for r, name in [(e, acc), *siblings.items()])
        for k, a in enumerate(looped):
            lo, hi = bounds[a]
            block = Loop(frozenset((a,)), loop=True, unrolled=unroll, var=names[a], lo=lo,
                         hi=hi, role="reduce", unroll=self.options.unroll if unroll else 0,
                         partials=partials if k == 0 else ())
            self.stack.append(block)
            opened.append(block)
            if k < last or not predicate:
                guard([c for c in rest if deepest[c] == k])
        inner = self.stack[-1]
        src = self.value(e.source)
        if counted:
            src = self.times_count(src, e.dtype, [bounds[a] for a in counted])
        mask = (tuple(self.value(c) for c in rest if deepest[c] == last)
                if predicate and looped else ())
        inner.items.append(accumulate(e, Ref(acc), src, mask, names, flag=True))
        for r, r_acc in siblings.items():
            r_src = self.value(substitute(r.source, dict(zip(r.axes, e.axes, strict=True))))
            inner.items.append(accumulate(r, Ref(r_acc), r_src, (), names, flag=True))
        innermost_loop = opened[-1] if opened and opened[-1].loop else None
        for block in reversed(opened):
            self.stack.pop()
            self.stack[-1].items.append(block)
        accumulators = [(e, acc), *((r, a) for r, a in siblings.items())]
        for r, r_acc in accumulators:
            if nan_flagged(r):
                here.items.append(RestoreNaN(r_acc))
        for r, r_acc in siblings.items():
            self.memo[r] = (Ref(r_acc), here)
        if (innermost_loop is not None and not unroll and not innermost_loop.has_blocks()
                and not innermost_loop.checks() and looped[-1] not in points
                and not gathers_along(e.source, looped[-1])
                and looped[-1].extent >= SIMD_MIN_EXTENT
                and all(r.combiner.kind in SIMD_KINDS and (dt.is_float(r.dtype) or r.combiner.kind
                                                           in ("max", "min"))
                        for r, _ in accumulators)):
            innermost_loop.vectorize = True
            innermost_loop.simd_reductions = tuple(
                (r.combiner.kind, a, nan_flagged(r)) for r, a in accumulators)
        if self.options.lanes and not partials and looped and nest_lanes.wanted(
                innermost_loop, looped[-1].extent,
                [(r.combiner.kind, r.dtype) for r, _ in accumulators],
                sum(b.loop for b in opened) > 1):
            innermost_loop.lanes = nest_lanes.LANES
            names = {a for _, a in accumulators}
            at = max(k for k, item in enumerate(here.items)
                     if isinstance(item, Accumulator) and item.name in names)
            lanes = [(r.combiner.kind, a, nan_flagged(r)) for r, a in accumulators]
            here.items[at + 1:at + 1] = [LaneAccumulator(a, kind, nan) for kind, a, nan in lanes]
            # (before a max's RestoreNaN: its lanes' NaN raise the flag)
            restore = [k for k, item in enumerate(here.items)
                       if isinstance(item, RestoreNaN) and item.name in names]
            at = restore[0] if restore else len(here.items)
            here.items[at:at] = [FoldLanes(a, kind, nan) for kind, a, nan in lanes]
        for a, old in shadowed.items():
            if old is not None:
                self.vars[a] = old
        self.emitting.difference_update([e, *siblings])
        return Ref(acc)

    def times_count(self, src, dtype: str, ranges: list):
        """``src`` times the points of ``ranges`` (``counted_axes``), computed here."""
        count = None
        for lo, hi in ranges:
            if isinstance(lo, int) and isinstance(hi, int):
                n = Lit(max(0, hi - lo), "int64")
            else:
                n = Ref(self.fresh("n"))
                self.stack[-1].items.append(Let(n.name, "int64", Count(lo, hi)))
            if count is not None:
                product = Ref(self.fresh("n"))
                self.stack[-1].items.append(
                    Let(product.name, "int64", Apply("mul", (count, n), "int64", "int64")))
                n = product
            count = n
        if count == Lit(1, "int64"):
            return src
        scale, scaled = Ref(self.fresh()), Ref(self.fresh())
        here = self.stack[-1].items
        here.append(Let(scale.name, dtype, Apply("cast", (count,), dtype, "int64")))
        here.append(Let(scaled.name, dtype, Apply("mul", (src, scale), dtype, dtype)))
        return scaled

    def threaded(self, e: Reduce) -> bool:
        """Whether ``e``'s first loop is shared out over threads (``Loop.partials``): a
        sum, product, max or min over ``Options.parallel_work`` or more (as an output
        loop is) in a 0-d kernel, outside every loop (a loss's mean, a sum over all
        dims), which would otherwise run on one thread."""
        return (not self.tensor.shape and e.combiner.kind in FUSABLE and e.axes[0].extent > 1
                and not any(b.loop for b in self.stack)
                and work_per_point(e) >= self.options.parallel_work)

    def siblings(self, e: Reduce) -> dict:
        """Other reductions of the body over the same ranges, with no ``where``, placed in
        the same block, independent of ``e`` and safe to evaluate unguarded: computed in
        ``e``'s loop (one pass over a layer-norm row instead of three). Keys only; the
        caller fills in their accumulators."""
        if e.where is not None or e.combiner.kind not in FUSABLE:
            return {}
        here = len(self.stack) - 1
        bound = frozenset().union(*(b.binds for b in self.stack))
        spans = [(a.lo, a.extent) for a in e.axes]
        inside_e = set(walk(e))
        found: dict = {}
        for r in self.reductions:
            if (r is e or r in found or r in self.emitting or r.where is not None
                    or r.combiner.kind not in FUSABLE
                    or [(a.lo, a.extent) for a in r.axes] != spans or r in inside_e):
                continue
            hit = self.memo.get(r)
            if hit is not None and any(hit[1] is b for b in self.stack):
                continue
            if not free_vars(r) <= bound or self.place(r) != here or not reads_in_bounds(r):
                continue
            nodes = walk(r)  # e's axes may name r's own, not one bound inside r
            if e in nodes or any(isinstance(x, Var) and x in e.axes and x not in r.axes
                                 for x in nodes):
                continue
            found[r] = None
        return found

    def loop_bounds(self, e: Reduce, names: dict):
        """Per axis ``(lo, hi)`` (half-open; ints or ``nest`` integer forms), the
        conjuncts left over, and the axes bounded to one value's point (whose loop, of one
        iteration or none, is not vectorized)."""
        bounds = {a: [a.lo, a.lo + a.extent] for a in e.axes}
        rest, points = [], set()
        conds = split_conjunction(e.where) if e.where is not None else []
        for c in conds:
            found = affine_bound(c)
            if found is None:
                point = self.value_point(e, c) if self.options.value_bounds else None
                if point is None:
                    rest.append(c)
                else:  # a == x: the one point x, if it lies in a's range
                    a, x = point
                    lo, hi = bounds[a]
                    bounds[a] = [IMax(lo, x), IMin(hi, Next(x))]
                    points.add(a)
                continue
            sides = []
            for coeffs, k, kind in found:
                own = [a for a in coeffs if a in bounds]
                if not own:
                    sides = None
                    break
                a = max(own, key=e.axes.index)  # the innermost own axis it uses
                others = {v: c for v, c in coeffs.items() if v is not a}
                if any(v in bounds and e.axes.index(v) > e.axes.index(a) for v in others) or \
                        not all(v in bounds or self._bound(v) for v in others):
                    sides = None
                    break
                if kind == "eq" and abs(coeffs[a]) != 1:
                    sides = None
                    break
                sides.append((a, coeffs[a], others, k, kind))
            if sides is None:
                rest.append(c)
                continue
            for a, coef, others, k, kind in sides:
                lo, hi = bounds[a]
                if not others and kind != "eq" and isinstance(lo, int) and isinstance(hi, int):
                    # coef * a + k >= 0 alone: a constant bound (a residue class's taps)
                    if coef > 0:
                        bounds[a] = [max(lo, -(k // coef)), hi]
                    else:
                        bounds[a] = [lo, min(hi, k // -coef + 1)]
                    continue
                r = Affine(tuple((c, names.get(v) or self.var(v)) for v, c in others.items()), k)
                if kind == "eq":  # coef * a + R == 0, coef = +-1
                    point = Scaled(-coef, r)
                    bounds[a] = [IMax(lo, point), IMin(hi, Next(point))]
                elif coef > 0:  # a >= ceil(-R / coef)
                    bounds[a] = [IMax(lo, CeilDiv(Negated(r), coef)), hi]
                else:  # a <= floor(R / -coef)
                    bounds[a] = [lo, IMin(hi, Next(FloorDiv(r, -coef)))]
        return {a: tuple(b) for a, b in bounds.items()}, rest, points

    def value_point(self, e: Reduce, c: Expr):
        """``(a, x)`` for a conjunct ``a == v`` (either side, ``a`` an axis of ``e``, maybe
        cast) with ``v`` an integer value that no axis of ``e`` changes and whose reads
        stay in bounds (``x``: its operand, computed before the loops): a class index
        ``sum_c [c = t[n]] x[n, c]`` visits the point ``c = t[n]``, not the ``C`` classes.
        None otherwise."""
        if not (isinstance(c, Binary) and c.op == "eq"):
            return None
        for axis, v in ((c.a, c.b), (c.b, c.a)):
            while isinstance(axis, Cast) and dt.is_int(axis.dtype):
                axis = axis.a
            if (isinstance(axis, Var) and axis in e.axes and dt.is_int(v.dtype)
                    and not free_vars(v) & frozenset(e.axes) and reads_in_bounds(v)):
                x = self.value(v)
                if isinstance(x, Lit):
                    return axis, int(x.value)
                return axis, Affine(((1, x.name),), 0)
        return None

    def _bound(self, v) -> bool:
        return isinstance(v, Var) and v in self.vars and any(v in b.binds for b in self.stack)


def counted_axes(e: Reduce, bounds: dict, rest: list, names: dict) -> tuple:
    """The last axes of a sum that neither its source nor a conjunct left over uses, and
    that no later axis's bounds name: the sum over them is the source times their points,
    ``sum_{k in [lo, hi)} x = max(0, hi - lo) x``, no loop (an adaptive pool's gradient:
    the offset in a window whose start is an input point's, one point or none). Not a
    bool's sum (an or), nor a ``prod`` (``x^n``)."""
    if e.combiner.kind != "sum" or e.dtype == "bool":
        return ()
    used = free_vars(e.source).union(*(free_vars(c) for c in rest))
    counted: list = []
    for a in reversed(e.axes):
        later = [bounds[b] for b in counted]
        if a in used or mentions(later, (names[a],)):
            break
        counted.insert(0, a)
    return tuple(counted)


def accumulator(e: Reduce, name: str) -> Accumulator:
    return Accumulator(name, e.dtype, Lit(e.combiner.identity_value(e.dtype), e.dtype),
                       nan_flagged(e))


def accumulate(e: Reduce, acc, src, mask: tuple, names: dict, flag: bool = False) -> Accumulate:
    """The step folding ``src`` into ``acc`` where ``mask`` holds. ``flag``: a float
    max/min keeps a NaN flag beside a plain compare (``Accumulate.flag``)."""
    kind = e.combiner.kind
    if kind not in ("sum", "prod", "max", "min", "argmax", "argmin", "custom"):
        raise NotImplementedError(f"reduction {kind} in the loop-nest tree")
    position = tuple((names[a], a.extent, a.lo) for a in e.axes) if kind in (
        "argmax", "argmin") else ()
    return Accumulate(kind, acc, src, e.dtype, mask, flag and nan_flagged(e), position,
                      e.combiner if kind == "custom" else None)


def affine_bound(c: Expr):
    """``c`` as ``[(coeffs, k, kind)]`` with ``sum coeffs * v + k >= 0`` (kind "ge") or
    ``== 0`` (kind "eq", one coefficient +-1 on some variable); None otherwise."""
    negated = isinstance(c, Unary) and c.op == "not" and isinstance(c.a, Binary)
    if negated and c.a.op in ("lt", "le"):
        a, b = c.a.a, c.a.b  # not (a < b): a - b >= 0; not (a <= b): a - b - 1 >= 0
        form = _difference(a, b, 0 if c.a.op == "lt" else -1)
        return None if form is None else [(*form, "ge")]
    if not isinstance(c, Binary) or c.op not in ("lt", "le", "eq"):
        return None
    if c.op == "eq":
        form = _difference(c.a, c.b, 0)
        if form is None or not any(abs(x) == 1 for x in form[0].values()):
            return None
        return [(*form, "eq")] if len(form[0]) >= 1 else None
    form = _difference(c.b, c.a, -1 if c.op == "lt" else 0)  # a < b: b - a - 1 >= 0
    return None if form is None else [(*form, "ge")]


def _difference(a: Expr, b: Expr, k: int):
    if not (dt.is_int(a.dtype) and dt.is_int(b.dtype)):
        return None
    ca, ka = linearize(a)
    cb, kb = linearize(b)
    coeffs = dict(ca)
    for atom, c in cb.items():
        coeffs[atom] = coeffs.get(atom, 0) - c
    coeffs = {v: c for v, c in coeffs.items() if c}
    if not coeffs or not all(isinstance(v, Var) for v in coeffs):
        return None
    return coeffs, ka - kb + k
