"""Reference tests: every op of the table against PyTorch autograd in float64.

For each spec: the forward value; reverse mode with a random head; full Jacobians
(head=None) where they are small; forward mode (jvp); and second order (the gradient
of a weighted sum of the first gradients, with respect to the inputs and the head).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

import tegrad as tg
from optable import SPECS, OpSpec

RTOL = {"float64": 1e-7, "float32": 1e-6}
ATOL = {"float64": 1e-9, "float32": 1e-6}
JACOBIAN_LIMIT = 8000  # entries of out.shape + x.shape (all inputs of the table but one fit)

params = pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])


def rng_for(spec: OpSpec, salt: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{spec.name}/{salt}".encode()))


def to_torch(arrays, diff=()):
    out = []
    for k, a in enumerate(arrays):
        t = torch.from_numpy(np.array(a))
        if k in diff:
            t.requires_grad_(True)
        out.append(t)
    return out


def assert_close(actual, expected, what):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    dtype = str(expected.dtype)
    np.testing.assert_allclose(actual, expected, rtol=RTOL.get(dtype, 1e-7),
                               atol=ATOL.get(dtype, 1e-9), err_msg=what)


def random_like(rng, t):
    return rng.standard_normal(t.shape).astype(t.dtype)


def grads_or_zeros(outs, wrt):
    return [torch.zeros_like(w) if g is None else g for g, w in zip(outs, wrt, strict=True)]


def weighted_sum(tensors, weights, name):
    """s = sum_a sum_idx tensors[a][idx] * weights[a][idx], as one 0-d compute."""
    def body():
        total = None
        for t, v in zip(tensors, weights, strict=True):
            axes = [tg.reduce_axis(n) for n in t.shape]
            term = tg.sum(t[tuple(axes)] * v[tuple(axes)], axis=axes) if axes else t[()] * v[()]
            total = term if total is None else total + term
        return total

    return tg.compute((), body, name)


# ---------------------------------------------------------------------------- forward


@params
def test_forward(spec: OpSpec):
    inputs, out = spec.build()
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    got = tg.build(inputs, out)(*arrays)
    expected = spec.torch_fn(*to_torch(arrays))
    assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
    assert_close(got, expected, f"{spec.name} forward")


# ---------------------------------------------------------------------------- reverse mode


@params
def test_reverse(spec: OpSpec):
    inputs, out = spec.build()
    diff = [inputs[k] for k in spec.diff]
    H = tg.placeholder(out.shape, out.dtype, name="H")
    grads = tg.gradient(out, diff, head=H)
    for g, x in zip(grads, diff, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype, (g, x)

    rng = rng_for(spec, "reverse")
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    h = random_like(rng, out)
    got = tg.build([*inputs, H], grads)(*arrays, h)

    ts = to_torch(arrays, spec.diff)
    y = spec.torch_fn(*ts)
    wrt = [ts[k] for k in spec.diff]
    expected = grads_or_zeros(
        torch.autograd.grad(y, wrt, grad_outputs=torch.from_numpy(h), allow_unused=True), wrt)
    for k, g, e in zip(spec.diff, got, expected, strict=True):
        assert_close(g, e, f"{spec.name}: d/d{inputs[k].name}")


# ---------------------------------------------------------------------------- Jacobian


@params
def test_jacobian(spec: OpSpec):
    inputs, out = spec.build()
    small = [k for k in spec.diff if out.size * inputs[k].size <= JACOBIAN_LIMIT]
    if not small:
        pytest.skip("Jacobian too large for the scatter-form reference")
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    for k in small:
        x = inputs[k]
        (J,) = tg.gradient(out, [x])
        assert J.shape == out.shape + x.shape
        got = tg.build(inputs, J)(*arrays)

        ts = to_torch(arrays)

        def f(xk, k=k, ts=ts):
            args = list(ts)
            args[k] = xk
            return spec.torch_fn(*args)

        expected = torch.autograd.functional.jacobian(f, ts[k])
        assert_close(got, expected, f"{spec.name}: Jacobian wrt {x.name}")


# ---------------------------------------------------------------------------- forward mode


@params
def test_jvp(spec: OpSpec):
    inputs, out = spec.build()
    diff = [inputs[k] for k in spec.diff]
    tangents = [tg.placeholder(x.shape, x.dtype, name=f"{x.name}_dot") for x in diff]
    y_dot = tg.jvp(out, diff, tangents)
    assert y_dot.shape == out.shape and y_dot.dtype == out.dtype

    rng = rng_for(spec, "jvp")
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    t_arrays = [random_like(rng, x) for x in diff]
    got = tg.build([*inputs, *tangents], y_dot)(*arrays, *t_arrays)

    ts = to_torch(arrays)

    def f(*d):
        args = list(ts)
        for k, v in zip(spec.diff, d, strict=True):
            args[k] = v
        return spec.torch_fn(*args)

    primals = tuple(ts[k] for k in spec.diff)
    tans = tuple(torch.from_numpy(t) for t in t_arrays)
    _, expected = torch.func.jvp(f, primals, tans)
    assert_close(got, expected, f"{spec.name}: jvp")


# ---------------------------------------------------------------------------- second order


@params
def test_second_order(spec: OpSpec):
    if not spec.second_order:
        pytest.skip("torch's double backward is zero/undefined here")
    inputs, out = spec.build()
    diff = [inputs[k] for k in spec.diff]
    H = tg.placeholder(out.shape, out.dtype, name="H")
    grads = tg.gradient(out, diff, head=H)
    Vs = [tg.placeholder(g.shape, g.dtype, name=f"V{n}") for n, g in enumerate(grads)]
    s = weighted_sum(grads, Vs, "s")
    second = tg.gradient(s, [*diff, H])
    for g, x in zip(second, [*diff, H], strict=True):
        assert g.shape == x.shape, (g, x)

    rng = rng_for(spec, "second")
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    h = random_like(rng, out)
    vs = [random_like(rng, g) for g in grads]
    got = tg.build([*inputs, H, *Vs], second)(*arrays, h, *vs)

    ts = to_torch(arrays, spec.diff)
    h_t = torch.from_numpy(h).requires_grad_(True)
    wrt = [ts[k] for k in spec.diff]
    y = spec.torch_fn(*ts)
    g1 = grads_or_zeros(torch.autograd.grad(y, wrt, grad_outputs=h_t, create_graph=True,
                                            allow_unused=True), wrt)
    s_t = sum((g * torch.from_numpy(v)).sum() for g, v in zip(g1, vs, strict=True))
    targets = [*wrt, h_t]
    expected = grads_or_zeros(torch.autograd.grad(s_t, targets, allow_unused=True), targets)
    names = [x.name for x in diff] + ["H"]
    for name, g, e in zip(names, got, expected, strict=True):
        assert_close(g, e, f"{spec.name}: second order, d/d{name}")


# ---------------------------------------------------------------------------- errors


def test_table_size():
    assert len(SPECS) >= 32


@pytest.mark.parametrize("mode", ["gradient", "jvp"])
def test_int_placeholder_not_differentiable(mode):
    W = tg.placeholder((6, 4), "float64", name="W")
    idx = tg.placeholder((5,), "int64", name="idx")
    out = tg.compute((5, 4), lambda n, e: W[idx[n], e], name="embed")
    with pytest.raises(tg.NotDifferentiableError, match="idx"):
        if mode == "gradient":
            tg.gradient(out, [W, idx], head=tg.placeholder(out.shape, "float64", name="H"))
        else:
            tg.jvp(out, [idx], [tg.placeholder((5,), "int64", name="t")])
