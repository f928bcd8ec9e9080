"""Alpha-normalisation of reductions, so equal sub-computations become one node.

Autodiff gives every term its own fresh copies of the variables it sums over, so the
same reduction (``sum_j dY[i, j] * S[i, j]`` in a softmax gradient) appears under
different variable names and would be evaluated once per copy. ``canonical_axes``
renames each reduction's bound variables to a canonical variable determined by
(name, height, position, range), where the height of a reduction is one more than the
largest height of the reductions inside it. A reduction nested in another has a smaller
height, so the renaming never makes an inner reduction re-bind an outer variable;
sibling reductions may share variables, which the IR allows. Interning then merges the
copies, and every consumer (evaluator, op counter, printer) sees one node.
"""

from __future__ import annotations

from ..ir.expr import Expr, Reduce, Var, fresh_uid, node_memo
from ..ir.traverse import children, substitute, transform

_CANONICAL: dict[tuple, Var] = {}


def height(e: Expr) -> int:
    memo = node_memo(e)
    hit = memo.get("height")
    if hit is None:
        below = max((height(c) for c in children(e)), default=0)
        hit = below + 1 if isinstance(e, Reduce) else below
        memo["height"] = hit
    return hit


def canonical_var(name: str, h: int, position: int, like: Var) -> Var:
    """The one variable named ``name`` with ``like``'s range and dtype at ``position`` of a
    reduction of height ``h`` (height 0: a compute's output axes, ``cse.py``)."""
    key = (name, h, position, like.lo, like.extent, like.dtype)
    out = _CANONICAL.get(key)
    if out is None:
        out = Var(name, fresh_uid(), like.dtype, like.lo, like.extent)
        _CANONICAL[key] = out
    return out


def _rename(e: Expr) -> Expr | None:
    if not isinstance(e, Reduce):
        return None
    h = height(e)
    mapping = {}
    for m, a in enumerate(e.axes):
        c = canonical_var(a.name, h, m, a)
        if c is not a:
            mapping[a] = c
    if not mapping:
        return None
    source = substitute(e.source, mapping)
    where = None if e.where is None else substitute(e.where, mapping)
    return Reduce(e.combiner, source, tuple(mapping.get(a, a) for a in e.axes), where, e.dtype)


def canonical_axes(e: Expr) -> Expr:
    return transform(e, _rename)
