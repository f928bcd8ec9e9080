"""The reference backend: runs a lowered plan with NumPy."""

from __future__ import annotations

import numpy as np

from ..lower.plan import Plan, written
from .numpy_eval import evaluate_compute
from .numpy_kernels import run_kernel
from .scan_run import run_scan


class NumpyProgram:
    def __init__(self, plan: Plan, inputs):
        self.plan = plan
        self.inputs = inputs
        self.dead_after = dead_after(plan)

    def run(self, feed: dict) -> list[np.ndarray]:
        arrays = dict(feed)
        for k, kernel in enumerate(self.plan.kernels):
            if kernel.kind == "scan":
                arrays.update(run_scan(kernel.detail, arrays, NumpyProgram))
            else:
                arrays[kernel.tensor] = run_kernel(kernel, arrays, evaluate_compute)
            for t in self.dead_after[k]:  # intermediates no later kernel reads
                del arrays[t]
        return [arrays[t] for t in self.plan.outputs]


def dead_after(plan: Plan) -> list[list]:
    """Per kernel, the computed tensors whose last reader it is (outputs are kept): the
    peak memory of a program is then what is live at once, not everything it made."""
    from ..ir.traverse import tensors_read

    made, last = set(), {}
    for k, kernel in enumerate(plan.kernels):
        if kernel.kind == "scan":
            op = kernel.detail.op
            reads = [*op.inits, *op.external]
            made.update(kernel.detail.outputs)
        else:
            body_of = getattr(kernel.detail, "body_of", kernel.tensor)  # a fused kernel's rest
            also = written(kernel)  # tensors its loops also write
            reads = [*tensors_read(body_of.body), *(r for _, b in also for r in tensors_read(b))]
            made.update([kernel.tensor, *(t for t, _ in also)])
        for t in reads:
            last[t] = k
    keep = set(plan.outputs)
    dead: list[list] = [[] for _ in plan.kernels]
    for t, k in last.items():
        if t in made and t not in keep:
            dead[k].append(t)
    return dead
