"""tegrad ops inside PyTorch and JAX: forward, backward and double backward run tegrad's
generated kernels; the numbers printed are the differences from each framework's own op.

    .venv/bin/python examples/interop.py
"""

from __future__ import annotations

import numpy as np

import tegrad as tg
from tegrad.function import cache_info


def softplus_rows(x):
    """A user-written op: log(1 + exp(x)) summed over each row."""
    k = tg.reduce_axis(x.shape[1], name="k")
    return tg.compute((x.shape[0],), lambda i: tg.sum(tg.log1p(tg.exp(x[i, k])), axis=k),
                      name="softplus_rows")


def torch_demo() -> None:
    import torch
    import torch.nn.functional as F

    from tegrad.interop.torch_bridge import to_torch

    conv = to_torch(tg.nn.conv2d)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def grads(conv2d):  # gradient, then the gradient of its norm (double backward)
        y = conv2d(x, w, b, stride=2, padding=1)
        gx, gw = torch.autograd.grad(y.tanh().sum(), (x, w), create_graph=True)
        return gx, gw, torch.autograd.grad(gx.square().sum() + gw.square().sum(), w)[0]

    names = ("d/dx", "d/dw", "d/dw |grad|^2")
    for name, got, want in zip(names, grads(conv), grads(F.conv2d), strict=True):
        print(f"torch conv2d {name:14s} max |tegrad - torch| = {(got - want).abs().max():.1e}")

    op = to_torch(softplus_rows)
    z = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    print("torch user op gradcheck / gradgradcheck:",
          torch.autograd.gradcheck(op, (z,)), torch.autograd.gradgradcheck(op, (z,)))


def jax_demo() -> None:
    import jax
    import jax.numpy as jnp

    from tegrad.interop.jax_bridge import to_jax

    jax.config.update("jax_enable_x64", True)
    op = to_jax(softplus_rows)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 5)))

    def energy(x):
        return jnp.sum(op(x) ** 2)

    def reference(x):
        return jnp.sum(jnp.sum(jax.nn.softplus(x), axis=1) ** 2)

    hvp = jax.jit(jax.grad(lambda x: jnp.sum(jax.grad(energy)(x) ** 2)))
    hvp_ref = jax.grad(lambda x: jnp.sum(jax.grad(reference)(x) ** 2))
    print(f"jax  grad          max |tegrad - jax| = "
          f"{jnp.max(jnp.abs(jax.grad(energy)(x) - jax.grad(reference)(x))):.1e}")
    print(f"jax  grad of grad  max |tegrad - jax| = {jnp.max(jnp.abs(hvp(x) - hvp_ref(x))):.1e}")
    fwd = to_jax(softplus_rows, mode="jvp")
    jac = jax.jacfwd(fwd)(x)
    print(f"jax  jacfwd {jac.shape}  max |tegrad - jax| = "
          f"{jnp.max(jnp.abs(jac - jax.jacfwd(lambda x: jnp.sum(jax.nn.softplus(x), 1))(x))):.1e}")


if __name__ == "__main__":
    for demo in (torch_demo, jax_demo):
        try:
            demo()
        except ImportError as error:
            print(f"skipped {demo.__name__}: {error}")
    print(cache_info())
