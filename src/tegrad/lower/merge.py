"""Two products of one operand made as one: their other operands side by side.

An LSTM's weight gradients read the gate gradient ``G`` (steps x batch, 4 hidden) twice:

    dW_ih[g, i] = sum_{t, n} G[t, n, g] x[t, n, i]        (1024 x 128)
    dW_hh[g, j] = sum_{t, n} G[t, n, g] h[t, n, j]        (1024 x 256)

Two products read and pack ``G`` (6.5 MB) twice, and BLAS makes the narrow one slowly
(``G`` transposed, only 128 columns). One product over the two other operands side by
side,

    B[t, n, c] = select(c < 128, x[t, n, c], h[t, n, c - 128])
    M[g, c]    = sum_{t, n} G[t, n, g] B[t, n, c]           (1024 x 384)
    dW_ih[g, i] = M[g, i],   dW_hh[g, j] = M[g, 128 + j],

reads ``G`` once, at the price of copies into ``B`` and out of ``M`` (2.4 and 1.5 MB here);
``benchmarks/bench_ab.py --knob merge --case lstm`` measures it against two products.

``merge_shared_products`` finds pairs of contraction kernels ``t1, t2`` with a float sum
of a product of two reads, no ``where``, the same reduction extents, one read the same
(``shared``: tensor and index, the reduce axes matched in order), and the other
(``other``) reading, besides the reduce axes, exactly the last output axis, at the same
index positions in both. The pair is merged where ``shared`` reads more elements than
the copies move (``B`` and the two outputs), and where the merged product is itself a
contraction; ``B`` and ``M`` are placed after the last kernel making what they read,
which must come before the first kernel reading ``t1`` or ``t2``.
"""

from __future__ import annotations

import math

from ..ir.expr import Binary, Read, Reduce, Var, binary, select
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import free_vars, substitute
from ..options import Options
from .contraction import match_contraction
from .kernels import Contraction, General, Kernel, reads_and_makes


def merge_shared_products(kernels: list[Kernel], options: Options) -> list[Kernel]:
    """``kernels`` with each mergeable pair of products made as one (module header;
    ``options.merge_products`` False: every product apart)."""
    while options.merge_products:
        merged = _merge_one(kernels, options.max_widened_step)
        if merged is None:
            break
        kernels = merged
    return kernels


def _merge_one(kernels: list[Kernel], max_widened_step: int) -> list[Kernel] | None:
    forms = [_form(k) for k in kernels]
    for i, first in enumerate(forms):
        for j in range(i + 1, len(kernels)):
            second = forms[j]
            if first is None or second is None or not (
                    {r.tensor for r in first[1]} & {r.tensor for r in second[1]}):
                continue
            made = _merged(kernels[i].tensor, first, kernels[j].tensor, second,
                           max_widened_step)
            if made is not None:
                placed = _placed(kernels, i, j, made)
                if placed is not None:
                    return placed
    return None


def _form(k: Kernel):
    """``(sum, (read, read), last axis)`` of a contraction kernel whose body is a sum of
    a product of two reads with no ``where``, else None."""
    if not isinstance(k, Contraction):
        return None
    t = k.tensor
    body = t.body
    if (not isinstance(body, Reduce) or body.where is not None
            or body.combiner.kind != "sum" or not isinstance(body.source, Binary)
            or body.source.op != "mul" or not t.axes):
        return None
    a, b = body.source.a, body.source.b
    if not isinstance(a, Read) or not isinstance(b, Read):
        return None
    return body, (a, b), t.axes[-1]


