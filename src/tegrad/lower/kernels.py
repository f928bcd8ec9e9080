"""The kernels of a plan, one class per kind, and the plan itself.

  General      the compute evaluated as a fused expression over its index grid
               (``body_of``: the compute with its contractions and scatters read from the
               ``parts`` computed before it, ``extract.py``); on compiled targets its loops
               may also write ``also`` and sum ``columns`` (``grouping.py``)
  Contraction  a sum over a product of affine (possibly guarded) reads: a BLAS call on
               strided views (``contraction.py``)
  Scatter      a sum whose ``where`` pins output indices to expressions of the reduce axes
               that could not be inverted: an explicit, deterministic scatter-add
               (``scatter.py``)
  ScanKernel   a recurrence: its step graph planned once and run once per step
  View         a compute that only re-indexes one tensor, made as a strided view of
               that tensor's array, not computed (``reindex.py``, ``views.py``)

Every kernel has ``tensor`` (what it makes first), ``kind`` (its name above, for
descriptions), ``reads_and_makes()`` and ``makes()`` (the second half of the first, without
walking a body). Targets dispatch on the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..ir.scan import ScanOp, StepGraph
from ..ir.tensor import Compute, Tensor
from ..ir.traverse import tensors_read
from .contraction import Contraction as ContractionForm
from .reindex import Strides
from .scatter import Scatter as ScatterForm


@dataclass(frozen=True)
class General:
    """``tensor`` evaluated point by point as ``body_of``. ``also``: more tensors of the
    same shape that its loops write, each ``(tensor, body over body_of's axes)``;
    ``columns``: 1-D tensors its loops sum, each ``(tensor, summand over body_of's axes)``,
    ``tensor[j] = sum over the other axes of summand`` with ``j`` the last axis."""

    tensor: Compute
    body_of: Compute = None  # type: ignore[assignment]  # None: the tensor itself
    parts: tuple[Compute, ...] = ()
    also: tuple = ()
    columns: tuple = ()
    kind: ClassVar[str] = "general"

    def __post_init__(self):
        if self.body_of is None:
            object.__setattr__(self, "body_of", self.tensor)

    def written(self) -> tuple:
        """``(tensor, body)`` of every tensor written besides the kernel's own."""
        return self.also + self.columns

    def reads_and_makes(self) -> tuple[list[Tensor], list[Tensor]]:
        also = self.written()
        reads = [*tensors_read(self.body_of.body),
                 *(r for _, b in also for r in tensors_read(b))]
        return reads, self.makes()

    def makes(self) -> list[Tensor]:
        return [self.tensor, *(t for t, _ in self.written())]

    def describe(self) -> str:
        said = [f"reads {', '.join(p.name for p in self.parts)}"] if self.parts else []
        if self.also:
            said.append(f"also writes {', '.join(t.name for t, _ in self.also)}")
        if self.columns:
            said.append(f"also sums {', '.join(t.name for t, _ in self.columns)}")
        return "; ".join(said)


class _WholeBody:
    """A kernel that evaluates its tensor's own body: it reads what that body reads."""

    tensor: Compute

    def reads_and_makes(self) -> tuple[list[Tensor], list[Tensor]]:
        return list(tensors_read(self.tensor.body)), self.makes()

    def makes(self) -> list[Tensor]:
        return [self.tensor]


@dataclass(frozen=True)
class Contraction(_WholeBody):
    tensor: Compute
    contraction: ContractionForm
    kind: ClassVar[str] = "contraction"

    def describe(self) -> str:
        return self.contraction.describe()


@dataclass(frozen=True)
class Scatter(_WholeBody):
    tensor: Compute
    scatter: ScatterForm
    kind: ClassVar[str] = "scatter"

    def describe(self) -> str:
        return self.scatter.describe()


@dataclass(frozen=True)
class View:
    tensor: Compute
    strides: Strides
    kind: ClassVar[str] = "view"

    def reads_and_makes(self) -> tuple[list[Tensor], list[Tensor]]:
        return [self.strides.source], [self.tensor]

    def describe(self) -> str:
        return self.strides.describe()


@dataclass
class ScanKernel:
    """A scan's step graph and its plan. ``checkpointed`` holds the states whose history
    the plan stores as checkpoints (``checkpoint.py``; empty: every history is kept whole),
    ``unread`` those of them no kernel reads (their checkpoints need not outlive the run),
    ``segments_cached`` how many recomputed segments the executor keeps at once (enough for
    one step of its readers, so each segment is recomputed once). ``saved`` holds the step
    values the forward run keeps for a backward (``saved_steps.py``)."""

    op: ScanOp
    step: StepGraph
    plan: Plan  # the step graph's
    checkpointed: frozenset[int] = field(default_factory=frozenset)  # state indices
    unread: frozenset[int] = field(default_factory=frozenset)  # checkpointed, read by none
    segments_cached: int = 1
    saved: dict = field(default_factory=dict)  # values over the steps -> step compute
    flips: dict = field(default_factory=dict)  # values -> flip (see ``row``)
    kind: ClassVar[str] = "scan"

    def save(self, x: Tensor, values: Tensor, flip: int | None = None) -> None:
        """Keep step compute ``x`` at every step ``t`` in row ``row(values, t)`` of
        ``values`` (``saved_steps.py``): the step plan returns it after the states (once,
        however many tensors hold it: a second-order backward recomputes it again)."""
        if x not in self.kept_steps:
            self.plan = Plan(self.plan.kernels, [*self.plan.outputs, x], self.plan.notes)
        self.saved[values] = x
        self.flips[values] = flip

    def row(self, values: Tensor, t: int) -> int | None:
        """The row of ``values`` that step ``t`` writes: ``t - k``, or ``flip - t`` (an
        adjoint's values for the input gradients); None when outside."""
        coefficient, offset = self.row_line(values)
        r = coefficient * t + offset
        return r if 0 <= r < values.shape[0] else None

    def row_line(self, values: Tensor) -> tuple[int, int]:
        """``(a, b)``: step ``t`` writes row ``a t + b`` of ``values`` (see ``row``)."""
        flip = self.flips.get(values)
        return (1, -self.op.init_rows) if flip is None else (-1, flip)

    @property
    def kept_steps(self) -> list[Tensor]:
        """The step computes kept, in the order the step plan returns them."""
        return list(dict.fromkeys(self.saved.values()))

    @property
    def outputs(self) -> list[Tensor]:
        """Everything the kernel makes: the histories, then the kept step values."""
        return [*self.op.outputs, *self.saved]

    @property
    def tensor(self) -> Tensor:
        return self.op.outputs[0]

    def reads_and_makes(self) -> tuple[list[Tensor], list[Tensor]]:
        return [*self.op.inits, *self.op.external], self.makes()

    def makes(self) -> list[Tensor]:
        return list(self.outputs)

    def describe(self) -> str:
        inner = "; ".join(f"{k.kind} {k.tensor.name}" for k in self.plan.kernels)
        text = f"{self.op.length - self.op.init_rows} steps of [{inner}]"
        if self.checkpointed:
            names = ", ".join(self.op.outputs[n].name for n in sorted(self.checkpointed))
            text += f"; checkpointed every {self.op.checkpoint} steps: {names}"
        if self.saved:
            text += "; keeps " + ", ".join(v.name for v in self.saved)
        return text


Kernel = General | Contraction | Scatter | View | ScanKernel


@dataclass
class Plan:
    kernels: list[Kernel]
    outputs: list[Tensor]
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = []
        for k in self.kernels:
            detail = k.describe()
            lines.append(f"{k.kind:12s} {k.tensor.name} {k.tensor.shape}"
                         + (f"  ({detail})" if detail else ""))
        return "\n".join(lines)


def reads_and_makes(kernel: Kernel) -> tuple[list[Tensor], list[Tensor]]:
    """The tensors ``kernel`` reads (its fused body's, and those of what its loops also
    write) and those it makes (a scan: its histories and kept step values)."""
    return kernel.reads_and_makes()


def needs(kernels: list[Kernel], outputs, always=lambda kernel: False
          ) -> tuple[set, list[Kernel]]:
    """``(tensors needed, kernels needed)``: walking back from ``outputs``, a kernel is
    needed when it makes a needed tensor (or ``always(kernel)``), and then what it reads
    is needed too."""
    needed, live = set(outputs), []
    for k in reversed(kernels):
        reads, makes = k.reads_and_makes()
        if always(k) or any(t in needed for t in makes):
            needed.update(reads)
            live.append(k)
    return needed, live[::-1]
