"""Every setting that shapes a generated program, as one frozen value.

``Options`` holds the planner's, the code generator's and the runtime's knobs (each the
setting ``benchmarks/bench_ab.py`` turns off, or a switch of ``tests/differential.py``)
and the facts of the machine (``Machine``: threads, last-level cache, processor vendor).
It is read from the environment in one place, ``from_environment``; nothing else in
tegrad reads a ``TEGRAD_*`` variable. ``tg.build(..., options=...)`` takes another value
(``tg.Options.from_environment().replace(merge_products=False)``), and the
disk cache keys a stored program by the whole value (``cache_key``), so a program made
under one setting is never served under another.

Environment variables (read by ``from_environment``, once per process unless
``refresh=True``):

  TEGRAD_NUM_THREADS   threads of compiled kernels and products (default: the cores this
                       process may use)
  TEGRAD_COPY_THREADS  threads of the NumPy backend's large layout copies (default 1)
  TEGRAD_TERM_KERNEL   1/0: float32 shifted-product sums on the register-blocked kernel
                       (``backends/cpu/term_kernel.py``; default: unless the processor is
                       Intel's)
  TEGRAD_BLAS          ``openblas``: skip MKL even where it is installed
  TEGRAD_TARGET        the target of ``target=None`` (``backends/registry.py``)
  TEGRAD_CACHE_DIR     where compiled kernels and stored programs live
                       (default ``~/.cache/tegrad``; a temporary directory of the process
                       when it cannot be written: ``cache/location.py``)
  TEGRAD_GRAPH_CACHE   0: no stored programs or gradients (``cache/disk.py``)

The last three say where and whether, not what: they are read at each use
(``target_variable``, ``cache_dir``, ``graph_cache_enabled``) and are not part of the key.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _positive(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


def _vendor() -> str:
    """``vendor_id`` of ``/proc/cpuinfo`` (``GenuineIntel``, ``AuthenticAMD``), else ''."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _last_level_cache() -> int:
    """Bytes of the largest cache sysfs lists for cpu0, else 0."""
    largest = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * scale)
    return largest


@dataclass(frozen=True)
class Machine:
    """What tegrad knows of the machine it generates for."""

    threads: int = 1  # compiled kernels' OpenMP threads, and the products'
    copy_threads: int = 1  # the NumPy backend's large layout copies
    last_level_cache: int = 0  # bytes; 0: unknown
    vendor: str = ""  # /proc/cpuinfo's vendor_id

    @classmethod
    def generic(cls) -> Machine:
        """One thread, nothing known: the same program on every machine."""
        return cls()

    @classmethod
    def here(cls) -> Machine:
        return cls(threads=_positive("TEGRAD_NUM_THREADS", cores()),
                   copy_threads=_positive("TEGRAD_COPY_THREADS", 1),
                   last_level_cache=_last_level_cache(), vendor=_vendor())


