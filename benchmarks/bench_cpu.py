"""The CPU benchmark suite (issue 6, item 4): tegrad's compiled target against PyTorch
eager and ``jax.jit`` on the CPU, float32, side by side in one process.

    .venv/bin/python benchmarks/bench_cpu.py                   # the suite, --target cpu
    .venv/bin/python benchmarks/bench_cpu.py --quick --target numpy --cases softmax
    .venv/bin/python benchmarks/bench_cpu.py --markdown        # GitHub tables for the README

Cases (``bench_cpu_cases.py``): matmul 512 and 1024; conv2d N=8, C=64, 56x56, K=64, 3x3,
pad 1, stride 1 and 2; max_pool2d 2x2 on the conv's input; softmax and layer_norm (weight,
bias) over the last dim of 4096x1024; LSTM L=50, N=32, I=128, H=256. ``--quick``: the
same ops on small shapes. Rows per case, each one program per side:

- forward: tegrad ``tg.build(inputs, out)``; torch under ``no_grad``; ``jax.jit(f)``.
- backward: tegrad ``tg.build_vjp``'s backward, on what its forward kept (that forward
  run once, untimed); torch ``torch.autograd.grad`` of a retained graph; JAX a jitted
  application of ``jax.vjp``'s pullback (its residuals from one forward, untimed).
  ``--backward recompute`` times tegrad's gradient program alone instead
  (``tg.build(inputs + [head], tg.gradient(out, inputs, head))``), which recomputes the
  forward values it needs at every call.
- forward+backward: one program returning the output and the gradients; torch a forward
  and ``autograd.grad``; JAX ``jax.vjp`` and its pullback in one jitted function.

Protocol: every program's results are checked once against torch's (max abs difference
over max abs value, float32 tolerance) before any timing; a disagreement is printed and
makes the exit status 1. Then per row the three sides take turns after one warm-up each:
with one thread one run per turn, with more threads blocks of at most three runs (BLAS
and OpenMP worker threads spin after a call; a pause, 0.3 s, and an untimed call precede
each block); each time is the median of ``--runs``. GFLOP/s: the case's analytic flops (see
``bench_cpu_cases``) over tegrad's time, and as a percentage of the machine's sgemm rate
(the median of NumPy float32 2048x2048 matmuls in this process, same threads).

First call: per case, a new process of this script (a hidden flag) with
``TEGRAD_CACHE_DIR`` set to an empty temporary directory times ``tg.nn`` +
``tg.gradient`` + ``tg.build`` of the forward+backward program and its first call; a
second new process with the now-warm cache does the same (``--no-compile`` skips both).
Threads: ``--threads N`` sets torch, BLAS and OpenMP (tegrad's kernels); else torch's
default count is given to all three. XLA's CPU pool follows only ``--threads 1``
(``XLA_FLAGS``); otherwise it uses every core, which the output says.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_shared, bench_cpu_cases: siblings
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(HERE.parent / "src"))

import bench_cpu_cases  # noqa: E402
import tegrad as tg  # noqa: E402
from bench_cpu_cases import ROWS, jax_programs, tegrad_programs, torch_programs  # noqa: E402

TOLERANCE = 1e-4  # max abs difference over max abs torch; measured at most 6e-6 (float32)
DEFAULT_JSON = HERE.parent / "reports" / "bench_cpu.json"


# checking and timing -----------------------------------------------------------------------


def check(case, side, row, got, want, names) -> list[dict]:
    """One record per tensor: max abs difference over max abs value of torch's."""
    records = []
    for name, g, w in zip(names, got, want, strict=True):
        g = np.asarray(g, dtype=np.float64).reshape(w.shape)
        scale = max(float(np.abs(w).max()), 1e-30)
        err = float(np.abs(g - w).max()) / scale if g.size else 0.0
        records.append({"case": case.name, "row": row, "side": side, "tensor": name,
                        "rel_err": err, "ok": bool(err <= TOLERANCE)})
    return records


