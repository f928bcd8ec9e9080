"""Row caches: an expensive value computed in a row reduction is stored for the row's
output loop instead of being computed twice.

A softmax, fused into one kernel, is per row ``i``

    s = sum_k e(k)      Y[i, j] = e(j) / s      for every j, with e(k) = exp(X[i, k] - m)

so each ``exp`` is evaluated twice (a softmax gradient that recomputes the forward, per
row ``s``, ``sum_k dY[i, k] e(k)`` and then ``e(j)`` again, likewise). When a reduction
``R`` over one axis ``k`` has the same extent as the innermost output axis ``j``, and a
sub-expression ``E(k)`` of its source that holds a transcendental op appears as ``E(j)``
in the output body, ``R``'s loop stores ``E(k)`` in a row buffer and the output loop
reads ``buffer[j]``. Several values of one reduction can be kept (softmax's ``dY e(k)``
and ``e(k)``): the largest first, then each part whose twin the output body still uses
outside the kept ones. The buffer lives in the block where ``R`` is computed (per
thread, inside the parallel loop), which encloses the output loop, and ``R`` is always
computed before that loop runs. The first buffer of the output's dtype is the output's own
row where that block knows it (``nest_build.NestBuilder._row_buffers``). Conditions, so that every
element is written before it is read: ``R`` depends on output variables only (not on
another reduction's), outside every guarded branch, and ``E`` depends on ``k`` and on
variables bound around ``R``.
"""

from __future__ import annotations

from ..ir.expr import Binary, Expr, Reduce, Select, Unary
from ..ir.traverse import children, free_vars, substitute, walk
from .nest_facts import eager

EXPENSIVE = {"exp", "log", "log1p", "expm1", "tanh", "sigmoid", "sin", "cos", "erf"}
MAX_ROW = 8192  # elements of one row buffer (on the stack)


def row_caches(body: Expr, axes, shape, buffers: int) -> list[tuple[Expr, Expr, Reduce]]:
    """``(E(k), E(j), R)`` triples for ``body`` with output ``axes`` (``j`` the last), at
    most ``buffers`` (``Options.row_cache_buffers``) twins kept."""
    if len(axes) < 2 or not 0 < shape[-1] <= MAX_ROW:
        return []
    j, n = axes[-1], shape[-1]
    guarded = _guarded(body)
    outputs = frozenset(axes)
    present = set(walk(body))
    found: dict = {}
    for r in (x for x in walk(body) if isinstance(x, Reduce)):
        if (len(r.axes) != 1 or r.axes[0].extent != n or r.axes[0].lo != 0 or r in guarded
                or not free_vars(r) <= outputs - {j}):
            continue
        k = r.axes[0]
        for e in walk(r.source):
            if e in found or k not in free_vars(e) or not _expensive(e):
                continue
            twin = substitute(e, {k: j})
            if twin in present:
                found[e] = (twin, r)
    # the largest first; a part of a kept value needs a buffer of its own only where the
    # output body uses it outside the kept values' twins (softmax's backward reads
    # dY e(j) and e(j) alone: both are kept, and e is evaluated once per element)
    pairs = sorted(((e, twin, r) for e, (twin, r) in found.items()),
                   key=lambda p: -len(set(walk(p[0]))))
    kept: set = set()  # the twins given a buffer
    for _, twin, _ in pairs:
        if len(kept) == buffers:
            break
        if twin not in kept and twin in _reached(body, kept):
            kept.add(twin)
    # every value of a kept twin writes its buffer: two sums fused into one loop evaluate
    # only one of their copies of E (the other's axis is renamed to the loop's)
    return [p for p in pairs if p[1] in kept]


def _reached(body: Expr, leaves: set) -> set:
    """The nodes of ``body`` reached without entering a node of ``leaves``."""
    out: set = set()
    todo = [body]
    while todo:
        e = todo.pop()
        if e in out:
            continue
        out.add(e)
        if e not in leaves:
            todo.extend(children(e))
    return out - leaves


def _expensive(e: Expr) -> bool:
    return any((isinstance(x, Unary) and x.op in EXPENSIVE)
               or (isinstance(x, Binary) and x.op == "pow") for x in walk(e))


def _guarded(body: Expr) -> set:
    """Nodes reached only through a select branch evaluated under its condition."""
    out: set = set()
    seen: set = set()

    def go(e: Expr, under: bool) -> None:
        if (e, under) in seen:
            return
        seen.add((e, under))
        if under:
            out.add(e)
        if isinstance(e, Select) and not (eager(e.a) and eager(e.b)):
            go(e.cond, under)
            go(e.a, True)
            go(e.b, True)
            return
        for c in children(e):
            go(c, under)

    go(body, False)
    reached_free = {e for (e, under) in seen if not under}
    return out - reached_free
