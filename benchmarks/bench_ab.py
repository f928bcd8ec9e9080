"""One setting of the compiled target on and off, alternating with torch in one process.

The suite's rows (``bench_cpu.py``) move by 20-100 % from one run to the next on a shared
machine, more than most single changes gain. This script builds a case's program twice,
with a setting at its default and with it turned off, and times both and torch's in turns
as ``bench_cpu.py`` does (per round and side: a pause, an untimed call, then ``--block``
timed calls), so the two versions meet the same state of the machine. It prints each
side's median and the ratio of the versions' round medians.

Settings (``--knob``):

- ``stream``: outputs no later kernel reads written with non-temporal stores
  (``codegen.KernelSource._stage``); off: ``STREAM_BYTES`` out of reach. ``--traffic 0``
  lifts the kernel-traffic limit too, to try the kernels it keeps on plain stores.
- ``rows``: a scan weight's product split by rows (``packed.SHARED_ROWS_BYTES``); off: 0.
- ``phases``: a strided output's residue classes written through one interleaving copy
  (``numpy_kernels.MIN_PHASES``); off: a copy per class.
- ``widen``: row widening for outputs whose columns step by more than one (a residue
  class's: ``contraction.MAX_WIDENED_STEP``); off: 1, an im2col copy instead.
- ``overlap``: a weight gradient's input copied three times over ``(n, c, s, h + r, w)``
  (``numpy_kernels._overlap_layout``); off: ``OVERLAP_BYTES`` 0, the im2col copy.
- ``merge``: two products of one operand (an LSTM's weight gradients) made as one, their
  other operands side by side (``lower/merge.py``); off: ``MERGE_PRODUCTS`` False.
- ``unread``: a tensor made and read by no later kernel (an LSTM's cell history) back to
  the pool at once (``numpy_backend.FREE_UNREAD``); off: dropped at the end of the run.
- ``keep``: a scan's elementwise step values that a backward reads (an LSTM's activated
  gates) kept by its forward run (``saved_steps.KEEP_STEP_KERNELS``); off: recomputed by
  the backward over all steps.

    python benchmarks/bench_ab.py --knob stream --case layer_norm --row backward
    python benchmarks/bench_ab.py --knob rows --case lstm --row forward
    python benchmarks/bench_ab.py --knob phases --case conv2d_s2 --row backward

``--quick`` (the suite's small shapes) only checks that the script runs: nothing there is
large enough to stream.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import bench_shared

# (module, attribute, value that turns the setting off)
KNOBS = {"stream": ("tegrad.backends.cpu.codegen", "STREAM_BYTES", 1 << 62),
         "rows": ("tegrad.backends.cpu.packed", "SHARED_ROWS_BYTES", 0),
         "phases": ("tegrad.backends.numpy_kernels", "MIN_PHASES", 1 << 30),
         "widen": ("tegrad.lower.contraction", "MAX_WIDENED_STEP", 1),
         "overlap": ("tegrad.backends.numpy_kernels", "OVERLAP_BYTES", 0),
         "merge": ("tegrad.lower.merge", "MERGE_PRODUCTS", False),
         "unread": ("tegrad.backends.numpy_backend", "FREE_UNREAD", False),
         "keep": ("tegrad.lower.saved_steps", "KEEP_STEP_KERNELS", False)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bench_shared.apply(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knob", choices=sorted(KNOBS), required=True)
    parser.add_argument("--case", required=True, help="a bench_cpu.py case name")
    parser.add_argument("--row", default="backward",
                        choices=["forward", "backward", "forward+backward"])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--block", type=int, default=5, help="timed calls per turn")
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--traffic", type=int, help="codegen.STREAM_TRAFFIC_BYTES (stream)")
    parser.add_argument("--quick", action="store_true", help="the suite's small shapes")
    parser.add_argument("--threads", help="threads for torch, BLAS and OpenMP")
    args = parser.parse_args(argv)
    os.environ["TEGRAD_GRAPH_CACHE"] = "0"  # (a stored plan would not see the setting)
    threads = bench_shared.set_threads(int(args.threads) if args.threads else None)[0]
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # as bench_cpu.py sets them

    import importlib

    import bench_cpu_cases as cases

    picked = cases.select(cases.cases(args.quick), args.case)
    if len(picked) != 1:
        raise SystemExit(f"--case: {args.case} names {len(picked)} cases; name one")
    (case,) = picked
    graph = case.graph()
    arrays, head = case.make_arrays(graph)
    module_name, attribute, off = KNOBS[args.knob]
    module = importlib.import_module(module_name)
    if args.traffic is not None:
        from tegrad.backends.cpu import codegen

        codegen.STREAM_TRAFFIC_BYTES = args.traffic
    default = getattr(module, attribute)
    programs = {}
    for side, value in (("off", off), ("on", default)):
        setattr(module, attribute, value)
        program = cases.tegrad_programs(graph, "cpu", arrays)[args.row]
        program(arrays, head)  # (built, traced and laid out under this value)
        programs[side] = program
    setattr(module, attribute, default)
    torch_fn = cases.torch_programs(case, arrays, head)[args.row]
    fns = {"off": lambda: programs["off"](arrays, head), "torch": torch_fn,
           "on": lambda: programs["on"](arrays, head)}
    rounds: dict[str, list[float]] = {side: [] for side in fns}
    for _ in range(args.rounds):
        for side, fn in fns.items():
            time.sleep(args.pause)
            fn()
            times = []
            for _ in range(args.block):
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
            rounds[side].append(statistics.median(times))
    ratios = [a / b for a, b in zip(rounds["on"], rounds["off"], strict=True)]
    med = {side: statistics.median(v) for side, v in rounds.items()}
    print(f"{args.case} {args.row}, {args.knob} on / off, {args.rounds} rounds of "
          f"{args.block} calls per side")
    print("  median ms: " + ", ".join(f"{side} {v:.3f}" for side, v in med.items()))
    print(f"  on / off: {med['on'] / med['off']:.3f} (round by round: median "
          f"{statistics.median(ratios):.3f}, {' '.join(f'{r:.2f}' for r in ratios)})")
    print(f"  off / torch {med['off'] / med['torch']:.3f}, on / torch "
          f"{med['on'] / med['torch']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
