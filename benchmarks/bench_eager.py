"""Eager mode: per-op dispatch overhead on tiny tensors and a small training step, tegrad
(``tg.Variable``, ``tg.GradientTape``) against PyTorch eager on the CPU, one process.

    .venv/bin/python benchmarks/bench_eager.py              # all tables
    .venv/bin/python benchmarks/bench_eager.py --quick      # fewer rounds, a smoke run
    .venv/bin/python benchmarks/bench_eager.py --markdown   # GitHub tables

Dispatch: each op on tiny float32 inputs (an add of two (4,) arrays, an 8x8 matmul, a
1x1x4x4 conv2d...), where the arithmetic is negligible and the time is the framework's
own cost per call. Each side's time is the median over ``--repeat`` rounds of the mean
of a batch of calls (sized to last about 2 ms); the sides take turns round by round
(tegrad, torch, NumPy), so a change in machine load hits all of them. NumPy, where the
op has a one-line NumPy equivalent, is the floor: the same arithmetic with no framework.
The cache column is the trace cache's hit rate (``tegrad.function.cache_info()``)
over tegrad's timed calls: every call after the first is a hit, so the time is that of
a compiled template being looked up and run, not traced. A second table splits
tegrad's time for ``add`` into its stages.

Training step: forward and backward of an MLP (64 -> 128 -> 10, ReLU, cross-entropy,
a batch of 64, float32): tegrad eager under a tape, tegrad with the loss under
``tg.jit`` (one graph) under a tape, and ``torch.autograd``; the gradients are
checked against torch's once. The times are medians over ``--repeat`` runs, the three
callables taking turns.

Threads: one by default (``--threads N`` to change). On tiny tensors a second thread
does no useful work, and on a loaded machine torch's OpenMP workers then stall: softmax
and conv2d on 8x8 inputs took ~14 ms a call with two threads on a busy 2-core machine,
against ~10 µs with one.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_shared, a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

if bench_shared.apply(sys.argv[1:]) is None:
    bench_shared.apply(["--threads", "1"])  # the default (see above), set before numpy loads

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tegrad as tg  # noqa: E402
from tegrad.eager.variable import is_variable  # noqa: E402
from tegrad.function import cache_info, split_leaves, trace  # noqa: E402


def batch_size(fn, seconds: float = 2e-3) -> int:
    """Calls per timed batch so that a batch lasts about ``seconds``."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(10_000, int(seconds / one)))


def median_us(fns, repeat: int) -> list[float]:
    """Median microseconds per call of each callable: ``repeat`` rounds, each callable
    one batch of calls per round, the callables taking turns."""
    sizes = [batch_size(fn) for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, n, ts in zip(fns, sizes, times, strict=True):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / n)
    return [1e6 * statistics.median(ts) for ts in times]


def median_ms(fns, repeat: int) -> list[float]:
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(ts) for ts in times]


# dispatch overhead ---------------------------------------------------------------------


def dispatch_ops(rng):
    """(name, shapes, tegrad callable, torch callable, NumPy callable or None)."""
    import torch

    def arrays(*shapes):
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    ops = []

    def op(name, shapes, inputs, ours, theirs, numpy=None):
        vs = [tg.Variable(a) for a in inputs]
        ts = [torch.from_numpy(a.copy()) for a in inputs]
        ops.append((name, shapes, lambda: ours(*vs), lambda: theirs(*ts),
                    None if numpy is None else (lambda: numpy(*inputs))))

    a4, b4 = arrays((4,), (4,))
    op("add", "(4,) + (4,)", [a4, b4], lambda x, y: x + y, lambda x, y: x + y, np.add)
    op("mul by a Python float", "(4,) * 0.5", [a4], lambda x: x * 0.5, lambda x: x * 0.5,
       lambda x: x * np.float32(0.5))
    op("broadcast add", "(8, 8) + (8,)", arrays((8, 8), (8,)), lambda x, y: x + y,
       lambda x, y: x + y, np.add)
    op("matmul", "(8, 8) @ (8, 8)", arrays((8, 8), (8, 8)), lambda x, y: x @ y,
       lambda x, y: x @ y, np.matmul)
    op("relu", "(8, 8)", arrays((8, 8)), tg.nn.relu, torch.relu,
       lambda x: np.maximum(x, np.float32(0)))
    op("exp", "(8, 8)", arrays((8, 8)), tg.exp, torch.exp, np.exp)
    op("sum", "(8, 8) -> ()", arrays((8, 8)), lambda x: x.sum(), lambda x: x.sum(), np.sum)
    op("softmax", "(8, 8), dim -1", arrays((8, 8)), lambda x: tg.nn.softmax(x, dim=-1),
       lambda x: torch.softmax(x, dim=-1))
    op("slice", "(8, 8)[1:5, ::2]", arrays((8, 8)), lambda x: x[1:5, ::2],
       lambda x: x[1:5, ::2].clone(), lambda x: x[1:5, ::2].copy())
    op("conv2d", "1x1x4x4 * 1x1x3x3, pad 1", arrays((1, 1, 4, 4), (1, 1, 3, 3)),
       lambda x, w: tg.nn.conv2d(x, w, padding=1),
       lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))
    return ops


