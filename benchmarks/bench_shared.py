"""What the benchmark scripts share: ``--threads N`` (BLAS reads its thread count when it
loads, so the environment is set from the command line before numpy and torch are
imported) and printing a table (Markdown, rich, or plain text).

    import bench_shared
    bench_shared.apply(sys.argv[1:])   # first, before ``import numpy``
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
    Console(width=max(100, Console().width)).print(table)
