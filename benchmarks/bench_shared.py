"""What the benchmark scripts share: ``--threads N`` (BLAS reads its thread count when it
loads, so the environment is set from the command line before numpy and torch are
imported), printing a table (Markdown, rich, or plain text) and a ratio's cell.

    import bench_shared
    bench_shared.apply(sys.argv[1:])   # first, before ``import numpy``
"""

from __future__ import annotations

import os
import statistics
import time


def threads_from_argv(argv) -> str | None:
    for k, a in enumerate(argv):
        if a == "--threads" and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


def apply(argv) -> str | None:
    """Set OMP/OpenBLAS/MKL thread counts and tegrad's (``TEGRAD_NUM_THREADS``: its
    kernels pass their own count to OpenMP, so ``OMP_NUM_THREADS`` alone leaves them on
    every core) from ``--threads``; returns the value given."""
    threads = threads_from_argv(argv)
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "TEGRAD_NUM_THREADS"):
            os.environ[var] = threads
    return threads


def ratio_text(v) -> str:
    """A ratio as a table cell: two decimals, ``-`` where there is none."""
    return "-" if v is None else f"{v:.2f}"


def print_table(title: str, headers, cells, markdown: bool = False) -> None:
    """``cells``: rows of strings. Markdown for a README, else rich, else plain text."""
    if markdown:
        print(f"**{title}**\n")
        print("| " + " | ".join(headers) + " |")
        print("|" + "|".join("---" for _ in headers) + "|")
        for c in cells:
            print("| " + " | ".join(c) + " |")
        print()
        return
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        print(title)
        print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        for c in cells:
            print("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)))
        print()
        return
    table = Table(title=title, title_justify="left")
    for h in headers:
        table.add_column(h)
    for c in cells:
        table.add_row(*c)
    # wide enough for every cell: rich otherwise truncates headers and cells to "…"
    needed = sum(max(len(h), *(len(c[i]) for c in cells)) + 3 for i, h in enumerate(headers)) + 1
    Console(width=max(100, Console().width, needed)).print(table)


# -- threads and load ----------------------------------------------------------------

_LIMITS = []  # keeps threadpoolctl's limiter alive


def set_threads(threads: int | None) -> tuple[int, str]:
    """Torch's and NumPy's BLAS thread counts: ``threads``, or torch's default for both.
    Returns the count and how NumPy's BLAS was set."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        env = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
        return threads, f"numpy BLAS: OPENBLAS_NUM_THREADS={env} (no threadpoolctl)"
    _LIMITS.append(threadpool_limits(limits=threads, user_api="blas"))
    blas = [f"{i['internal_api']} {i['num_threads']}" for i in threadpool_info()
            if i["user_api"] == "blas"]
    return threads, f"numpy BLAS (threadpoolctl): {', '.join(blas) or 'none found'}"



def _busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have been busy (Linux ``/proc/stat``), else None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """CPU time that other processes used while the block ran: busy CPU time of the
    machine less this process's own (all its threads)."""

    def __enter__(self):
        self.busy, self.own, self.wall = _busy_cpu_seconds(), _own_cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        busy = _busy_cpu_seconds()
        self.wall = time.perf_counter() - self.wall
        self.cores = None
        if busy is not None and self.busy is not None:
            other = (busy - self.busy) - (_own_cpu() - self.own)
            self.cores = max(other, 0.0) / self.wall
        return False


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


BLOCK_RUNS = 3  # timed runs per block, with more than one thread (time_alternating)


def time_alternating(fns, runs: int, threads: int, pause: float) -> list[float]:
    """Median ms of each callable (None: skipped), after one warm-up each. One thread:
    ``runs`` rounds of one run per callable, a pause before each. More threads: blocks of
    at most ``BLOCK_RUNS`` runs per callable, in turns, a pause and an untimed call before
    each block. The pause matters: after a call, OpenBLAS's idle workers spin for about
    0.1-0.2 s, and a torch (OpenMP) call that starts meanwhile loses a time slice
    (measured here: a 0.03 ms matmul takes 8 ms); 0.3 s is enough. The blocks are short
    because the shared machine slows down in bursts: a burst as long as a block moves at
    most a third of one side's runs, not half of them (with two blocks of five, single
    rows moved by 20-100 % from one suite run to the next)."""
    live = [fn for fn in fns if fn is not None]
    for fn in live:
        fn()
    rounds = runs if threads == 1 else min(runs, max(2, -(-runs // BLOCK_RUNS)))
    per_block = -(-runs // rounds)
    times: dict[int, list[float]] = {id(fn): [] for fn in live}
    for _ in range(rounds):
        for fn in live:
            time.sleep(pause)
            if threads > 1:
                fn()
            for _ in range(per_block):
                t0 = time.perf_counter()
                fn()
                times[id(fn)].append(time.perf_counter() - t0)
    return [None if fn is None else 1e3 * statistics.median(times[id(fn)]) for fn in fns]
