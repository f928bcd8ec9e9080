"""``target="cpu"``: a plan run with its general kernels compiled to native code.

The plan comes fused and grouped (``lower.plan(..., fused=True)``); each general kernel
and each scatter-add (``lower/nest_scatter.py``; with ``Options.compiled_scatters`` off,
the NumPy path of ``host/scatter.py``) becomes a C function (``codegen.py``), compiled once
however many kernels of this program or of earlier ones have the same text up to their
names (``kernel_cache.py``). Contractions stay on BLAS and views are NumPy views
(``host/view_kernel.py``); a scan's time loop runs its compiled step program.

Threads: ``Options.machine.threads`` (``$TEGRAD_NUM_THREADS``, default the cores this
process may use).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...lower.kernels import (
    Contraction,
    General,
    Plan,
    ScanKernel,
    Scatter,
    View,
    reads_and_makes,
)
from ...lower.nest_scatter import compilable
from ...options import Options
from ..host.kernels import run_kernel
from ..host.liveness import dead_after
from ..host.ops import HostOps
from ..host.scan_run import run_scan
from ..host.view_kernel import ViewOf
from .buffers import BufferPool
from .codegen import KernelSource, ScatterSource
from .gemm import blas_threads_shared, one_blas_thread
from .kernel_call import CompiledKernel, KernelText, Library
from .replay import ReplayedContraction
from .step_trace import StepTrace


@dataclass
class Blueprint:
    """What a ``CpuProgram`` is made from: its plan fused and grouped, and per kernel a
    general kernel's or a scatter's C (``KernelText``), a scan's step blueprint, or None
    (contractions, scatters left to NumPy). Plain data, so ``tg.build`` keeps it in the disk cache
    (``cache/disk.py``): a warm process does not plan or generate C again."""

    plan: Plan
    parts: list

    def texts(self) -> list[KernelText]:
        """Every general kernel's C, step blueprints' included (one ``Library``)."""
        out = []
        for part in self.parts:
            out += part.texts() if isinstance(part, Blueprint) else [part] if part else []
        return out


def blueprint(plan: Plan, numbers: Iterator[int] | None = None,
              options: Options | None = None) -> Blueprint:
    """``plan`` (fused and grouped) with its general kernels written in C; kernels are named
    ``k0, k1, ...`` across the step blueprints (``numbers`` gives the next). The top
    program's kernels write past the caches what no later kernel reads (large outputs,
    ``lower/nest_build.py``); a step program's outputs are the next step's inputs."""
    top = numbers is None
    numbers = itertools.count() if numbers is None else numbers
    read = {t for kernel in plan.kernels for t in reads_and_makes(kernel)[0]}
    parts: list = []
    for kernel in plan.kernels:
        if isinstance(kernel, General):
            made = reads_and_makes(kernel)[1]
            src = KernelSource(kernel.tensor, kernel.body_of, f"k{next(numbers)}",
                               kernel.also, kernel.columns,
                               frozenset(t for t in made if top and t not in read), options)
            parts.append(_text(src))
        elif (isinstance(kernel, Scatter) and compilable(kernel.scatter)
              and (options or Options.from_environment()).compiled_scatters):
            parts.append(_text(ScatterSource(kernel.tensor, kernel.scatter, f"k{next(numbers)}",
                                             options)))
        elif isinstance(kernel, ScanKernel):
            parts.append(blueprint(kernel.plan, numbers, options))
        else:
            parts.append(None)
    return Blueprint(plan, parts)


def _text(src: KernelSource | ScatterSource) -> KernelText:
    return KernelText(src.tensor, src.name, src.text, tuple(src.args), src.outputs,
                      tuple(src.gathers))


class CpuProgram:
    """A blueprint's kernels bound to their compiled functions (``unit``: the library of
    the top program, shared by its scans' step programs)."""

    def __init__(self, made: Blueprint, inputs, options: Options | None = None,
                 unit: Library | None = None):
        options = self.options = options or Options.from_environment()
        self.plan = made.plan
        self.inputs = inputs
        self.dead_after = dead_after(self.plan, options.free_unread)
        top = self.top = unit is None
        threads = self.threads = options.machine.threads
        self.pool = BufferPool(options.pool_min_bytes)
        self.trace = threading.local()  # a step's trace, per thread (step_trace.py)
        unit = unit or Library(made.texts())
        self.steps = []
        for kernel, part in zip(self.plan.kernels, made.parts, strict=True):
            if isinstance(part, KernelText):  # a general kernel or a scatter
                self.steps.append(CompiledKernel(part, unit, threads, options.pool_min_bytes))
            elif isinstance(kernel, Contraction):
                self.steps.append(ReplayedContraction(kernel.contraction, threads, options))
            elif isinstance(kernel, ScanKernel):
                self.steps.append(CpuProgram(part, kernel.step.placeholders(), options, unit))
            elif isinstance(kernel, View):
                self.steps.append(ViewOf(kernel.strides))
            else:
                self.steps.append(None)
        # OpenBLAS held at one thread while a run makes products on this target's threads
        # (gemm.py): always with OpenBLAS, else where scans or NumPy-run kernels run; a
        # program of compiled kernels and contractions on MKL runs without (entering and
        # leaving costs microseconds, much of a small product's run)
        self.holds_blas_threads = blas_threads_shared() or any(
            step is None or isinstance(kernel, ScanKernel)
            for kernel, step in zip(self.plan.kernels, self.steps, strict=True))
        self.host = HostOps.for_options(options)  # (scatters: NumPy-run)
        if top:
            unit.load()
        self.direct = self._direct_call() if top else None

    def _direct_call(self):
        """``run`` by position for a program that is one small compiled kernel reading
        only the inputs, with no scratch tensor and no BLAS to hold (an eager op: ``x + y``
        on small arrays), or one view of an input: the input arrays, of their
        placeholders' shapes and dtypes (the caller checks), straight to the kernel, with
        no feed, no pool and no liveness.
        None for any other program."""
        if len(self.plan.kernels) != 1 or self.holds_blas_threads:
            return None
        (kernel,), (step,) = self.plan.kernels, self.steps
        if (isinstance(step, ViewOf) and step.source in self.inputs
                and list(self.plan.outputs) == [kernel.tensor]):  # ``x[1:5, ::2]``
            source, position = step.source, self.inputs.index(step.source)
            return lambda arrays: [step({source: arrays[position]})]
        if (not isinstance(step, CompiledKernel) or step.written or step.pooled
                or list(self.plan.outputs) != [kernel.tensor]
                or any(a not in self.inputs for a, _, _ in step.reads)):
            return None
        return step.direct([self.inputs.index(a) for a, _, _ in step.reads])

    def run(self, feed: dict) -> list[np.ndarray]:
        if not self.top:
            return self.run_into(feed, None)
        self.pool.reclaim()
        if self.holds_blas_threads:
            with one_blas_thread():  # one thread pool: see gemm.py
                results = self._run_kernels(feed)
        else:
            results = self._run_kernels(feed)
        self.pool.lend(results)
        return results

    def run_into(self, feed: dict, targets: list | None) -> list:
        """A scan's step (``scan_run._Stepper``): by addresses once traced
        (``step_trace.py``), its outputs written into ``targets`` there; else, and where
        the feed's layouts are not the trace's, the general path (its first run makes this
        thread's trace)."""
        trace = getattr(self.trace, "made", None)
        if trace is not None:
            results = trace.run(feed, targets)
            if results is not None:
                return results
        results = self._run_kernels(feed)
        if not hasattr(self.trace, "made"):
            self.trace.made = StepTrace.make(self, feed, self.threads)
        return results

    def run_steps(self, start: int, stop: int, fed: dict, targets: list) -> bool:
        """A scan's steps ``[start, stop)`` in one C call through this thread's trace
        (``step_loop.py``), or False, none run, where there is none or it cannot."""
        trace = getattr(self.trace, "made", None)
        return trace is not None and trace.run_steps(start, stop, fed, targets)

    def new_run(self) -> None:
        """A scan starts its steps (``scan_run._Stepper``): this thread's trace, if any,
        packs its fixed operands again (``packed.py``)."""
        trace = getattr(self.trace, "made", None)
        if trace is not None:
            trace.new_run()

    def _run_kernels(self, feed: dict) -> list[np.ndarray]:
        arrays = dict(feed)
        for k, kernel in enumerate(self.plan.kernels):
            step = self.steps[k]
            if isinstance(kernel, ScanKernel):
                arrays.update(run_scan(kernel, arrays, lambda plan, inputs, s=step: s,
                                       self.pool.take))
            elif step is not None:
                arrays[kernel.tensor] = step(arrays, self.pool)
            else:
                arrays[kernel.tensor] = run_kernel(kernel, arrays, self.host)
            for t in self.dead_after[k]:
                self.pool.give(arrays, t)
        return [arrays[t] for t in self.plan.outputs]
