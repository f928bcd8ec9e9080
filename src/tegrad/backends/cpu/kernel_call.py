"""A general kernel's C and its compiled function: the parts of ``program.py`` that the
scan step traces (``step_trace.py``) also bind to.

``KernelText`` is the C of one kernel, plain data; ``Library`` finds the compiled
functions of the kernels of one program (and its scans' step programs), compiling those
not compiled before (``kernel_cache.py``: kernels equal up to their names are one
function); ``CompiledKernel`` calls one kernel's function on the arrays it reads."""

from __future__ import annotations

import ctypes
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ...ir.tensor import Tensor
from ...options import cores
from . import kernel_cache
from .buffers import BufferPool
from .call_extension import MAX_ARRAYS, extension, layout
from .compiler import bind
from .copy import helper as copy_helper
from .gemm import helper as gemm_helper
from .replay import data_address


def compile_jobs() -> int:
    """Concurrent compiler runs: the cores this process may use (at most 8)."""
    return min(8, cores())


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


class Library:
    """The kernels of one program (and its scans' step programs): kernel name -> its
    compiled function's library and symbol, once ``load`` has run."""

    def __init__(self, texts: list[KernelText]):
        self.keys = {}  # kernel name -> kernel key
        self.sources = {}  # kernel key -> its C as tg_<key>
        for k in texts:
            key, source = kernel_cache.kernel_key(k.text, k.name)
            self.keys[k.name] = key
            self.sources.setdefault(key, source)
        self.libraries: dict = {}  # kernel key -> library

    def load(self) -> None:
        # the product and copy helpers and the call extension are built (on a first run:
        # cached after) meanwhile
        with ThreadPoolExecutor(max_workers=3) as side:
            helpers = [side.submit(_build_quietly, build)
                       for build in (copy_helper, gemm_helper, extension)]
            self.libraries = kernel_cache.functions(self.sources, compile_jobs())
            for job in helpers:
                job.result()

    def function(self, name: str, argtypes: list):
        """The compiled function of the kernel ``name``, called with ``argtypes``."""
        key = self.keys[name]
        return bind(self.libraries[key], f"tg_{key}", argtypes)


def _build_quietly(build) -> None:
    """Run ``build``; a failure is left for the first use of what it builds to report."""
    try:
        build()
    except Exception:  # noqa: BLE001 - reported again where the helper is used
        pass


class CompiledKernel:
    """A general kernel's compiled function, called on the arrays it reads. The call is
    made once per kernel and per scan step, so it does little: each read is checked
    against the dtype (an interned ``np.dtype``) and C-order strides it is compiled for,
    a small output is not pooled, and the error slots are a ctypes array. Where the call
    extension is built (``call_extension.py``) the checks and the call are made in C; a
    read it refuses takes the conversion and the ctypes call."""

    def __init__(self, src: KernelText, unit: Library, threads: int, min_bytes: int):
        self.src = src
        self.threads = threads
        self.unit = unit
        self.fn = None
        t = src.tensor
        self.shape, self.dtype, self.dtype_name = t.shape, np.dtype(t.dtype), t.dtype
        self.pooled = math.prod(t.shape) * self.dtype.itemsize >= min_bytes
        # the other tensors its loops write or sum (grouping.py), after its own
        self.written = [(u, u.shape, u.dtype) for u in src.args[1:src.outputs]]
        self.reads = []
        for a in src.args[src.outputs:]:
            dtype = np.dtype(a.dtype)
            self.reads.append((a, dtype, _c_strides(a.shape, dtype.itemsize)))
        self.pointers = ctypes.c_void_p * len(src.args)
        self.err = (ctypes.c_long * 2)()
        self.err_address = ctypes.addressof(self.err)
        self.run = self.address = self.layout = None  # the C call (call_extension.py)

    def __call__(self, arrays: dict, pool: BufferPool | None = None) -> np.ndarray:
        return self.call([arrays[a] for a, _, _ in self.reads], arrays, pool)

    def call(self, reads: list, arrays: dict | None = None,
             pool: BufferPool | None = None) -> np.ndarray:
        """The kernel on ``reads`` (the arrays it reads, in ``self.reads``' order, each of
        its tensor's shape); the other tensors it writes go into ``arrays``."""
        fn = self.fn or self.bound()
        if pool is not None and self.pooled:
            out = pool.take(self.shape, self.dtype_name)
        else:
            out = np.empty(self.shape, self.dtype)
        held = [out]
        for u, shape, dtype in self.written:
            arrays[u] = pool.take(shape, dtype) if pool is not None else np.empty(shape, dtype)
            held.append(arrays[u])
        if self.run is not None and self.run(self.address, self.err_address, self.threads,
                                             self.layout, *held, *reads) is None:
            if self.err[0]:
                self.raise_error()
            return out
        for arr, (_, dtype, strides) in zip(reads, self.reads, strict=True):
            if (type(arr) is not np.ndarray or arr.dtype is not dtype
                    or arr.strides != strides):  # (a copy if not a C-order array)
                arr = np.ascontiguousarray(arr, dtype=dtype)
            held.append(arr)
        fn(self.pointers(*map(data_address, held)), self.err_address, self.threads)
        if self.err[0]:
            self.raise_error()
        return out

    def direct(self, positions: list[int]):
        """``call`` as a closure on a program's input arrays (``CpuProgram.direct``): the
        kernel reads ``arrays[positions[j]]`` as its ``j``-th read; it writes no other
        tensor and its output is not pooled. An eager op's whole run on small arrays, so
        it is ``call`` with the lookups bound once (a few microseconds a call)."""
        assert not self.written and not self.pooled
        # the function unprototyped: ctypes converts its arguments by their own types (a
        # pointer array, the error slots, an int), a third faster than through argtypes
        fn = ctypes.CFUNCTYPE(None)(ctypes.cast(self.bound(), ctypes.c_void_p).value)
        fn.argtypes = None
        shape, dtype, threads, pointers, err = self.shape, self.dtype, self.threads, \
            self.pointers, self.err
        reads = [(k, d, strides) for k, (_, d, strides) in zip(positions, self.reads,
                                                                 strict=True)]
        empty, ndarray, address = np.empty, np.ndarray, data_address
        c_run, c_args = self.run, (self.address, self.err_address, threads, self.layout)
        count = len(positions)
        in_order = positions == list(range(count))

        def run(arrays) -> list[np.ndarray]:
            out = empty(shape, dtype)
            if c_run is not None and c_run(
                    *c_args, out, *(arrays if in_order and len(arrays) == count
                                    else [arrays[k] for k in positions])) is None:
                if err[0]:
                    self.raise_error()
                return [out]
            held, copies = [address(out)], []
            for k, d, strides in reads:
                a = arrays[k]
                if type(a) is not ndarray or a.dtype is not d or a.strides != strides:
                    a = np.ascontiguousarray(a, dtype=d)
                    copies.append(a)  # (alive until the call returns)
                held.append(address(a))
            fn(pointers(*held), err, threads)
            if err[0]:
                self.raise_error()
            return [out]

        return run

    def bound(self):
        """The compiled function (``fn(pointers, err, threads)``), loaded on first use."""
        if self.fn is None:
            self.fn = self.unit.function(self.src.name,
                                         [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int])
            module = extension() if len(self.src.args) <= MAX_ARRAYS else None
            if module is not None:
                self.address = ctypes.cast(self.fn, ctypes.c_void_p).value
                self.layout = layout(self.src.outputs, [(d, s) for _, d, s in self.reads])
                self.run = module.run
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
