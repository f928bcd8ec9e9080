"""Gradient kernels: tegrad (NumPy backend) against PyTorch CPU, float32, one process.

    .venv/bin/python benchmarks/bench_gradients.py                 # gradients from tg.gradient
    .venv/bin/python benchmarks/bench_gradients.py --handwritten   # hand-written gather forms
    .venv/bin/python benchmarks/bench_gradients.py --quick         # small shapes, a smoke run

Rows: conv2d N=8, C=64, 56x56, K=64, 3x3, padding 1, strides 1 and 2 (forward, input
gradient, weight gradient) and matmul 512 and 1024 (forward, both gradients). Each time is
the median of ``--runs`` runs after warm-up; tegrad and PyTorch take turns in blocks of
runs with a pause between (see ``median_ms``). PyTorch times its own kernels:
``F.conv2d`` and ``torch.autograd.grad`` of a retained graph (one input at a time, so
autograd computes only that gradient), ``A @ B``.

The builders below (forward operators and the gather forms of their gradients, as the
simplifier writes them) are also used by ``tests/test_lower.py``, which checks them
against PyTorch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_shared, a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tegrad as tg  # noqa: E402

# tensor-expression builders ------------------------------------------------------------


def matmul(A, B, name="C"):
    k = tg.reduce_axis(A.shape[1], name="k")
    return tg.compute((A.shape[0], B.shape[1]), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k),
                      name=name)


def matmul_grads(A, B, H):
    """Gather forms: dA[i, k] = sum_j H[i, j] B[k, j]; dB[k, j] = sum_i A[i, k] H[i, j]."""
    j = tg.reduce_axis(B.shape[1], name="j")
    i = tg.reduce_axis(A.shape[0], name="i")
    dA = tg.compute(A.shape, lambda a, b: tg.sum(H[a, j] * B[b, j], axis=j), name="dA")
    dB = tg.compute(B.shape, lambda a, b: tg.sum(A[i, a] * H[i, b], axis=i), name="dB")
    return dA, dB


def conv_out(size, k, stride, padding, dilation):
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _inside(pairs):
    conds = []
    for e, n in pairs:
        conds += [0 <= e, e < n]
    return tg.all(conds)


def conv2d(X, W, stride=1, padding=0, dilation=1, groups=1, name="Y"):
    """Y[n, o, y, x] = sum_{c, r, s} Xpad[n, g(o)*Cg + c, y*S + r*D - P, x*S + s*D - P]
    * W[o, c, r, s], with g(o) = o // (K / groups)."""
    N, C, H, Wd = X.shape
    K, Cg, R, S = W.shape
    Kg = K // groups
    Ho, Wo = conv_out(H, R, stride, padding, dilation), conv_out(Wd, S, stride, padding, dilation)
    c, r, s = tg.reduce_axis(Cg, "c"), tg.reduce_axis(R, "r"), tg.reduce_axis(S, "s")

    def body(n, o, y, x):
        h = y * stride + r * dilation - padding
        w = x * stride + s * dilation - padding
        ch = c if groups == 1 else (o // Kg) * Cg + c
        read = X[n, ch, h, w]
        if padding:
            read = tg.if_then_else(_inside([(h, H), (w, Wd)]), read, 0.0)
        return tg.sum(read * W[o, c, r, s], axis=[c, r, s])

    return tg.compute((N, K, Ho, Wo), body, name=name)


def conv2d_input_grad(Hd, W, x_shape, stride=1, padding=0, dilation=1, groups=1, name="dX"):
    """Gather form of dX. Stride 1: dX[n, ch, h, w] = sum_{k, r, s} Hd[n, k, h + P - r*D, ...]
    W[k, ch % Cg, r, s] over k of ch's group, guarded. Stride S > 1 (D = 1), with
    ``h + P = S*m + p``: taps r = p + S*t, t in [0, ceil(R/S)):
    dX = sum_{k, t, u} Hd[n, k, m - t, ...] * W[k, c, p + S*t, ...] where 0 <= m - t < Ho
    and p + S*t < R."""
    N, C, Hh, Ww = x_shape
    K, Cg, R, S = W.shape
    Kg = K // groups
    Ho, Wo = Hd.shape[2], Hd.shape[3]
    k = tg.reduce_axis(Kg, "k")

    def chan(ch):
        if groups == 1:
            return k, ch
        return (ch // Cg) * Kg + k, ch % Cg

    if stride == 1:
        r, s = tg.reduce_axis(R, "r"), tg.reduce_axis(S, "s")

        def body(n, ch, h, w):
            o, c = chan(ch)
            y, x = h + padding - r * dilation, w + padding - s * dilation
            read = tg.if_then_else(_inside([(y, Ho), (x, Wo)]), Hd[n, o, y, x], 0.0)
            return tg.sum(read * W[o, c, r, s], axis=[k, r, s])

        return tg.compute(x_shape, body, name=name)
    if dilation != 1:
        raise NotImplementedError("strided and dilated input gradient: not written by hand")
    t = tg.reduce_axis(-(-R // stride), "t")
    u = tg.reduce_axis(-(-S // stride), "u")

    def body_strided(n, ch, h, w):
        o, c = chan(ch)
        my, py = (h + padding) // stride, (h + padding) % stride
        mx, px = (w + padding) // stride, (w + padding) % stride
        y, x = my - t, mx - u
        r, s = py + stride * t, px + stride * u
        cond = tg.all(_inside([(y, Ho), (x, Wo)]), r < R, s < S)
        return tg.sum(Hd[n, o, y, x] * W[o, c, r, s], axis=[k, t, u], where=cond)

    return tg.compute(x_shape, body_strided, name=name)


def conv2d_weight_grad(Hd, X, w_shape, stride=1, padding=0, dilation=1, groups=1, name="dW"):
    """dW[o, c, r, s] = sum_{n, y, x} Hd[n, o, y, x] Xpad[n, g(o)*Cg + c, y*S + r*D - P, ...]."""
    N, C, H, Wd = X.shape
    K, Cg, R, S = w_shape
    Kg = K // groups
    n_, y_, x_ = (tg.reduce_axis(d, nm) for d, nm in zip(Hd.shape[:1] + Hd.shape[2:], "nyx",
                                                         strict=True))

    def body(o, c, r, s):
        h = y_ * stride + r * dilation - padding
        w = x_ * stride + s * dilation - padding
        ch = c if groups == 1 else (o // Kg) * Cg + c
        read = X[n_, ch, h, w]
        if padding:
            read = tg.if_then_else(_inside([(h, H), (w, Wd)]), read, 0.0)
        return tg.sum(Hd[n_, o, y_, x_] * read, axis=[n_, y_, x_])

    return tg.compute(w_shape, body, name=name)


# timing ---------------------------------------------------------------------------------


def median_ms(fns, runs: int, rounds: int | None = None, pause: float = 0.3) -> list[float]:
    """Median milliseconds of each callable, after warm-up. The callables take turns in
    ``rounds`` blocks of runs (default: one run per turn), so that slow drifts of a
    shared machine hit both sides alike. With more than one thread use few rounds: BLAS
    and OpenMP worker threads spin (or their idle cores sleep) after a call, and a
    switch of library then costs a wake-up or a fight for the cores; the ``pause`` at
    each switch lets them settle."""
    rounds = runs if rounds is None else rounds
    times: list[list[float]] = [[] for _ in fns]
    per_round = -(-runs // rounds)
    for fn in fns:
        fn()
    for _ in range(rounds):
        for fn, ts in zip(fns, times, strict=True):
            if rounds < runs:
                time.sleep(pause)
                fn()
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(ts) for ts in times]


def _kinds(f) -> str:
    out = []
    for k in f.program.plan.kernels:
        detail = getattr(k.detail, "split", "none")
        out.append(k.kind if detail in (None, "none") else f"{k.kind}/{detail}")
    return "+".join(out)


def conv_rows(handwritten, stride, shape, runs, rounds):
    import torch
    import torch.nn.functional as F

    n, c, hw, k = shape
    rng = np.random.default_rng(0)
    X = tg.placeholder((n, c, hw, hw), "float32", name="X")
    W = tg.placeholder((k, c, 3, 3), "float32", name="W")
    Y = conv2d(X, W, stride=stride, padding=1)
    H = tg.placeholder(Y.shape, "float32", name="H")
    if handwritten:
        dX = conv2d_input_grad(H, W, X.shape, stride=stride, padding=1)
        dW = conv2d_weight_grad(H, X, W.shape, stride=stride, padding=1)
    else:
        dX, dW = tg.gradient(Y, [X, W], head=H)
    x, w, h = (rng.standard_normal(p.shape, dtype=np.float32) for p in (X, W, H))
    tx = torch.from_numpy(x).requires_grad_()
    tw = torch.from_numpy(w).requires_grad_()
    ty = F.conv2d(tx, tw, stride=stride, padding=1)
    th = torch.from_numpy(h)
    rows = []
    label = f"conv2d s{stride}"
    for what, out, ref in (
        ("forward", Y, lambda: F.conv2d(tx, tw, stride=stride, padding=1)),
        ("input grad", dX, lambda: torch.autograd.grad(ty, [tx], th, retain_graph=True)),
        ("weight grad", dW, lambda: torch.autograd.grad(ty, [tw], th, retain_graph=True)),
    ):
        f = tg.build([X, W, H], out, target="numpy")
        got = f(x, w, h)
        with torch.no_grad():
            want = ref()
        want = (want[0] if isinstance(want, tuple) else want).numpy()
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        t_tg, t_torch = median_ms([lambda f=f: f(x, w, h), ref], runs, rounds)
        rows.append((label, what, _kinds(f), t_tg, t_torch, err))
    return rows


def matmul_rows(handwritten, size, runs, rounds):
    import torch

    rng = np.random.default_rng(0)
    A = tg.placeholder((size, size), "float32", name="A")
    B = tg.placeholder((size, size), "float32", name="B")
    C = matmul(A, B)
    H = tg.placeholder(C.shape, "float32", name="H")
    dA, dB = matmul_grads(A, B, H) if handwritten else tg.gradient(C, [A, B], head=H)
    a, b, h = (rng.standard_normal(p.shape, dtype=np.float32) for p in (A, B, H))
    ta, tb = (torch.from_numpy(v).requires_grad_() for v in (a, b))
    tc = ta @ tb
    th = torch.from_numpy(h)
    rows = []
    for what, out, ref in (
        ("forward", C, lambda: ta @ tb),
        ("grad A", dA, lambda: torch.autograd.grad(tc, [ta], th, retain_graph=True)),
        ("grad B", dB, lambda: torch.autograd.grad(tc, [tb], th, retain_graph=True)),
    ):
        f = tg.build([A, B, H], out, target="numpy")
        got = f(a, b, h)
        with torch.no_grad():
            want = ref()
        want = (want[0] if isinstance(want, tuple) else want).detach().numpy()
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        t_tg, t_torch = median_ms([lambda f=f: f(a, b, h), ref], runs, rounds)
        rows.append((f"matmul {size}", what, _kinds(f), t_tg, t_torch, err))
    return rows


def print_table(rows, title):
    headers = ("op", "pass", "tegrad kernel", "tegrad ms", "torch ms", "ratio", "rel err")
    cells = [(op, what, kinds, f"{t:.2f}", f"{r:.2f}", f"{t / r:.2f}", f"{e:.1e}")
             for op, what, kinds, t, r, e in rows]
    bench_shared.print_table(title, headers, cells)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handwritten", action="store_true",
                        help="time hand-written gather-form gradients instead of tg.gradient's")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per row (>= 5)")
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--only", choices=("conv", "matmul"), help="one family of rows")
    parser.add_argument("--threads", type=int,
                        help="threads for BLAS and torch (default: their own defaults)")
    args = parser.parse_args(argv)
    runs = max(args.runs, 5)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    conv_shape = (2, 8, 16, 8) if args.quick else (8, 64, 56, 64)
    sizes = (64, 128) if args.quick else (512, 1024)
    threads = torch.get_num_threads()
    rounds = runs if threads == 1 else 2  # one run per turn, or two blocks with pauses
    rows = []
    if args.only in (None, "conv"):
        for stride in (1, 2):
            rows += conv_rows(args.handwritten, stride, conv_shape, runs, rounds)
    if args.only in (None, "matmul"):
        for size in sizes:
            rows += matmul_rows(args.handwritten, size, runs, rounds)
    source = "hand-written gather forms" if args.handwritten else "tg.gradient"
    turns = "interleaved" if rounds == runs else f"in {rounds} blocks"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (f"gradients: {source}; median of {runs} runs ({turns}); float32; torch threads "
             f"{threads}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
             f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
             f"load average {load}")
    print_table(rows, title)
    worst = max(t / r for *_, t, r, _e in rows)
    print(f"worst ratio tegrad/torch: {worst:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
