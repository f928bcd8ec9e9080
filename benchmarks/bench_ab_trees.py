"""The CPU suite (``bench_cpu.py``) on two source trees, in turns: a change's speed
against the code before it, where the two cannot meet in one process (a restructuring:
the same modules, other code).

Each round runs ``bench_cpu.py`` once per tree, each in a new process whose ``PYTHONPATH``
puts that tree's ``src`` first (its own ``benchmarks/bench_cpu.py``), the trees' order
alternating from round to round. Per row it prints the median over rounds of each tree's
tegrad time, their ratio (after / before), and the noise: the spread of each tree's times
over the rounds (max / min). A row moved by more than its noise is flagged. First calls
(a cold and a warm disk cache, ``bench_cpu.py``'s ``first_call``) are compared the same
way.

    .venv/bin/python benchmarks/bench_ab_trees.py --before /tmp/base --after . --rounds 3
    .venv/bin/python benchmarks/bench_ab_trees.py --before /tmp/base --after . --quick
    .venv/bin/python benchmarks/bench_ab_trees.py --before /tmp/base --rounds 6 \
        --cases conv2d_s2,lstm --no-compile

``--before`` is typically a ``git worktree add /tmp/base <commit>`` of the older code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_suite(tree: Path, out: Path, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), TEGRAD_GRAPH_CACHE="0")
    cmd = [sys.executable, str(tree / "benchmarks" / "bench_cpu.py"), "--json", str(out),
           *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if not out.exists():
        raise SystemExit(f"{tree}: bench_cpu.py failed ({done.returncode}):\n{done.stdout}"
                         f"\n{done.stderr}")
    return json.loads(out.read_text())


def spread(values: list[float]) -> float:
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the older tree")
    parser.add_argument("--after", type=Path, default=Path("."), help="the newer tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="bench_cpu.py --quick")
    parser.add_argument("--cases", help="bench_cpu.py --cases (names or prefixes)")
    parser.add_argument("--no-compile", action="store_true", help="no first-call runs")
    parser.add_argument("--json", type=Path, help="write every round's results here")
    args = parser.parse_args(argv)
    extra = ["--no-jax"] + (["--quick"] if args.quick else []) + (
        ["--cases", args.cases] if args.cases else []) + (
        ["--no-compile"] if args.no_compile else [])
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[str, list[dict]] = {side: [] for side in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for side in order:
                print(f"round {r + 1}/{args.rounds}: {side} ({trees[side]})", flush=True)
                results[side].append(run_suite(trees[side], Path(tmp) / f"{side}{r}.json",
                                               extra))
    rows = [(row["case"], row["row"]) for row in results["after"][0]["rows"]]
    print(f"\n{args.rounds} rounds; machine: {results['after'][0]['machine']['cpu_model']}, "
          f"{results['after'][0]['machine']['cpus']} CPUs")
    print(f"{'case':12s} {'row':17s} {'before ms':>10s} {'after ms':>10s} {'after/before':>12s}"
          f" {'noise b':>8s} {'noise a':>8s}")
    ratios, flagged = [], []
    for case, name in rows:
        times = {side: [next(x["tegrad_ms"] for x in run["rows"]
                             if (x["case"], x["row"]) == (case, name))
                        for run in results[side]] for side in trees}
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        noise = max(spread(times["before"]), spread(times["after"]))
        ratio = a / b
        ratios.append((ratio, case, name))
        mark = ""
        if ratio > noise or 1 / ratio > noise:
            mark = "  <- beyond noise"
            flagged.append((case, name))
        print(f"{case:12s} {name:17s} {b:10.3f} {a:10.3f} {ratio:12.3f} "
              f"{spread(times['before']):8.3f} {spread(times['after']):8.3f}{mark}")
    ordered = sorted(ratios)
    print(f"median after/before {statistics.median(r for r, _, _ in ratios):.3f} over "
          f"{len(ratios)} rows; slowest {ordered[-1][0]:.3f} ({ordered[-1][1]} "
          f"{ordered[-1][2]}), fastest {ordered[0][0]:.3f} ({ordered[0][1]} {ordered[0][2]}); "
          f"beyond noise: {', '.join(f'{c} {n}' for c, n in flagged) or 'none'}")
    if results["after"][0].get("first_call"):
        print("\nfirst call (tg.nn + tg.gradient + tg.build + first run, ms; median of rounds)")
        for k, entry in enumerate(results["after"][0]["first_call"]):
            line = f"{entry['case']:12s}"
            for cache in ("cold", "warm"):
                got = {side: statistics.median(run["first_call"][k][cache]["total_ms"]
                                               for run in results[side]) for side in trees}
                line += (f"  {cache}: before {got['before']:8.1f} after {got['after']:8.1f}"
                         f" ({got['after'] / got['before']:.2f})")
            print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