def run_dispatch(repeat: int, rng):
    rows = []
    for name, shapes, ours, theirs, numpy in dispatch_ops(rng):
        ours()  # the first call traces and builds: a miss
        before = cache_info()
        fns = [ours, theirs] + ([numpy] if numpy is not None else [])
        times = median_us(fns, repeat)
        after = cache_info()
        hits, misses = after.hits - before.hits, after.misses - before.misses
        rate = hits / max(hits + misses, 1)
        rows.append((name, shapes, times[0], times[1], times[2] if numpy else None, rate,
                     hits + misses))
    return rows


def add_breakdown(repeat: int, rng):
    """tegrad's ``a + b`` on (4,) float32 Variables, stage by stage (µs per call)."""
    from tegrad.eager.variable import ELEMENTWISE

    a, b = (tg.Variable(rng.standard_normal(4).astype(np.float32)) for _ in range(2))
    fn = ELEMENTWISE["add"]
    graph = trace(fn, *split_leaves((a, b), {}, is_variable)[1:])
    values = (a.numpy(), b.numpy())
    graph(*values)  # builds the program if no earlier call did
    program = graph._program

    def lookup():
        _, spec_args, spec_kwargs = split_leaves((a, b), {}, is_variable)
        trace(fn, spec_args, spec_kwargs)

    stages = [
        ("whole op: a + b", lambda: a + b),
        ("key and cache lookup (split_leaves + trace)", lookup),
        ("compiled graph call (GraphFunction.__call__)", lambda: graph(*values)),
        ("its program alone (tg.build's callable)", lambda: program(*values)),
        ("one Variable.dtype read (str of a NumPy dtype; 2 per a + b)", lambda: a.dtype),
    ]
    times = median_us([f for _, f in stages], repeat)
    return [(name, t) for (name, _), t in zip(stages, times, strict=True)]


# training step ---------------------------------------------------------------------------


class MLP:
    """64 -> 128 -> 10, ReLU, mean cross-entropy; the same weights on both sides."""

    def __init__(self, rng, batch=64, sizes=(64, 128, 10)):
        import torch

        n_in, hidden, n_out = sizes
        b1, b2 = 1 / np.sqrt(n_in), 1 / np.sqrt(hidden)  # torch.nn.Linear's initialisation
        arrays = [rng.uniform(-b1, b1, (n_in, hidden)), rng.uniform(-b1, b1, hidden),
                  rng.uniform(-b2, b2, (hidden, n_out)), rng.uniform(-b2, b2, n_out)]
        arrays = [a.astype(np.float32) for a in arrays]
        self.x = rng.standard_normal((batch, n_in)).astype(np.float32)
        self.y = rng.integers(0, n_out, batch).astype(np.int64)
        self.params = [tg.Variable(a, name=n) for a, n in zip(arrays, ("w1", "b1", "w2", "b2"),
                                                               strict=True)]
        self.xv, self.yv = tg.Variable(self.x, trainable=False), tg.Variable(self.y)
        self.loss_jit = tg.jit(self.loss)
        self.torch = torch
        self.tparams = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
        self.tx, self.ty = torch.from_numpy(self.x), torch.from_numpy(self.y)

    @staticmethod
    def loss(x, y, w1, b1, w2, b2):
        h = tg.nn.relu(x @ w1 + b1)
        return tg.nn.cross_entropy(h @ w2 + b2, y)

    def eager_step(self):
        with tg.GradientTape() as tape:
            loss = self.loss(self.xv, self.yv, *self.params)
        return loss, tape.gradient(loss, self.params)

    def jit_step(self):
        with tg.GradientTape() as tape:
            loss = self.loss_jit(self.xv, self.yv, *self.params)
        return loss, tape.gradient(loss, self.params)

    def torch_step(self):
        F = self.torch.nn.functional  # noqa: N806
        w1, b1, w2, b2 = self.tparams
        loss = F.cross_entropy(F.relu(self.tx @ w1 + b1) @ w2 + b2, self.ty)
        return loss, self.torch.autograd.grad(loss, self.tparams)


