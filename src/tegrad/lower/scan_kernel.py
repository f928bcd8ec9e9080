"""A scan as one kernel: its step graph planned once, run once per step.

The step graph (``ir/scan.py``) is an ordinary graph over per-step placeholders; its
plan gives each step compute a kernel form (contraction, general...), so the work within a
step is vectorized and the time loop is the only Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.scan import ScanOp, StepGraph
from ..ir.tensor import Tensor


@dataclass
class ScanKernel:
    op: ScanOp
    step: StepGraph
    plan: object  # the step graph's Plan

    @property
    def tensor(self) -> Tensor:
        return self.op.outputs[0]

    def describe(self) -> str:
        inner = "; ".join(f"{k.kind} {k.tensor.name}" for k in self.plan.kernels)
        return f"{self.op.length - self.op.init_rows} steps of [{inner}]"


def plan_scan(op: ScanOp) -> ScanKernel:
    from .plan import plan

    step = op.step()
    return ScanKernel(op, step, plan(step.outputs, given=step.full))
