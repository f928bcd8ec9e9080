"""Contractions replayed: the C calls of a contraction, recorded once per layout.

A contraction runs the host engine's general path (``host/products.py``): Python that
derives views, layout copies and product shapes from its operands' shapes and strides.
That costs about 0.2 ms a call whatever the size, and a scan's step calls it once per step
(an LSTM's ``h @ W`` is 0.1 ms of BLAS). Its decisions depend only on the layouts, so
``ReplayedContraction`` runs the general path once per layout ``(shape, strides, dtype)``
of the factors with a ``Recorder`` as its products, copies, adds and allocations
(``host/ops.HostOps``). Every product (``gemm.GemmCall``), copy (``copy.CopyCall``) and
add (``copy.AddCall``: a product's blocks, a sum of shifted views) is logged with each
operand located as ``(buffer, byte offset)``, where a buffer is one of:

- an input: the array of a tensor the contraction reads;
- the output: the array the contraction returns, taken from the program's pool;
- an owned buffer: a temporary product the recorder allocated, or one of the engine's
  workspace buffers (``host/workspace.py``: layout copies, zero-padded operands). The
  recipe keeps a copy of the bytes of each that the calls touch, made at the end of the
  recording, per thread: the zero borders of a padded operand are written outside the
  logged copies, and are the same for every call of one layout.

Later calls with that layout make the logged calls at the new addresses, in order. At
most ``MAX_LAYOUTS`` layouts are recorded per contraction (eager code may feed views of
ever new strides); others take the general path.

A recording is kept only when it is complete. Every operand an action touches must lie in
one of those buffers: an operand NumPy computed (a cast, a partial sum, a scaled copy)
lies in none. Writes that are none of those (a zeroed piece, a scaled sum) call
``HostOps.untraceable``. A contraction returning anything but its output buffer is not
kept either. Otherwise the layout keeps the general path.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import sys
import threading
from functools import partial

import numpy as np

from ...options import Options
from ..host.ops import HostOps, product_sum, terms
from ..host.products import run_contraction
from ..host.workspace import release_workspace, workspace_buffers
from . import copy as copies
from . import gemm
from .buffers import BufferPool

# a larger workspace is not kept (a recipe holds its own copy): at 32 MB, a transposed
# convolution of stride 3 over 104 x 104 x 156 inputs (three padded copies, 34 MB) kept
# the general path, 17.8 ms a call against 9.3 replayed (scratch, 2 threads)
MAX_OWNED_BYTES = 1 << 26
MAX_LAYOUTS = 16  # recordings kept per contraction; further layouts take the general path


def _data_offset() -> int | None:
    """The offset of the data pointer in NumPy's array object (``PyArrayObject_fields``:
    after the object header), checked on an array; None if it does not match here."""
    probe = np.arange(3.0)
    offset = object.__basicsize__
    found = ctypes.c_void_p.from_address(id(probe) + offset).value
    return offset if found == probe.ctypes.data else None


_OFFSET = _data_offset()
# the process's memory as machine words, to read the pointer at ``id(a) + _OFFSET`` by
# indexing (no ctypes object made per read); None where the offset is not word-aligned
_WORD = ctypes.sizeof(ctypes.c_size_t)
_WORDS = ((ctypes.c_size_t * (sys.maxsize // _WORD)).from_address(0)
          if _OFFSET is not None and _OFFSET % _WORD == 0 else None)
_WORD_OFFSET = (_OFFSET or 0) // _WORD
_PROBE = np.arange(3.0)  # (objects are word-aligned: checked once, on an array)
if _WORDS is not None and _WORDS[id(_PROBE) // _WORD + _WORD_OFFSET] != _PROBE.ctypes.data:
    _WORDS = None


def data_address(a: np.ndarray) -> int:
    """``a.ctypes.data``, ten times faster (read from the array object): ``a`` must be an
    ``np.ndarray`` itself, which the callers check."""
    if _WORDS is not None:
        return _WORDS[id(a) // _WORD + _WORD_OFFSET]
    if _OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _OFFSET).value


def array_address(a: np.ndarray) -> int:
    """``a.ctypes.data`` for any array (``data_address`` where ``a`` is an ndarray)."""
    return data_address(a) if type(a) is np.ndarray else a.ctypes.data


def _span(a: np.ndarray) -> tuple[int, int]:
    """The addresses ``[lo, hi)`` of the bytes array ``a`` may touch."""
    start = array_address(a)
    lo = hi = 0
    for n, s in zip(a.shape, a.strides, strict=True):
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    return start + lo, start + hi + a.itemsize


class Recorder:
    """The hooks of one recorded run: products and copies made (on ``threads``) and
    logged, with their operands located (see the module header). ``why`` says what made
    the run untraceable, or is None."""

    def __init__(self, inputs: list[np.ndarray], pool: BufferPool | None, threads: int,
                 copy_limits: tuple[int, int]):
        self.threads = threads
        self.copy_limits = copy_limits
        self.pool = pool
        self.inputs = [(array_address(a), *_span(a)) for a in inputs]
        # the inputs' spans by start, for a bisection where no two of them overlap (a
        # training step's hundreds of weights, searched for each product's operands)
        spans = sorted((lo, hi, k) for k, (_, lo, hi) in enumerate(self.inputs))
        apart = all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        self.starts = [lo for lo, _, _ in spans] if apart else None
        self.spans = spans
        self.output: np.ndarray | None = None
        self.owned: list[np.ndarray] = []  # temporaries and workspace buffers (roots)
        self.actions: list = []
        self.used: dict[int, int] = {}  # owned buffer -> bytes the actions touch
        self.why: str | None = None

    def untraceable(self, why: str) -> None:
        if self.why is None:
            self.why = why

    def empty(self, shape, dtype) -> np.ndarray:
        if self.output is not None:
            self.untraceable("a second output buffer")
        out = np.empty(shape, dtype) if self.pool is None else self.pool.take(shape, dtype)
        self.output = out
        return out

    def matmul(self, a, b, out=None, accumulate=False):
        if out is None:
            out = gemm.new_result(a, b)
            if out is not None:
                self.owned.append(out)
        prepared = None if out is None else gemm.prepare(a, b, out, accumulate=accumulate)
        if prepared is None:
            self.untraceable("a product outside BLAS")
            return product_sum(a, b, out, accumulate)
        self._log(*prepared, reach=(terms(a), terms(b), [out]))
        return out

    def copy(self, dst, src) -> None:
        self._helped(copies.prepare(dst, src, self.copy_limits), dst, "a copy",
                     lambda: np.copyto(dst, src))

    def add(self, dst, src) -> None:
        self._helped(copies.prepare_add(dst, src, self.copy_limits), dst, "an add",
                     lambda: np.add(dst, src, out=dst))

    def _helped(self, prepared, dst, what: str, numpy_way) -> None:
        """Log and make the copy helper's ``prepared`` call; where there is none,
        ``numpy_way()`` (a write into ``dst`` the recording cannot replay)."""
        if prepared is None:
            if dst.size:
                self.untraceable(f"{what} outside the copy helper")
            numpy_way()
            return
        self._log(*prepared)

    def _log(self, call, operands, reach=None) -> None:
        """Log and make ``call`` on ``operands``; ``reach`` lists, per operand, the arrays
        its call touches (a product's terms: at fixed offsets in the same buffer)."""
        addresses = [array_address(x) for x in operands]
        located = tuple(self._locate(p) for p in addresses)
        n = len(self.inputs)
        for x, (k, _), touched in zip(operands, located, reach or [[x] for x in operands],
                                     strict=True):
            if any(self._locate(array_address(t))[0] != k for t in touched):
                self.untraceable("a product's terms in two buffers")
            if k > n:  # an owned buffer: the recipe copies the bytes that are used
                start = array_address(self._buffer(k))
                end = max(_span(t)[1] for t in (x, *touched)) - start
                self.used[k - n - 1] = max(self.used.get(k - n - 1, 0), end)
        self.actions.append((call, located))
        call.run(*addresses, self.threads)

    def _buffer(self, k: int) -> np.ndarray:
        """Owned buffer ``k`` (numbered as ``_locate`` does)."""
        return self.owned[k - len(self.inputs) - 1]

    def _locate(self, address: int) -> tuple[int, int]:
        """``(buffer, byte offset from its data pointer)`` of an operand's first element:
        buffers ``0..n-1`` are the inputs, ``n`` the output, ``n + 1 + j`` owned one
        ``j``."""
        if self.starts is None:
            found = [(k, address - data) for k, (data, lo, hi) in enumerate(self.inputs)
                     if lo <= address < hi]
        else:
            found = []
            j = bisect.bisect_right(self.starts, address) - 1
            if j >= 0 and address < self.spans[j][1]:
                k = self.spans[j][2]
                found.append((k, address - self.inputs[k][0]))
        n = len(self.inputs)
        if self.output is not None:
            lo, hi = _span(self.output)
            if lo <= address < hi:
                found.append((n, address - array_address(self.output)))
        for j, root in enumerate(self.owned):
            start = array_address(root)
            if start <= address < start + root.nbytes:
                found.append((n + 1 + j, address - start))
        if not found:
            root = _workspace_root(address)
            if root is None:
                self.untraceable("an operand NumPy computed")
                return -1, 0
            self.owned.append(root)
            found.append((n + len(self.owned), address - array_address(root)))
        if len(found) > 1:
            self.untraceable("an operand in two buffers")
        return found[0]


def _workspace_root(address: int) -> np.ndarray | None:
    for root in workspace_buffers():
        start = root.ctypes.data
        if start <= address < start + root.nbytes:
            return root
    return None


class _Recipe:
    """The logged calls of one layout, made again on new arrays."""

    def __init__(self, recorder: Recorder, covers: bool):
        self.actions = recorder.actions
        self.covers = covers
        # the bytes used, as the run left them: the buffer itself, taken from the workspace
        # (no copy: a conv's first call copied 19 ms of workspaces), unless it is mostly
        # unused (a workspace grown for a larger request)
        self.snapshots = []
        for j, root in enumerate(recorder.owned):
            used = root.view(np.uint8).reshape(-1)[: recorder.used.get(j, 0)]
            if 2 * used.nbytes >= root.nbytes:
                release_workspace(root)
            else:
                used = used.copy()
            self.snapshots.append(used)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.taken = False  # the first thread to replay uses the snapshots themselves

    def owned_addresses(self) -> list[int]:
        """The addresses of this thread's copies of the owned buffers (the bytes the calls
        write are rewritten before each read)."""
        owned = getattr(self.local, "addresses", None)
        if owned is None:
            with self.lock:
                first, self.taken = not self.taken, True
                arrays = self.snapshots if first else [s.copy() for s in self.snapshots]
            self.local.arrays = arrays
            owned = self.local.addresses = [a.ctypes.data for a in arrays]
        return owned

    def run(self, inputs: list[np.ndarray], out: np.ndarray, threads: int) -> np.ndarray:
        self.replay([*map(data_address, inputs), data_address(out)], out, threads)
        return out

    def replay(self, addresses: list[int], out: np.ndarray, threads: int,
               actions: list | None = None) -> None:
        """The logged calls on the inputs and output at ``addresses`` (the output last;
        ``out`` is that output, zeroed first when the products do not cover it);
        ``actions``: the caller's version of them (a step trace's packed products)."""
        if not self.covers:
            out.fill(0)
        bases = addresses + self.owned_addresses()
        for call, operands in actions or self.actions:
            call.run(*[bases[k] + offset for k, offset in operands], threads)


_MISSING = object()


def compiled_host(threads: int, pool: BufferPool | None, options: Options) -> HostOps:
    """The host operations that put the general path's products and copies on ``tg_gemm``
    and ``tg_copy`` over ``threads``, its outputs taken from ``pool``."""
    return HostOps.for_options(options).replace(
        matmul=partial(gemm.matmul, threads=threads),
        copy=partial(copies.copy, threads=threads, limits=copies.limits(options)),
        add=partial(copies.add, threads=threads, limits=copies.limits(options)),
        empty=None if pool is None else pool.take)


class ReplayedContraction:
    """A contraction kernel of a compiled program: ``__call__(arrays, pool)`` returns its
    output, through a recipe when its layout has one."""

    def __init__(self, contraction, threads: int, options: Options):
        self.c = contraction
        self.threads = threads
        self.options = options
        self.tensors = list(dict.fromkeys(f.tensor for p in contraction.pieces
                                          for f in p.factors))
        self.recipes: dict = {}
        self.untraced: dict = {}  # layout -> why it keeps the general path

    def __call__(self, arrays: dict, pool: BufferPool | None = None) -> np.ndarray:
        inputs = [arrays[t] for t in self.tensors]
        if any(type(a) is not np.ndarray for a in inputs):  # (data_address reads arrays)
            return self._general(arrays, pool)
        key = tuple((a.shape, a.strides, a.dtype) for a in inputs)
        recipe = self.recipes.get(key, _MISSING)
        if recipe is _MISSING:
            if len(self.recipes) >= MAX_LAYOUTS:  # operands of ever new strides: no more
                return self._general(arrays, pool)
            return self._record(key, inputs, arrays, pool)
        if recipe is None:
            return self._general(arrays, pool)
        c = self.c
        out = np.empty(c.shape, c.dtype) if pool is None else pool.take(c.shape, c.dtype)
        return recipe.run(inputs, out, self.threads)

    def _general(self, arrays: dict, pool: BufferPool | None) -> np.ndarray:
        """The general path, its products and copies on the compiled target's helpers."""
        return run_contraction(self.c, arrays, compiled_host(self.threads, pool, self.options))

    def _record(self, key, inputs, arrays, pool) -> np.ndarray:
        recorder = Recorder(inputs, pool, self.threads, copies.limits(self.options))
        host = HostOps.for_options(self.options).replace(
            matmul=recorder.matmul, copy=recorder.copy, add=recorder.add, empty=recorder.empty,
            trace=recorder)
        result = run_contraction(self.c, arrays, host)
        why = recorder.why
        if why is None and result is not recorder.output:
            why = "a result cast to another dtype"
        if why is None and sum(recorder.used.values()) > MAX_OWNED_BYTES:
            why = "workspace too large to keep"
        if why is None:
            self.recipes[key] = _Recipe(recorder, self.c.covers)
        else:
            self.recipes[key] = None
            self.untraced[key] = why
        return result
