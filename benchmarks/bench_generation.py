"""Planning and C generation alone: ``lower.plan(..., fused=True)`` and the cpu target's
``blueprint`` (C text, no compiler) of every program in ``tests/c_text.py`` (the op table
and every coverage case, forward and gradients, float64 and float32), timed in this
process: the cost a cold ``tg.build`` pays before gcc.

    .venv/bin/python benchmarks/bench_generation.py --repeat 3

Run it on two trees (``PYTHONPATH=/tmp/base/src``) to compare a change; it works on code
whose ``plan`` has no ``fused`` parameter too (that ``blueprint`` fused by itself).
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TEGRAD_GRAPH_CACHE", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    import c_text
    import tegrad
    from tegrad.backends.cpu.program import blueprint
    from tegrad.lower.plan import plan

    fused = "fused" in inspect.signature(plan).parameters
    programs = [outs for _, outs in c_text.programs()]

    def generate():
        for outs in programs:
            blueprint(plan(list(outs), fused=True) if fused else plan(list(outs)))

    generate()  # (first: imports and caches warm)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        generate()
        times.append(time.perf_counter() - start)
    print(f"{Path(tegrad.__file__).parents[1]}: plan + C of {len(programs)} programs, "
          f"best {min(times):.2f} s, median {statistics.median(times):.2f} s "
          f"of {args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
