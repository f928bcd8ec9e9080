"""The layer-shape benchmark (issue 30, item 1): layers of real networks (ResNet-18/50,
MobileNetV2, a U-Net decoder, a Transformer encoder block, the LSTM language model), pools,
norms, embeddings and losses at their shapes there, and whole training steps, tegrad's
compiled target against PyTorch eager, float32, side by side in one process.

    .venv/bin/python benchmarks/bench_layers.py --threads 2 --json reports/bench_layers.json
    .venv/bin/python benchmarks/bench_layers.py --cases resnet18.,dw --runs 15
    .venv/bin/python benchmarks/bench_layers.py --quick --cases losses.mse   # a smoke run
    .venv/bin/python benchmarks/bench_layers.py --cases resnet18. --option thin_batch=0

Cases: ``bench_layers_cases.py`` (its docstring lists them). Rows per case, as in
``bench_cpu.py`` and with its machinery (``bench_cpu_cases.tegrad_programs`` and
``torch_programs``, ``bench_shared.time_alternating``):

- forward: tegrad ``tg.build(inputs, out)``; torch under ``no_grad``.
- backward: tegrad ``tg.build_vjp``'s backward on what its forward kept (that forward run
  once, untimed); torch ``torch.autograd.grad`` of a graph built once and retained.
- forward+backward: one tegrad program returning the output and the gradients; torch a
  forward and its ``autograd.grad``. For a training step: the loss and every parameter's
  gradient.

Protocol: every program's results are checked against torch's (max abs difference over
max abs value, float32 tolerance; a looser one for whole networks, whose 20-50 layers sum
in other orders; for the ResNets, whose float32 gradients jump where rounding moves a
ReLU's input across 0, the float32 loss and the float64 gradients) before any timing; a
disagreement is printed and makes the exit status 1.
Then per row the two sides take turns in blocks of at most three runs, each block after a
pause and an untimed call; each time is the median of ``--runs``. The summary gives, per
row and over all rows, the median tegrad/torch ratio, the cases over 1.5x and over 3x,
and the worst cases. ``--threads N`` sets torch, BLAS and OpenMP (tegrad's kernels) alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_shared, bench_cpu, bench_layers_cases: siblings
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(HERE.parent / "src"))

import bench_layers_cases  # noqa: E402
import tegrad as tg  # noqa: E402
from bench_cpu import check, machine_info, target_available, thread_info  # noqa: E402
from bench_cpu_cases import ROWS, tegrad_programs, torch_programs  # noqa: E402

DEFAULT_JSON = HERE.parent / "reports" / "bench_layers.json"
SLOW, VERY_SLOW = 1.5, 3.0  # the thresholds: tegrad / torch over these
WORST = 10  # worst cases listed in the summary


def bench_case(case, args, threads) -> tuple[list[dict], list[dict], float | None]:
    """Check, then time, the three rows of ``case``: (rows, check records, other load)."""
    t0 = time.perf_counter()
    graph = case.graph()
    arrays, head, torch_setup = case.make_arrays(graph)
    teg = tegrad_programs(graph, args.target, arrays, options=args.options)
    ref = torch_programs(SimpleNamespace(torch_setup=torch_setup), arrays, head)
    prepare_s = time.perf_counter() - t0

    want_all = torch_values(case, ref, arrays)
    names_all = ["out"] + [f"d{case.inputs[k].name}" for k in case.differentiated()]
    pick = {"forward": slice(0, 1), "backward": slice(1, None), "forward+backward": slice(None)}
    checks = []
    for row in ROWS:
        names, want = names_all[pick[row]], want_all[pick[row]]
        for record in check(case, "tegrad", row, teg[row](arrays, head), want, names):
            record["judged"] = not case.kinked or record["tensor"] == "out"
            record["ok"] = bool(record["rel_err"] <= case.tolerance or not record["judged"])
            checks.append(record)
    if case.kinked:
        checks += float64_checks(case, args, arrays, head, torch_setup, names_all)

    rows = []
    with bench_shared.OtherLoad() as other:
        for row in ROWS:
            t_tg, t_th = bench_shared.time_alternating(
                [lambda r=row: teg[r](arrays, head), ref[row]], args.runs, threads, args.pause)
            rows.append({"case": case.name, "network": case.network, "title": case.title,
                         "row": row, "tegrad_ms": t_tg, "torch_ms": t_th,
                         "tegrad_over_torch": t_tg / t_th})
    rows[0]["prepare_s"] = prepare_s  # tg.gradient, the builds and their compilation
    return rows, checks, other.cores


def torch_values(case, ref: dict, arrays) -> list[np.ndarray]:
    """torch's forward+backward: the output, then each differentiated input's gradient
    (float64 arrays, each of its input's shape)."""
    got = [t.detach().numpy().astype(np.float64) for t in ref["forward+backward"]()]
    return [got[0]] + [w.reshape(arrays[k].shape)
                       for w, k in zip(got[1:], case.differentiated(), strict=True)]


FLOAT64_TOLERANCE = 1e-9  # tegrad's float64 step against torch's, over 20-50 layers


def float64_checks(case, args, arrays, head, torch_setup, names) -> list[dict]:
    """A kinked network's loss and gradients in float64, tegrad's against torch's (its
    float32 gradients are checked for their loss only: see ``Layer.kinked``)."""
    wide = [a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays]
    head64 = head.astype(np.float64)
    g = case.graph("float64")
    got = tg.build([*g.inputs, g.head], [g.out, *g.grads], target=args.target,
                   options=args.options)(*wide, head64)
    ref = torch_programs(SimpleNamespace(torch_setup=torch_setup), wide, head64)
    want = torch_values(case, ref, wide)
    records = check(case, "tegrad float64", "forward+backward", got, want, names)
    for record in records:
        record["ok"] = bool(record["rel_err"] <= FLOAT64_TOLERANCE)
    return records


def summarize(rows: list[dict]) -> dict:
    """Per row kind and over every row: the median ratio, the cases over ``SLOW`` and
    ``VERY_SLOW``, and the ``WORST`` slowest (case, ratio)."""
    def over(found: list[dict]) -> dict:
        ratios = [r["tegrad_over_torch"] for r in found]
        worst = sorted(found, key=lambda r: -r["tegrad_over_torch"])[:WORST]
        return {"rows": len(found), "median": statistics.median(ratios) if ratios else None,
                f"over_{SLOW}": sum(v > SLOW for v in ratios),
                f"over_{VERY_SLOW}": sum(v > VERY_SLOW for v in ratios),
                "worst": [{"case": r["case"], "row": r["row"],
                           "tegrad_over_torch": r["tegrad_over_torch"]} for r in worst]}

    summary = {row: over([r for r in rows if r["row"] == row]) for row in ROWS}
    summary["all rows"] = over(rows)
    return summary


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def report(result, markdown: bool) -> None:
    m, th = result["machine"], result["threads"]

    def say(line: str) -> None:
        print(f"- {line}" if markdown else line)

    say(f"tegrad target={result['target']} vs torch {m['torch']} eager; float32; median of "
        f"{result['runs']} runs per row, the sides in turns"
        + (" (--quick)" if result["quick"] else ""))
    say(f"machine: {m['cpu_model']}, {m['cpus']} CPUs ({m['cpus_usable']} usable), "
        f"load average {', '.join(map(str, m['load_average']))}; threads: torch "
        f"{th['torch']}; {th['blas']}; OMP_NUM_THREADS={th['OMP_NUM_THREADS']}")
    if result["other_load_cores"] is not None:
        say(f"other processes during the timed runs: {result['other_load_cores']:.2f} cores "
            "busy on average" + ("  WARNING: the times are unreliable"
                                 if result["other_load_cores"] > 0.25 else ""))
    print()
    by_case: dict[str, dict] = {}
    for r in result["rows"]:
        by_case.setdefault(r["case"], {"title": r["title"]})[r["row"]] = r
    cells = []
    for name, found in by_case.items():
        both = found["forward+backward"]
        cells.append((name, found["title"],
                      *(bench_shared.ratio_text(found[row]["tegrad_over_torch"]) for row in ROWS),
                      _ms(both["tegrad_ms"]), _ms(both["torch_ms"])))
    bench_shared.print_table(
        "tegrad / torch per row; forward+backward times (ms, median)",
        ("case", "layer", "fwd", "bwd", "fwd+bwd", "tegrad ms", "torch ms"), cells, markdown)
    s = result["summary"]
    for key in (*ROWS, "all rows"):
        if key not in s or not s[key]["rows"]:
            continue
        x = s[key]
        worst = ", ".join(f"{w['case']}{'' if key != 'all rows' else ' ' + w['row']} "
                          f"{w['tegrad_over_torch']:.2f}" for w in x["worst"][:5])
        say(f"{key}: median {x['median']:.2f} over {x['rows']} rows; {x[f'over_{SLOW}']} over "
            f"{SLOW}x, {x[f'over_{VERY_SLOW}']} over {VERY_SLOW}x; worst: {worst}")
    judged = [c for c in result["checks"] if c.get("judged", True)]
    worst = max(judged, key=lambda c: c["rel_err"], default=None)
    if worst is not None:
        say(f"check against torch: {len(judged)} tensors, worst {worst['case']} "
            f"{worst['side']} {worst['row']} {worst['tensor']} rel err "
            f"{worst['rel_err']:.1e} (the ReLU networks' float32 gradients not judged: "
            f"their float64 ones are)")
    for c in result["checks"]:
        if not c["ok"]:
            say(f"!!! DISAGREEMENT: {c['case']} {c['row']} {c['tensor']}: max abs diff / "
                f"max abs torch = {c['rel_err']:.3e}")
    for e in result["errors"]:
        say(f"!!! ERROR: {e}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated substrings of case names "
                        "(resnet18., resnet50., mobilenet_v2., unet., transformer., lstm_lm., "
                        "embedding., losses., train.; or any part of a name: dw_s2, downsample)")
    parser.add_argument("--runs", type=int, help="timed runs per side and row (9; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="3 runs per row (a smoke run)")
    parser.add_argument("--threads", type=int, help="threads for torch, BLAS and OpenMP; "
                        "default: torch's default count for all")
    parser.add_argument("--target", default="cpu", help="tegrad's target (cpu)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"write the results here ({DEFAULT_JSON.relative_to(HERE.parent)})")
    parser.add_argument("--markdown", action="store_true", help="print GitHub tables")
    parser.add_argument("--pause", type=float, help="seconds of pause before each turn "
                        "(0.3 with more than one thread, else 0.02)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--option", action="append", default=[], metavar="FIELD=INT",
                        help="a tg.Options field for tegrad's builds (integer or 0/1 for "
                        "a switch), e.g. --option thin_batch=0: an optimisation off")
    args = parser.parse_args(argv)
    changes = {}
    for item in args.option:
        field, _, value = item.partition("=")
        changes[field] = int(value)
    args.options = tg.Options.from_environment().replace(**changes) if changes else None
    selected = bench_layers_cases.select(bench_layers_cases.cases(), args.cases)
    if args.list:
        for c in selected:
            print(f"{c.name}: {c.title}")
        return 0
    args.runs = args.runs or (3 if args.quick else 9)
    threads, blas_line = bench_shared.set_threads(args.threads)
    if args.pause is None:
        args.pause = 0.3 if threads > 1 else 0.02
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # OpenMP runtimes loaded later
    why = target_available(args.target)
    if why:
        print(f"tegrad target {args.target!r} is not available: {why}", file=sys.stderr)
        return 2

    rows, checks, loads, errors = [], [], [], []
    start = time.perf_counter()
    for case in selected:
        try:
            case_rows, case_checks, load = bench_case(case, args, threads)
        except Exception as e:  # noqa: BLE001 - one failing case must not hide the others
            errors.append(f"{case.name}: {type(e).__name__}: {e}")
            continue
        rows += case_rows
        checks += case_checks
        if load is not None:
            loads.append(load)
        both = case_rows[-1]
        print(f"  {case.name}: fwd+bwd {both['tegrad_over_torch']:.2f}x torch "
              f"({time.perf_counter() - start:.0f}s elapsed)", file=sys.stderr, flush=True)
    result = {"suite": "bench_layers", "target": args.target, "quick": args.quick,
              "options": dict(changes),
              "runs": args.runs, "pause_s": args.pause, "machine": machine_info(),
              "threads": thread_info(threads, blas_line),
              "other_load_cores": statistics.mean(loads) if loads else None,
              "seconds": time.perf_counter() - start, "thresholds": [SLOW, VERY_SLOW],
              "rows": rows, "checks": checks, "errors": errors, "summary": summarize(rows)}
    report(result, args.markdown)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")
    failed = len(errors) + sum(not c["ok"] for c in checks)
    if failed:
        print(f"!!! {failed} disagreement(s) or error(s): exit status 1", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
