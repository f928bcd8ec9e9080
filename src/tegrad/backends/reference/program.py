"""``target="numpy"``: the reference. A lowered plan run as planned (unfused), with NumPy:
general kernels by ``host/evaluate.py``, contractions and scatters by the host engine
(``host/products.py``, ``host/scatter.py``), scans step by step (``host/scan_run.py``)."""

from __future__ import annotations

import numpy as np

from ...lower.kernels import Plan, ScanKernel
from ...options import Options
from ..host.kernels import run_kernel
from ..host.liveness import dead_after
from ..host.ops import HostOps
from ..host.scan_run import run_scan


class NumpyTarget:
    name = "numpy"
    description = "the NumPy backend"
    fused = False
    cached = False

    def unavailable(self) -> None:
        return None

    def prepare(self, plan: Plan, options: Options) -> Plan:
        return plan

    def program(self, plan: Plan, inputs: list, options: Options) -> NumpyProgram:
        return NumpyProgram(plan, inputs, options)


class NumpyProgram:
    def __init__(self, plan: Plan, inputs, options: Options | None = None):
        options = options or Options.from_environment()
        self.plan = plan
        self.inputs = inputs
        self.options = options
        self.host = HostOps.for_options(options)
        self.dead_after = dead_after(plan, options.free_unread)

    def run(self, feed: dict) -> list[np.ndarray]:
        arrays = dict(feed)
        for k, kernel in enumerate(self.plan.kernels):
            if isinstance(kernel, ScanKernel):
                arrays.update(run_scan(kernel, arrays, self.step_program))
            else:
                arrays[kernel.tensor] = run_kernel(kernel, arrays, self.host)
            for t in self.dead_after[k]:  # intermediates no later kernel reads
                arrays.pop(t, None)
        return [arrays[t] for t in self.plan.outputs]

    def step_program(self, plan: Plan, inputs) -> NumpyProgram:
        """A scan's step program, under this program's options."""
        return NumpyProgram(plan, inputs, self.options)
