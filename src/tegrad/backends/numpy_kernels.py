"""NumPy execution of each kernel form of a plan."""

from __future__ import annotations


def run_kernel(kernel, arrays, evaluate_compute):
    if kernel.kind == "general":
        return evaluate_compute(kernel.tensor, arrays)
    raise NotImplementedError(kernel.kind)
