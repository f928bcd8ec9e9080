"""Layouts for a stride-1 3x3 convolution's weight gradient on the compiled target's calls,
against torch's weight gradient alone, alternating in one process, medians.

    dW[k, c, r, s] = sum_{n, h, w} dY[n, k, h, w] Xpad[n, c, h + r, w + s]

Every variant starts from the unpadded ``X`` and ``dY`` and makes its own copies, with the
copy helper and ``tg_gemm`` (``copy.py``, ``gemm.py``) on 2 threads:

- ``im2col`` (what the lowering did before its overlap copy): pad ``X``, widen ``dY``'s
  rows to the padded width, then per image an im2col copy (``C*9`` rows) and one ``K x
  C*9`` product added up over the images.
- ``shifted``: pad ``X``, then three copies of it shifted by ``s`` (not nine); the kernel
  row ``r`` is an offset into them, so each ``r`` is one product over ``(c, s)`` with the
  images as its terms; ``dY`` is read as it is. ``shifted^T`` computes the transposed
  product (``C*3 x K``): what the lowering does now (``host/products._overlap_layout``,
  the three products one batched call).
- ``folded``: the shifted copies and ``dY`` laid out with the images inside each row, so
  that each ``r`` is one product ``K`` deep over all images (``folded^T``: transposed).

The README's conv2d entry cites this script's figures.

    .venv/bin/python benchmarks/bench_conv_wgrad.py [--runs 21] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402
from numpy.lib.stride_tricks import as_strided  # noqa: E402

sys.path.insert(0, str(HERE.parent / "src"))

from tegrad.backends.cpu import copy as copies  # noqa: E402
from tegrad.backends.cpu import gemm  # noqa: E402
from tegrad.options import Options  # noqa: E402

THREADS = 2
TOLERANCE = 1e-4  # max abs difference over max abs value, float32


class Calls:
    """A list of prepared product and copy calls, run in order on ``THREADS`` threads; the
    arrays they read and write are kept alive with them."""

    def __init__(self):
        self.calls: list = []
        self.arrays: list = []

    def product(self, a, b, out, accumulate=False) -> None:
        got = gemm.prepare(a, b, out, accumulate=accumulate)
        if got is None:
            raise SystemExit("no BLAS for the products (pip install tegrad[mkl])")
        self._add(*got)

    def copy(self, dst, src) -> None:
        self._add(*copies.prepare(dst, src, copies.limits(Options.from_environment())))

    def keep(self, *arrays) -> None:
        self.arrays.extend(arrays)

    def _add(self, call, operands) -> None:
        self.arrays.extend(operands)
        self.calls.append((call, [o.ctypes.data for o in operands]))

    def __call__(self) -> None:
        for call, addresses in self.calls:
            call.run(*addresses, THREADS)


def im2col(X, dY):
    n, c, h, w = X.shape
    k, p = dY.shape[1], w + 2
    width = h * p
    Xp = np.zeros((n, c, p * p + 8), X.dtype)  # (slack: the widened rows read past the end)
    dYw = np.zeros((n, k, h, p), X.dtype)
    col = np.empty((c, 3, 3, width), X.dtype)
    out = np.empty((k, c, 3, 3), X.dtype)
    calls = Calls()
    calls.keep(Xp, dYw, col)
    calls.copy(Xp[:, :, :p * p].reshape(n, c, p, p)[:, :, 1:-1, 1:-1], X)
    calls.copy(dYw[..., :w], dY)
    for i in range(n):
        calls.copy(col, as_strided(Xp[i], (c, 3, 3, width), (Xp.strides[1], p * 4, 4, 4)))
        calls.product(dYw[i].reshape(k, width), col.reshape(c * 9, width).T,
                      out.reshape(k, c * 9), accumulate=i > 0)
    return calls, out


def shifted(X, dY, turned: bool):
    n, c, h, w = X.shape
    k, p = dY.shape[1], w + 2
    Xp = np.zeros((n, c, p, p), X.dtype)
    Xs = np.empty((n, c, 3, p, w), X.dtype)  # Xs[n, c, s, y, x] = Xp[n, c, y, x + s]
    temp = np.empty((3, c, 3, k) if turned else (3, k, c, 3), X.dtype)
    out = np.empty((k, c, 3, 3), X.dtype)
    calls = Calls()
    calls.keep(Xp, Xs, temp)
    calls.copy(Xp[:, :, 1:-1, 1:-1], X)
    calls.copy(Xs, as_strided(Xp, Xs.shape, (Xp.strides[0], Xp.strides[1], 4,
                                              Xp.strides[2], 4)))
    flat_dy, flat_x = dY.reshape(n, k, h * w), Xs.reshape(n, c * 3, p * w)
    for r in range(3):
        a = [flat_dy[i] for i in range(n)]
        b = [flat_x[i][:, r * w: r * w + h * w].T for i in range(n)]
        if turned:
            calls.product([x.T for x in b], [x.T for x in a], temp[r].reshape(c * 3, k))
        else:
            calls.product(a, b, temp[r].reshape(k, c * 3))
    calls.copy(out, temp.transpose(3, 1, 0, 2) if turned else temp.transpose(1, 2, 0, 3))
    return calls, out


def folded(X, dY, turned: bool):
    n, c, h, w = X.shape
    k, p = dY.shape[1], w + 2
    span = p * w  # one image's rows in the shifted copies (y over the padded height)
    Xp = np.zeros((n, c, p, p), X.dtype)
    Xg = np.zeros((c, 3, n, span), X.dtype)  # Xg[c, s, n, y, x] = Xp[n, c, y, x + s]
    dYg = np.zeros((k, n, span), X.dtype)  # dY[n, k] in the first h * w of each span
    temp = np.empty((3, c, 3, k) if turned else (3, k, c, 3), X.dtype)
    out = np.empty((k, c, 3, 3), X.dtype)
    calls = Calls()
    calls.keep(Xp, Xg, dYg, temp)
    calls.copy(Xp[:, :, 1:-1, 1:-1], X)
    calls.copy(Xg.reshape(c, 3, n, p, w), as_strided(
        Xp, (c, 3, n, p, w), (Xp.strides[1], 4, Xp.strides[0], Xp.strides[2], 4)))
    calls.copy(dYg[:, :, :h * w].reshape(k, n, h, w), dY.transpose(1, 0, 2, 3))
    depth = n * span - 2 * w  # the zeros past each image's h * w cancel the other rows
    a = dYg.reshape(k, n * span)[:, :depth]
    for r in range(3):
        b = Xg.reshape(c * 3, n * span)[:, r * w: r * w + depth]
        if turned:
            calls.product(b, a.T, temp[r].reshape(c * 3, k))
        else:
            calls.product(a, b.T, temp[r].reshape(k, c * 3))
    calls.copy(out, temp.transpose(3, 1, 0, 2) if turned else temp.transpose(1, 2, 0, 3))
    return calls, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="timed rounds (21)")
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--threads", help="threads for torch, BLAS and OpenMP (2)")
    args = parser.parse_args(argv)
    global THREADS
    THREADS = bench_shared.set_threads(int(args.threads) if args.threads else 2)[0]
    import torch

    n, c, k, size = (2, 8, 8, 12) if args.quick else (8, 64, 64, 56)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, c, size, size)).astype(np.float32)
    dY = rng.standard_normal((n, k, size, size)).astype(np.float32)
    tX, tdY, tW = torch.from_numpy(X), torch.from_numpy(dY), torch.zeros(k, c, 3, 3)

    def torch_wgrad():
        return torch.ops.aten.convolution_backward(
            tdY, tX, tW, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
            [False, True, False])[1]

    want = torch_wgrad().numpy()
    sides = {"im2col": im2col(X, dY), "shifted": shifted(X, dY, False),
             "shifted^T": shifted(X, dY, True), "folded": folded(X, dY, False),
             "folded^T": folded(X, dY, True)}
    failed = 0
    for name, (run, out) in sides.items():
        run()
        err = float(np.abs(out - want).max() / np.abs(want).max())
        if err > TOLERANCE:
            print(f"!!! {name} disagrees with torch: relative error {err:.1e}")
            failed += 1
    fns = {name: run for name, (run, _) in sides.items()} | {"torch": torch_wgrad}
    names = list(fns)
    times: dict = {name: [] for name in names}
    for i in range(args.runs):  # each round in a rotated order, a short pause first
        for name in names[i % len(names):] + names[:i % len(names)]:
            time.sleep(0.05)
            fns[name]()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["im2col"])
    cells = [(name, f"{1e3 * statistics.median(ts):.2f}",
              bench_shared.ratio_text(statistics.median(ts) / base)) for name, ts in times.items()]
    bench_shared.print_table(
        f"weight gradient, N={n} C={c} K={k} {size}x{size} 3x3 pad 1, {THREADS} threads, "
        f"median of {args.runs} (ms)", ("layout", "ms", "over im2col"), cells)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
