"""A plan: the computes to materialize, in order, each with the kernel form chosen.

Kernel forms:
  general      the compute evaluated as a fused expression over its index grid; the
               float sums inside it that are contractions or scatters are computed
               first, as kernels of their own (``extract.py``)
  contraction  a sum over a product of affine (possibly guarded) reads: a BLAS call on
               strided views (see ``contraction.py``)
  scatter      a sum whose ``where`` pins output indices to expressions of the reduce
               axes that could not be inverted: an explicit, deterministic scatter-add
               (see ``scatter.py``)
  scan         a recurrence: its step graph planned once and run once per step
               (see ``scan_kernel.py``)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.scan import LAG_READS, ScanOutput
from ..ir.tensor import Compute, Tensor
from ..ir.traverse import tensors_read, topo_tensors
from ..ir.verify import IRError, verify_compute


@dataclass
class Kernel:
    tensor: Compute
    kind: str = "general"
    detail: object = None


@dataclass
class Plan:
    kernels: list[Kernel]
    outputs: list[Tensor]
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = []
        for k in self.kernels:
            detail = k.detail.describe() if hasattr(k.detail, "describe") else ""
            lines.append(f"{k.kind:12s} {k.tensor.name} {k.tensor.shape}"
                         + (f"  ({detail})" if detail else ""))
        return "\n".join(lines)


@dataclass(frozen=True)
class Fused:
    """A general kernel evaluating ``body_of`` (the compute with its contractions and
    scatters read from the ``parts`` computed before it; ``extract.py``); ``also``: more
    tensors of the same shape that its loops write, each ``(tensor, body over body_of's
    axes)``; ``columns``: 1-D tensors its loops sum, each ``(tensor, summand over body_of's
    axes)``, ``tensor[j] = sum over the other axes of summand`` with ``j`` the last axis
    (``backends/cpu/grouping.py``)."""

    body_of: Compute
    parts: tuple[Compute, ...]
    also: tuple = ()
    columns: tuple = ()

    def written(self) -> tuple:
        """``(tensor, body)`` of every tensor written besides the kernel's own."""
        return self.also + self.columns

    def describe(self) -> str:
        said = [f"reads {', '.join(p.name for p in self.parts)}"] if self.parts else []
        if self.also:
            said.append(f"also writes {', '.join(t.name for t, _ in self.also)}")
        if self.columns:
            said.append(f"also sums {', '.join(t.name for t, _ in self.columns)}")
        return "; ".join(said)


def written(kernel: Kernel) -> tuple:
    """``(tensor, body)`` of the tensors a kernel writes besides its own (``Fused.written``:
    grouping on the compiled target), else none."""
    detail = kernel.detail
    return detail.written() if isinstance(detail, Fused) else ()


def reads_and_makes(kernel: Kernel) -> tuple[list[Tensor], list[Tensor]]:
    """The tensors ``kernel`` reads (its fused body's, and those of what its loops also
    write) and those it makes (a scan: its histories and kept step values)."""
    if kernel.kind == "scan":
        op = kernel.detail.op
        return [*op.inits, *op.external], list(kernel.detail.outputs)
    body_of = getattr(kernel.detail, "body_of", kernel.tensor)  # a fused kernel's rest
    also = written(kernel)
    reads = [*tensors_read(body_of.body), *(r for _, b in also for r in tensors_read(b))]
    return reads, [kernel.tensor, *(t for t, _ in also)]


def _kernel_form(t: Compute):
    from .contraction import match_contraction
    from .scatter import match_scatter

    for kind, match in (("contraction", match_contraction), ("scatter", match_scatter)):
        found = match(t)
        if found is not None:
            return kind, found
    return None


def plan(outputs: list[Tensor], given=()) -> Plan:
    """Kernels for ``outputs``; tensors in ``given`` are inputs (computed elsewhere)."""
    from .checkpoint import mark_checkpoints
    from .contraction import match_contraction
    from .extract import extract_kernels
    from .merge import merge_shared_products
    from .saved_steps import keep_step_values
    from .scan_kernel import plan_scan
    from .scatter import match_scatter

    kernels = []
    given = set(given)
    made = set()  # an extracted part may also be a tensor of the graph: made once
    for t in topo_tensors(outputs, stop=given):
        if t in given or t in made:
            continue
        if isinstance(t, ScanOutput):
            if t.index == 0:
                kernels.append(Kernel(t, "scan", plan_scan(t.op)))
            continue
        if not isinstance(t, Compute):
            continue
        verify_compute(t)
        if t in LAG_READS:
            raise IRError(LAG_READS[t][2])
        detail = match_contraction(t)
        if detail is not None:
            kernels.append(Kernel(t, "contraction", detail))
            continue
        detail = match_scatter(t)
        if detail is not None:
            kernels.append(Kernel(t, "scatter", detail))
            continue
        extracted = extract_kernels(t, _kernel_form)
        if extracted is not None:
            parts, rest = extracted
            kernels.extend(Kernel(part, kind, found) for part, kind, found in parts
                           if part not in made)
            made.update(part for part, _, _ in parts)
            kernels.append(Kernel(t, "general", Fused(rest, tuple(p for p, _, _ in parts))))
            continue
        kernels.append(Kernel(t, "general"))
    kernels = merge_shared_products(_live(keep_step_values(kernels, outputs), outputs))
    return mark_checkpoints(Plan(kernels, list(outputs)))


def _live(kernels: list[Kernel], outputs) -> list[Kernel]:
    """The kernels that some output needs: a value a scan keeps leaves the kernels that
    only its recomputation read (an LSTM's gate gradients after the adjoint) unread."""
    return needs(kernels, outputs)[1]


def needs(kernels: list[Kernel], outputs, always=lambda kernel: False
          ) -> tuple[set, list[Kernel]]:
    """``(tensors needed, kernels needed)``: walking back from ``outputs``, a kernel is
    needed when it makes a needed tensor (or ``always(kernel)``), and then what it reads
    is needed too."""
    needed, live = set(outputs), []
    for k in reversed(kernels):
        reads, makes = reads_and_makes(k)
        if always(k) or any(t in needed for t in makes):
            needed.update(reads)
            live.append(k)
    return needed, live[::-1]
