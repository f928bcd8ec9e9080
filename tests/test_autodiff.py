"""Differentiation semantics: heads with a prefix, DAGs, higher order, errors, gather form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad.coverage.structure import equations

RNG = np.random.default_rng(7)


def mlp():
    """loss = sum((tanh(X W1) W2 - Y)^2) / N, a 2-layer MLP in float64."""
    n, d, h, o = 5, 4, 6, 3
    x = tg.placeholder((n, d), "float64", name="X")
    y = tg.placeholder((n, o), "float64", name="Y")
    w1 = tg.placeholder((d, h), "float64", name="W1")
    w2 = tg.placeholder((h, o), "float64", name="W2")
    k1, k2 = tg.reduce_axis(d, "k1"), tg.reduce_axis(h, "k2")
    hid = tg.compute((n, h), lambda i, j: tg.tanh(tg.sum(x[i, k1] * w1[k1, j], k1)), name="Hid")
    out = tg.compute((n, o), lambda i, j: tg.sum(hid[i, k2] * w2[k2, j], k2), name="Out")
    a, b = tg.reduce_axis(n, "a"), tg.reduce_axis(o, "b")
    loss = tg.compute((), lambda: tg.sum((out[a, b] - y[a, b]) ** 2, [a, b]) / n, name="Loss")
    return x, y, w1, w2, loss


def torch_mlp_loss(x, y, w1, w2):
    return ((torch.tanh(x @ w1) @ w2 - y) ** 2).sum() / x.shape[0]


def test_hessian_vector_product_of_mlp_loss():
    x, y, w1, w2, loss = mlp()
    g1, g2 = tg.gradient(loss, [w1, w2])
    v1 = tg.placeholder(w1.shape, "float64", name="V1")
    v2 = tg.placeholder(w2.shape, "float64", name="V2")
    d, h = w1.shape
    h_, o = w2.shape
    p, q, r, s = (tg.reduce_axis(n, nm) for n, nm in ((d, "p"), (h, "q"), (h_, "r"), (o, "s")))
    gv = tg.compute(
        (),
        lambda: tg.sum(g1[p, q] * v1[p, q], [p, q]) + tg.sum(g2[r, s] * v2[r, s], [r, s]),
        name="GV",
    )
    hv1, hv2 = tg.gradient(gv, [w1, w2])
    arrays = [RNG.standard_normal(t.shape) for t in (x, y, w1, w2, v1, v2)]
    ours = tg.build([x, y, w1, w2, v1, v2], [hv1, hv2])(*arrays)
    xt, yt, w1t, w2t, v1t, v2t = (torch.tensor(a) for a in arrays)
    _, hvp = torch.autograd.functional.hvp(
        lambda a, b: torch_mlp_loss(xt, yt, a, b), (w1t, w2t), (v1t, v2t)
    )
    for mine, ref in zip(ours, hvp, strict=True):
        np.testing.assert_allclose(mine, ref.numpy(), rtol=1e-9, atol=1e-12)


def test_third_order_scalar():
    x = tg.placeholder((3,), "float64", name="x")
    y = tg.compute((3,), lambda i: x[i] ** 3 + x[i] ** 2 + x[i] + 5.0)
    g = x
    grads = []
    cur = y
    for _ in range(3):
        (cur,) = tg.gradient(cur, [g], head=tg.compute((3,), lambda i: tg.const(1.0, "float64")))
        grads.append(cur)
    xv = np.array([3.0, 0.0, -1.0])
    d1, d2, d3 = tg.build([x], grads)(xv)
    np.testing.assert_allclose(d1, 3 * xv**2 + 2 * xv + 1)
    np.testing.assert_allclose(d2, 6 * xv + 2)
    np.testing.assert_allclose(d3, [6.0, 6.0, 6.0])


def test_head_with_prefix_gives_batched_vjps():
    a = tg.placeholder((3, 4), "float64", name="A")
    b = tg.placeholder((4, 2), "float64", name="B")
    k = tg.reduce_axis(4, "k")
    c = tg.compute((3, 2), lambda i, j: tg.sum(a[i, k] * b[k, j], k), name="C")
    heads = tg.placeholder((5, 3, 2), "float64", name="Heads")
    (da,) = tg.gradient(c, [a], head=heads)
    assert da.shape == (5, 3, 4)
    av, bv, hv = (RNG.standard_normal(t.shape) for t in (a, b, heads))
    np.testing.assert_allclose(tg.build([b, heads], da)(bv, hv), hv @ bv.T, rtol=1e-12)


def test_jacobian_with_identity_head():
    x = tg.placeholder((3,), "float64", name="X")
    y = tg.compute((2, 3), lambda i, j: tg.exp(x[j]) * (i + 1))
    (jac,) = tg.gradient(y, [x])
    assert jac.shape == (2, 3, 3)
    xv = RNG.standard_normal(3)
    ref = torch.autograd.functional.jacobian(
        lambda t: torch.exp(t)[None, :] * torch.tensor([[1.0], [2.0]], dtype=torch.float64),
        torch.tensor(xv),
    )
    np.testing.assert_allclose(tg.build([x], jac)(xv), ref.numpy(), rtol=1e-12)


def test_tensor_read_several_times_accumulates():
    x = tg.placeholder((4,), "float64", name="X")
    u = tg.compute((4,), lambda i: x[i] * x[i], name="U")
    v = tg.compute((4,), lambda i: u[i] + tg.sin(x[i]) + u[3 - i], name="V")
    head = tg.placeholder((4,), "float64", name="H")
    (dx,) = tg.gradient(v, [x], head)
    xv, hv = RNG.standard_normal(4), RNG.standard_normal(4)
    xt = torch.tensor(xv, requires_grad=True)
    ut = xt * xt
    (ref,) = torch.autograd.grad(ut + torch.sin(xt) + ut.flip(0), xt, torch.tensor(hv))
    np.testing.assert_allclose(tg.build([x, head], dx)(xv, hv), ref.numpy(), rtol=1e-12)


def test_gradient_with_respect_to_integer_raises():
    w = tg.placeholder((4,), "float64", name="W")
    idx = tg.placeholder((3,), "int32", name="Idx")
    e = tg.compute((3,), lambda i: w[idx[i]], name="E")
    with pytest.raises(tg.NotDifferentiableError, match="Idx"):
        tg.gradient(e, [idx])


def test_unconnected_input_gets_zero():
    x = tg.placeholder((3,), "float64", name="X")
    z = tg.placeholder((2,), "float64", name="Z")
    y = tg.compute((3,), lambda i: x[i] * 2.0)
    (dz,) = tg.gradient(y, [z], head=tg.placeholder((3,), "float64", name="H"))
    assert dz.shape == (2,)
    np.testing.assert_array_equal(tg.evaluate(dz, {}), np.zeros(2))


def test_jvp_matches_torch():
    x, y, w1, w2, loss = mlp()
    t1 = tg.placeholder(w1.shape, "float64", name="T1")
    t2 = tg.placeholder(w2.shape, "float64", name="T2")
    tangent = tg.jvp(loss, [w1, w2], [t1, t2])
    arrays = [RNG.standard_normal(t.shape) for t in (x, y, w1, w2, t1, t2)]
    ours = tg.build([x, y, w1, w2, t1, t2], tangent)(*arrays)
    xt, yt, w1t, w2t, t1t, t2t = (torch.tensor(a) for a in arrays)
    _, ref = torch.func.jvp(lambda a, b: torch_mlp_loss(xt, yt, a, b), (w1t, w2t), (t1t, t2t))
    np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-10)


def test_max_ties_share_the_gradient():
    x = tg.placeholder((4,), "float64", name="X")
    k = tg.reduce_axis(4, "k")
    m = tg.compute((), lambda: tg.max(x[k], k))
    (g,) = tg.gradient(m, [x])
    np.testing.assert_allclose(tg.build([x], g)(np.array([1.0, 3.0, 3.0, 0.0])), [0, 0.5, 0.5, 0])
    b = tg.compute((2,), lambda i: tg.maximum(x[i], x[i + 2]))
    (gb,) = tg.gradient(b, [x], head=tg.compute((2,), lambda i: tg.const(1.0, "float64")))
    np.testing.assert_allclose(tg.build([x], gb)(np.array([1.0, 2.0, 1.0, 0.0])), [0.5, 1, 0.5, 0])


def test_prod_gradient_is_exact_with_zeros_in_a_row():
    # rows with no zero, one zero and two zeros; first and second order against torch
    rows = np.array([[2.0, -0.5, 3.0, 1.5], [2.0, 0.0, 3.0, 1.5], [0.0, -0.5, 0.0, 1.5]])
    x = tg.placeholder(rows.shape, "float64", name="X")
    k = tg.reduce_axis(4, "k")
    p = tg.compute((3,), lambda i: tg.prod(x[i, k], axis=k), name="P")
    h = tg.placeholder((3,), "float64", name="H")
    (g,) = tg.gradient(p, [x], head=h)
    v = tg.placeholder(rows.shape, "float64", name="V")
    kk = [tg.reduce_axis(n) for n in rows.shape]
    s = tg.compute((), lambda: tg.sum(g[kk[0], kk[1]] * v[kk[0], kk[1]], kk), name="S")
    (gg,) = tg.gradient(s, [x])
    hv, vv = RNG.standard_normal(3), RNG.standard_normal(rows.shape)
    got_g, got_gg = tg.build([x, h, v], [g, gg])(rows, hv, vv)

    xt = torch.tensor(rows, requires_grad=True)
    (gt,) = torch.autograd.grad(torch.prod(xt, 1), xt, torch.tensor(hv), create_graph=True)
    (ggt,) = torch.autograd.grad((gt * torch.tensor(vv)).sum(), xt)
    np.testing.assert_allclose(got_g, gt.detach().numpy(), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(got_gg, ggt.numpy(), rtol=1e-14, atol=1e-15)


def test_stop_gradient_is_the_identity_held_constant():
    x = tg.placeholder((3,), "float64", name="X")
    y = tg.compute((3,), lambda i: x[i] * tg.stop_gradient(x[i] * x[i]), name="Y")
    (g,) = tg.gradient(y, [x], head=tg.compute((3,), lambda i: tg.const(1.0, "float64")))
    y_dot = tg.jvp(y, [x], [tg.compute((3,), lambda i: tg.const(1.0, "float64"))])
    xv = np.array([1.5, -2.0, 0.5])
    value, grad, tangent = tg.build([x], [y, g, y_dot])(xv)
    np.testing.assert_array_equal(value, xv ** 3)
    np.testing.assert_array_equal(grad, xv ** 2)  # d/dx x * c, with c = x^2 held constant
    np.testing.assert_array_equal(tangent, xv ** 2)


def test_conv_gradients_are_gathers():
    x = tg.placeholder((2, 4, 9, 9), "float64", name="X")
    w = tg.placeholder((6, 2, 3, 3), "float64", name="W")
    c, r, s = tg.reduce_axis(2, "c"), tg.reduce_axis(3, "r"), tg.reduce_axis(3, "s")

    def body(n, k, h, q):  # stride 2, padding 1, dilation 2, groups 2
        y, z = 2 * h + 2 * r - 1, 2 * q + 2 * s - 1
        g = k // 3
        inside = tg.all(0 <= y, y < 9, 0 <= z, z < 9)
        return tg.sum(
            tg.if_then_else(inside, x[n, g * 2 + c, y, z], 0.0) * w[k, c, r, s], [c, r, s]
        )

    out = tg.compute((2, 6, 4, 4), body, name="Y")
    head = tg.placeholder(out.shape, "float64", name="dY")
    dx, dw = tg.gradient(out, [x, w], head)
    assert not equations(dx) and not equations(dw)
    xv, wv, hv = (RNG.standard_normal(t.shape) for t in (x, w, head))
    gx, gw = tg.build([x, w, head], [dx, dw])(xv, wv, hv)
    xt, wt = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, stride=2, padding=1, dilation=2, groups=2)
    yt.backward(torch.tensor(hv))
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_every_scalar_op_has_a_rule_or_is_piecewise_constant():
    from tegrad.autodiff.partials import PIECEWISE_CONSTANT, RULES
    from tegrad.ir.expr import BINARY_OPS, UNARY_OPS

    for op in (*UNARY_OPS, *BINARY_OPS):
        assert (op in RULES) != (op in PIECEWISE_CONSTANT), op


def test_duplicate_rule_is_refused():
    from tegrad.autodiff.partials import rule

    with pytest.raises(ValueError, match="duplicate"):
        rule("exp")(lambda e, k: e)


def test_reused_tensor_must_cover_the_indices_it_is_read_at():
    # found by the fuzzer: sum_j H[i, j] over i in [0, 2) was replaced by a read of a
    # one-row tensor holding the same sum for i = 0 only
    y = tg.placeholder((2,), "float64", name="Y")
    t0 = tg.compute((1,), lambda i: y[i], name="T0")
    t1 = tg.compute(
        (2, 2), lambda i, j: y[i] + tg.if_then_else(tg.all(0 <= i, i < 1), t0[i], 0.0), name="T1"
    )
    head = tg.placeholder((2, 2), "float64", name="H")
    (g,) = tg.gradient(t1, [y], head)
    hv = RNG.standard_normal((2, 2))
    expected = hv.sum(1) + np.array([hv[0].sum(), 0.0])
    np.testing.assert_allclose(tg.build([head], g)(hv), expected, rtol=1e-12)


def test_prod_gradient_is_finite_where_no_term_maps():
    # found by the fuzzer: the gather form of d/dY evaluates prod's partial at every
    # Y[0, j], also at odd j that no term reads (a 0/1 guard then masks it); there
    # T0 - Y[0, j] is 0, and P / 0 * 0 was nan
    y = tg.placeholder((1, 5), "float64", name="Y")
    k = tg.reduce_axis((2, 6), "k")
    t0 = tg.compute((), lambda: tg.minimum(y[0, 0] * y[0, 0], y[0, 0]), name="T0")
    t1 = tg.compute((), lambda: tg.prod(tg.if_then_else(
        tg.equal(k % 2, 0), t0[()] - y[0, k % 5], t0[()]), k), name="T1")
    (g,) = tg.gradient(t1, [y], head=tg.compute((), lambda: tg.const(1.0, "float64")))
    yv = np.array([[0.5, 0.25, 0.3, 0.25, 0.9]])  # T0 = 0.25 = Y[0, 1] = Y[0, 3]
    got = tg.build([y], g)(yv)

    yt = torch.tensor(yv, requires_grad=True)
    t0t = torch.minimum(yt[0, 0] * yt[0, 0], yt[0, 0])
    factors = [t0t - yt[0, j % 5] if j % 2 == 0 else t0t for j in range(2, 6)]
    torch.stack(factors).prod().backward()
    np.testing.assert_allclose(got, yt.grad.numpy(), rtol=1e-14, atol=1e-15)


def _exps(tensors) -> int:
    from tegrad.ir.expr import Unary
    from tegrad.ir.tensor import Compute
    from tegrad.ir.traverse import topo_tensors, walk

    return sum(isinstance(x, Unary) and x.op == "exp" for t in topo_tensors(tensors)
               if isinstance(t, Compute) for x in walk(t.body))


def test_softmax_gradient_reads_the_output_and_evaluates_no_exp():
    # dX = dY Y - (sum_k dY_k Y_k) Y: every exp(X - m) / s of the derived gradient is
    # the forward's output (simplify/products.py), as in a hand-written backward
    x = tg.placeholder((3, 7), "float64", name="X")
    h = tg.placeholder((3, 7), "float64", name="H")
    y = tg.nn.softmax(x, -1)
    (g,) = tg.gradient(y, [x], h)
    assert _exps([g]) == _exps([y])  # the forward's own only: the gradient adds none
    xv, hv = RNG.standard_normal((3, 7)), RNG.standard_normal((3, 7))
    xt = torch.tensor(xv, requires_grad=True)
    (want,) = torch.autograd.grad(xt.softmax(-1), xt, torch.tensor(hv))
    np.testing.assert_allclose(tg.build([x, h], g)(xv, hv), want.numpy(), rtol=1e-12)


def test_a_cube_s_gradient_squares_by_a_product():
    """``d(x**3) = 3 x**2``: the simplifier writes ``x**2`` as ``x * x`` (NumPy's power
    squares for 2 as well), so no ``pow`` is left; values are NumPy's, to the last bit
    for the square."""
    from tegrad.ir.expr import Binary
    from tegrad.ir.traverse import walk

    x = tg.placeholder((6,), "float64", name="X")
    h = tg.placeholder((6,), "float64", name="H")
    y = tg.compute((6,), lambda i: x[i] ** 3.0, name="Y")
    (gx,) = tg.gradient(y, [x], h)
    simplified = tg.simplify(gx)
    assert not any(isinstance(e, Binary) and e.op == "pow" for e in walk(simplified.body))
    sq = tg.simplify(tg.compute((6,), lambda i: x[i] ** 2.0, name="S"))
    assert not any(isinstance(e, Binary) and e.op == "pow" for e in walk(sq.body))
    xv, hv = RNG.standard_normal(6), RNG.standard_normal(6)
    for target in ("numpy", "cpu"):
        np.testing.assert_allclose(tg.build([x, h], gx, target=target)(xv, hv),
                                   3 * xv**2 * hv, rtol=1e-15)
        np.testing.assert_array_equal(tg.build([x], sq, target=target)(xv), np.power(xv, 2.0))


def test_a_quotient_in_a_derivative_reads_the_forward_quotient():
    # Y = A / B: dY/dB = -A / B^2 = -Y / B, one division per element reading Y
    a = tg.placeholder((5,), "float64", name="A")
    b = tg.placeholder((5,), "float64", name="B")
    h = tg.placeholder((5,), "float64", name="H")
    y = tg.compute((5,), lambda i: a[i] / b[i], name="Y")
    (gb,) = tg.gradient(y, [b], h)
    from tegrad.ir.traverse import tensors_read

    assert y in tensors_read(gb.body)
    av, bv, hv = RNG.standard_normal(5), RNG.uniform(1, 2, 5), RNG.standard_normal(5)
    np.testing.assert_allclose(tg.build([a, b, h], gb)(av, bv, hv), -hv * av / bv**2,
                               rtol=1e-12)


def test_a_quotient_is_read_only_where_its_tensor_covers_the_index():
    # T0 holds A[i] / B[i] for i = 0 only: the same quotient over i in [0, 2) is not T0[i]
    a = tg.placeholder((2,), "float64", name="A")
    b = tg.placeholder((2,), "float64", name="B")
    t0 = tg.compute((1,), lambda i: a[i] / b[i], name="T0")
    t1 = tg.compute((2,), lambda i: 3.0 * (a[i] / b[i]) + t0[0], name="T1")
    av, bv = np.array([1.0, 2.0]), np.array([4.0, 8.0])
    got = tg.build([a, b], tg.simplify(t1))(av, bv)
    np.testing.assert_allclose(got, 3.0 * av / bv + av[0] / bv[0], rtol=1e-12)


def test_attention_with_a_float_mask_costs_its_products_in_the_backward():
    # attention with a float mask: the mask's gradient sums over batch and heads a term
    # that holds the softmax rows' sum_k P dP. Matching the softmax output through that
    # row coefficient must keep the row sum a tensor of its own (products._part): inlined,
    # it was evaluated again for every mask column (B H L S S multiply-adds)
    b, nh, q_len, s_len, e = 2, 3, 4, 6, 5
    q = tg.placeholder((b, nh, q_len, e), "float64", "q")
    k = tg.placeholder((b, nh, s_len, e), "float64", "k")
    v = tg.placeholder((b, nh, s_len, e), "float64", "v")
    m = tg.placeholder((q_len, s_len), "float64", "m")
    y = tg.nn.scaled_dot_product_attention(q, k, v, attn_mask=m)
    h = tg.placeholder(y.shape, "float64", "h")
    grads = tg.gradient(y, [q, k, v, m], h)
    # four products of B H L S E, and per score a few row-sum and mask-sum terms
    assert tg.count_ops(grads, given=[y]).macs <= 4 * b * nh * q_len * s_len * (e + 1)
    # the row max is held constant (as tg.nn.softmax's): no max or tie count in the backward
    from tegrad.ir.expr import Reduce
    from tegrad.ir.tensor import Compute
    from tegrad.ir.traverse import topo_tensors, walk

    forward = set(topo_tensors([y]))
    assert not any(isinstance(x, Reduce) and x.combiner.kind == "max"
                   for t in topo_tensors(grads) if isinstance(t, Compute) and t not in forward
                   for x in walk(t.body))
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(p.shape) for p in (q, k, v, m, h)]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays[:4]]
    out = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3])
    want = torch.autograd.grad(out, ts, torch.tensor(arrays[4]))
    for got, w in zip(tg.build([q, k, v, m, h], grads)(*arrays), want, strict=True):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-10, atol=1e-12)


def _pool(kind, x):
    if kind == "avg":
        return tg.nn.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)
    return tg.nn.lp_pool2d(x, 3.0, (2, 3), 2, ceil_mode=True)


def _torch_pool(kind, x):
    import torch.nn.functional as F

    if kind == "avg":
        return F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)
    return F.lp_pool2d(x, 3.0, (2, 3), 2, ceil_mode=True)


@pytest.mark.parametrize("kind", ["avg", "lp"])
def test_a_factor_of_the_output_point_is_evaluated_once_per_output_point(kind):
    """An average pool without the padding divides by its window's count ``D(i)``; an Lp
    pool's gradient also takes ``(sum / D(i))^(1/p - 1)``. Both depend on the output point
    alone: the gradient scales the head by them once per output point
    (``reverse.ScaledHeads``), so its sum over the taps holds no division and no power."""
    from tegrad.ir.expr import Binary, Reduce, Unary
    from tegrad.ir.traverse import topo_tensors, walk

    x = tg.placeholder((2, 3, 9, 8), "float64", name="X")
    y = _pool(kind, x)
    h = tg.placeholder(y.shape, "float64", name="H")
    (g,) = tg.gradient(y, [x], h)
    taps = [r for r in walk(g.body) if isinstance(r, Reduce)]
    assert taps
    for r in taps:
        costly = [e for e in walk(r.source) if isinstance(e, Binary) and e.op in ("div", "pow")
                  or isinstance(e, Unary) and e.op not in ("neg", "abs")]
        assert not costly, f"{g.name} evaluates {costly} per tap:\n{g}"
    scaled = [t for t in topo_tensors([g]) if t.name.startswith("H.scaled")]
    assert [t.shape for t in scaled] == [y.shape]
    xv, hv = RNG.uniform(0.5, 2.0, x.shape), RNG.standard_normal(y.shape)
    xt = torch.tensor(xv, requires_grad=True)
    (want,) = torch.autograd.grad(_torch_pool(kind, xt), xt, torch.tensor(hv))
    for target in ("numpy", "cpu"):
        np.testing.assert_allclose(tg.build([x, h], g, target=target)(xv, hv), want.numpy(),
                                   rtol=1e-12, atol=1e-14)


def test_a_factor_under_a_select_moves_with_its_condition():
    """``Y[i] = select(i > 0, sum_k X[i + k] / X[i - 1], 0)``: the adjoint of the window's
    read is ``select(i > 0, 1 / X[i - 1], 0)``, a factor of the output point whose condition
    keeps ``X[i - 1]`` in bounds. The scaled head takes the select whole, so ``X[-1]`` is
    never read, and the values are exact."""
    x = tg.placeholder((7,), "float64", name="X")
    k = tg.reduce_axis(2, "k")
    y = tg.compute((6,), lambda i: tg.if_then_else(
        i > 0, tg.sum(x[i + k], axis=k) / x[i - 1], 0.0), name="Y")
    h = tg.placeholder((6,), "float64", name="H")
    (g,) = tg.gradient(y, [x], h)
    from tegrad.ir.traverse import topo_tensors

    assert any(t.name.startswith("H.scaled") for t in topo_tensors([g]))
    xv, hv = RNG.uniform(0.5, 2.0, 7), RNG.standard_normal(6)
    xt = torch.tensor(xv, requires_grad=True)
    parts = [(xt[i] + xt[i + 1]) / xt[i - 1] if i > 0 else xt[0] * 0 for i in range(6)]
    (want,) = torch.autograd.grad(torch.stack(parts), xt, torch.tensor(hv))
    for target in ("numpy", "cpu"):
        np.testing.assert_allclose(tg.build([x, h], g, target=target)(xv, hv), want.numpy(),
                                   rtol=1e-12, atol=1e-14)


def test_a_min_over_gathered_rows_under_a_guard_has_its_gradient_on_the_reference():
    """``min_k Y[t[k - 1], k]`` where ``0 <= t[k - 1] < 4`` (and k even): the gradient's
    test ``0 <= t[..] && t[..] < 4 && ... && Y[t[..], j] == min`` reads ``Y`` at ``t``
    only where the guard before it holds. The reference checked that gather under the
    enclosing conditions alone and raised at ``t = -1`` (a fuzz example); it now checks
    the right side of ``and`` where the left holds, and gives the cpu target's values."""
    y = tg.placeholder((4, 5), "float64", name="Y")
    t = tg.compute((4,), lambda i: tg.if_then_else(tg.equal(i, 3), 1, -1), name="t")
    k = tg.reduce_axis((1, 5), "k")
    low = tg.compute((), lambda: tg.min(y[t[k - 1], k], axis=k, where=tg.all(
        0 <= t[k - 1], t[k - 1] < 4, tg.equal(k % 2, 0))), name="low")
    (dy,) = tg.gradient(low, [y])
    yv = np.random.default_rng(0).standard_normal((4, 5))
    want = np.zeros((4, 5))
    want[1, 4] = 1.0  # k = 4 alone passes: t[3] = 1
    for target in ("numpy", "cpu"):
        got_low, got_dy = tg.build([y], [low, dy], target=target)(yv)
        assert got_low == yv[1, 4]
        np.testing.assert_array_equal(got_dy, want)
