"""One setting of the compiled target on and off, alternating with torch in one process.

The suite's rows (``bench_cpu.py``) move by 20-100 % from one run to the next on a shared
machine, more than most single changes gain. This script builds a case's program twice,
with a setting at its default and with it turned off, and times both and torch's in turns
as ``bench_cpu.py`` does (per round and side: a pause, an untimed call, then ``--block``
timed calls), so the two versions meet the same state of the machine. It prints each
side's median and the ratio of the versions' round medians.

Settings (``--knob``), each a field of ``tg.Options`` passed to the build:

- ``stream``: outputs no later kernel reads written with non-temporal stores
  (``codegen.KernelSource._stage``); off: ``stream_bytes`` out of reach. ``--traffic 0``
  lifts the kernel-traffic limit too, to try the kernels it keeps on plain stores.
- ``rows``: a scan weight's product split by rows (``shared_rows_bytes``); off: 0.
- ``phases``: a strided output's residue classes written through one interleaving copy
  (``min_phases``); off: a copy per class.
- ``widen``: row widening for outputs whose columns step by more than one (a residue
  class's: ``max_widened_step``); off: 1, an im2col copy instead.
- ``overlap``: a weight gradient's input copied three times over ``(n, c, s, h + r, w)``
  (``host/products._overlap_layout``); off: ``overlap_bytes`` 0, the im2col copy.
- ``merge``: two products of one operand (an LSTM's weight gradients) made as one, their
  other operands side by side (``lower/merge.py``); off: ``merge_products`` False.
- ``unread``: a tensor made and read by no later kernel (an LSTM's cell history) back to
  the pool at once (``free_unread``); off: dropped at the end of the run.
- ``keep``: a scan's elementwise step values that a backward reads (an LSTM's activated
  gates) kept by its forward run (``keep_step_kernels``); off: recomputed by
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

# (tg.Options field, value that turns the setting off)
KNOBS = {"stream": ("stream_bytes", 1 << 62),
         "rows": ("shared_rows_bytes", 0),
         "phases": ("min_phases", 1 << 30),
         "widen": ("max_widened_step", 1),
         "overlap": ("overlap_bytes", 0),
         "merge": ("merge_products", False),
         "unread": ("free_unread", False),
         "keep": ("keep_step_kernels", False)}


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
    parser.add_argument("--traffic", type=int, help="Options.stream_traffic_bytes (stream)")
    parser.add_argument("--quick", action="store_true", help="the suite's small shapes")
    parser.add_argument("--threads", help="threads for torch, BLAS and OpenMP")
    args = parser.parse_args(argv)
    threads = bench_shared.set_threads(int(args.threads) if args.threads else None)[0]
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # as bench_cpu.py sets them

    import dataclasses

    import bench_cpu_cases as cases
    import tegrad as tg

    picked = cases.select(cases.cases(args.quick), args.case)
    if len(picked) != 1:
        raise SystemExit(f"--case: {args.case} names {len(picked)} cases; name one")
    (case,) = picked
    graph = case.graph()
    arrays, head = case.make_arrays(graph)
    field, off = KNOBS[args.knob]
    default = tg.Options.from_environment()
    if args.traffic is not None:
        default = dataclasses.replace(default, stream_traffic_bytes=args.traffic)
    programs = {}
    for side, options in (("off", dataclasses.replace(default, **{field: off})),
                          ("on", default)):
        program = cases.tegrad_programs(graph, "cpu", arrays, options=options)[args.row]
        program(arrays, head)  # (built, traced and laid out under these options)
        programs[side] = program
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