def _merged(t1: Compute, f1, t2: Compute, f2, max_widened_step: int):
    """``_side_by_side``'s merged computes for the pair, or None where it does not merge."""
    (r1, reads1, last1), (r2, reads2, _) = f1, f2
    if (len(r1.axes) != len(r2.axes) or t1.shape[:-1] != t2.shape[:-1]
            or t1.dtype != t2.dtype or any(u.extent != v.extent or u.lo != v.lo
                                           for u, v in zip(r1.axes, r2.axes, strict=True))):
        return None
    rename = dict(zip(r2.axes, r1.axes, strict=True))
    rename.update(zip(t2.axes, t1.axes, strict=True))
    for shared1, other1 in (reads1, reads1[::-1]):
        for shared2, other2 in (reads2, reads2[::-1]):
            if shared1.tensor is not shared2.tensor or shared1.tensor is other1.tensor:
                continue
            if substitute(shared2, rename) is not shared1:
                continue
            if last1 in free_vars(shared1):
                continue
            other2 = substitute(other2, rename)
            made = _side_by_side(t1, r1, shared1, other1, other2, t2.shape[-1], last1,
                                 max_widened_step)
            if made is not None:
                return made
    return None


def _side_by_side(t1, r1, shared, other1, other2, n2: int, last: Var,
                  max_widened_step: int):
    """``(B, M, M's contraction, n1)`` (module header), or None where ``other1`` and
    ``other2`` do not read only the reduce axes and ``last``, or it does not pay."""
    reduce_axes = set(r1.axes)
    for other in (other1, other2):
        if (not free_vars(other) <= reduce_axes | {last} or last not in free_vars(other)
                or other.dtype != shared.dtype):
            return None
    n1 = t1.shape[-1]
    used = [v for v in r1.axes if v in free_vars(other1) | free_vars(other2)]
    if any(v.lo for v in used):  # (a compute's axes start at 0)
        return None
    moved = (math.prod(v.extent for v in used) * (n1 + n2)
             + math.prod(t1.shape[:-1]) * (n1 + n2))
    if math.prod(v.extent for v in r1.axes if v in free_vars(shared)) * math.prod(
            t1.shape[:-1]) < moved:
        return None
    c = Var.fresh("c", 0, n1 + n2)
    fresh = {v: Var.fresh(v.name, v.lo, v.extent) for v in used}
    second = substitute(other2, {last: binary("sub", c, n1)})
    body = select(binary("lt", c, n1), substitute(other1, {last: c}), second)
    side = make_compute((*(v.extent for v in used), n1 + n2), (*fresh.values(), c),
                        substitute(body, fresh), f"{t1.name}.side")
    column = Var.fresh("c", 0, n1 + n2)
    source = binary("mul", shared, Read(side, (*used, column), side.dtype))
    outer = {v: Var.fresh(v.name, v.lo, v.extent) for v in t1.axes[:-1]}
    product = make_compute(
        (*t1.shape[:-1], n1 + n2), (*outer.values(), column),
        substitute(Reduce(r1.combiner, source, r1.axes, None, t1.dtype), outer),
        f"{t1.name}.merged")
    found = match_contraction(product, max_widened_step)
    if found is None:
        return None
    return side, product, found, n1


def _placed(kernels: list[Kernel], i: int, j: int, made) -> list[Kernel] | None:
    """``kernels`` with ``i`` and ``j`` replaced by the merged kernels, or None where no
    place has everything they read made and nothing reading ``i`` or ``j`` yet run."""
    side, product, found, n1 = made
    t1, t2 = kernels[i].tensor, kernels[j].tensor
    rest = [k for n, k in enumerate(kernels) if n not in (i, j)]
    reads = set(reads_and_makes(kernels[i])[0]) | set(reads_and_makes(kernels[j])[0])
    after = max((n + 1 for n, k in enumerate(rest)
                 if reads & set(reads_and_makes(k)[1])), default=0)
    before = min((n for n, k in enumerate(rest)
                  if {t1, t2} & set(reads_and_makes(k)[0])), default=len(rest))
    if after > before:
        return None
    slices = []
    for t, offset in ((t1, 0), (t2, n1)):
        last = t.axes[-1]
        index = (*t.axes[:-1], last if not offset else binary("add", last, offset))
        body_of = make_compute(t.shape, t.axes, Read(product, index, t.dtype), t.name)
        slices.append(General(t, body_of, (product,)))
    return [*rest[:after], General(side), Contraction(product, found),
            *slices, *rest[after:]]
