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

Training step: forward and backward of three networks, a batch of 64, float32 (an MLP
64 -> 128 -> 10, an MLP 784 -> 256 -> 256 -> 10, and the digits CNN of
``examples/digits_models.py``): tegrad eager under a tape, tegrad with the loss under
``tg.jit`` (one graph) under a tape, and ``torch.autograd``; the loss and gradients are
checked against torch's before timing (a failure stops the run). The times are medians
over ``--repeat`` runs, the three callables taking turns.

Threads: one by default (``--threads N`` to change). On tiny tensors a second thread
does no useful work, and on a loaded machine torch's OpenMP workers then stall: softmax
and conv2d on 8x8 inputs took ~14 ms a call with two threads on a busy 2-core machine,
against ~10 µs with one.
"""

from __future__ import annotations

import argparse
import itertools
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
from tegrad.eager.variable import quick_key  # noqa: E402
from tegrad.function import cache_info, quick_lookup  # noqa: E402


def batch_size(fn, seconds: float = 2e-3) -> int:
    """Calls per timed batch so that a batch lasts about ``seconds``."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(10_000, int(seconds / one)))


def median_us(fns, repeat: int, rounds: list | None = None) -> list[float]:
    """Median microseconds per call of each callable: ``repeat`` rounds, each callable
    one batch of calls per round, the callables taking turns. ``rounds``, if given,
    receives each round's times (seconds per call, one per callable)."""
    sizes = [batch_size(fn) for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, n, ts in zip(fns, sizes, times, strict=True):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / n)
        if rounds is not None:
            rounds.append([ts[-1] for ts in times])
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
        rounds: list = []
        times = median_us(fns, repeat, rounds)
        after = cache_info()
        hits, misses = after.hits - before.hits, after.misses - before.misses
        rate = hits / max(hits + misses, 1)
        # the ratio within each round (both sides under the same load), its median
        ratio = statistics.median(r[0] / r[1] for r in rounds)
        rows.append((name, shapes, times[0], times[1], ratio, times[2] if numpy else None,
                     rate, hits + misses))
    return rows


def add_breakdown(repeat: int, rng):
    """tegrad's ``a + b`` on (4,) float32 Variables, stage by stage (µs per call)."""
    from tegrad.eager.variable import ELEMENTWISE

    a, b = (tg.Variable(rng.standard_normal(4).astype(np.float32)) for _ in range(2))
    fn = ELEMENTWISE["add"]
    a + b  # traced, built and filed under its quick key
    key, leaves = quick_key(fn, (a, b), {})
    graph = quick_lookup(key)
    values = [a.numpy(), b.numpy()]

    stages = [
        ("whole op: a + b", lambda: a + b),
        ("key and cache lookup (quick_key + quick_lookup)",
         lambda: quick_lookup(quick_key(fn, (a, b), {})[0])),
        ("its kernel run straight (GraphFunction.call_exact)", lambda: graph.call_exact(values)),
        ("the general call, inputs checked (GraphFunction.__call__)",
         lambda: graph(*values)),
        ("one Variable.dtype read (str of a NumPy dtype; 2 per a + b)", lambda: a.dtype),
    ]
    times = median_us([f for _, f in stages], repeat)
    return [(name, t) for (name, _), t in zip(stages, times, strict=True)]


# training step ---------------------------------------------------------------------------


class Network:
    """A model's loss on both sides, the same weights and batch: ``tegrad_loss(x, y, *params)``
    on Variables (eager op by op, or under ``tg.jit`` as one graph) and ``torch_loss`` on
    tensors; ``arrays`` the initial weights (torch.nn's initialisation, drawn with NumPy)."""

    def __init__(self, name, x, y, arrays, tegrad_loss, torch_loss):
        import torch

        self.name = name
        self.params = [tg.Variable(a, name=f"p{k}") for k, a in enumerate(arrays)]
        self.xv, self.yv = tg.Variable(x, trainable=False), tg.Variable(y)
        self.loss = tegrad_loss
        self.loss_jit = tg.jit(tegrad_loss)
        self.torch, self.torch_loss = torch, torch_loss
        self.tparams = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
        self.tx, self.ty = torch.from_numpy(x), torch.from_numpy(y)

    def eager_step(self):
        with tg.GradientTape() as tape:
            loss = self.loss(self.xv, self.yv, *self.params)
        return loss, tape.gradient(loss, self.params)

    def jit_step(self):
        with tg.GradientTape() as tape:
            loss = self.loss_jit(self.xv, self.yv, *self.params)
        return loss, tape.gradient(loss, self.params)

    def torch_step(self):
        loss = self.torch_loss(self.tx, self.ty, *self.tparams)
        return loss, self.torch.autograd.grad(loss, self.tparams)


def _uniform(rng, fan_in: int, *shape):
    bound = 1 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def mlp(rng, sizes: tuple[int, ...], batch: int = 64) -> Network:
    """Linear layers of ``sizes`` with ReLU between, mean cross-entropy."""
    import torch

    arrays = []
    for n_in, n_out in itertools.pairwise(sizes):
        arrays += [_uniform(rng, n_in, n_in, n_out), _uniform(rng, n_in, n_out)]

    def ours(x, y, *p):
        for k in range(0, len(p), 2):
            x = x @ p[k] + p[k + 1]
            x = tg.nn.relu(x) if k + 2 < len(p) else x
        return tg.nn.cross_entropy(x, y)

    def theirs(x, y, *p):
        for k in range(0, len(p), 2):
            x = x @ p[k] + p[k + 1]
            x = torch.relu(x) if k + 2 < len(p) else x
        return torch.nn.functional.cross_entropy(x, y)

    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int64)
    return Network("MLP " + "-".join(map(str, sizes)), x, y, arrays, ours, theirs)


