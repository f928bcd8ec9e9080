"""Gradient checkers on the bug zoo: tegrad's ``tg.check_gradient`` against
``torch.autograd.gradcheck`` in slow mode and in fast mode (``fast_mode=True``), one process.

    .venv/bin/python benchmarks/bench_gradcheck.py               # median of 5 runs, 1 thread
    .venv/bin/python benchmarks/bench_gradcheck.py --quick       # one run per measurement
    .venv/bin/python benchmarks/bench_gradcheck.py --markdown    # a GitHub table (README)
    .venv/bin/python benchmarks/bench_gradcheck.py --only conv2d # cases whose name contains it

Every case of ``tests/gradzoo.py`` (``ZOO``) is checked three times, on the same forward and
the same hand-written backward:

* tegrad: ``tg.check_gradient(output, inputs, grads, head=..., values=...)``. "caught" is
  verdict FAIL; "located" is the report's ``wrong_mask`` equal to the zoo's
  ``expected_wrong`` mask for every input of a buggy case (inputs the bug leaves right must
  come back with no wrong element, or no mask at all).
* torch slow / fast: the pair wrapped in a ``torch.autograd.Function`` (``ZooFunction``)
  whose forward runs ``tg.build(...)(output)`` and whose backward runs
  ``tg.build(...)(grads)`` on the head (grad_output). Both callables are built once per case,
  outside the timed region; placeholders that are not checked inputs (integer index tensors)
  are fixed from ``pair.values``. Inputs are float64 tensors for float64 cases and float32
  tensors for float32 cases, always with gradcheck's default tolerances (eps=1e-6,
  atol=1e-5, rtol=1e-3), as PyTorch's own tests call it. "caught" is gradcheck returning
  False (``raise_exception=False``) or raising.

On a correct case "caught" is a false alarm. The kink families (max pool at exact ties,
relu at exact zeros) have several valid backwards; gradcheck's central differences see the
average of the one-sided derivatives there.

Timing: only the check call is timed; each measurement is the median of ``--repeat`` runs,
the three checkers taking turns case by case, after one untimed warm-up run per checker
(which also records gradcheck's error message and warnings). tegrad's time includes
compiling its own evaluation programs; torch's does not include building the two tegrad
callables that its Function runs. A measurement stops repeating once it has used
``--max-seconds`` (then fewer runs than asked are reported, marked with ``*``).
Evaluation counts: tegrad's report (``forward_evals``, ``backward_evals``) and, for torch,
counters in the Function's forward and backward (per check call).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_shared, a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

# BLAS (used by tegrad's NumPy backend and by torch) reads its thread count when it loads:
# the same count as torch.set_num_threads, 1 unless --threads says otherwise.
if bench_shared.apply(sys.argv[1:]) is None:
    bench_shared.apply(["--threads", "1"])

# The zoo lives in tests/ (it is test data, not part of the package): put tests/ (for
# ``gradzoo``) and src/ (for ``tegrad``, in case it is not installed) on the import path.
_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT / "tests"))
sys.path.insert(0, str(_ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tegrad as tg  # noqa: E402
from gradzoo import ZOO, ZooCase, ZooPair, placeholders_of  # noqa: E402

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ----------------------------------------------------------------- the pair as a Function


def make_function(pair: ZooPair) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` over the pair's checked inputs (in ``pair.inputs``
    order), running the pair's forward and hand-written backward with ``tg.build``.
    ``Fn.forwards`` / ``Fn.backwards`` count the calls (reset them before a check)."""
    fwd_phs = placeholders_of([pair.output])
    bwd_phs = placeholders_of(pair.grads)
    fwd = tg.build(fwd_phs, pair.output)
    bwd = tg.build(bwd_phs, list(pair.grads))
    pos = {id(x): k for k, x in enumerate(pair.inputs)}

    def feed(phs, arrays, head=None):
        out = []
        for p in phs:
            if p is pair.head:
                out.append(head)
            elif id(p) in pos:
                out.append(arrays[pos[id(p)]])
            else:  # fixed placeholder (e.g. an index tensor)
                out.append(pair.values[p.name])
        return out

    def as_numpy(t: torch.Tensor) -> np.ndarray:
        return t.detach().contiguous().numpy()

    class ZooFunction(torch.autograd.Function):
        forwards = 0
        backwards = 0

        @staticmethod
        def forward(ctx, *xs):
            ZooFunction.forwards += 1
            ctx.save_for_backward(*xs)
            y = fwd(*feed(fwd_phs, [as_numpy(x) for x in xs]))
            return torch.from_numpy(np.array(y, copy=True))  # never alias tegrad's buffers

        @staticmethod
        def backward(ctx, dy):
            ZooFunction.backwards += 1
            xs = [as_numpy(x) for x in ctx.saved_tensors]
            gs = bwd(*feed(bwd_phs, xs, head=as_numpy(dy)))
            return tuple(torch.from_numpy(np.array(g, copy=True)) for g in gs)

    return ZooFunction


