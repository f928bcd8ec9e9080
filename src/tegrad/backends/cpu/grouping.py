"""Grouping: general kernels of one shape written by one loop nest.

After fusion (``lower/fusion.py``) a plan may still hold a kernel that another reads at
its own point but that fusion kept, because a third kernel reads it too: a layer norm's
row mean, read by its variance and by its weight gradient. Run apart, both stream the
rows from memory. A kernel ``B`` takes an earlier kernel ``A`` of its shape into its loops
(``Fused.also``) when

* no kernel between them reads ``A`` (``A`` is then made where ``B`` is), and
* ``B`` reads ``A``, only at its own point, ``A[i, j]`` inside ``B[i, j]``: those reads
  become ``A``'s body, which the code generator evaluates once per point (interned nodes)
  and stores into ``A``'s array as well;
* both are plain row nests (``codegen._row_nest``): no column-order reduction, no regions
  of the last axis, no residue classes.

    var[i] = sum_k (X[i, k] - mean[i])^2 / D      mean[i] = sum_k X[i, k] / D
    ->  one kernel: per row the mean, then the variance; both stored

Kernels that merely share inputs are left apart: a layer norm's output and input gradient
written by one loop (four row streams, 4096 x 1024) took 5.1 ms against 1.3 + 1.7 ms
apart (medians of 25 calls, a one-off A/B script not kept in the repo).
"""

from __future__ import annotations

from ...ir.expr import Read
from ...ir.tensor import make_compute
from ...ir.traverse import substitute, tensors_read, walk
from ...lower.fusion import inline
from ...lower.plan import Fused, Kernel, Plan
from ...lower.residue import unrolled_axes
from .kernel_facts import column_order, regions


def group(p: Plan) -> Plan:
    kernels = list(p.kernels)
    k = 0
    while k < len(kernels):
        merged = _absorb(kernels, k)
        if merged is None:
            k += 1
            continue
        j, kernel = merged  # kernel k takes kernel j (< k) into its loops
        kernels[k] = kernel
        del kernels[j]
    return Plan(kernels, p.outputs, p.notes)


def _absorb(kernels: list, k: int):
    """``(j, kernel k with kernel j in its loops)`` for the nearest earlier ``j`` that
    can join it, or None."""
    b = kernels[k]
    if not _plain(b):
        return None
    body_b = _body(b)
    for j in range(k - 1, -1, -1):
        a = kernels[j]
        if any(a.tensor in _reads(kernels[m]) for m in range(j + 1, k)):
            continue  # read in between: it must exist before kernel k runs
        if not _plain(a) or a.tensor.shape != b.tensor.shape or _also(a):
            continue
        reads = [e for e in walk(body_b.body) if isinstance(e, Read) and e.tensor is a.tensor]
        if not reads or any(tuple(e.indices) != tuple(body_b.axes) for e in reads):
            continue  # not read, or read elsewhere than at its own point
        source = _body(a)
        renamed = substitute(source.body, dict(zip(source.axes, body_b.axes, strict=True)))
        also = (*_also(b), (a.tensor, renamed))
        compute = make_compute(body_b.shape, body_b.axes,
                               inline(body_b.body, a.tensor, source), body_b.name)
        parts = getattr(b.detail, "parts", ())
        return j, Kernel(b.tensor, "general", Fused(compute, parts, also))
    return None


def _body(kernel: Kernel):
    return getattr(kernel.detail, "body_of", kernel.tensor)


def _also(kernel: Kernel) -> tuple:
    return getattr(kernel.detail, "also", ())


def _reads(kernel: Kernel) -> set:
    if kernel.kind == "scan":
        return {*kernel.detail.op.inits, *kernel.detail.op.external}
    if kernel.kind == "general":
        return {*tensors_read(_body(kernel).body),
                *(r for _, body in _also(kernel) for r in tensors_read(body))}
    return set(tensors_read(kernel.tensor.body))


def _plain(kernel: Kernel) -> bool:
    """A general kernel that ``codegen`` writes as a plain row nest."""
    if kernel.kind != "general":
        return False
    c = _body(kernel)
    axes, shape = c.axes, c.shape
    if not axes or column_order(c.body, axes, shape) or regions(c.body, axes[-1], shape[-1]):
        return False
    return not (len(axes) > 1 and unrolled_axes(c.body, axes))