def digits_cnn(rng, batch: int = 64) -> Network:
    """examples/digits_models.py's CNN: 1x8x8 images, conv 3x3 1->8, ReLU, max pool 2,
    conv 3x3 8->16, ReLU, max pool 2, linear 64->10, mean cross-entropy."""
    import torch
    F = torch.nn.functional  # noqa: N806

    arrays = [_uniform(rng, 9, 8, 1, 3, 3), _uniform(rng, 9, 8),
              _uniform(rng, 72, 16, 8, 3, 3), _uniform(rng, 72, 16),
              _uniform(rng, 64, 10, 64), _uniform(rng, 64, 10)]

    def ours(x, y, w1, b1, w2, b2, w3, b3):
        nn = tg.nn
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, w1, b1, padding=1)), 2)
        h = nn.max_pool2d(nn.relu(nn.conv2d(h, w2, b2, padding=1)), 2)
        return nn.cross_entropy(nn.linear(nn.flatten(h, 1), w3, b3), y)

    def theirs(x, y, w1, b1, w2, b2, w3, b3):
        h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1)), 2)
        return F.cross_entropy(F.linear(torch.flatten(h, 1), w3, b3), y)

    x = rng.standard_normal((batch, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    return Network("digits CNN", x, y, arrays, ours, theirs)


def run_training(repeat: int, rng) -> list[dict]:
    """Per network: the three steps' median times, each checked against torch first."""
    rows = []
    for model in (mlp(rng, (64, 128, 10)), mlp(rng, (784, 256, 256, 10)), digits_cnn(rng)):
        ref_loss, ref_grads = model.torch_step()
        checks = []
        for name, step in (("eager", model.eager_step), ("jit", model.jit_step)):
            loss, grads = step()
            worst = max(float(np.abs(np.asarray(g) - r.numpy()).max() / np.abs(r.numpy()).max())
                        for g, r in zip(grads, ref_grads, strict=True))
            dloss = abs(float(loss) - ref_loss.item())
            if dloss > 1e-4 or worst > 1e-4:
                raise AssertionError(f"{model.name} {name}: loss off by {dloss:.1e}, a gradient "
                                     f"by {worst:.1e} of its largest element")
            checks.append((name, dloss, worst))
        model.eager_step()
        before = cache_info()
        times = median_ms([model.eager_step, model.jit_step, model.torch_step], repeat)
        after = cache_info()
        hits, misses = after.hits - before.hits, after.misses - before.misses
        with tg.GradientTape() as tape:
            model.loss(model.xv, model.yv, *model.params)
        rows.append(dict(name=model.name, times=times, checks=checks,
                         rate=hits / max(hits + misses, 1), ops=len(tape._records)))
    return rows


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
        training = run_training(train_rounds, rng)

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
    for name, shapes, ours, theirs, ratio, numpy, rate, calls in dispatch:
        cells.append((name, shapes, f"{ours:.1f}", f"{theirs:.1f}", f"{ratio:.2f}",
                      "-" if numpy is None else f"{numpy:.1f}",
                      f"{100 * rate:.1f}% of {calls}"))
    bench_shared.print_table(
        f"per-op dispatch on tiny tensors: µs per call, median of {rounds} rounds "
        "(tegrad/torch: the median of the rounds' ratios)",
        ("op", "shapes", "tegrad µs", "torch µs", "tegrad/torch", "NumPy µs", "cache hits"),
        cells, args.markdown)
    ratios = sorted((row[4], row[0]) for row in dispatch)
    print(f"dispatch tegrad/torch over {len(ratios)} ops: median "
          f"{statistics.median(r for r, _ in ratios):.2f}, worst "
          + ", ".join(f"{name} {r:.2f}" for r, name in ratios[::-1][:3])
          + f"; {sum(r > 2 for r, _ in ratios)} over 2x")
    print()
    total = breakdown[0][1]
    bench_shared.print_table(
        "where tegrad's time goes: a + b on (4,) float32 (µs per call; stages overlap)",
        ("stage", "µs", "share of the whole op"),
        [(name, f"{t:.1f}", f"{100 * t / total:.0f}%") for name, t in breakdown],
        args.markdown)
    cells = []
    for row in training:
        eager, jit, ref = row["times"]
        cells.append((row["name"], f"{eager:.2f}", f"{eager / ref:.2f}", f"{jit:.2f}",
                      f"{jit / ref:.2f}", f"{ref:.2f}", str(row["ops"]),
                      f"{100 * row['rate']:.1f}%"))
    bench_shared.print_table(
        f"training step, batch 64, float32: forward + backward, median of {train_rounds} "
        "runs (ms; ratios to torch)",
        ("network", "eager (tape)", "/torch", "tg.jit(loss) (tape)", "/torch",
         "torch.autograd", "ops per eager forward", "trace cache hits"),
        cells, args.markdown)
    worst = max(max(d, g) for row in training for _, d, g in row["checks"])
    print(f"checked before timing, eager and jit against torch: loss and every gradient "
          f"within {worst:.1e} (relative to each gradient's largest element)")
    print("(the VJP graphs are cached on each template, outside the trace-cache counts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
