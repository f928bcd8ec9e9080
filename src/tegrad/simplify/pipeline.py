"""The simplifier's entry points.

``simplify_expr`` rewrites bottom-up with the local rules of ``algebra.py``, turns
every floating-point sum into gather form with ``gather.py`` and reads the tensors it
reads wherever it holds their sums (``reuse.py``) or quotients (``products.py``) again,
repeating until nothing changes (at most ``MAX_PASSES`` passes). Results are memoised
on the node (nodes are interned), so simplifying the same sub-expression twice is free.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.expr import Expr, Read, Reduce, conjunction, node_memo
from ..ir.tensor import Compute, Tensor, make_compute
from ..ir.traverse import free_vars, topo_tensors, transform
from .algebra import fold
from .canonical import canonical_axes
from .gather import solve_sum
from .products import reuse_products
from .reuse import reuse_computed

MAX_PASSES = 4


def merge_nested_sums(e: Expr) -> Expr | None:
    """sum_a (sum_b x) = sum_(a, b) x, when x depends on a (otherwise the inner sum is a
    factor of the outer and stays apart). One sum over both axes is what the contraction
    lowering matches: a scan's weight gradient sums a per-step product over time."""
    if not (isinstance(e, Reduce) and e.combiner.kind == "sum"):
        return None
    inner = e.source
    if not (isinstance(inner, Reduce) and inner.combiner.kind == "sum"
            and inner.dtype == e.dtype and free_vars(inner.source) & set(e.axes)):
        return None
    where = conjunction(w for w in (e.where, inner.where) if w is not None)
    return Reduce(e.combiner, inner.source, e.axes + inner.axes, where, e.dtype)


def _rule(e: Expr) -> Expr | None:
    changed = False
    for _ in range(16):
        out = fold(e)
        if out is None or out is e:
            out = merge_nested_sums(e)
            if out is None:
                break
        e, changed = out, True
    if isinstance(e, Reduce) and e.combiner.kind == "sum" and dt.is_float(e.dtype):
        out = solve_sum(e, simplify_expr)
        if out is not e:
            return out
    return e if changed else None


def simplify_expr(e: Expr) -> Expr:
    memo = node_memo(e)
    hit = memo.get("simplified")
    if hit is not None:
        return hit
    out = e
    for _ in range(MAX_PASSES):
        nxt = reuse_products(reuse_computed(canonical_axes(transform(out, _rule))))
        if nxt is out:
            break
        out = nxt
    memo["simplified"] = out
    node_memo(out)["simplified"] = out
    return out


def simplify_compute(t: Compute) -> Compute:
    if not isinstance(t, Compute):  # a scan's output: its body is simplified when built
        return t
    body = simplify_expr(t.body)
    return t if body is t.body else make_compute(t.shape, t.axes, body, t.name)


def simplify(tensor: Tensor) -> Tensor:
    """An equivalent tensor with every compute it depends on simplified."""
    new: dict[Tensor, Tensor] = {}
    for t in topo_tensors([tensor]):
        if not isinstance(t, Compute):
            new[t] = t
            continue

        def relink(x: Expr):
            if isinstance(x, Read) and new.get(x.tensor, x.tensor) is not x.tensor:
                return Read(new[x.tensor], x.indices, x.dtype)
            return None

        body = simplify_expr(transform(t.body, relink))
        new[t] = t if body is t.body else make_compute(t.shape, t.axes, body, t.name)
    return new[tensor]
