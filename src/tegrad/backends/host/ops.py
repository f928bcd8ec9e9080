"""What the host contraction engine asks of the target it runs for: ``HostOps``.

The engine (``products.py``, ``views.py``) lays operands out and multiplies them; the
target decides how. ``HostOps`` carries

  matmul(a, b, out=None, accumulate=False)   a product (``product_sum``: with lists of
                        terms, the sum of their products; added to ``out`` when accumulating)
  copy(dst, src)        ``dst[...] = src``, broadcasting (``numpy_copy``)
  add(dst, src)         ``dst[...] += src``, broadcasting (``numpy_add``)
  empty(shape, dtype)   the output array (None: a new one)
  trace                 a recorder (``backends/cpu/replay.py``) told of every write that
                        is neither a product nor a copy (``untraceable``), or None
  min_phases, overlap_bytes   the layout settings of ``tg.Options``

The NumPy reference takes ``HostOps.for_options(options)``; the cpu target its compiled
product and copy helpers and its buffer pool (``backends/cpu/program.py``). It is passed
down explicitly, so two programs (or a recording and a run) never see each other's.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ...options import Options

PARALLEL_COPY_MIN = 1 << 18  # elements; smaller copies run on the calling thread


def terms(x) -> list[np.ndarray]:
    """The terms of a product operand: ``x`` itself, or the arrays of a list."""
    return list(x) if isinstance(x, list | tuple) else [x]


def product_sum(a, b, out: np.ndarray | None = None, accumulate: bool = False) -> np.ndarray:
    """``np.matmul(a, b, out=out)``; with lists of terms (a looped reduction, see
    ``_looped``), the sum of their products; ``accumulate``: added to ``out``."""
    a_terms, b_terms = terms(a), terms(b)
    if accumulate:
        out += product_sum(a, b)
        return out
    out = np.matmul(a_terms[0], b_terms[0], out=out)
    for x, y in zip(a_terms[1:], b_terms[1:], strict=True):
        out += np.matmul(x, y)
    return out


_POOL: dict = {}  # threads -> the executor of the copies' other threads


def numpy_copy(dst: np.ndarray, src: np.ndarray, threads: int = 1) -> None:
    """``dst[...] = src`` (broadcasting), split over ``threads`` along an outer axis when
    large: NumPy copies on one core and releases the GIL while it does."""
    if threads < 2 or dst.size < PARALLEL_COPY_MIN:
        np.copyto(dst, src)
        return
    src = np.broadcast_to(src, dst.shape)
    axis = next((i for i, n in enumerate(dst.shape) if n >= threads), None)
    if axis is None:
        np.copyto(dst, src)
        return
    pool = _POOL.get(threads)
    if pool is None:
        pool = _POOL[threads] = ThreadPoolExecutor(threads - 1, thread_name_prefix="tegrad-copy")
    n = dst.shape[axis]
    bounds = [n * i // threads for i in range(threads + 1)]
    head = (slice(None),) * axis
    parts = [(dst[(*head, slice(a, b))], src[(*head, slice(a, b))])
             for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    jobs = [pool.submit(np.copyto, d, s) for d, s in parts[1:]]
    np.copyto(*parts[0])  # the calling thread does its share
    for job in jobs:
        job.result()


def numpy_add(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] += src`` (broadcasting)."""
    np.add(dst, src, out=dst)


@dataclass(frozen=True)
class HostOps:
    matmul: Callable = product_sum
    copy: Callable = numpy_copy
    add: Callable = numpy_add
    empty: Callable | None = None
    trace: object = None
    min_phases: int = 2
    overlap_bytes: int = 24 << 20
    thin_batch: int = 64  # (Options.thin_batch; products.py)

    @classmethod
    def for_options(cls, options: Options) -> HostOps:
        """NumPy's products and copies (copies on ``options.machine.copy_threads``)."""
        return cls(copy=partial(numpy_copy, threads=options.machine.copy_threads),
                   min_phases=options.min_phases, overlap_bytes=options.overlap_bytes,
                   thin_batch=options.thin_batch)

    def replace(self, **changes) -> HostOps:
        return replace(self, **changes)

    def untraceable(self, why: str) -> None:
        """A write the recorder (if any) cannot replay: ``why``."""
        if self.trace is not None:
            self.trace.untraceable(why)
