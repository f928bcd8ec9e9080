"""Forward/backward pairs for ``tegrad check``: run ``tegrad check examples/gradcheck_pairs.py``.

Every top-level function named ``gradcheck_*`` that takes no required arguments is a
pair. It returns a dict: ``output``/``inputs`` (and optionally ``grads``, ``head``,
``values``) for tensor expressions, checked with ``tg.check_gradient``; or
``forward``/``backward``/``args`` for NumPy callables, checked with ``tg.check_vjp``.

One pair here is wrong on purpose (``gradcheck_conv2d_input_grad_dropped_edge``): the
checker should report its last row and column as wrong, so the command exits with 1.
``tegrad check examples/gradcheck_pairs.py -k generated`` selects only the passing one.
"""

from __future__ import annotations

import numpy as np

import tegrad as tg

N, C, H, W = 2, 3, 9, 9  # input
K, R = 4, 3  # output channels, kernel size
STRIDE, PAD = 2, 1


def conv2d(stride: int = STRIDE, pad: int = PAD) -> tuple[tg.Tensor, tg.Tensor, tg.Tensor]:
    """``Y = conv2d(X, Wt)`` (NCHW, float64, square kernel), zero padding by a guarded read."""
    x = tg.placeholder((N, C, H, W), "float64", name="X")
    wt = tg.placeholder((K, C, R, R), "float64", name="Wt")
    ho, wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    rc, ry, rx = tg.reduce_axis(C, "rc"), tg.reduce_axis(R, "ry"), tg.reduce_axis(R, "rx")

    def body(b, o, i, j):
        y, z = i * stride + ry - pad, j * stride + rx - pad
        inside = tg.all(0 <= y, y < H, 0 <= z, z < W)
        value = tg.if_then_else(inside, x[b, rc, y, z], 0.0)
        return tg.sum(value * wt[o, rc, ry, rx], [rc, ry, rx])

    return x, wt, tg.compute((N, K, ho, wo), body, name="Y")


def gradcheck_conv2d_generated() -> dict:
    """The generated gradients of a strided, padded conv2d, in both inputs: passes."""
    x, wt, y = conv2d()
    return {"output": y, "inputs": [x, wt]}


def gradcheck_conv2d_input_grad_dropped_edge() -> dict:
    """A hand-written input gradient that forgets the last row and column: fails.

    Built from the generated one, masked so that ``dX[n, c, H-1, :]`` and
    ``dX[n, c, :, W-1]`` come out zero.
    """
    x, wt, y = conv2d()
    head = tg.placeholder(y.shape, "float64", name="dY")
    (g,) = tg.gradient(y, [x], head=head)
    dx = tg.compute(
        x.shape,
        lambda n, c, h, w: tg.if_then_else(tg.all(h < H - 1, w < W - 1), g[n, c, h, w], 0.0),
        name="dX_dropped_edge",
    )
    return {"output": y, "inputs": [x], "grads": [dx], "head": head}


def _linear_forward(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A dense layer without bias: ``Y = X @ W.T``."""
    return x @ w.T


def _linear_backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray):
    """``(dX, dW) = (dY @ W, dY.T @ X)``."""
    return dy @ w, dy.T @ x


def gradcheck_numpy_linear() -> dict:
    """A NumPy matmul layer through the callable form (``tg.check_vjp``): passes."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4))
    w = rng.standard_normal((3, 4))
    return {"forward": _linear_forward, "backward": _linear_backward, "args": (x, w)}
