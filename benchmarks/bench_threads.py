"""``--threads N`` for the benchmark scripts: BLAS reads its thread count when it loads,
so the environment is set from the command line before numpy and torch are imported.

    import bench_threads
    bench_threads.apply(sys.argv[1:])   # first, before ``import numpy``
"""

from __future__ import annotations

import os


def threads_from_argv(argv) -> str | None:
    for k, a in enumerate(argv):
        if a == "--threads" and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


def apply(argv) -> str | None:
    """Set OMP/OpenBLAS/MKL thread counts from ``--threads``; returns the value given."""
    threads = threads_from_argv(argv)
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = threads
    return threads
