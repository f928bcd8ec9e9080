"""The reference backend: runs a lowered plan with NumPy."""

from __future__ import annotations

import numpy as np

from ..lower.plan import Plan, reads_and_makes
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
                arrays.pop(t, None)
        return [arrays[t] for t in self.plan.outputs]


FREE_UNREAD = True  # False: only what a later kernel reads is dropped (benchmarks/bench_ab.py)


def dead_after(plan: Plan) -> list[list]:
    """Per kernel, the computed tensors whose last reader it is, or that it makes and
    nothing reads (a scan's history of a state no later kernel reads: an LSTM's cells);
    outputs are kept. The peak memory of a program is then what is live at once, not
    everything it made, and the compiled target's pool gets each buffer back for the next
    run (an array made anew costs a page fault per 4 KiB it writes)."""
    made, last = set(), {}
    for k, kernel in enumerate(plan.kernels):
        reads, makes = reads_and_makes(kernel)
        made.update(makes)
        for t in reads:
            last[t] = k
        if FREE_UNREAD:
            for t in makes:
                last.setdefault(t, k)
    keep = set(plan.outputs)
    dead: list[list] = [[] for _ in plan.kernels]
    for t, k in last.items():
        if t in made and t not in keep:
            dead[k].append(t)
    return dead
