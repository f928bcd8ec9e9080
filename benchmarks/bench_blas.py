"""The BLAS libraries the compiled target can call for its products (``gemm.py``), and
``term_kernel``'s own kernel where ``tg_gemm`` takes it: Intel's MKL (``pip install
tegrad[mkl]``), NumPy's OpenBLAS, and MKL with the kernel (the default except on Intel's
processors: ``term_kernel.wanted_here``), all through the same ``tg_gemm`` helper
(single-threaded calls, split over OpenMP threads), on the product shapes the CPU
benchmark meets, alternating in one process, medians.

    .venv/bin/python benchmarks/bench_blas.py [--threads 2] [--runs 51]

Shapes (``M x N x K``; ``A^T``, ``B^T``: that operand stored transposed, as in the
gradients ``X^T dY`` and ``dY W^T``): an LSTM's products (a step's, N=32, 4H=1024, H=256
or I=128, and its 50 steps' at once), square 512 and 1024, and a 3x3 convolution's
(K=64 by C*9=576 by 56*56 pixels, and its weight gradient's for one image), a weight
stored transposed at 64 and 40 rows (copied to rows, and dot products), ResNet-18's 3x3
convolution at 2x2 (32 x 512 x 2304) and its first one's weight gradient (64 x 147 x
8192), and a product deep enough for slices (256 x 2048 x 2048). The last
column is the kernel's time over MKL's where ``tg_gemm`` gives the product's blocks to
``term_kernel``'s kernels (float32, AVX-512, their limits: the helper's count of blocks
rises in the checked first call), else ``-``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_shared: a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(HERE.parent / "src"))

from tegrad.backends.cpu import gemm  # noqa: E402

SHAPES = ((32, 1024, 256, ""), (32, 1024, 128, ""), (1600, 1024, 128, "B^T"),
          (1600, 128, 1024, ""), (1024, 256, 1600, "A^T"), (512, 512, 512, ""),
          (512, 512, 512, "A^T"), (512, 512, 512, "B^T"), (1024, 1024, 1024, ""),
          (1024, 1024, 1024, "A^T"), (1024, 1024, 1024, "B^T"), (64, 3136, 576, ""),
          (64, 576, 3248, "B^T"), (64, 512, 512, "B^T"), (40, 512, 512, "B^T"),
          (32, 512, 2304, "B^T"), (64, 147, 8192, "B^T"), (256, 2048, 2048, ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=51)
    args = ap.parse_args(argv)
    libraries = {"mkl": gemm.Blas(mkl=True, direct_terms=False),
                 "openblas": gemm.Blas(mkl=False, direct_terms=False),
                 "mkl+kernel": gemm.Blas(mkl=True, direct_terms=True)}
    if libraries["mkl"].name != "mkl":
        print("MKL is not installed (pip install tegrad[mkl]); nothing to compare")
        return 1
    rng = np.random.default_rng(0)
    cells = []
    openblas = libraries["openblas"]
    before = openblas.get_threads()
    openblas.set_threads(1)  # its calls are made from OpenMP's threads, as in a program
    try:
        for m, n, k, transposed in SHAPES:
            a = rng.standard_normal((k, m) if transposed == "A^T" else (m, k), np.float32)
            b = rng.standard_normal((n, k) if transposed == "B^T" else (k, n), np.float32)
            a, b = (a.T if transposed == "A^T" else a), (b.T if transposed == "B^T" else b)
            want = a.astype(np.float64) @ b
            times, calls, took = {}, {}, {}
            for name, blas in libraries.items():
                out = np.empty((m, n), np.float32)
                call, operands = gemm.prepare(a, b, out, blas)
                addresses = [x.ctypes.data for x in operands]
                blocks = blas.term_blocks
                call.run(*addresses, args.threads)
                took[name] = blas.term_blocks > blocks
                err = np.abs(out - want).max() / np.abs(want).max()
                assert err < 1e-5, f"{name} {m}x{n}x{k}: relative error {err:.1e}"
                calls[name] = (call, addresses, operands)  # operands: kept alive
                times[name] = []
            for _ in range(args.runs):  # alternating: both see the same machine
                for name, (call, addresses, _) in calls.items():
                    t0 = time.perf_counter()
                    call.run(*addresses, args.threads)
                    times[name].append(time.perf_counter() - t0)
            med = {name: statistics.median(t) for name, t in times.items()}
            flops = 2.0 * m * n * k
            kernel = took["mkl+kernel"]
            cells.append((f"{m} x {n} x {k} {transposed}".strip(),
                          *(f"{1e6 * med[x]:.0f} ({flops / med[x] / 1e9:.0f})" for x in med),
                          f"{med['mkl'] / med['openblas']:.2f}",
                          f"{med['mkl+kernel'] / med['mkl']:.2f}" if kernel else "-"))
    finally:
        openblas.set_threads(before)
    bench_shared.print_table(
        f"float32 products, M x N x K, {args.threads} OpenMP threads: us (GFLOP/s), "
        f"median of {args.runs}",
        ("shape", "mkl", "openblas", "mkl+kernel", "mkl/openblas", "kernel/mkl"), cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
