"""Views: which re-indexing kernels of a plan are made as strided views, not copies.

A general kernel whose (fused) body only re-indexes one tensor (``reindex.py``: a
transpose, permute, reshape, flatten, expand, slice, a ``split``'s pieces, a ``cat``'s or
a ``stack``'s gradients) becomes a ``View`` of that tensor's array when everything that
reads it takes strides:

    plan outputs          the caller gets a NumPy view (as torch returns views)
    contractions          the product engine reads strided views of its operands
    scatters, views       they index their operands' arrays as they are

and no general kernel or scan reads it: a compiled loop nest reads C-ordered arrays (and
fusion has already inlined a re-indexing into the loop nests that read it where it
could), a scan's steps run by address. Readers are decided first (the plan from its
end), so a view may read a view. A checkpointed scan history is no array: a view of it
stays a copy. Targets realize a ``View`` in their own way (the host: ``host/view_kernel.py``).

Aliasing is safe by construction: a view holds a reference to the array it shows, and a
program's buffer pool reuses an array only once nothing else references it
(``backends/cpu/buffers.py``), so a view returned to the caller is never overwritten by
a later call; a view of a program input aliases the caller's array, as a torch view does.

Run on the plan every target runs (``plan.py``), last: after fusion and grouping on a
compiled target, whose fused bodies may re-index through several computes at once.
"""

from __future__ import annotations

from ..options import Options
from .kernels import Contraction, General, Plan, ScanKernel, Scatter, View, reads_and_makes
from .reindex import match_reindexing


def choose_views(p: Plan, options: Options) -> Plan:
    """``p`` with its re-indexing kernels made views where their readers take strides
    (module docstring); unchanged when ``options.views`` is off."""
    if not options.views:
        return p
    readers: dict = {}
    unviewable = set()
    for k in p.kernels:
        for t in reads_and_makes(k)[0]:
            readers.setdefault(t, []).append(k)
        if isinstance(k, ScanKernel):
            unviewable.update(k.op.outputs[n] for n in k.checkpointed)
    chosen: dict[int, View] = {}
    for k in reversed(p.kernels):
        if not isinstance(k, General) or k.written() or k.parts:
            continue
        found = match_reindexing(k.body_of)
        if found is None or found.source in unviewable:
            continue
        if all(isinstance(r, (Contraction, Scatter)) or id(r) in chosen
               for r in readers.get(k.tensor, ())):
            chosen[id(k)] = View(k.tensor, found)
    if not chosen:
        return p
    return Plan([chosen.get(id(k), k) for k in p.kernels], p.outputs, p.notes)


def as_copies(p: Plan) -> Plan:
    """``p`` with every view a general kernel again (fusion then inlines re-indexings into
    their readers, and ``choose_views`` decides again on the fused plan)."""
    if not any(isinstance(k, View) for k in p.kernels):
        return p
    return Plan([General(k.tensor) if isinstance(k, View) else k for k in p.kernels],
                p.outputs, p.notes)