def run_training(repeat: int, rng):
    model = MLP(rng)
    ref_loss, ref_grads = model.torch_step()
    checks = []
    for name, step in (("eager", model.eager_step), ("jit", model.jit_step)):
        loss, grads = step()
        worst = max(float(np.abs(np.asarray(g) - r.numpy()).max())
                    for g, r in zip(grads, ref_grads, strict=True))
        checks.append((name, abs(float(loss) - ref_loss.item()), worst))
    model.eager_step()
    before = cache_info()
    times = median_ms([model.eager_step, model.jit_step, model.torch_step], repeat)
    after = cache_info()
    hits, misses = after.hits - before.hits, after.misses - before.misses
    with tg.GradientTape() as tape:
        model.loss(model.xv, model.yv, *model.params)
    ops_per_step = len(tape._records)
    return times, checks, hits / max(hits + misses, 1), ops_per_step


# output --------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int,
                        help="timed rounds (default 41 for dispatch, 21 for training; "
                        "--quick 7)")
    parser.add_argument("--quick", action="store_true", help="7 rounds (a smoke run)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for torch and NumPy's BLAS (default 1: see above)")
    parser.add_argument("--markdown", action="store_true", help="print GitHub tables")
    args = parser.parse_args(argv)
    threads, blas_line = bench_shared.set_threads(args.threads)
    import torch

    rounds = args.repeat or (7 if args.quick else 41)
    train_rounds = args.repeat or (7 if args.quick else 21)
    rng = np.random.default_rng(0)

    with bench_shared.OtherLoad() as other:
        dispatch = run_dispatch(rounds, rng)
        breakdown = add_breakdown(rounds, rng)
        train_times, checks, train_rate, ops_per_step = run_training(train_rounds, rng)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print("tegrad eager (tg.Variable, NumPy backend) against PyTorch eager, CPU, float32")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, numpy {np.__version__}, python "
          f"{platform.python_version()}, threads {threads} ({blas_line}), load average {load}")
    if other.cores is not None:
        print(f"other processes during the timed runs: {other.cores:.2f} cores busy on average"
              f" over {other.wall:.0f} s")
    print()
    cells = []
    for name, shapes, ours, theirs, numpy, rate, calls in dispatch:
        cells.append((name, shapes, f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.0f}x",
                      "-" if numpy is None else f"{numpy:.1f}",
                      f"{100 * rate:.1f}% of {calls}"))
    bench_shared.print_table(
        f"per-op dispatch on tiny tensors: µs per call, median of {rounds} rounds",
        ("op", "shapes", "tegrad µs", "torch µs", "tegrad/torch", "NumPy µs", "cache hits"),
        cells, args.markdown)
    total = breakdown[0][1]
    bench_shared.print_table(
        "where tegrad's time goes: a + b on (4,) float32 (µs per call; stages overlap)",
        ("stage", "µs", "share of the whole op"),
        [(name, f"{t:.1f}", f"{100 * t / total:.0f}%") for name, t in breakdown],
        args.markdown)
    eager, jit, ref = train_times
    bench_shared.print_table(
        f"training step, MLP 64-128-10, batch 64, float32: forward + backward, "
        f"median of {train_rounds} runs (ms)",
        ("side", "ms", "ratio to torch"),
        [("tegrad eager under a tape", f"{eager:.2f}", f"{eager / ref:.1f}"),
         ("tegrad tg.jit(loss) under a tape", f"{jit:.2f}", f"{jit / ref:.1f}"),
         ("torch.autograd", f"{ref:.2f}", "1.0")],
        args.markdown)
    print(f"eager step: {ops_per_step} recorded ops per forward; trace cache hit rate over the "
          f"timed steps {100 * train_rate:.1f}% (VJP graphs are cached on each template, "
          "outside these counts)")
    for name, dloss, dgrad in checks:
        print(f"check {name} against torch: |loss diff| {dloss:.1e}, max |grad diff| "
              f"{dgrad:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
