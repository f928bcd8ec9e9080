"""``target="cpu"``: a plan run with its general kernels compiled to native code.

The plan is fused first (``lower/fusion.py``) and grouped (``grouping.py``), then each
general kernel becomes a C function (``codegen.py``), all of them (scan steps included) in
one shared library (``compiler.py``). Contractions stay on BLAS and scatters on the
deterministic NumPy path (``numpy_kernels.py``); a scan's time loop runs its compiled step
program.

Threads: ``$TEGRAD_NUM_THREADS``, default the cores this process may use.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ...ir.tensor import Tensor
from ...lower.fusion import fuse
from ...lower.plan import Plan, reads_and_makes
from ..numpy_backend import dead_after
from ..numpy_eval import evaluate_compute
from ..numpy_kernels import hooks, run_kernel
from ..scan_run import run_scan
from .buffers import MIN_BYTES, BufferPool
from .c_ops import PRELUDE
from .codegen import KernelSource
from .compiler import bind, load, split_units
from .copy import helper as copy_helper
from .gemm import blas_threads_shared, one_blas_thread
from .gemm import helper as gemm_helper
from .grouping import group
from .replay import ReplayedContraction, compiled_hooks, data_address
from .step_trace import StepTrace


def _cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def compile_jobs() -> int:
    """Concurrent compiler runs: the cores this process may use (at most 8)."""
    return min(8, _cores())


def num_threads() -> int:
    value = os.environ.get("TEGRAD_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return _cores()


@dataclass(frozen=True)
class KernelText:
    """A general kernel's C function and what calling it needs (from ``KernelSource``,
    without the generator's working state, so that a blueprint pickles small)."""

    tensor: Tensor
    name: str
    text: str
    args: tuple  # outputs first, then each tensor read
    outputs: int
    gathers: tuple


@dataclass
class Blueprint:
    """What a ``CpuProgram`` is made from: its plan fused and grouped, and per kernel a
    general kernel's C (``KernelText``), a scan's step blueprint, or None (contractions,
    scatters). Plain data, so ``tg.build`` keeps it in the disk cache
    (``ir/disk_cache.py``): a warm process does not plan or generate C again."""

    plan: Plan
    parts: list

    def texts(self) -> list[KernelText]:
        """Every general kernel's C, step blueprints' included: one library."""
        out = []
        for part in self.parts:
            out += part.texts() if isinstance(part, Blueprint) else [part] if part else []
        return out


def blueprint(plan: Plan, numbers: Iterator[int] | None = None) -> Blueprint:
    """``plan`` fused, grouped and its general kernels written in C; kernels are named
    ``k0, k1, ...`` across the step blueprints (``numbers`` gives the next). The top
    program's kernels write past the caches what no later kernel reads (large outputs,
    ``KernelSource._stage``); a step program's outputs are the next step's inputs."""
    top = numbers is None
    numbers = itertools.count() if numbers is None else numbers
    plan = group(fuse(plan))
    read = {t for kernel in plan.kernels for t in reads_and_makes(kernel)[0]}
    parts: list = []
    for kernel in plan.kernels:
        if kernel.kind == "general":
            detail = kernel.detail
            made = reads_and_makes(kernel)[1]
            src = KernelSource(kernel.tensor, getattr(detail, "body_of", kernel.tensor),
                               f"k{next(numbers)}", getattr(detail, "also", ()),
                               getattr(detail, "columns", ()),
                               frozenset(t for t in made if top and t not in read))
            parts.append(KernelText(src.tensor, src.name, src.text, tuple(src.args),
                                    src.outputs, tuple(src.gathers)))
        elif kernel.kind == "scan":
            parts.append(blueprint(kernel.detail.plan, numbers))
        else:
            parts.append(None)
    return Blueprint(plan, parts)


class _Unit:
    """The kernels of one program (and its scans' step programs): one library."""

    def __init__(self, texts: list[KernelText]):
        self.texts = [k.text for k in texts]
        self.lib = None

    def load(self) -> None:
        # the product and copy helpers are built (on a first run: cached after) meanwhile
        with ThreadPoolExecutor(max_workers=2) as side:
            helpers = [side.submit(_build_quietly, build) for build in (copy_helper, gemm_helper)]
            self.lib = load("\n\n".join([PRELUDE, *self.texts]),
                            split_units(PRELUDE, self.texts, compile_jobs()))
            for job in helpers:
                job.result()


def _build_quietly(build) -> None:
    """Run ``build``; a failure is left for the first use of what it builds to report."""
    try:
        build()
    except Exception:  # noqa: BLE001 - reported again where the helper is used
        pass


