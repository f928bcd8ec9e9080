"""The reference backend: runs a lowered plan with NumPy."""

from __future__ import annotations

import numpy as np

from ..lower.plan import Plan
from .numpy_eval import evaluate_compute
from .numpy_kernels import run_kernel


class NumpyProgram:
    def __init__(self, plan: Plan, inputs):
        self.plan = plan
        self.inputs = inputs

    def run(self, feed: dict) -> list[np.ndarray]:
        arrays = dict(feed)
        for kernel in self.plan.kernels:
            arrays[kernel.tensor] = run_kernel(kernel, arrays, evaluate_compute)
        return [arrays[t] for t in self.plan.outputs]
