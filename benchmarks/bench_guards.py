"""Guarded reads on the compiled target against PyTorch: the kernels whose code issue 27
changed (a select branch that reads at affine indices runs branch-free, its reads at
indices clamped into the tensor, where it was an ``if`` block gcc turned into masked
loads).

    .venv/bin/python benchmarks/bench_guards.py --threads 2
    .venv/bin/python benchmarks/bench_guards.py --quick      # small shapes: runs, checks

Cases (float32), each forward and gradient (``tg.gradient`` with a head), tegrad's
compiled program and the same op in torch eager taking turns in one process
(``bench_shared.time_alternating``), every result checked against torch first:

- ``pad_rows``: ``sqrt(x^2 + 1)`` padded by one row at each end (the guard on the outer
  axis, issue 27's program); torch ``F.pad(torch.sqrt(x * x + 1), (0, 0, 1, 1))``;
- ``pad_cols``: the same padded along the last axis (the guard on the inner axis);
- ``window``: ``sum_k w[k] tanh(x)[i, j + k - 1]`` over a guarded window of 3 along the
  last axis (a convolution's padding on the inner axis, the reduction unrolled);
  torch ``F.conv1d`` of ``tanh(x)`` with padding 1;
- ``upsample``: a padded ``max(x, 0.25)`` read at ``[i // 2]`` (rows repeated);
  torch ``F.pad`` then ``repeat_interleave``.

To compare two versions of tegrad, run the script once with each on ``PYTHONPATH``
(``PYTHONPATH=<checkout>/src``): the ratios against torch are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import bench_shared

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402

import tegrad as tg  # noqa: E402


def _cases(n: int, m: int):
    import torch
    import torch.nn.functional as F

    X = tg.placeholder((n, m), "float32", name="X")

    def pad_rows():
        U = tg.compute((n, m), lambda i, j: tg.sqrt(X[i, j] * X[i, j] + 1.0), name="U")
        P = tg.compute((n + 2, m), lambda i, j: tg.if_then_else(
            tg.all(i >= 1, i < n + 1), U[i - 1, j], 0.0), name="P")
        return [X], P, lambda x: F.pad(torch.sqrt(x * x + 1), (0, 0, 1, 1))

    def pad_cols():
        U = tg.compute((n, m), lambda i, j: tg.sqrt(X[i, j] * X[i, j] + 1.0), name="U")
        P = tg.compute((n, m + 2), lambda i, j: tg.if_then_else(
            tg.all(j >= 1, j < m + 1), U[i, j - 1], 0.0), name="P")
        return [X], P, lambda x: F.pad(torch.sqrt(x * x + 1), (1, 1))

    def window():
        W = tg.placeholder((3,), "float32", name="W")
        U = tg.compute((n, m), lambda i, j: tg.tanh(X[i, j]), name="U")
        k = tg.reduce_axis(3)
        Y = tg.compute((n, m), lambda i, j: tg.sum(tg.if_then_else(
            tg.all(j + k >= 1, j + k < m + 1), W[k] * U[i, j + k - 1], 0.0), axis=k), name="Y")
        return [X, W], Y, lambda x, w: F.conv1d(torch.tanh(x)[:, None], w[None, None],
                                                 padding=1)[:, 0]

    def upsample():
        U = tg.compute((n, m), lambda i, j: tg.maximum(X[i, j], 0.25), name="U")
        P = tg.compute((n + 2, m), lambda i, j: tg.if_then_else(i < n, U[i, j], 0.0), name="P")
        Y = tg.compute((2 * (n + 2), m), lambda i, j: P[i // 2, j], name="Y")
        return [X], Y, lambda x: F.pad(torch.maximum(x, torch.tensor(0.25)),
                                       (0, 0, 0, 2)).repeat_interleave(2, dim=0)

    return {"pad_rows": pad_rows, "pad_cols": pad_cols, "window": window,
            "upsample": upsample}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = parser.parse_args(argv)
    import torch

    threads, blas = bench_shared.set_threads(args.threads)
    n, m = (37, 29) if args.quick else (2048, 1024)
    rng = np.random.default_rng(0)
    rows, ratios, bad = [], [], 0
    for name, make in _cases(n, m).items():
        inputs, out, reference = make()
        values = [rng.standard_normal(p.shape).astype(np.float32) for p in inputs]
        head = tg.placeholder(out.shape, "float32", name="H")
        h = rng.standard_normal(out.shape).astype(np.float32)
        grads = tg.gradient(out, inputs, head=head)
        forward = tg.build(inputs, out, target="cpu")
        backward = tg.build([*inputs, head], grads, target="cpu")
        tensors = [torch.tensor(v, requires_grad=True) for v in values]
        with torch.no_grad():
            want = reference(*tensors).numpy()
        y = reference(*tensors)
        want_grads = torch.autograd.grad(y, tensors, torch.tensor(h), retain_graph=True)
        got, got_grads = forward(*values), backward(*values, h)
        for g, w in [(got, want), *zip(got_grads, (t.numpy() for t in want_grads),
                                       strict=True)]:
            err = float(np.max(np.abs(g - w))) / max(float(np.max(np.abs(w))), 1e-30)
            if not err <= 1e-4:  # (float32; the weight's gradient sums 2M terms)
                print(f"{name}: tegrad and torch disagree ({err:.3g})")
                bad += 1

        def torch_forward(tensors=tensors, reference=reference):
            with torch.no_grad():
                reference(*tensors)

        def torch_backward(tensors=tensors, y=y, h=torch.from_numpy(h)):  # noqa: B008
            torch.autograd.grad(y, tensors, h, retain_graph=True)

        times = bench_shared.time_alternating(
            [lambda f=forward, v=values: f(*v), torch_forward,
             lambda b=backward, v=values, h=h: b(*v, h), torch_backward],
            args.runs, threads, 0.05 if args.quick else 0.3)
        for row, (mine, theirs) in (("forward", times[:2]), ("gradient", times[2:])):
            ratios.append(mine / theirs)
            rows.append([name, row, f"{mine:.3f}", f"{theirs:.3f}",
                         bench_shared.ratio_text(mine / theirs)])
    bench_shared.print_table(f"guarded reads, float32 {n}x{m}, {threads} threads ({blas}); "
                             f"median of {args.runs} runs per side",
                             ["case", "row", "tegrad ms", "torch ms", "tegrad/torch"], rows)
    print(f"tegrad/torch: median {statistics.median(ratios):.2f}, largest {max(ratios):.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
