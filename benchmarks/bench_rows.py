"""One ``bench_cpu.py`` case's tegrad rows timed alone in this process: a few untimed
calls, then the median of ``--calls`` timed ones per row. Run it in several processes
per tree to see how a row's time moves from process to process.

    .venv/bin/python benchmarks/bench_rows.py --case lstm --rows backward,forward+backward
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, help="a bench_cpu.py case name")
    parser.add_argument("--rows", default="forward,backward,forward+backward")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--threads", help="threads for torch, BLAS and OpenMP")
    args = parser.parse_args(argv)
    bench_shared.set_threads(int(args.threads) if args.threads else None)
    import bench_cpu_cases as cases
    import tegrad

    (case,) = cases.select(cases.cases(False), args.case)
    graph = case.graph()
    arrays, head = case.make_arrays(graph)
    programs = cases.tegrad_programs(graph, "cpu", arrays)
    said = []
    for row in args.rows.split(","):
        fn = programs[row]
        for _ in range(3):
            fn(arrays, head)
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            fn(arrays, head)
            times.append(1e3 * (time.perf_counter() - start))
        said.append(f"{row} {statistics.median(times):.2f} ms")
    print(f"{Path(tegrad.__file__).parents[1]} {args.case}: " + ", ".join(said))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