def torch_inputs(case: ZooCase, pair: ZooPair) -> tuple[torch.Tensor, ...]:
    dtype = TORCH_DTYPES[case.dtype]
    return tuple(torch.tensor(pair.values[x.name], dtype=dtype, requires_grad=True)
                 for x in pair.inputs)


# ---------------------------------------------------------------------------- measurement


@dataclasses.dataclass
class Run:
    """One checker on one case: what it said, how long it took, how often it evaluated."""

    caught: bool
    ms: float
    runs: int
    forwards: int
    backwards: int
    located: bool | None = None
    verdict: str = ""
    region: str = ""
    signature: str = ""
    message: str = ""  # gradcheck's error (first line), from the warm-up run
    warned: str = ""  # gradcheck's first warning, from the warm-up run


def _timed(fn, repeat: int, max_seconds: float):
    """``fn()`` ``repeat`` times (fewer once ``max_seconds`` are used): the last result,
    the median milliseconds and the number of runs."""
    times, result, used = [], None, 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        used += dt
        if used > max_seconds:
            break
    return result, 1e3 * statistics.median(times), len(times)


def shorten(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def first_words(signature: str) -> str:
    """'constant scale (received = 0.5 x expected)' -> 'constant scale'."""
    return signature.split(" (", 1)[0]


class Bench:
    def __init__(self, case: ZooCase, repeat: int, max_seconds: float):
        self.case, self.repeat, self.max_seconds = case, repeat, max_seconds
        self.pair = case.make()
        self.fn = make_function(self.pair)
        self.xs = torch_inputs(case, self.pair)

    # tegrad
    def tegrad_call(self):
        p = self.pair
        return tg.check_gradient(p.output, p.inputs, p.grads, head=p.head, values=p.values,
                                 raise_on_failure=False)

    def tegrad_run(self, times: list[float]) -> Run:
        t0 = time.perf_counter()
        report = self.tegrad_call()
        times.append(time.perf_counter() - t0)
        located = None
        if self.case.bug is not None:
            located = True
            for name, expected in self.pair.expected_wrong.items():
                got = report.results[name].wrong_mask
                if got is None:
                    got = np.zeros_like(expected) if not expected.any() else None
                located = located and got is not None and np.array_equal(got, expected)
        failing = [(n, r) for n, r in report.results.items() if r.verdict == "FAIL"]
        multi = len(failing) > 1
        region = "; ".join((f"{n}: " if multi else "") + r.region for n, r in failing)
        sig = "; ".join(dict.fromkeys(first_words(r.signature) for _, r in failing
                                      if r.signature))
        return Run(caught=report.verdict == "FAIL", ms=0.0, runs=0,
                   forwards=report.forward_evals, backwards=report.backward_evals,
                   located=located, verdict=report.verdict, region=region, signature=sig)

    # torch
    def torch_call(self, fast: bool, raise_exception: bool = False) -> bool:
        self.fn.forwards = self.fn.backwards = 0
        with warnings.catch_warnings():
            if not raise_exception:  # timed runs: the warm-up run records the warnings
                warnings.simplefilter("ignore")
            try:
                return bool(torch.autograd.gradcheck(self.fn.apply, self.xs, fast_mode=fast,
                                                     raise_exception=raise_exception))
            except Exception:
                if raise_exception:
                    raise
                return False

    def torch_warmup(self, fast: bool) -> tuple[str, str]:
        """An untimed run that raises: gradcheck's error message and warnings."""
        message = ""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self.torch_call(fast, raise_exception=True)
            except Exception as e:  # GradcheckError, or the Function's own error
                message = f"{type(e).__name__}: " + next(
                    (ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        warned = next((str(w.message) for w in caught), "")
        return message, warned

    def measure(self) -> dict[str, Run]:
        """Warm-up, then the three checkers taking turns, ``repeat`` times."""
        self.tegrad_call()
        warm = {fast: self.torch_warmup(fast) for fast in (False, True)}
        out: dict[str, Run] = {}
        te_times: list[float] = []
        slow_times: list[float] = []
        fast_times: list[float] = []
        results: dict[str, object] = {}
        counts: dict[str, tuple[int, int]] = {}
        done = {"tegrad": False, "slow": False, "fast": False}
        for _ in range(self.repeat):
            if not done["tegrad"]:
                results["tegrad"] = self.tegrad_run(te_times)
                done["tegrad"] = sum(te_times) > self.max_seconds
            for key, fast, times in (("slow", False, slow_times), ("fast", True, fast_times)):
                if done[key]:
                    continue
                t0 = time.perf_counter()
                ok = self.torch_call(fast)
                times.append(time.perf_counter() - t0)
                results[key] = ok
                counts[key] = (self.fn.forwards, self.fn.backwards)
                done[key] = sum(times) > self.max_seconds
        te = results["tegrad"]
        assert isinstance(te, Run)
        out["tegrad"] = dataclasses.replace(te, ms=1e3 * statistics.median(te_times),
                                            runs=len(te_times))
        for key, fast, times in (("slow", False, slow_times), ("fast", True, fast_times)):
            message, warned = warm[fast]
            out[key] = Run(caught=not results[key], ms=1e3 * statistics.median(times),
                           runs=len(times), forwards=counts[key][0], backwards=counts[key][1],
                           message=message, warned=warned)
        return out


# ------------------------------------------------------------------------------- reporting

COLUMNS = ["case", "bug", "tegrad", "located", "region", "signature", "tegrad ms",
           "fwd/bwd", "torch slow", "slow ms", "fwd/bwd", "torch fast", "fast ms", "fwd/bwd"]


def _caught(run: Run, buggy: bool) -> str:
    if buggy:
        return "caught" if run.caught else "MISSED"
    return "FALSE ALARM" if run.caught else "pass"


def _ms(run: Run, repeat: int) -> str:
    return f"{run.ms:.1f}" + ("*" if run.runs < repeat else "")


def row(case: ZooCase, runs: dict[str, Run], repeat: int) -> list[str]:
    buggy = case.bug is not None
    te, slow, fast = runs["tegrad"], runs["slow"], runs["fast"]
    tegrad = te.verdict if buggy or te.verdict != "FAIL" else "FAIL (FALSE ALARM)"
    located = "-" if te.located is None else ("yes" if te.located else "NO")
    return [
        case.name + (f" ({case.dtype})" if case.dtype != "float64" else ""),
        shorten(case.bug, 40) if buggy else "(correct)",
        tegrad, located, shorten(te.region, 60) if te.region else "-",
        shorten(te.signature, 30) if te.signature else "-",
        _ms(te, repeat), f"{te.forwards}/{te.backwards}",
        _caught(slow, buggy), _ms(slow, repeat), f"{slow.forwards}/{slow.backwards}",
        _caught(fast, buggy), _ms(fast, repeat), f"{fast.forwards}/{fast.backwards}",
    ]


def markdown(rows: list[list[str]]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---:" if c.endswith(("ms", "bwd")) else "---" for c in COLUMNS)
             + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def print_table(rows: list[list[str]], use_markdown: bool) -> None:
    if use_markdown:
        print(markdown(rows))
        return
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        widths = [max(len(c), *(len(r[k]) for r in rows)) for k, c in enumerate(COLUMNS)]
        print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        return
    table = Table(title="gradient checkers on the bug zoo")
    for c in COLUMNS:
        right = c.endswith(("ms", "bwd"))
        table.add_column(c, justify="right" if right else "left",
                         no_wrap=c not in ("bug", "region"))
    for r in rows:
        table.add_row(*(Text(c) for c in r))  # Text: "dX[n,c,8,8]" is not markup
    # a wide table: wider than most terminals rather than folded into unreadable columns
    Console(width=max(230, Console().width)).print(table)


def summary(cases: list[ZooCase], all_runs: list[dict[str, Run]], args) -> list[str]:
    buggy = [(c, r) for c, r in zip(cases, all_runs, strict=True) if c.bug is not None]
    correct = [(c, r) for c, r in zip(cases, all_runs, strict=True) if c.bug is None]
    names = {"tegrad": "tegrad", "slow": "torch slow", "fast": "torch fast"}
    lines = []
    for key, name in names.items():
        caught = sum(r[key].caught for _, r in buggy)
        alarms = [c.name for c, r in correct if r[key].caught]
        total = sum(r[key].ms for r in all_runs)
        extra = ""
        if key == "tegrad":
            located = sum(bool(r[key].located) for _, r in buggy)
            extra = f", located exactly {located}/{len(buggy)}"
        lines.append(
            f"{name}: caught {caught}/{len(buggy)} bugs{extra}; false alarms "
            f"{len(alarms)}/{len(correct)} correct"
            + (f" ({', '.join(alarms)})" if alarms else "")
            + f"; total {total:.0f} ms (sum of medians)")
    lines.append(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"{args.threads} thread(s); python {platform.python_version()}, torch "
        f"{torch.__version__}, numpy {np.__version__}; median of {args.repeat} run(s) "
        f"per measurement (* fewer: --max-seconds {args.max_seconds:g})")
    notes = []
    for c, r in zip(cases, all_runs, strict=True):
        for key in ("slow", "fast"):
            run = r[key]
            if run.message and (c.bug is None or c.dtype != "float64"):
                notes.append(f"  {c.name} torch {key}: {shorten(run.message, 150)}")
            if run.warned:
                notes.append(f"  {c.name} torch {key} warned: {shorten(run.warned, 150)}")
    if notes:
        lines.append("gradcheck messages on correct or non-float64 cases (warm-up run):")
        lines.extend(notes)
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads and BLAS threads (default 1)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs per measurement, median reported (default 5)")
    parser.add_argument("--quick", action="store_true", help="one run per measurement")
    parser.add_argument("--only", metavar="SUBSTRING", help="cases whose name contains it")
    parser.add_argument("--markdown", action="store_true", help="a GitHub markdown table")
    parser.add_argument("--max-seconds", type=float, default=10.0,
                        help="stop repeating a measurement after this many seconds "
                             "(default 10)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
    torch.set_num_threads(args.threads)
    cases = [c for c in ZOO if not args.only or args.only in c.name]
    if not cases:
        parser.error(f"no zoo case name contains {args.only!r}")
    t0 = time.perf_counter()
    rows, all_runs = [], []
    for case in cases:
        runs = Bench(case, args.repeat, args.max_seconds).measure()
        all_runs.append(runs)
        rows.append(row(case, runs, args.repeat))
        print(f"  {case.name}: done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    print_table(rows, args.markdown)
    print()
    for line in summary(cases, all_runs, args):
        print(line)
    print(f"(whole run {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
