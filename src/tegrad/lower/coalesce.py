"""Two nested loops over a row-major block made one loop (a pass over a built nest).

    for a in [lo, hi):                      for b in [lo nb, hi nb):
      for b in [0, nb):            ==         body(a := 0, b)
        body(a, b)

holds when ``a`` and ``b`` appear in the body only as the indices of loads and stores, and
in every one of those addresses ``a``'s coefficient is ``nb`` times ``b``'s: the address
``... + c (nb a + b)`` is ``... + c m`` with ``m = nb a + b``, and ``m`` runs over
``[lo nb, hi nb)`` exactly once per point, in the same order. So the outer loop goes,
``a``'s terms go (``a = 0``) and ``b`` runs over ``m``'s range (a padded image's interior
rows, a region ``[1, H - 1)`` of them, too).

Why: an image's rows are short. A norm's or an activation's kernel over ``(N, C, H, W)``
loops over ``h`` and then vectorizes ``w`` alone: 56 columns are three vectors and a
masked tail per row, a reduction's vector accumulator is summed across its lanes at the
end of every row, and a 4x4 image's rows are a quarter of a vector. Merged, the loop is
``H W`` long (3136 points: 196 vectors). The group norm of ``unet.group_norm``
(``benchmarks/bench_layers.py``, 8 x 64 x 56^2, 32 groups) reads every image plane in
these loops, forward and backward.

Only an exact match merges: both loops of one role and of constant bounds (the inner one
from 0, their product an ``int``), neither unrolled nor shared out, the inner one the
outer one's only item, and nothing else using ``a`` or ``b``: a guard or a value computed
from either (a padding test, ``b + 1``), a clamped or gathered index, a row cache's
column, an argmax's position would see the merged variable, so any of them keeps the two
loops. Inner pairs merge first, so three loops over a contiguous ``(C, H, W)`` become one.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

from . import nest as n
from . import nest_forms as forms

INT_MAX = 2**31 - 1  # a loop's index is a C int (``render.CDialect.index_types``)
_OWN = (n.__name__, forms.__name__)  # the classes whose fields are searched for names


def coalesced(kernel: n.LoopNest) -> n.LoopNest:
    """``kernel`` with every pair of loops that can be one merged (in place: its blocks
    are the builder's own, not shared)."""
    _within(kernel.body)
    return kernel


def _within(block: n.Block) -> None:
    for k, item in enumerate(block.items):
        if not isinstance(item, n.Block):
            continue
        _within(item)
        if isinstance(item, n.Loop):
            merged = _merged(item)
            if merged is not None:
                block.items[k] = merged


def _merged(outer: n.Loop) -> n.Loop | None:
    """``outer`` and its only item, a loop, as that one loop; None where they cannot be."""
    if len(outer.items) != 1 or type(outer.items[0]) is not n.Loop:
        return None
    inner = outer.items[0]
    if not (_plain(outer) and _plain(inner) and inner.lo == 0 and outer.role == inner.role):
        return None
    if outer.hi * inner.hi > INT_MAX:
        return None
    a, b, nb = outer.var, inner.var, inner.hi
    uses = []  # (coefficient of a, coefficient of b) per address
    rewritten = [_rewrite(item, a, b, uses) for item in inner.items]
    if any(ca != nb * cb for ca, cb in uses) or mentions(rewritten, (a, b)):
        return None
    # (a merged loop is longer than a vector's lanes: its sums' lanes stay 0, nest_lanes)
    return replace(inner, lo=outer.lo * nb, hi=outer.hi * nb, lanes=0,
                   items=[_unmark(item, b) for item in rewritten])


def _plain(loop: n.Loop) -> bool:
    return (isinstance(loop.lo, int) and isinstance(loop.hi, int) and 0 <= loop.lo < loop.hi
            and not loop.unroll and not loop.unrolled and not loop.partials
            and not loop.barrier)


_MARK = "\0merged:"  # a name no kernel has: b's uses as an address, until all are checked


def _rewrite(item, a: str, b: str, uses: list):
    """``item`` with the addresses' terms of ``a`` dropped and those of ``b`` marked
    (``_MARK``), each address's coefficients of the two appended to ``uses``; other uses
    of ``a`` and ``b`` are left as they are, for ``mentions`` to find."""
    if isinstance(item, n.Block):
        return replace(item, items=[_rewrite(i, a, b, uses) for i in item.items])
    if isinstance(item, n.Let) and isinstance(item.value, forms.Load):
        terms, ca, cb = [], 0, 0
        for t in item.value.index:
            name = t.value.name if isinstance(t.value, forms.Ref) and t.clamp is None else None
            if name == a:
                ca += t.stride
                continue
            if name == b:
                cb += t.stride
                t = replace(t, value=forms.Ref(_MARK + b))
            terms.append(t)
        uses.append((ca, cb))
        return replace(item, value=replace(item.value, index=tuple(terms)))
    if isinstance(item, n.Store) and isinstance(item.index, forms.RowIndex):
        terms, ca, cb = [], 0, 0
        for name, stride in item.index.terms:
            if name == a:
                ca += stride
                continue
            if name == b:
                cb += stride
                name = _MARK + b
            terms.append((name, stride))
        uses.append((ca, cb))
        return replace(item, index=forms.RowIndex(tuple(terms)))
    return item


def _unmark(item, b: str):
    """``item`` with ``_rewrite``'s marks back to ``b``."""
    if isinstance(item, n.Block):
        return replace(item, items=[_unmark(i, b) for i in item.items])
    if isinstance(item, n.Let) and isinstance(item.value, forms.Load):
        index = tuple(replace(t, value=forms.Ref(b)) if t.value == forms.Ref(_MARK + b) else t
                      for t in item.value.index)
        return replace(item, value=replace(item.value, index=index))
    if isinstance(item, n.Store) and isinstance(item.index, forms.RowIndex):
        return replace(item, index=forms.RowIndex(tuple(
            (b if name == _MARK + b else name, stride) for name, stride in item.index.terms)))
    return item


def mentions(x, names: tuple) -> bool:
    """Whether ``x`` (statements, blocks, forms) names one of ``names`` anywhere: as a
    ``Ref``, an index or bound term, an argmax's position, a loop's variable."""
    if isinstance(x, str):
        return x in names
    if isinstance(x, (list, tuple, frozenset)):
        return any(mentions(i, names) for i in x)
    if not is_dataclass(x) or type(x).__module__ not in _OWN:
        return False  # ints, dtypes, a custom combiner's expression of its own parameters
    # (a block's ``binds`` are tegrad.ir variables, not names)
    return any(mentions(getattr(x, f.name), names) for f in fields(x) if f.name != "binds")