class _Compiled:
    """A general kernel's compiled function, called on the arrays it reads. The call is
    made once per kernel and per scan step, so it does little: each read is checked
    against the dtype (an interned ``np.dtype``) and C-order strides it is compiled for,
    a small output is not pooled, and the error slots are a ctypes array."""

    def __init__(self, src: KernelText, unit: _Unit):
        self.src = src
        self.unit = unit
        self.fn = None
        t = src.tensor
        self.shape, self.dtype, self.dtype_name = t.shape, np.dtype(t.dtype), t.dtype
        self.pooled = math.prod(t.shape) * self.dtype.itemsize >= MIN_BYTES
        # the other tensors its loops write or sum (grouping.py), after its own
        self.written = [(u, u.shape, u.dtype) for u in src.args[1:src.outputs]]
        self.reads = []
        for a in src.args[src.outputs:]:
            dtype = np.dtype(a.dtype)
            self.reads.append((a, dtype, _c_strides(a.shape, dtype.itemsize)))
        self.pointers = ctypes.c_void_p * len(src.args)
        self.err = (ctypes.c_long * 2)()
        self.err_address = ctypes.addressof(self.err)

    def __call__(self, arrays: dict, pool: BufferPool | None = None) -> np.ndarray:
        fn = self.fn or self.bound()
        if pool is not None and self.pooled:
            out = pool.take(self.shape, self.dtype_name)
        else:
            out = np.empty(self.shape, self.dtype)
        held = [out]
        for u, shape, dtype in self.written:
            arrays[u] = pool.take(shape, dtype) if pool is not None else np.empty(shape, dtype)
            held.append(arrays[u])
        for a, dtype, strides in self.reads:
            arr = arrays[a]
            if (type(arr) is not np.ndarray or arr.dtype is not dtype
                    or arr.strides != strides):  # (a copy if not a C-order array)
                arr = np.ascontiguousarray(arr, dtype=dtype)
            held.append(arr)
        fn(self.pointers(*map(data_address, held)), self.err_address, _THREADS)
        if self.err[0]:
            self.raise_error()
        return out

    def bound(self):
        """The compiled function (``fn(pointers, err, threads)``), loaded on first use."""
        if self.fn is None:
            self.fn = bind(self.unit.lib, self.src.name,
                           [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int])
        return self.fn

    def raise_error(self) -> None:
        """Raise what a call left in the error slots (and clear them)."""
        if self.err[0] < 0:  # (err[0] = -1: the column sums' partial rows, grouping.py)
            self.err[0] = 0
            raise MemoryError(f"{self.src.tensor.name}: no memory for per-thread partial sums")
        if self.err[0]:
            g = self.src.gathers[self.err[0] - 1]
            value = self.err[1]
            self.err[0] = self.err[1] = 0
            raise IndexError(f"{self.src.tensor.name}: gather {g.tensor}[...] index {g.axis} "
                             f"got value {value}, outside [0, {g.dim}) (from {g.index})")


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


_THREADS = num_threads()


class CpuProgram:
    """A blueprint's kernels bound to their compiled functions (``unit``: the library of
    the top program, shared by its scans' step programs)."""

    def __init__(self, made: Blueprint, inputs, unit: _Unit | None = None):
        self.plan = made.plan
        self.inputs = inputs
        self.dead_after = dead_after(self.plan)
        top = self.top = unit is None
        self.pool = BufferPool()
        self.trace = threading.local()  # a step's trace, per thread (step_trace.py)
        unit = unit or _Unit(made.texts())
        self.steps = []
        for kernel, part in zip(self.plan.kernels, made.parts, strict=True):
            if kernel.kind == "general":
                self.steps.append(_Compiled(part, unit))
            elif kernel.kind == "contraction":
                self.steps.append(ReplayedContraction(kernel.detail, _THREADS))
            elif kernel.kind == "scan":
                self.steps.append(CpuProgram(part, kernel.detail.step.placeholders(), unit))
            else:
                self.steps.append(None)
        # the hooks a run sets (products, copies and outputs of the general paths on this
        # target's helpers and pool), and OpenBLAS held at one thread: needed by scans and
        # NumPy-run kernels; contractions set them for their own general path, so a
        # program of compiled kernels and contractions runs without them on MKL (entering
        # and leaving them took 8 us of a 16x16 product's 21 us run, and 1-2 % of a 512^3
        # product's: one-off script, alternating in one process)
        self.hooked = blas_threads_shared() or any(
            step is None or kernel.kind == "scan"
            for kernel, step in zip(self.plan.kernels, self.steps, strict=True))
        self.hooks = compiled_hooks(_THREADS, self.pool)  # (made once, not per run)
        if top:
            unit.load()

    def run(self, feed: dict) -> list[np.ndarray]:
        if not self.top:
            return self.run_into(feed, None)
        self.pool.reclaim()
        if self.hooked:
            # products and layout copies on the same threads (gemm.py, copy.py),
            # contraction outputs from the pool
            with hooks(*self.hooks), \
                    one_blas_thread():  # one thread pool: see gemm.py
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
            self.trace.made = StepTrace.make(self, feed, _THREADS)
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
            if kernel.kind == "scan":
                arrays.update(run_scan(kernel.detail, arrays, lambda plan, inputs, s=step: s,
                                       self.pool.take))
            elif step is not None:
                arrays[kernel.tensor] = step(arrays, self.pool)
            else:
                arrays[kernel.tensor] = run_kernel(kernel, arrays, evaluate_compute)
            for t in self.dead_after[k]:
                self.pool.give(arrays, t)
        return [arrays[t] for t in self.plan.outputs]
