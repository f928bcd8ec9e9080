"""A reduction that a plan computes as a tensor of its own is read there, not computed again.

Reverse mode makes a reduction inside a compute's body its own tensor (``autodiff.
reverse.hoist_reductions``): for ``T[i] = (sum_r x[s i + r]^p / D(i))^(1/p)`` (an Lp pool)
the gradient reads ``A[i] = sum_r x[s i + r]^p`` over ``T``'s own axes, the very node of
``T``'s body. A plan of ``T`` and its gradient then holds both, and without this pass
``T``'s kernel sums the window a second time:

    T[i] = f(R(i), i)     A[i] = R(i)     ==>     T[i] = f(A[i], i)

``R`` matches only as the same interned node over the same axis variables (``A``'s axes
are ``T``'s, a subset of them), so ``A[i]`` is ``R(i)`` at every point. ``A``'s kernel is
moved before ``T``'s where it came after it (``R`` reads only what ``T`` reads, all of it
made earlier). Fusion may still inline ``A`` into its readers where that is cheaper.
"""

from __future__ import annotations

from ..ir.expr import Read, Reduce
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import free_vars, transform
from .kernels import General, Kernel


def read_shared_reductions(kernels: list[Kernel]) -> list[Kernel]:
    whole: dict[Reduce, Compute] = {}  # R -> the tensor whose whole body it is
    for k in kernels:
        if (isinstance(k, General) and k.body_of is k.tensor and not k.written()
                and isinstance(k.tensor.body, Reduce)
                and frozenset(k.tensor.axes) == free_vars(k.tensor.body)):
            whole.setdefault(k.tensor.body, k.tensor)
    if not whole:
        return kernels
    out = list(kernels)
    for k in kernels:
        if not isinstance(k, General) or k.written():
            continue
        source = k.body_of
        axes = frozenset(source.axes)
        found: list[Compute] = []

        def swap(e, own=(source, k.tensor), axes=axes, found=found):
            hit = whole.get(e) if isinstance(e, Reduce) else None
            if hit is None or hit in own or not frozenset(hit.axes) <= axes:
                return None
            found.append(hit)
            return Read(hit, hit.axes, hit.dtype)

        body = transform(source.body, swap)
        if not found:
            continue
        here = out.index(k)
        for hit in dict.fromkeys(found):
            made = next(n for n, m in enumerate(out) if isinstance(m, General) and m.tensor is hit)
            if made > here:
                out.insert(here, out.pop(made))
                here += 1
        rewritten = make_compute(source.shape, source.axes, body, source.name)
        out[here] = General(k.tensor, rewritten, (*k.parts, *dict.fromkeys(found)))
    return out
