"""Reductions inside expressions, moved into computes of their own (for TVM).

TVM accepts a reduction only as the whole body of a ``te.compute``; tegrad allows one
anywhere (softmax may be one compute, a gradient is often a select of sums). So each
reduction ``R`` that is not the whole body becomes a compute over the variables it uses
(axes of the compute, and axes of enclosing reductions, shifted to start at 0), and the
body reads it there:

    Y[i, j] = exp(X[i, j]) / sum(exp(X[i, k]), k)
      ->  Y.r0[i] = sum(exp(X[i, k]), k)
          Y[i, j] = exp(X[i, j]) / Y.r0[i]

The new compute evaluates ``R`` at points where the original did not (where a select's
condition on the path is false), so its reads must be in bounds there too. It is
verified as any compute; when that fails, the guards on the path (select conditions and
enclosing ``where`` clauses) join its ``where``: first those over its own variables,
then all of them (the compute then also ranges over the guards' variables). Where a
guard is false, the value is the reducer's identity and unused. A reduction with a
gather index (a read of an integer tensor) or an integer division by a variable takes
its guards at once: the verifier cannot bound such an index or exclude a zero divisor,
so the guards must stay on its path.
Reductions nested in the new compute's source are moved the same way, recursively.
"""

from __future__ import annotations

from ..ir.bounds import is_pure_index
from ..ir.expr import (
    Binary,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Var,
    binary,
    conjunction,
    split_conjunction,
)
from ..ir.expr import unary as make_unary
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import children, free_vars, substitute, walk, with_children
from ..ir.verify import IRError, verify_compute

MAX_DEPTH = 8


def hoist_reductions(t: Compute, depth: int = 0) -> list[Compute]:
    """Computes equivalent to ``t`` with every reduction the whole body of one: the new
    computes first, then ``t`` rewritten to read them (``t`` itself when unchanged)."""
    if depth > MAX_DEPTH:
        raise IRError(f"{t.name}: reductions nested more than {MAX_DEPTH} deep for TVM")
    h = _Hoister(t, depth)
    body = h.top(t.body)
    if body is t.body:
        return [*h.parts, t] if h.parts else [t]
    return [*h.parts, make_compute(t.shape, t.axes, body, t.name)]


class _Hoister:
    def __init__(self, t: Compute, depth: int):
        self.t = t
        self.depth = depth
        self.parts: list[Compute] = []
        self.memo: dict = {}
        self.cache: dict = {}
        self.found: dict = {}

    def top(self, body: Expr) -> Expr:
        if not isinstance(body, Reduce):
            return self.go(body, (), ())
        scope = tuple(body.axes)
        guards = tuple(split_conjunction(body.where)) if body.where is not None else ()
        source = self.go(body.source, guards, scope)
        where = None if body.where is None else self.go(body.where, (), scope)
        return Reduce(body.combiner, source, body.axes, where, body.dtype)

    def go(self, e: Expr, guards: tuple, scope: tuple) -> Expr:
        if not self.has_reduce(e):
            return e
        key = (e, guards, scope)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if isinstance(e, Reduce):
            out = self.hoist(e, guards, scope)
        elif isinstance(e, Binary) and e.op == "and":
            # each conjunct may assume the others (as the verifier does)
            a = self.go(e.a, (*guards, *split_conjunction(e.b)), scope)
            b = self.go(e.b, (*guards, *split_conjunction(e.a)), scope)
            out = with_children(e, (a, b))
        elif isinstance(e, Select):
            cond = self.go(e.cond, guards, scope)
            a = self.go(e.a, (*guards, *split_conjunction(e.cond)), scope)
            b = self.go(e.b, (*guards, make_unary("not", e.cond)), scope)
            out = with_children(e, (cond, a, b))
        else:
            out = with_children(e, tuple(self.go(c, guards, scope) for c in children(e)))
        self.memo[key] = out
        return out

    def has_reduce(self, e: Expr) -> bool:
        hit = self.found.get(e)
        if hit is None:
            hit = isinstance(e, Reduce) or any(self.has_reduce(c) for c in children(e))
            self.found[e] = hit
        return hit

    def hoist(self, r: Reduce, guards: tuple, scope: tuple) -> Expr:
        unsafe = any(_unsafe(x) for x in walk(r))
        used = free_vars(r)
        relevant = tuple(g for g in guards if free_vars(g) <= used)
        tries = [] if unsafe else [()]
        tries += [g for g in (relevant, guards) if g not in tries]
        last: IRError | None = None
        for gs in tries:
            key = (r, gs, scope)
            if key in self.cache:
                return self.cache[key]
            part, indices = self.part(r, gs, scope)
            try:
                verify_compute(part)
            except IRError as error:
                last = error
                continue
            nested = hoist_reductions(part, self.depth + 1)
            self.parts.extend(nested)
            out = Read(nested[-1], indices, r.dtype)
            self.cache[key] = out
            return out
        raise IRError(
            f"{self.t.name}: a reduction inside an expression cannot become a TVM compute of "
            f"its own with reads in bounds ({last}); write it as a separate tg.compute"
        )

    def part(self, r: Reduce, gs: tuple, scope: tuple) -> tuple[Compute, tuple[Expr, ...]]:
        where = conjunction([*([r.where] if r.where is not None else []), *gs])
        body = Reduce(r.combiner, r.source, r.axes, where, r.dtype)
        used = free_vars(body)
        order = [v for v in self.t.axes if v in used]
        order += [v for v in scope if v in used and v not in order]
        order += sorted((v for v in used if v not in order), key=lambda v: v.uid)
        fresh = {v: Var.fresh(v.name, 0, v.extent) for v in order}
        shifted = {v: binary("add", fresh[v], v.lo) if v.lo else fresh[v] for v in order}
        part = make_compute(
            tuple(v.extent for v in order),
            tuple(fresh.values()),
            substitute(body, shifted),
            f"{self.t.name}.r{len(self.parts)}",
        )
        indices = tuple(binary("sub", v, v.lo) if v.lo else v for v in order)
        return part, indices


def _unsafe(x: Expr) -> bool:
    """Nodes the verifier cannot clear everywhere: a gather (its index is a value), an
    integer division by a variable (by zero where the guard is false: a crash in TVM)."""
    if isinstance(x, Read):
        return not all(is_pure_index(i) for i in x.indices)
    return (isinstance(x, Binary) and x.op in ("floordiv", "floormod")
            and not isinstance(x.b, Const))
