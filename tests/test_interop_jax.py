"""``tg.to_jax``: tegrad ops as JAX functions, checked by ``jax.test_util.check_grads``
(numerical, second order, reverse and forward mode) and against PyTorch in float64.

The calls are the table of ``test_interop_torch`` (same ops, static arguments and
inputs); float64 is enabled per test with ``jax.enable_x64``.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import tegrad as tg  # noqa: E402
from tegrad.interop.jax_bridge import to_jax  # noqa: E402
from test_interop_torch import CALLS, Call, composite_layer_norm, linear  # noqa: E402


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def prepared(c: Call, mode: str = "vjp", seed: int = 0):
    """``f(*floats)`` closing over the integer inputs and returning the float outputs,
    the float inputs as JAX arrays, and the torch reference with the same signature."""
    tensors = c.inputs(torch.Generator().manual_seed(seed))
    floats = [k for k, t in enumerate(tensors) if t.is_floating_point()]
    op = to_jax(c.op, mode=mode)

    def place(values, fixed):
        args, it = list(fixed), iter(values)
        for k in floats:
            args[k] = next(it)
        return args

    def keep_floats(result):
        if not isinstance(result, (tuple, list)):
            return result
        return tuple(y for y in result if "float" in str(y.dtype))  # torch's or JAX's

    fixed_jax = [jnp.asarray(t.numpy()) for t in tensors]

    def f(*values):
        return keep_floats(c.call(op, *place(values, fixed_jax)))

    def ref(*values):
        return keep_floats(c.call(c.ref, *place(values, tensors)))

    return f, [fixed_jax[k] for k in floats], ref


@pytest.mark.parametrize("mode, check", [("vjp", "rev"), ("jvp", "fwd")])
@pytest.mark.parametrize("c", CALLS, ids=lambda c: c.name)
def test_check_grads_second_order(c: Call, mode, check):
    f, args, _ = prepared(c, mode)
    check_grads(f, args, order=2, modes=[check])


def loss(y):
    ys = y if isinstance(y, tuple) else (y,)
    return sum(jnp.sum(jnp.sin(v) * (k + 1)) for k, v in enumerate(ys))


def torch_loss(y):
    ys = y if isinstance(y, tuple) else (y,)
    return sum(torch.sum(torch.sin(v) * (k + 1)) for k, v in enumerate(ys))


@pytest.mark.parametrize("c", CALLS, ids=lambda c: c.name)
def test_jit_value_and_grad_match_torch(c: Call):
    f, args, ref = prepared(c)
    argnums = tuple(range(len(args)))
    value, grads = jax.jit(jax.value_and_grad(lambda *a: loss(f(*a)), argnums))(*args)
    leaves = [torch.from_numpy(np.array(a)).requires_grad_(True) for a in args]
    want = torch_loss(ref(*leaves))
    want_grads = torch.autograd.grad(want, leaves)
    np.testing.assert_allclose(value, want.item(), rtol=1e-10)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-9, atol=1e-10)


def test_grad_of_grad_matches_torch():
    """A Hessian-vector product and a third derivative through nested jax.grad."""
    ln = to_jax(tg.nn.layer_norm)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3)), rng.standard_normal(3)

    def energy(x):
        return jnp.sum(jnp.tanh(ln(x, (3,), weight=jnp.asarray(w))))

    def third(x):
        g = jax.grad(energy)
        gg = jax.grad(lambda x: jnp.sum(jnp.square(g(x))))
        return jax.grad(lambda x: jnp.sum(jnp.sin(gg(x))))(x)

    got = jax.jit(third)(jnp.asarray(x))
    xt = torch.from_numpy(x).requires_grad_(True)
    y = composite_layer_norm(xt, (3,), torch.from_numpy(w)).tanh().sum()
    (g,) = torch.autograd.grad(y, xt, create_graph=True)
    (gg,) = torch.autograd.grad(g.square().sum(), xt, create_graph=True)
    (want,) = torch.autograd.grad(gg.sin().sum(), xt)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-10)


def test_jacfwd_equals_jacrev_and_vmap():
    rng = np.random.default_rng(1)
    x, w, b = (jnp.asarray(rng.standard_normal(s)) for s in ((3, 4), (2, 4), (2,)))
    fwd, rev = to_jax(linear, mode="jvp"), to_jax(linear)
    jf = jax.jacfwd(lambda w: fwd(x, w, b))(w)
    jr = jax.jacrev(lambda w: rev(x, w, b))(w)
    np.testing.assert_allclose(jf, jr, rtol=1e-12)
    batched = jax.vmap(lambda x: rev(x, w, b))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(batched[1], np.asarray(x) * 2 @ np.asarray(w).T + b, rtol=1e-12)


def test_float32_by_default():
    with jax.enable_x64(False):
        soft = to_jax(tg.nn.softmax)
        x = jnp.asarray(np.random.default_rng(2).standard_normal((2, 3)), dtype=jnp.float32)
        g = jax.jit(jax.grad(lambda x: soft(x, dim=-1)[:, 0].sum()))(x)
        assert g.dtype == jnp.float32
        xt = torch.from_numpy(np.array(x)).requires_grad_(True)
        torch.softmax(xt, dim=-1)[:, 0].sum().backward()
        np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="unknown mode"):
        to_jax(tg.nn.softmax, mode="hessian")
    with pytest.raises(TypeError, match="bfloat16"):
        to_jax(tg.nn.softmax)(jnp.ones((2, 2), dtype=jnp.bfloat16), dim=0)