@dataclass(frozen=True)
class Options:
    """The knobs of planning, code generation and running, and the machine."""

    # planning (lower/)
    merge_products: bool = True  # two products of one operand made as one (merge.py)
    keep_step_kernels: bool = True  # a scan's step values its backward reads kept (saved_steps)
    max_widened_step: int = 4  # largest column step of a widened product output (contraction)
    max_widened_waste: float = 1 / 3  # a widened row at most this much longer (contraction)
    max_inline_ratio: float = 2.0  # a producer inlined at up to this many evaluations a point
    max_cheap_inline_ratio: float = 9.0  # ... when it is cheap (fusion.py)
    views: bool = True  # a re-indexing whose readers take strides made as a view (views.py)
    # loop nests (the compiled target's code generator)
    parallel_work: int = 1 << 17  # points x work per point below which a kernel is serial
    unroll: int = 16  # reductions of at most this many constant points are unrolled
    row_cache_buffers: int = 4  # row caches per kernel (row_cache.py)
    max_regions: int = 8  # ranges a guarded axis is split into (lower/nest_facts.regions)
    value_bounds: bool = True  # a reduce loop where k == t[n] visits that point (nest_reduce)
    count_sums: bool = True  # a sum over axes its source does not use: times their points
    hoist_unrolled: bool = True  # an unrolled loop's values out of the vector loop (hoist.py)
    order_reductions: bool = True  # a reduction's axes by stride (nest_facts.stride_ordered)
    transpose_tile: int = 8  # a transposing read's contiguous axis in classes of this (0: no)
    ragged_residues: bool = True  # residue classes of an axis its factor does not divide
    looped_residues: int = 8  # classes of an axis before the last looped, not unrolled (0: no)
    coalesce_loops: bool = True  # nested loops over a contiguous block as one (coalesce.py)
    lanes: bool = True  # short sums as masked vectors carried across rows (nest_lanes.py)
    # outputs no later kernel reads are streamed past the caches when this large (more
    # than a core's L2) and the kernel moves this much in all (more than an L3 holds)
    stream_bytes: int = 4 << 20
    stream_traffic_bytes: int = 40 << 20
    stage_min_bytes: int = 256  # an iteration's staged part: at least (whole lines)
    compiled_scatters: bool = True  # scatter-adds as generated C (lower/nest_scatter.py)
    # target "cuda": contractions as torch.einsum of strided views, on cuBLAS (cuda/products)
    cuda_products: bool = True
    # running
    shared_rows_bytes: int = 1 << 20  # a scan weight's product split by rows (packed.py)
    min_phases: int = 2  # fewest residue classes written through one interleaving copy
    overlap_bytes: int = 24 << 20  # a weight gradient's input copied overlapped, up to
    # a thin output: fewer points than this on a product's free side (host/products.py:
    # a one-sided batch joins it, shifted reads of the larger operand go through taps) or
    # on a strided read's output variables (lower/contraction.py: no phase split); 32:
    # ResNet's 2x2 and 4x4 layers gain, and 7x7 ones (49 points) lose, from the merge
    thin_batch: int = 32
    free_unread: bool = True  # a tensor no later kernel reads back to the pool at once
    parallel_copy_elements: int = 1 << 16  # compiled layout copies split from this size
    parallel_transpose_elements: int = 1 << 14  # ... transposes from this one
    pool_min_bytes: int = 1 << 16  # smaller arrays are made, not pooled
    # the process's BLAS, loaded once: these two are read from from_environment()'s value
    # (a build's own are part of its key, not consulted)
    term_kernel: bool = True  # float32 shifted-product sums on term_kernel.py's kernel
    blas: str = "mkl"  # "mkl" where installed, else NumPy's; "openblas": NumPy's
    machine: Machine = field(default_factory=Machine.generic)

    @classmethod
    def from_environment(cls, refresh: bool = False) -> Options:
        """The defaults on this machine, with the ``TEGRAD_*`` variables applied (read
        once per process; ``refresh``: read again)."""
        if refresh or not _READ:
            machine = Machine.here()
            chosen = os.environ.get("TEGRAD_TERM_KERNEL", "").strip()
            term = chosen == "1" if chosen in ("0", "1") else machine.vendor != "GenuineIntel"
            blas = "openblas" if os.environ.get("TEGRAD_BLAS", "").lower() == "openblas" \
                else "mkl"
            _READ[:] = [cls(machine=machine, term_kernel=term, blas=blas)]
        return _READ[0]

    def replace(self, **changes) -> Options:
        """These options with ``changes`` (field -> value) applied."""
        return dataclasses.replace(self, **changes)

    def cache_key(self) -> bytes:
        """The bytes the disk cache adds to a stored program's key."""
        return repr(sorted(asdict(self).items())).encode()


_READ: list[Options] = []


def target_variable() -> str | None:
    """``$TEGRAD_TARGET``: the target of ``target=None``, when set."""
    return os.environ.get("TEGRAD_TARGET") or None


def cache_dir() -> Path:
    """``$TEGRAD_CACHE_DIR``, default ``~/.cache/tegrad``: compiled kernels, stored programs."""
    return Path(os.environ.get("TEGRAD_CACHE_DIR") or Path.home() / ".cache" / "tegrad")


def graph_cache_enabled() -> bool:
    """``$TEGRAD_GRAPH_CACHE`` is not ``0``: programs and gradients are stored on disk."""
    return os.environ.get("TEGRAD_GRAPH_CACHE", "1") != "0"
