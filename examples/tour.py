"""A tour of tegrad: define conv2d once, get its backward, check it, run it.

Run with `make run`. Prints the generated gradient definitions (gather form), their
agreement with PyTorch (when installed), and their cost against the forward.
"""

from __future__ import annotations

import numpy as np

import tegrad as tg


def conv2d(n, c, h, k, r, stride, pad):
    ho = (h + 2 * pad - r) // stride + 1
    x = tg.placeholder((n, c, h, h), "float64", name="X")
    w = tg.placeholder((k, c, r, r), "float64", name="W")
    rc, ry, rx = tg.reduce_axis(c, "c"), tg.reduce_axis(r, "ry"), tg.reduce_axis(r, "rx")

    def body(b, o, i, j):
        y, z = i * stride + ry - pad, j * stride + rx - pad
        inside = tg.all(0 <= y, y < h, 0 <= z, z < h)
        return tg.sum(tg.if_then_else(inside, x[b, rc, y, z], 0.0) * w[o, rc, ry, rx], [rc, ry, rx])

    return x, w, tg.compute((n, k, ho, ho), body, name="Y")


def main() -> None:
    x, w, y = conv2d(2, 3, 9, 4, 3, stride=2, pad=1)
    head = tg.placeholder(y.shape, "float64", name="dY")
    dx, dw = tg.gradient(y, [x, w], head)
    print("forward:\n ", str(y).splitlines()[-1])
    print("generated input gradient:\n ", str(dx).splitlines()[-1])
    print("generated weight gradient:\n ", str(dw).splitlines()[-1])

    rng = np.random.default_rng(0)
    xv, wv, hv = (rng.standard_normal(t.shape) for t in (x, w, head))
    yv, dxv, dwv = tg.build([x, w, head], [y, dx, dw])(xv, wv, hv)
    try:
        import torch
    except ImportError:
        print("(install torch to compare against PyTorch)")
        return
    xt = torch.tensor(xv, requires_grad=True)
    wt = torch.tensor(wv, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, stride=2, padding=1)
    yt.backward(torch.tensor(hv))
    for name, ours, ref in (("Y", yv, yt), ("dX", dxv, xt.grad), ("dW", dwv, wt.grad)):
        err = np.abs(ours - ref.detach().numpy()).max()
        print(f"{name}: max |tegrad - torch| = {err:.1e}")


if __name__ == "__main__":
    main()