def sgemm_gflops(runs: int) -> float:
    """NumPy float32 2048x2048 @ 2048x2048, median GFLOP/s (BLAS threads already set)."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2048, 2048), dtype=np.float32) for _ in range(2))
    a @ b
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2.0 * 2048**3 / statistics.median(ts) / 1e9


def bench_case(case, args, threads, use_jax) -> tuple[list[dict], list[dict], float | None]:
    """Check, then time, the three rows of ``case``: (rows, check records, other load)."""
    graph = case.graph()
    arrays, head = case.make_arrays(graph)
    teg = tegrad_programs(graph, args.target, arrays, args.backward)
    ref = torch_programs(case, arrays, head)
    jx = jax_programs(case, arrays, head) if use_jax else None

    want_all = [t.detach().numpy().astype(np.float64) for t in ref["forward+backward"]()]
    want_all = [want_all[0]] + [w.reshape(a.shape) for w, a in zip(want_all[1:], arrays,
                                                                   strict=True)]
    names_all = ["out"] + [f"d{p.name}" for p in graph.inputs]
    pick = {"forward": slice(0, 1), "backward": slice(1, None), "forward+backward": slice(None)}
    checks = []
    for row in ROWS:
        names, want = names_all[pick[row]], want_all[pick[row]]
        checks += check(case, "tegrad", row, teg[row](arrays, head), want, names)
        if jx is not None:
            checks += check(case, "jax", row, jx[row](), want, names)

    rows = []
    with bench_shared.OtherLoad() as other:
        for row in ROWS:
            t_tg, t_th, t_jx = bench_shared.time_alternating(
                [lambda r=row: teg[r](arrays, head), ref[row], jx[row] if jx else None],
                args.runs, threads, args.pause)
            flops = case.flops(row)
            rows.append({"case": case.name, "title": case.title, "row": row,
                         "tegrad_ms": t_tg, "torch_ms": t_th, "jax_ms": t_jx,
                         "tegrad_over_torch": t_tg / t_th,
                         "tegrad_over_jax": None if t_jx is None else t_tg / t_jx,
                         "flops": flops, "tegrad_gflops": flops / t_tg / 1e6})
    return rows, checks, other.cores


# first call in a new process -----------------------------------------------------------------


def first_call_child(name: str, args) -> dict:
    """In a new process: time ``tg.nn`` + ``tg.gradient``, ``tg.build`` of the
    forward+backward program, its first call and (for comparison) its second. The
    process's one-time costs come first and apart (``setup_ms``): building and running
    a one-line program imports the target's modules (compiling their sources where
    ``PYTHONDONTWRITEBYTECODE`` is set), asks the compiler's version and, with an empty
    cache, builds the product and copy helpers (once per cache, alongside the first
    program's kernels)."""
    case = next(c for c in bench_cpu_cases.cases(args.quick) if c.name == name)
    t_setup = time.perf_counter()
    target_available(args.target)
    t0 = time.perf_counter()
    graph = case.graph()
    t1 = time.perf_counter()
    f = tg.build([*graph.inputs, graph.head], [graph.out, *graph.grads], target=args.target)
    t2 = time.perf_counter()
    arrays, head = case.make_arrays(graph)
    t3 = time.perf_counter()
    f(*arrays, head)
    t4 = time.perf_counter()
    f(*arrays, head)
    t5 = time.perf_counter()
    return {"setup_ms": 1e3 * (t0 - t_setup), "graph_ms": 1e3 * (t1 - t0),
            "build_ms": 1e3 * (t2 - t1), "first_call_ms": 1e3 * (t4 - t3),
            "second_call_ms": 1e3 * (t5 - t4),
            "total_ms": 1e3 * ((t2 - t0) + (t4 - t3))}


def first_call(case, args) -> dict:
    """Cold (empty ``TEGRAD_CACHE_DIR``) and warm (the same directory, new process)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_first-call", case.name,
           "--target", args.target]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    result = {"case": case.name}
    with tempfile.TemporaryDirectory(prefix="tegrad-bench-cache-") as cache:
        env = {**os.environ, "TEGRAD_CACHE_DIR": cache}
        for phase in ("cold", "warm"):
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                                  timeout=900)
            if done.returncode != 0:
                result["error"] = f"{phase} process failed:\n{done.stderr[-2000:]}"
                return result
            result[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# output ----------------------------------------------------------------------------------------


def machine_info() -> dict:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    info = {"cpu_model": model, "cpus": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else None,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__,
            "load_average": [round(x, 2) for x in os.getloadavg()]}
    try:
        import jax

        info["jax"] = jax.__version__
    except ImportError:
        info["jax"] = None
    return info


def thread_info(threads: int, blas_line: str) -> dict:
    """What each library reports (threadpoolctl lists every loaded BLAS and OpenMP)."""
    from tegrad.backends.cpu.gemm import blas_name

    info = {"threads": threads, "torch": threads, "blas": blas_line,
            "tegrad_products": blas_name(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}
    try:
        from threadpoolctl import threadpool_info

        info["openmp"] = [f"{i['filepath']} {i['num_threads']}"
                          for i in threadpool_info() if i["user_api"] == "openmp"]
    except ImportError:
        info["openmp"] = ["(no threadpoolctl)"]
    return info


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def summarize(rows, first_calls) -> dict:
    ratios = [r["tegrad_over_torch"] for r in rows]
    worst = max(rows, key=lambda r: r["tegrad_over_torch"])

    def beats(case):
        r = [x for x in rows if x["case"] == case and x["row"] == "backward"]
        return None if not r else bool(r[0]["tegrad_over_torch"] < 1.0)

    done = [f for f in first_calls if "warm" in f]
    return {"median_tegrad_over_torch": statistics.median(ratios),
            "max_tegrad_over_torch": worst["tegrad_over_torch"],
            "max_row": f"{worst['case']} {worst['row']}",
            "softmax_backward_beats_torch": beats("softmax"),
            "layer_norm_backward_beats_torch": beats("layer_norm"),
            "max_cold_first_call_ms": max((f["cold"]["total_ms"] for f in done), default=None),
            "max_warm_first_call_ms": max((f["warm"]["total_ms"] for f in done), default=None),
            # the target, "generation plus compilation": tg.gradient and tg.build
            "max_warm_generation_ms": max((f["warm"]["graph_ms"] + f["warm"]["build_ms"]
                                           for f in done), default=None)}


def report(result, markdown: bool) -> None:
    m, th, sg = result["machine"], result["threads"], result["sgemm_gflops"]

    def say(line: str) -> None:  # a list item in Markdown, so that lines stay lines
        print(f"- {line}" if markdown else line)

    say(f"tegrad target={result['target']} vs torch {m['torch']} eager vs jax "
        f"{m['jax'] if result['jax_used'] else '(skipped)'} jit; float32; median of "
        f"{result['runs']} runs"
        + (" (--quick shapes)" if result["quick"] else ""))
    say("tegrad's backward row: " + (
        "tg.build_vjp's backward on what its forward kept" if result["tegrad_backward"] ==
        "saved" else "the gradient program alone, recomputing the forward values it needs"))
    say(f"machine: {m['cpu_model']}, {m['cpus']} CPUs ({m['cpus_usable']} usable), "
        f"load average {', '.join(map(str, m['load_average']))}")
    say(f"threads: torch {th['torch']}; {th['blas']}; tegrad's products: "
        f"{th.get('tegrad_products', '?')}, single-threaded, on OpenMP's threads; OMP_NUM_THREADS="
        f"{th['OMP_NUM_THREADS']}, OpenMP runtimes: {', '.join(th['openmp']) or 'none'}; "
        f"XLA_FLAGS='{th['XLA_FLAGS']}'" + ("" if th["torch"] == 1 else
                                            " (XLA's pool: every core)"))
    say(f"sgemm (NumPy float32 2048^3, same threads): {sg:.1f} GFLOP/s")
    if result["other_load_cores"] is not None:
        say(f"other processes during the timed runs: {result['other_load_cores']:.2f} cores "
            "busy on average" + ("  WARNING: the times are unreliable"
                                 if result["other_load_cores"] > 0.25 else ""))
    print()
    cells = [(r["case"], r["row"], _ms(r["tegrad_ms"]), _ms(r["torch_ms"]), _ms(r["jax_ms"]),
              bench_shared.ratio_text(r["tegrad_over_torch"]),
              bench_shared.ratio_text(r["tegrad_over_jax"]),
              f"{r['tegrad_gflops']:.1f}", f"{100 * r['tegrad_gflops'] / sg:.1f}")
             for r in result["rows"]]
    bench_shared.print_table(
        "time (ms, median)", ("case", "row", "tegrad ms", "torch ms", "jax ms",
                              "tegrad/torch", "tegrad/jax", "tegrad GFLOP/s", "% sgemm"),
        cells, markdown)
    if result["first_call"]:
        cells = []
        for f in result["first_call"]:
            if "error" in f:
                cells.append((f["case"], "failed", *[""] * 7))
                continue
            c, w = f["cold"], f["warm"]
            cells.append((f["case"], *(_ms(c[k]) for k in ("setup_ms", "graph_ms", "build_ms",
                                                          "first_call_ms", "total_ms")),
                          _ms(w["graph_ms"] + w["build_ms"]), _ms(w["total_ms"]),
                          _ms(w["second_call_ms"])))
        bench_shared.print_table(
            "first call in a new process, forward+backward program (ms): the process's "
            "setup (apart), tg.nn + tg.gradient, tg.build, first call; their total with an "
            "empty cache; with a warm cache, gradient + build alone and the total",
            ("case", "setup", "gradient", "build", "first call", "cold total",
             "warm gradient+build", "warm total", "2nd call"), cells, markdown)
    worst = max(result["checks"], key=lambda c: c["rel_err"], default=None)
    if worst is not None:
        say(f"check against torch: {len(result['checks'])} tensors, worst {worst['side']} "
            f"{worst['case']} {worst['row']} {worst['tensor']} rel err "
            f"{worst['rel_err']:.1e} (tolerance {TOLERANCE:g})")
    for c in result["checks"]:
        if not c["ok"]:
            say(f"!!! DISAGREEMENT: {c['side']} {c['case']} {c['row']} {c['tensor']}: "
                f"max abs diff / max abs torch = {c['rel_err']:.3e} > {TOLERANCE:g}")
    for e in result["errors"]:
        say(f"!!! ERROR: {e}")
    for n in result["notes"]:
        say(f"note: {n}")
    s = result["summary"]
    if s:
        yes = {True: "yes", False: "NO", None: "not run"}
        say(f"summary: median tegrad/torch {s['median_tegrad_over_torch']:.2f} over "
            f"{len(result['rows'])} rows; largest {s['max_tegrad_over_torch']:.2f} "
            f"({s['max_row']}); backward beats torch: softmax "
            f"{yes[s['softmax_backward_beats_torch']]}, layer_norm "
            f"{yes[s['layer_norm_backward_beats_torch']]}; first call max "
            f"{_ms(s['max_cold_first_call_ms'])} ms cold, "
            f"{_ms(s['max_warm_first_call_ms'])} ms warm (gradient + build alone "
            f"{_ms(s['max_warm_generation_ms'])} ms)")


def target_available(target: str) -> str | None:
    """None if ``target`` builds a one-line program, else why not."""
    x = tg.placeholder((2,), "float32", name="x")
    try:
        tg.build([x], x + 1.0, target=target)(np.zeros(2, np.float32))
    except (ValueError, ImportError, RuntimeError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def jax_available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, 3 runs (a smoke run)")
    parser.add_argument("--cases", help="comma-separated case names or prefixes "
                        "(matmul512, matmul1024, conv2d_s1, conv2d_s2, max_pool2d, softmax, "
                        "layer_norm, lstm)")
    parser.add_argument("--runs", type=int, help="timed runs per side and row (7; --quick 3)")
    parser.add_argument("--threads", type=int, help="threads for torch, BLAS, OpenMP (and XLA "
                        "when 1); default: torch's default count for all")
    parser.add_argument("--target", default="cpu", help="tegrad's target (cpu)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"write the results here ({DEFAULT_JSON.relative_to(HERE.parent)})")
    parser.add_argument("--markdown", action="store_true", help="print GitHub tables")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out")
    parser.add_argument("--backward", choices=("saved", "recompute"), default="saved",
                        help="tegrad's backward row: tg.build_vjp's backward on what its "
                        "forward kept (saved), or the gradient program alone (recompute)")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip the first-call measurements in new processes")
    parser.add_argument("--pause", type=float, help="seconds of pause before each turn "
                        "(0.3 with more than one thread, else 0.02)")
    parser.add_argument("--_first-call", dest="first_call", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_call:
        print(json.dumps(first_call_child(args.first_call, args)))
        return 0
    args.runs = args.runs or (3 if args.quick else 7)
    selected = bench_cpu_cases.select(bench_cpu_cases.cases(args.quick), args.cases)

    threads, blas_line = bench_shared.set_threads(args.threads)
    if args.pause is None:
        args.pause = 0.3 if threads > 1 else 0.02
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # OpenMP runtimes loaded later
    if threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_"
                                   "eigen=false intra_op_parallelism_threads=1").strip()
    why = target_available(args.target)
    if why:
        print(f"tegrad target {args.target!r} is not available: {why}\n"
              "run with --target numpy (the reference backend) until it is", file=sys.stderr)
        return 2
    use_jax = not args.no_jax and jax_available()
    notes = [] if use_jax or args.no_jax else ["jax is not importable: its columns are empty"]
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not args.no_compile:
        notes.append("PYTHONDONTWRITEBYTECODE is set: every new process compiles tegrad's "
                     "Python sources (the first-call table's setup column)")

    first_calls = [] if args.no_compile else [first_call(c, args) for c in selected]
    errors = [f"first call of {f['case']}: {f['error']}" for f in first_calls if "error" in f]
    sgemm = sgemm_gflops(3 if args.quick else 7)
    rows, checks, loads = [], [], []
    for case in selected:
        try:
            case_rows, case_checks, load = bench_case(case, args, threads, use_jax)
        except Exception as e:  # noqa: BLE001 - one failing case must not hide the others
            errors.append(f"{case.name}: {type(e).__name__}: {e}")
            continue
        rows += case_rows
        checks += case_checks
        if load is not None:
            loads.append(load)
    for r in rows:
        r["pct_sgemm"] = 100 * r["tegrad_gflops"] / sgemm
    result = {"suite": "bench_cpu", "target": args.target, "quick": args.quick,
              "tegrad_backward": args.backward, "runs": args.runs, "pause_s": args.pause,
              "jax_used": use_jax, "tolerance": TOLERANCE,
              "machine": machine_info(),
              "threads": thread_info(threads, blas_line), "sgemm_gflops": sgemm,
              "other_load_cores": statistics.mean(loads) if loads else None,
              "rows": rows, "checks": checks, "first_call": first_calls, "errors": errors,
              "notes": notes, "summary": summarize(rows, first_calls) if rows else {}}
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
