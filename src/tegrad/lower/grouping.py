"""Grouping: general kernels of one shape written by one loop nest.

After fusion (``lower/fusion.py``) a plan may still hold a kernel that another reads at
its own point but that fusion kept, because a third kernel reads it too: a layer norm's
row mean, read by its variance and by its weight gradient. Run apart, both stream the
rows from memory. A kernel ``B`` takes an earlier kernel ``A`` of its shape into its loops
(``General.also``) when

* no kernel between them reads ``A`` (``A`` is then made where ``B`` is), and
* ``B`` reads ``A``, only at its own point, ``A[i, j]`` inside ``B[i, j]``: those reads
  become ``A``'s body, which the code generator evaluates once per point (interned nodes)
  and stores into ``A``'s array as well;
* both are plain row nests (``nest_build``'s row nest): no column-order reduction, no regions
  of the last axis, no residue classes.

    var[i] = sum_k (X[i, k] - mean[i])^2 / D      mean[i] = sum_k X[i, k] / D
    ->  one kernel: per row the mean, then the variance; both stored

``B`` keeps taking kernels while one qualifies, and ``A`` comes with what it already
writes (the same conditions hold for those tensors): an LSTM step whose gates a backward
keeps (plan outputs, so fusion keeps them) is one loop nest writing the hidden state, the
cell state and the gates.

Kernels that merely share inputs are left apart: a layer norm's output and input gradient
written by one loop (four row streams) was slower than the two loops apart, which keep
fewer rows in flight.

**Column sums.** A later kernel ``D[j] = sum_{i...} s(i..., j)`` summing over every axis of
a plain row kernel ``B[i..., j]`` but its last, with a summand ``s`` that reads only what
exists before ``B`` runs, is made in ``B``'s loops (``General.columns``): each thread adds
``s`` at the points it visits into its own row of partial sums, and the rows are added
in thread order after the loop (deterministic for a thread count). Of the row kernels
that can take it, the one that already reads the most of the row-sized tensors ``s`` reads
does (``_place_columns``). A layer norm's input, weight and bias gradients then stream
``dY`` and ``X`` once, not three times, also next to its forward:

    dX[i, j] = rstd[i] (dY[i, j] w[j] - ...)        dW[j] = sum_i dY[i, j] xhat[i, j]
    ->  one kernel: dX stored per point, dW (and dB) summed per thread
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ..ir.expr import Read, Reduce
from ..ir.tensor import make_compute
from ..ir.traverse import substitute, tensors_read, walk
from ..options import Options
from .fusion import inline
from .kernels import General, Kernel, Plan, reads_and_makes
from .nest_facts import column_order, regions
from .residue import unrolled_axes


def group(p: Plan, options: Options) -> Plan:
    """``p`` with general kernels of one loop nest written together (module header);
    ``options.max_regions`` as the loop nests will be built (``nest_build.py``)."""
    kernels = list(p.kernels)
    plain = _Remembered(partial(_plain, max_regions=options.max_regions,
                                ragged=options.ragged_residues))
    _merge_into_each(kernels, lambda ks, k: _absorb(ks, k, plain))  # same shape, earlier
    _place_columns(kernels, plain)  # column sums into a row kernel before them
    j = len(kernels) - 1
    while j >= 0:
        merged = _absorb_rows(kernels, j, set(p.outputs), plain)
        if merged is not None:
            k, kernel = merged  # kernel k computes kernel j's rows itself
            kernels[k] = kernel
            del kernels[j]
        j -= 1
    _READS.clear()
    return Plan(kernels, p.outputs, p.notes)


class _Remembered:
    """``fn(kernel)``, once per kernel object: ``_plain`` asks the loop-nest facts
    (regions, column order, residues) of one kernel's body, which take a walk of it, and
    the searches below ask it of each earlier kernel for every later one."""

    def __init__(self, fn):
        self.fn = fn
        self.known: dict = {}  # id(kernel) -> (kernel, answer)

    def __call__(self, kernel):
        hit = self.known.get(id(kernel))
        if hit is None or hit[0] is not kernel:
            hit = self.known[id(kernel)] = (kernel, self.fn(kernel))
        return hit[1]


def _merge_into_each(kernels: list, absorb) -> None:
    """For each kernel ``k`` in turn, while ``absorb(kernels, k)`` gives ``(j, kernel k
    with kernel j in its loops)``, put that in place of ``k`` and drop kernel ``j``."""
    k = 0
    while k < len(kernels):
        merged = absorb(kernels, k)
        if merged is None:
            k += 1
            continue
        j, kernel = merged
        kernels[k] = kernel
        del kernels[j]
        k -= j < k  # kernel k moved down one: ask it again


def _absorb_rows(kernels: list, j: int, outputs: set, plain):
    """``(k, kernel k with kernel j inlined)`` when kernel ``j`` (with the tensors it also
    writes) is read by one kernel only, a plain row nest ``k`` that reads it at its leading
    axes alone (``mean[i]`` in ``dX[i, j]``), or None. Fusion kept such a row statistic
    because its other readers were column sums that grouping has since moved into ``k``;
    inlined, each row's statistic is computed in that row's loop (once: code motion) and
    the rows are read from memory once."""
    a = kernels[j]
    if not isinstance(a, General) or a.columns:
        return None
    made = {a.tensor, *(t for t, _ in a.also)}
    if made & outputs:
        return None
    readers = [k for k, other in enumerate(kernels) if k != j and made & _reads(other)]
    if len(readers) != 1 or readers[0] < j or not plain(kernels[readers[0]]):
        return None
    k = readers[0]
    b = kernels[k]
    body_b = b.body_of
    lead = tuple(body_b.axes[: len(a.tensor.shape)])
    if len(lead) >= len(body_b.axes) or a.tensor.shape != body_b.shape[: len(lead)]:
        return None
    bodies = [body_b.body, *(body for _, body in b.written())]
    for e in (x for body in bodies for x in walk(body)):
        if isinstance(e, Read) and e.tensor in made and tuple(e.indices) != lead:
            return None
    inlined = _inliner(a)
    compute = make_compute(body_b.shape, body_b.axes, inlined(body_b.body), body_b.name)
    return k, replace(b, body_of=compute, also=tuple((t, inlined(body)) for t, body in b.also),
                      columns=tuple((t, inlined(body)) for t, body in b.columns))


def _place_columns(kernels: list, plain) -> None:
    """Each column sum (see the header), in order, into the earlier plain row kernel that
    can take it and already reads the most of the row-sized tensors its summand reads (the
    first of those on a tie): a layer norm's weight and bias gradients go into its input
    gradient's loops, which stream ``dY`` and ``X`` anyway, rather than into its output's
    (a forward+backward program), which would then read ``dY`` once more."""
    j = 0
    while j < len(kernels):
        d = kernels[j]
        best = None
        if isinstance(d, General) and not d.written() and _column_sum(d.body_of):
            later: set = set()  # made by the candidate or after it: a summand may not read
            for k in range(j - 1, -1, -1):
                b = kernels[k]
                later.update(_made(b))
                if (not isinstance(b, General) or len(b.body_of.axes) < 2
                        or b.body_of.shape[-1:] != d.body_of.shape or not plain(b)):
                    continue
                body_b = b.body_of
                summand = _column_summand(d.body_of, body_b.axes, body_b.shape)
                if summand is None or set(tensors_read(summand)) & later:
                    continue
                rows = {t for t in tensors_read(summand) if t.shape == body_b.shape}
                score = len(rows & _reads(b))
                if best is None or score >= best[0]:
                    best = (score, k, summand)
        if best is None:
            j += 1
            continue
        _, k, summand = best
        b = kernels[k]
        kernels[k] = replace(b, columns=(*b.columns, (d.tensor, summand)))
        del kernels[j]


def _column_sum(d) -> bool:
    """Whether ``d`` may be a column sum of some row nest (``_column_summand`` asks the
    rest): a 1-D float sum with no ``where``, over axes from 0."""
    body = d.body
    return (isinstance(body, Reduce) and body.combiner.name == "sum" and body.where is None
            and d.dtype in ("float32", "float64") and body.dtype == d.dtype
            and len(d.shape) == 1 and d.axes[0].lo == 0)


def _column_summand(d, axes, shape):
    """``d = sum_{r...} s(r..., j)``, the sum over ``axes[:-1]`` of a row nest of
    ``shape``: ``s`` over ``axes``, else None. A float sum with no ``where``."""
    body = d.body
    if (not _column_sum(d) or d.shape != shape[-1:] or len(body.axes) != len(axes) - 1):
        return None
    for r, v, n in zip(body.axes, axes[:-1], shape[:-1], strict=True):
        if r.lo != 0 or r.extent != n or v.lo != 0:
            return None
    if axes[-1].lo != 0:
        return None
    return substitute(body.source, {**dict(zip(body.axes, axes[:-1], strict=True)),
                                    d.axes[0]: axes[-1]})


def _made(kernel: Kernel) -> set:
    return set(kernel.makes())


def _absorb(kernels: list, k: int, plain):
    """``(j, kernel k with kernel j in its loops)`` for the nearest earlier ``j`` that
    can join it, or None. Kernel ``j`` comes with what it already also writes (an LSTM
    step's cell state with the gates a backward keeps: ``h_new`` then writes them all)."""
    b = kernels[k]
    if not plain(b):
        return None
    body_b = b.body_of
    bodies_b = [body_b.body, *(body for _, body in b.also)]
    read_by_b = {t for body in bodies_b for t in tensors_read(body)}
    between: set = set()  # what kernels j + 1 .. k - 1 read
    for j in range(k - 1, -1, -1):
        if j < k - 1:
            between |= _reads(kernels[j + 1])
        a = kernels[j]
        if a.tensor not in read_by_b or a.tensor.shape != b.tensor.shape:
            continue  # not read by kernel k, or of another shape
        made = _made(a)  # (no column sums yet: its tensor and what it also writes)
        if made & between:
            continue  # read in between: it must exist before kernel k runs
        if not plain(a):
            continue
        reads = [e for body in bodies_b for e in walk(body)
                 if isinstance(e, Read) and e.tensor in made]
        if (not any(e.tensor is a.tensor for e in reads)
                or any(tuple(e.indices) != tuple(body_b.axes) for e in reads)):
            continue  # not read, or read elsewhere than at its own point
        source = a.body_of
        renaming = dict(zip(source.axes, body_b.axes, strict=True))
        taken = [(a.tensor, source.body), *a.also]
        inlined = _inliner(a)
        compute = make_compute(body_b.shape, body_b.axes, inlined(body_b.body), body_b.name)
        also = (*((t, inlined(body)) for t, body in b.also),
                *((t, substitute(body, renaming)) for t, body in taken))
        return j, replace(b, body_of=compute, also=also)
    return None


def _inliner(a: Kernel):
    """``body -> body`` with every read of what kernel ``a`` makes (its tensor and what it
    also writes) replaced by that tensor's body."""
    source = a.body_of
    sources = [(a.tensor, source)] + [(t, make_compute(t.shape, source.axes, body, t.name))
                                       for t, body in a.also]

    def inlined(body):
        for t, compute in sources:
            body = inline(body, t, compute)
        return body

    return inlined


_READS: dict = {}  # id(kernel) -> (kernel, the tensors it reads): group() walks often


def _reads(kernel: Kernel) -> set:
    hit = _READS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    found = set(reads_and_makes(kernel)[0])
    _READS[id(kernel)] = (kernel, found)
    return found


def _plain(kernel: Kernel, max_regions: int, ragged: bool) -> bool:
    """A general kernel whose loop nest ``nest_build`` makes a plain row nest (no column
    order, no regions of its last axis, no residue classes)."""
    if not isinstance(kernel, General):
        return False
    c = kernel.body_of
    axes, shape = c.axes, c.shape
    if not axes or column_order(c.body, axes, shape) or regions(
            c.body, axes[-1], shape[-1], max_regions):
        return False
    return not (len(axes) > 1 and unrolled_axes(c.body, axes, ragged=ragged))
