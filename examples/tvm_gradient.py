"""te.gradient for TVM again: a forward written in TVM ``te`` in, its backward as TVM
``te`` out, printed as TVMScript, built with TVM (llvm) and run.

    .venv/bin/python examples/tvm_gradient.py

The forward is a convolution layer the way topi writes one: a padding compute, a
strided convolution reduced over (rc, ry, rx), a bias and a ReLU. tegrad reads it
(``from_tvm``), differentiates it (``tg.gradient``) and writes the gradients back
(``to_tvm``) as ordinary ``te.compute`` tensors; TVM builds forward and backward into
one PrimFunc. The check at the end uses TVM alone: a central difference of the TVM
forward along a random direction against the TVM backward.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

import tegrad as tg
from tegrad.interop.tvm_bridge import load_tvm

tir = load_tvm().tir  # tvm.tirx in TVM 0.27 (tvm.tir before)
N, C, HW, F, K = 2, 3, 8, 4, 3
dtype = "float64"

# --- the TVM user's forward ------------------------------------------------------
X = te.placeholder((N, C, HW, HW), dtype, name="X")
W = te.placeholder((F, C, K, K), dtype, name="W")
B = te.placeholder((F,), dtype, name="B")
Xp = te.compute(
    (N, C, HW + 2, HW + 2),
    lambda n, c, y, x: tir.if_then_else(
        tir.all(y >= 1, y < HW + 1, x >= 1, x < HW + 1), X[n, c, y - 1, x - 1],
        tir.const(0.0, dtype)),
    name="pad",
)
rc = te.reduce_axis((0, C), name="rc")
ry = te.reduce_axis((0, K), name="ry")
rx = te.reduce_axis((0, K), name="rx")
OH = HW // 2
conv = te.compute(
    (N, F, OH, OH),
    lambda n, f, y, x: te.sum(Xp[n, rc, 2 * y + ry, 2 * x + rx] * W[f, rc, ry, rx],
                              axis=[rc, ry, rx]),
    name="conv",
)
Y = te.compute((N, F, OH, OH), lambda n, f, y, x: tir.max(conv[n, f, y, x] + B[f],
                                                            tir.const(0.0, dtype)), name="Y")

# --- into tegrad, differentiate, back to TVM --------------------------------------
y, feeds = tg.from_tvm(Y)
dY = tg.placeholder(y.shape, y.dtype, name="dY")
dX, dW, dB = tg.gradient(y, [feeds[X], feeds[W], feeds[B]], head=dY)
print("generated backward (tegrad's notation):")
for g in (dX, dW, dB):
    print(" ", str(g).splitlines()[-1])

outs, params = tg.to_tvm([y, dX, dW, dB], inputs=[feeds[X], feeds[W], feeds[B], dY])
prim = te.create_prim_func([*params, *outs])
print("\nthe same as a TVM PrimFunc:")
print(prim.script())

# --- build with TVM and run ---------------------------------------------------------
mod = tvm.compile(prim, target="llvm")
dev = tvm.cpu()
rng = np.random.default_rng(0)
x, w, b = (rng.standard_normal(s) for s in [(N, C, HW, HW), (F, C, K, K), (F,)])
head = rng.standard_normal(y.shape)


def run(*arrays):
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    res = [tvm.runtime.empty([int(s) for s in o.shape], dtype, dev) for o in outs]
    mod(*args, *res)
    return [r.numpy() for r in res]


y_val, gx, gw, gb = run(x, w, b, head)

# check with TVM alone: <dY, Y(p + e v) - Y(p - e v)> / 2e  ==  <grad, v>
eps = 1e-6
for name, k, g in (("X", 0, gx), ("W", 1, gw), ("B", 2, gb)):
    v = rng.standard_normal(g.shape)
    plus, minus = [x, w, b], [x, w, b]
    plus[k], minus[k] = plus[k] + eps * v, minus[k] - eps * v
    numeric = np.sum(head * (run(*plus, head)[0] - run(*minus, head)[0])) / (2 * eps)
    print(f"d{name}: <grad, v> = {np.sum(g * v):+.10f}   central difference = {numeric:+.10f}")
    assert abs(np.sum(g * v) - numeric) <= 1e-6 * (1 + abs(numeric))
print("\nbackward built and run by TVM agrees with TVM's own forward")
