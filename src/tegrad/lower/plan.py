"""``plan``: the kernels every target runs, in order (the kinds: ``kernels.py``).

Each compute of the graph takes a kernel form: a contraction, a scatter, or a general
kernel whose float sums that are contractions or scatters become kernels of their own
first (``extract.py``); a scan's step graph is planned the same way. A reduction that is
a tensor of its own is read where another body holds it (``shared_reductions.py``).
Then products of
one operand merge (``merge.py``), scans keep the step values a backward reads
(``saved_steps.py``) and checkpoint their histories (``checkpoint.py``). A target that
compiles its general kernels asks for ``fused=True``: producers inlined into their
readers (``fusion.py``) and kernels of one loop nest grouped (``grouping.py``), in every
step plan too. Last, the top plan's re-indexing kernels whose readers take strides
become views (``views.py``), on the fused plan anew. Every setting comes from
``options`` (``tegrad/options.py``).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.scan import LAG_READS, ScanOutput
from ..ir.tensor import Compute, Tensor
from ..ir.traverse import topo_tensors
from ..ir.verify import IRError, verify_compute
from ..options import Options
from .checkpoint import mark_checkpoints
from .contraction import match_contraction
from .extract import extract_kernels
from .fusion import fuse
from .grouping import group
from .kernels import Contraction, General, Kernel, Plan, ScanKernel, Scatter, needs
from .merge import merge_shared_products
from .saved_steps import keep_step_values
from .scatter import match_scatter
from .shared_reductions import read_shared_reductions
from .views import as_copies, choose_views


def plan(outputs: list[Tensor], given=(), options: Options | None = None,
         fused: bool = False) -> Plan:
    """Kernels for ``outputs``; tensors in ``given`` are inputs (computed elsewhere)."""
    options = options or Options.from_environment()
    made = _planned(outputs, set(given), options)
    return compiled(made, options) if fused else choose_views(made, options)


def compiled(made: Plan, options: Options) -> Plan:
    """``made`` (as ``plan`` made it) fused and grouped, and so every scan's step plan;
    then its views chosen again."""
    return choose_views(_fused(as_copies(made), options), options)


def _fused(made: Plan, options: Options) -> Plan:
    made = group(fuse(made, options), options)
    kernels = [replace(k, plan=_fused(k.plan, options)) if isinstance(k, ScanKernel) else k
               for k in made.kernels]
    return Plan(kernels, made.outputs, made.notes)


def _planned(outputs: list[Tensor], given: set, options: Options) -> Plan:
    widened, thin, waste = options.max_widened_step, options.thin_batch, options.max_widened_waste

    def form(t: Compute) -> Kernel | None:
        found = match_contraction(t, widened, thin, waste)
        if found is not None:
            return Contraction(t, found)
        found = match_scatter(t)
        return Scatter(t, found) if found is not None else None

    kernels: list[Kernel] = []
    made = set()  # an extracted part may also be a tensor of the graph: made once
    for t in topo_tensors(outputs, stop=given):
        if t in given or t in made:
            continue
        if isinstance(t, ScanOutput):
            if t.index == 0:
                step = t.op.step()
                kernels.append(ScanKernel(t.op, step, _planned(step.outputs, set(step.full),
                                                               options)))
            continue
        if not isinstance(t, Compute):
            continue
        verify_compute(t)
        if t in LAG_READS:
            raise IRError(LAG_READS[t][2])
        kernel = form(t)
        if kernel is not None:
            kernels.append(kernel)
            continue
        extracted = extract_kernels(t, form)
        if extracted is not None:
            parts, rest = extracted
            kernels.extend(part for part in parts if part.tensor not in made)
            made.update(part.tensor for part in parts)
            kernels.append(General(t, rest, tuple(part.tensor for part in parts)))
            continue
        kernels.append(General(t))
    kernels = read_shared_reductions(kernels)
    kept = keep_step_values(kernels, outputs, options.keep_step_kernels)
    kernels = merge_shared_products(needs(kept, outputs)[1], options)
    return mark_checkpoints(Plan(kernels, list(outputs)))
