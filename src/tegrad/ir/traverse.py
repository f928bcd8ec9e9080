"""Walking and rebuilding expressions.

Reductions bind their axes, so every walk here is binder-aware: ``free_vars`` of
``sum(A[i, k], k)`` is ``{i}``, and substituting ``k -> 0`` into it changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, node_memo
from .tensor import Compute, ScanOutput, Tensor


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Var, Const)):
        return ()
    if isinstance(e, Read):
        return e.indices
    if isinstance(e, Unary | Cast):
        return (e.a,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Reduce):
        return (e.source,) if e.where is None else (e.source, e.where)
    raise TypeError(f"not an expression node: {e!r}")


def with_children(e: Expr, new: tuple[Expr, ...]) -> Expr:
    """``e`` rebuilt over new children (same node if they did not change)."""
    if all(a is b for a, b in zip(new, children(e), strict=True)):
        return e
    if isinstance(e, Read):
        return Read(e.tensor, tuple(new), e.dtype)
    if isinstance(e, Unary):
        return Unary(e.op, new[0], e.dtype)
    if isinstance(e, Cast):
        return Cast(new[0], e.dtype)
    if isinstance(e, Binary):
        return Binary(e.op, new[0], new[1], e.dtype)
    if isinstance(e, Select):
        return Select(new[0], new[1], new[2], e.dtype)
    if isinstance(e, Reduce):
        where = new[1] if len(new) > 1 else None
        return Reduce(e.combiner, new[0], e.axes, where, e.dtype)
    raise TypeError(f"not an expression node: {e!r}")


def free_vars(e: Expr) -> frozenset[Var]:
    """Variables of ``e`` not bound by a reduction inside it."""
    memo = node_memo(e)
    hit = memo.get("free")
    if hit is not None:
        return hit
    if isinstance(e, Var):
        out = frozenset((e,))
    else:
        out = frozenset().union(*(free_vars(c) for c in children(e)))
        if isinstance(e, Reduce):
            out = out - frozenset(e.axes)
    memo["free"] = out
    return out


def substitute(e: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    """Replace free occurrences of variables (capture-avoiding for bound axes)."""
    if not mapping:
        return e
    memo: dict[Expr, Expr] = {}
    keys = frozenset(mapping)

    def go(x: Expr, active: frozenset[Var]) -> Expr:
        if not (free_vars(x) & active):
            return x
        key = (x, active)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if isinstance(x, Var):
            out = mapping[x]
        elif isinstance(x, Reduce):
            inner = active - frozenset(x.axes)
            out = with_children(x, tuple(go(c, inner) for c in children(x)))
        else:
            out = with_children(x, tuple(go(c, active) for c in children(x)))
        memo[key] = out
        return out

    return go(e, keys)


def with_fresh_axes(r: Reduce) -> Reduce:
    """``r`` over new axis variables (same names and ranges): for placing a reduction where
    its axis objects are already bound, or where substituted indices use them."""
    fresh = {a: Var.fresh(a.name, a.lo, a.extent, a.dtype) for a in r.axes}
    where = None if r.where is None else substitute(r.where, fresh)
    return Reduce(r.combiner, substitute(r.source, fresh), tuple(fresh.values()), where,
                  r.dtype)


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild bottom-up; ``fn(node_with_new_children)`` may return a replacement."""
    memo: dict[Expr, Expr] = {}

    def go(x: Expr) -> Expr:
        hit = memo.get(x)
        if hit is not None:
            return hit
        y = with_children(x, tuple(go(c) for c in children(x)))
        z = fn(y)
        out = y if z is None else z
        memo[x] = out
        return out

    return go(e)


def walk(e: Expr) -> Iterable[Expr]:
    """Every distinct node of ``e`` once, children before parents."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        x, done = stack.pop()
        if done:
            order.append(x)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(children(x)))
    return order


def tensors_read(e: Expr) -> list[Tensor]:
    """The tensors ``e`` reads, in order of first read; kept on the node (planning and
    the simplifier ask it of the same bodies tens of thousands of times in a ResNet-50
    gradient)."""
    memo = node_memo(e)
    found = memo.get("tensors_read")
    if found is None:
        out: dict[Tensor, None] = {}
        for x in walk(e):
            if isinstance(x, Read):
                out[x.tensor] = None
        found = memo["tensors_read"] = tuple(out)
    return list(found)


def topo_tensors(outputs: Iterable[Tensor], stop: Iterable[Tensor] = ()) -> list[Tensor]:
    """Every tensor the outputs depend on (themselves included), inputs first. The
    outputs of one scan come out together, after everything any of them depends on (the
    scan's body is not entered: it is the scan's own). Tensors in ``stop`` are listed but
    not entered (they are given)."""
    order: list[Tensor] = []
    seen: set[Tensor] = set()
    given = set(stop)

    def visit(t: Tensor) -> None:
        stack = [(t, False)]
        while stack:
            x, done = stack.pop()
            if done:
                order.append(x)
                continue
            if x in seen:
                continue
            seen.add(x)
            stack.append((x, True))
            if x in given:
                continue
            if isinstance(x, Compute):
                stack.extend((d, False) for d in reversed(tensors_read(x.body)) if d not in seen)
            elif isinstance(x, ScanOutput):
                siblings = [o for o in x.op.outputs if o is not x]
                seen.update(siblings)
                stack[-1:] = [(o, True) for o in reversed(siblings)] + [stack[-1]]
                stack.extend((d, False) for d in reversed(x.dependencies()) if d not in seen)

    for t in outputs:
        visit(t)
    return order
