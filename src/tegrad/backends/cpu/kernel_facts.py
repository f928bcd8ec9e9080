"""What the code generator asks of an expression before emitting it.

``unshadow``      fresh axes for a reduction that rebinds a variable bound around it
``eager``         may be evaluated unguarded (no reduction, every read in bounds)
``column_order``  a reduction along the outer dimension of contiguous reads
``reduction_width``  the widest reduction, for the parallel-work estimate
"""

from __future__ import annotations

import math

from ...ir.affine import linearize
from ...ir.bounds import interval, is_pure_index
from ...ir.expr import Const, Expr, Read, Reduce, Var
from ...ir.tensor import Compute
from ...ir.traverse import children, walk, with_children, with_fresh_axes


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


def eager(e: Expr) -> bool:
    """True when ``e`` may be evaluated whatever guards it sits under: no reduction, and
    every read in bounds over the full ranges of its variables."""
    return not any(isinstance(x, Reduce) for x in walk(e)) and reads_in_bounds(e)


def reads_in_bounds(e: Expr) -> bool:
    for x in walk(e):
        if isinstance(x, Read):
            for index, dim in zip(x.indices, x.tensor.shape, strict=True):
                if not is_pure_index(index):
                    return False
                iv = interval(index)
                if iv is None or iv[0] is None or iv[1] is None or iv[0] < 0 or iv[1] >= dim:
                    return False
    return True


def reduction_width(t: Compute) -> int:
    best = 1
    for x in walk(t.body):
        if isinstance(x, Reduce):
            best = max(best, math.prod(a.extent for a in x.axes))
    return best
