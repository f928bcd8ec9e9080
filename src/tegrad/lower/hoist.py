"""Values of an unrolled loop that the vectorized loop around it does not change, computed
once before that loop (a pass over a built nest).

    for i (vectorized):                     h[r] = v(r) for r in [lo, hi)
      for r in [lo, hi) (unrolled):   ==    for i (vectorized):
        x = v(r)      (v: no i)               for r in [lo, hi) (unrolled):
        ... x ...                               x = h[r - lo]
                                                ... x ...

holds when ``v`` reads nothing bound inside the ``i`` loop but ``r`` and values of the
same kind, and ``x`` is a statement of the ``r`` loop itself (not under a guard there):
``v(r)`` is then computed for every ``r`` whatever ``i`` is, and ``h`` holds each once.

Why: a vectorized loop computes its whole body per lane. An adaptive pool's gradient,
``dX[i, j] = sum_o [i in window o] ...`` over the few windows ``o`` (unrolled) for every
column ``j`` (vectorized), counted ``[i in window o]`` from floor divisions of ``i`` and
``o`` in every lane: 2.0 ms for 1.5M points; computed once per row, 0.24 ms (a C
harness of that kernel, 2 threads). gcc's own invariant motion did not move them out of
the vector loop.

Only values that also depend on something bound outside the ``i`` loop move (``o``
alone gives constants once ``r`` is unrolled), with the values of the ``r`` loop they
read computed again before the loop. The ``h`` are buffers on the stack
(``nest.RowBuffer``), at most ``MAX_POINTS`` elements each.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

from . import nest as n
from . import nest_forms as forms

MAX_POINTS = 64
_OWN = (n.__name__, forms.__name__)


def hoisted(kernel: n.LoopNest) -> n.LoopNest:
    """``kernel`` with the values ``hoist`` moves out of every vectorized loop (in place:
    its blocks are the builder's own)."""
    counter = [0]
    _within(kernel.body, counter, kernel.outputs)
    return kernel


def _within(block: n.Block, counter: list, outputs: int) -> None:
    k = 0
    while k < len(block.items):
        item = block.items[k]
        if isinstance(item, n.Block):
            _within(item, counter, outputs)
        if isinstance(item, n.Loop) and item.vectorize:
            before = _hoist(item, counter, outputs)
            block.items[k:k] = before
            k += len(before)
        k += 1


def _hoist(loop: n.Loop, counter: list, outputs: int) -> list:
    """The statements to run before ``loop`` (buffers and the loops filling them), its
    unrolled loops rewritten to read them. A read of an output (arguments below
    ``outputs``) or of a row cache stays where it is: the loop may write it first."""
    inside = _defined(loop)
    before: list = []
    for u, inner in enumerate(loop.items):
        if not (isinstance(inner, n.Loop) and inner.unrolled and isinstance(inner.lo, int)
                and isinstance(inner.hi, int) and 0 < inner.hi - inner.lo <= MAX_POINTS):
            continue
        lets = [s for s in inner.items if isinstance(s, n.Let)]
        own = {s.name for s in lets}
        movable: dict[str, n.Let] = {}  # reads nothing of the loop's but r and these
        outer: set[str] = set()  # ... and something bound outside the vectorized loop
        for s in lets:
            if isinstance(s.value, forms.BufferLoad) or (
                    isinstance(s.value, forms.Load) and s.value.arg < outputs):
                continue
            used = _names(s.value) - {inner.var}
            if used & inside - set(movable):
                continue
            if any(x in own for x in used - set(movable)):
                continue  # (a value of the loop defined after this one: not reached)
            movable[s.name] = s
            if used - inside - own or used & outer:
                outer.add(s.name)
        outer = {x for x in outer if not isinstance(movable[x].value, forms.Lit)}
        # a buffer for each moved value that a statement staying in the loop reads
        staying = [s for s in inner.items if not (isinstance(s, n.Let) and s.name in outer)]
        read = _names(staying)
        targets = [s for s in lets if s.name in outer and s.name in read]
        if not targets:
            continue
        buffers = {}
        for s in targets:
            counter[0] += 1
            buffers[s.name] = f"h{counter[0]}_{s.name}"
        fill = n.Loop(loop=True, var=inner.var, lo=inner.lo, hi=inner.hi, role="reduce")
        point = _offset(fill, inner)
        needed = _needed(movable, targets)
        for s in lets:
            if s.name in needed:
                fill.items.append(s)
            if s.name in buffers:
                fill.items.append(n.BufferStore(buffers[s.name], point, forms.Ref(s.name)))
        before += [n.RowBuffer(buffers[s.name], s.dtype, inner.hi - inner.lo) for s in targets]
        before.append(fill)
        index = _offset(None, inner)
        head = [] if isinstance(index, forms.Ref) and index.name == inner.var else [index[1]]
        at = index if not head else forms.Ref(index[0])
        items = [replace(s, value=forms.BufferLoad(buffers[s.name], at))
                 if isinstance(s, n.Let) and s.name in buffers else s for s in inner.items]
        loop.items[u] = replace(inner, items=[*head, *items])
    return before


def _offset(fill: n.Loop | None, inner: n.Loop):
    """The buffer's index at the loop's point, ``r - lo``: the variable itself where
    ``lo`` is 0; else, for the filling loop (``fill``), a ``Let`` put there and its name;
    for the rewritten loop, ``(name, Let)`` to put at its head."""
    r = forms.Ref(inner.var)
    if inner.lo == 0:
        return r
    name = f"{inner.var}_at"
    let = n.Let(name, "int32", forms.Apply("sub", (r, forms.Lit(inner.lo, "int32")),
                                           "int32", "int32"))
    if fill is not None:
        fill.items.append(let)
        return forms.Ref(name)
    return name, let


def _needed(movable: dict, targets: list) -> set[str]:
    """The names of the movable values the targets read, themselves included."""
    needed, todo = set(), [s.name for s in targets]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo += [x for x in _names(movable[name].value) if x in movable]
    return needed


def _defined(block: n.Block) -> set[str]:
    """Every name bound inside ``block``: loop variables, locals, accumulators."""
    names: set[str] = set()
    for item in block.items:
        if isinstance(item, n.Block):
            names |= _defined(item)
        elif hasattr(item, "name") and isinstance(item.name, str):
            names.add(item.name)
    if isinstance(block, n.Loop):
        names.add(block.var)
    return names


def _names(x) -> set[str]:
    """The names ``x`` (a scalar form, an operand, an integer form) reads."""
    if isinstance(x, str):
        return {x}
    if isinstance(x, (list, tuple)):
        return set().union(*(_names(i) for i in x))
    if not is_dataclass(x) or type(x).__module__ not in _OWN or isinstance(x, forms.Lit):
        return set()
    if isinstance(x, forms.Apply):
        return _names(x.args)
    return set().union(*(_names(getattr(x, f.name)) for f in fields(x)))
