"""Materializing the reductions inside a compute that have a kernel form of their own.

A compute whose body is not itself a contraction or a scatter often contains one:

    Y[n, o, p] = sum_{c, k} X[n, c, p + k] W[o, c, k] + b[o]       (a conv plus its bias)
    dX[j]      = select(j >= 1, sum_i dY[i] A[i, j - 1], 0) + sum_i dY[i] B[i, j]
                                                         (a gradient: two contractions)
    S[b, i, j] = 0.125 * sum_e Q[b, i, e] K[b, j, e]                (a scaled product)

Evaluated as one fused expression, each sum is a broadcast product over its whole index
grid: 10-40x slower than BLAS, and far more memory. So each reduction ``R`` of the body
that is a float sum, outside any other reduction, becomes a compute of its own over the
output variables it uses, with the guards on its path (conditions of the enclosing
selects on those variables) moved into its ``where``:

    R'[v...] = sum(source, axes, where = w and guards(v...))

When ``R'`` is planned as a contraction or a scatter (``contraction.py``, ``scatter.py``),
the body reads ``R'[v...]`` in its place and the rest stays a general kernel; otherwise
``R`` stays where it was. The guards keep every read of ``R'`` in bounds: the verifier
proved them in bounds under exactly those conditions. Where a guard is false the value of
``R'`` is 0 and unused (the select takes the other branch).
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.expr import Expr, Read, Reduce, Select, Var, conjunction, split_conjunction, unary
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import children, free_vars, substitute, with_children
from ..ir.verify import IRError, verify_compute


def extract_kernels(t: Compute, match) -> tuple[list, Compute] | None:
    """``(parts, rest)``: the kernels ``match(compute) -> kernel or None`` makes of the
    reductions of ``t``, and ``t`` rewritten to read them; None when there is none."""
    parts: list = []
    memo: dict = {}
    axes = tuple(t.axes)

    def extract(r: Reduce, guards: tuple[Expr, ...]) -> Expr | None:
        if r.combiner.kind != "sum" or not dt.is_float(r.dtype):
            return None
        used = free_vars(r)
        order = tuple(v for v in axes if v in used)
        relevant = tuple(g for g in guards if free_vars(g) <= used)
        fresh = {v: Var.fresh(v.name, 0, v.extent) for v in order}
        where = conjunction([*([r.where] if r.where is not None else []), *relevant])
        body = substitute(Reduce(r.combiner, r.source, r.axes, where, r.dtype), fresh)
        part = make_compute(tuple(v.extent for v in order), tuple(fresh.values()), body,
                            f"{t.name}.part{len(parts)}")
        try:
            verify_compute(part)
        except IRError:
            return None
        found = match(part)
        if found is None:
            return None
        parts.append(found)
        return Read(part, order, r.dtype)

    def go(e: Expr, guards: tuple[Expr, ...]) -> Expr:
        key = (e, guards)
        if key in memo:
            return memo[key]
        if isinstance(e, Reduce):
            found = extract(e, guards)
            out = e if found is None else found
        elif isinstance(e, Select):
            # conjunct by conjunct: a part keeps each one over the variables it uses
            out = with_children(e, (e.cond, go(e.a, (*guards, *split_conjunction(e.cond))),
                                    go(e.b, (*guards, unary("not", e.cond)))))
        elif isinstance(e, Read | Var) or not children(e):
            out = e
        else:
            out = with_children(e, tuple(go(c, guards) for c in children(e)))
        memo[key] = out
        return out

    if any(v.lo != 0 for v in axes):
        return None
    body = go(t.body, ())
    if not parts:
        return None
    return parts, make_compute(t.shape, axes, body, t.name)

