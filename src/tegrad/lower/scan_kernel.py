"""A scan as one kernel: its step graph planned once, run once per step.

The step graph (``ir/scan.py``) is an ordinary graph over per-step placeholders; its
plan gives each step compute a kernel form (contraction, general...), so the work within a
step is vectorized and the time loop is the only Python loop.

``checkpointed`` holds the states whose history this plan stores as checkpoints (set by
``lower/checkpoint.py`` from ``op.checkpoint`` and the plan's readers; empty: every
history is kept whole), ``unread`` those of them no kernel reads (their checkpoints need
not outlive the run of the scan), ``segments_cached`` how many recomputed segments the
executor keeps at once (enough for one step of its readers, so each segment is
recomputed once). ``saved`` holds the step values the forward run keeps for a backward
(``saved_steps.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.scan import ScanOp, StepGraph
from ..ir.tensor import Tensor
from .plan import Plan


@dataclass
class ScanKernel:
    op: ScanOp
    step: StepGraph
    plan: object  # the step graph's Plan
    checkpointed: frozenset[int] = field(default_factory=frozenset)  # state indices
    unread: frozenset[int] = field(default_factory=frozenset)  # checkpointed, read by none
    segments_cached: int = 1
    saved: dict = field(default_factory=dict)  # values over the steps -> step compute
    flips: dict = field(default_factory=dict)  # values -> flip (see ``row``)

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

    def describe(self) -> str:
        inner = "; ".join(f"{k.kind} {k.tensor.name}" for k in self.plan.kernels)
        text = f"{self.op.length - self.op.init_rows} steps of [{inner}]"
        if self.checkpointed:
            names = ", ".join(self.op.outputs[n].name for n in sorted(self.checkpointed))
            text += f"; checkpointed every {self.op.checkpoint} steps: {names}"
        if self.saved:
            text += "; keeps " + ", ".join(v.name for v in self.saved)
        return text


def plan_scan(op: ScanOp) -> ScanKernel:
    from .plan import plan

    step = op.step()
    return ScanKernel(op, step, plan(step.outputs, given=step.full))
