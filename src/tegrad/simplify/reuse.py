"""Reuse of computed tensors: a reduction that recomputes a tensor already read by the
expression becomes a read of that tensor.

A tensor ``T[i] = R(i)`` whose body is a reduction matches a sub-expression ``x`` when
some index expressions ``e`` make ``R(e)`` equal to ``x`` up to renaming of bound
variables; ``x`` is then ``T[e]``, provided each ``e`` provably stays inside ``T``'s axis (a
tensor of 1 row does not replace the same sum over 2 rows). Matching is first-order
unification over the
(interned) expression trees: each axis of ``T`` binds to one sub-expression, reduce axes
correspond position by position, every other node must agree exactly. The bound index
expressions may only use variables that are free where ``x`` stands.

Typical win: the simplifier factors a softmax gradient's ``sum_k exp(X[i, k] - M[i])``
out of a sum; it is exactly the normaliser that the gradient already reads as a tensor.
"""

from __future__ import annotations

from ..ir.bounds import interval
from ..ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var
from ..ir.tensor import Compute
from ..ir.traverse import children, free_vars, tensors_read, transform


def unify(pattern: Expr, target: Expr, axes: frozenset, binding: dict, renamed: dict) -> bool:
    if isinstance(pattern, Var):
        if pattern in axes:
            if pattern in binding:
                return binding[pattern] is target
            if not target.dtype.startswith("int"):
                return False
            binding[pattern] = target
            return True
        return renamed.get(pattern, pattern) is target
    if pattern is target and not (free_vars(pattern) & (axes | frozenset(renamed))):
        return True
    if type(pattern) is not type(target) or pattern.dtype != target.dtype:
        return False
    if isinstance(pattern, Const):
        return False  # equal constants are the same interned node, caught above
    if isinstance(pattern, Read) and pattern.tensor is not target.tensor:
        return False
    if isinstance(pattern, Unary | Binary) and pattern.op != target.op:
        return False
    if isinstance(pattern, Reduce):
        if pattern.combiner is not target.combiner or len(pattern.axes) != len(target.axes):
            return False
        if (pattern.where is None) != (target.where is None):
            return False
        for a, b in zip(pattern.axes, target.axes, strict=True):
            if (a.lo, a.extent) != (b.lo, b.extent):
                return False
            renamed[a] = b
    if not isinstance(pattern, Read | Unary | Binary | Select | Cast | Reduce):
        return False
    return all(
        unify(p, t, axes, binding, renamed)
        for p, t in zip(children(pattern), children(target), strict=True)
    )


def match_tensor(t: Compute, x: Expr) -> Read | None:
    binding: dict = {}
    if not unify(t.body, x, frozenset(t.axes), binding, {}):
        return None
    free = free_vars(x)
    if any(not free_vars(e) <= free for e in binding.values()):
        return None
    return read_bound(t, binding)


def read_bound(t: Compute, binding: dict) -> Read | None:
    """``T[e]`` for the index expressions ``binding`` gives ``T``'s axes, when it gives
    every axis one and each stays inside ``T`` (``e`` can only take values of its axis):
    a tensor of 1 row does not stand for the same value over 2 rows."""
    if set(binding) != set(t.axes):
        return None
    for a in t.axes:
        iv = interval(binding[a])
        if iv is None or iv[0] < a.lo or iv[1] > a.hi:
            return None
    return Read(t, tuple(binding[a] for a in t.axes), t.dtype)


def reuse_computed(e: Expr) -> Expr:
    candidates = [
        t for t in tensors_read(e) if isinstance(t, Compute) and isinstance(t.body, Reduce)
    ]
    if not candidates:
        return e

    def rule(x: Expr):
        if not isinstance(x, Reduce):
            return None
        for t in candidates:
            if t.body is x:
                continue
            hit = match_tensor(t, x)
            if hit is not None:
                return hit
        return None

    return transform(e, rule)
