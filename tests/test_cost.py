"""The op counter: exact counts on hand-built operators, checked against brute force."""

from __future__ import annotations

import time

import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.bounds import grid_values
from tegrad.ir.expr import Var
from tegrad.lower import cost
from tegrad.lower.cost import ComputeCost, OpCount, PointCounter, count_ops


def matmul(m: int, n: int, k: int, dtype: str = "float32"):
    a = tg.placeholder((m, k), dtype, name="A")
    b = tg.placeholder((k, n), dtype, name="B")
    r = tg.reduce_axis(k, name="k")
    c = tg.compute((m, n), lambda i, j: tg.sum(a[i, r] * b[r, j], axis=r), name="C")
    return a, b, c


def conv2d(n, c, h, w, k, kh, kw, pad, stride):
    """Conv2d whose padding is a guard on the reduction (no padded copy)."""
    x = tg.placeholder((n, c, h, w), name="X")
    wt = tg.placeholder((k, c, kh, kw), name="W")
    rc, rr, rs = tg.reduce_axis(c, "c"), tg.reduce_axis(kh, "r"), tg.reduce_axis(kw, "s")
    ho, wo = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1

    def body(b, o, y, z):
        hy, wz = y * stride + rr - pad, z * stride + rs - pad
        return tg.sum(x[b, rc, hy, wz] * wt[o, rc, rr, rs], axis=[rc, rr, rs],
                      where=tg.all(hy >= 0, hy < h, wz >= 0, wz < w))

    return x, wt, tg.compute((n, k, ho, wo), body, name="Y")


def brute_conv_points(n, c, h, w, k, kh, kw, pad, stride) -> int:
    ho, wo = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    _, _, y, z, _, r, s = np.indices((n, k, ho, wo, c, kh, kw), sparse=True)
    hy, wz = y * stride + r - pad, z * stride + s - pad
    valid = (hy >= 0) & (hy < h) & (wz >= 0) & (wz < w)
    return int(np.broadcast_to(valid, (n, k, ho, wo, c, kh, kw)).sum())


def test_matmul():
    m, n, k = 7, 5, 11
    _, _, c = matmul(m, n, k, "float64")
    oc = count_ops(c)
    assert oc.macs == m * n * k
    assert oc.reduction_points == m * n * k
    assert oc.flops == 2 * m * n * k  # one mul and one add per point
    assert oc.bytes_written == m * n * 8
    assert oc.bytes_read == (m * k + k * n) * 8
    assert [p.name for p in oc.per_compute] == ["C"]


@pytest.mark.parametrize("pad,stride", [(0, 1), (1, 1), (2, 1), (1, 2), (2, 3)])
def test_conv2d_padding_guard_exact(pad, stride):
    dims = (2, 3, 7, 6, 4, 3, 2, pad, stride)
    _, _, y = conv2d(*dims)
    oc = count_ops(y)
    expected = brute_conv_points(*dims)
    assert oc.macs == expected == oc.reduction_points
    assert oc.flops == 2 * expected


def test_conv2d_large_is_fast_and_exact():
    # the worked example of the module docstring
    x, w, y = conv2d(8, 64, 56, 56, 64, 3, 3, 1, 1)
    start = time.perf_counter()
    oc = count_ops(y)
    assert oc.macs == 8 * 64 * 64 * 166 * 166 == 902_955_008
    grads = tg.gradient(y, [x, w], head=tg.placeholder(y.shape, name="HY"))
    count_ops(grads)
    assert time.perf_counter() - start < 5.0


def softmax(rows: int, cols: int):
    x = tg.placeholder((rows, cols), name="X")
    k1, k2 = tg.reduce_axis(cols, "k1"), tg.reduce_axis(cols, "k2")

    def body(i, j):
        mx = tg.max(x[i, k1], axis=k1)
        den = tg.sum(tg.exp(x[i, k2] - mx), axis=k2)
        return tg.exp(x[i, j] - mx) / den

    return tg.compute((rows, cols), body, name="softmax")


def test_softmax_single_compute_hoists_reductions():
    rows, cols = 6, 10
    oc = count_ops(softmax(rows, cols))
    # max: 1 per (i,k); exp(x - mx): 2, sum: 1 per (i,k); exp(x - mx) / den: 3 per (i,j)
    assert oc.flops == 7 * rows * cols
    assert oc.reduction_points == 2 * rows * cols
    assert oc.macs == 0
    wide = count_ops(softmax(rows, 4 * cols))
    assert wide.flops == 4 * oc.flops  # rows*cols, not rows*cols**2


@pytest.mark.parametrize("n", [9, 64, 3000])  # 3000: too big to enumerate, swept instead
def test_triangular_where(n):
    b = 3
    x = tg.placeholder((b, n), name="X")
    v = tg.placeholder((n,), name="V")
    k = tg.reduce_axis(n, "k")
    t = tg.compute((b, n), lambda r, i: tg.sum(x[r, k] * v[k], axis=k, where=k <= i), name="T")
    oc = count_ops(t)
    assert oc.reduction_points == b * n * (n + 1) // 2
    assert oc.macs == b * n * (n + 1) // 2
    # the add per kept point; the product depends on (r, k) only, so it is hoisted out of i
    assert oc.flops == b * n * (n + 1) // 2 + b * n


def test_zero_d():
    x = tg.placeholder((5,), "float64", name="x")
    s0 = tg.placeholder((), "float64", name="s0")
    k = tg.reduce_axis(5, "k")
    dot = tg.compute((), lambda: tg.sum(x[k] * x[k], axis=k) * s0[()], name="dot")
    oc = count_ops(dot)
    assert oc.macs == 5 and oc.reduction_points == 5
    assert oc.flops == 5 + 5 + 1
    assert oc.bytes_written == 8 and oc.bytes_read == 6 * 8
    const = tg.compute((), lambda: tg.const(1.0), name="one")
    assert count_ops(const).flops == 0 and count_ops(const).bytes_written == 4


def test_select_guard_limits_branch_work():
    n = 10
    x = tg.placeholder((n,), name="x")
    def pad(i):
        return tg.if_then_else(tg.all(i >= 1, i <= n), x[i - 1] * 2.0, 0.0)

    xp = tg.compute((n + 2,), pad, name="xp")
    assert count_ops(xp).flops == n  # the padded border is no work
    relu = tg.compute((n,), lambda i: tg.if_then_else(x[i] > 0, x[i], 0.0), name="relu")
    assert count_ops(relu).flops == n  # the data comparison


def test_broadcast_counts_used_variables_only():
    x = tg.placeholder((4,), name="x")
    y = tg.compute((4, 6), lambda i, j: tg.exp(x[i]), name="y")
    oc = count_ops(y)
    assert oc.flops == 4
    assert oc.bytes_written == 4 * 6 * 4 and oc.bytes_read == 4 * 4


def hand_matmul_backward(a, b, h):
    r1, r2 = tg.reduce_axis(b.shape[1], "j"), tg.reduce_axis(a.shape[0], "i")
    da = tg.compute(a.shape, lambda i, k: tg.sum(h[i, r1] * b[k, r1], axis=r1), name="dA")
    db = tg.compute(b.shape, lambda k, j: tg.sum(a[r2, k] * h[r2, j], axis=r2), name="dB")
    return [da, db]


def test_gradients_do_not_crash_and_match_hand_written():
    a, b, c = matmul(6, 4, 5)
    h = tg.placeholder(c.shape, name="H")
    generated = count_ops(tg.gradient(c, [a, b], head=h))
    hand = count_ops(hand_matmul_backward(a, b, h))
    assert generated.macs <= 1.1 * hand.macs
    assert generated.flops <= 1.1 * hand.flops
    # Jacobian (head=None), second order, strided conv: any form, sane numbers
    jac = count_ops(tg.gradient(c, [a]))
    x, w, y = conv2d(2, 3, 9, 8, 4, 3, 3, 1, 2)
    conv = count_ops(tg.gradient(y, [x, w], head=tg.placeholder(y.shape, name="HY")))
    sm = softmax(3, 5)
    dsm = count_ops(tg.gradient(sm, _placeholders(sm), head=tg.placeholder(sm.shape, name="HS")))
    for oc in (jac, conv, dsm):
        assert isinstance(oc, OpCount) and oc.per_compute
        assert min(oc.macs, oc.flops, oc.reduction_points, oc.bytes_read, oc.bytes_written) >= 0
    assert conv.macs >= count_ops(y).macs  # dX and dW each redo the forward's products


def _placeholders(t):
    from tegrad.ir.traverse import topo_tensors

    return [x for x in topo_tensors([t]) if isinstance(x, tg.Placeholder)]


def test_opcount_add_and_str():
    _, _, c1 = matmul(2, 3, 4)
    _, _, c2 = matmul(3, 3, 3)
    one, two = count_ops(c1), count_ops(c2)
    both = one + two
    assert both.macs == 24 + 27 and len(both.per_compute) == 2
    assert sum([one, two]) == both
    assert both.bytes == both.bytes_read + both.bytes_written
    assert count_ops([c1, c2]).macs == both.macs
    text = str(both)
    assert "51 MAC" in text and "C (2, 3) float32" in text
    assert isinstance(both.per_compute[0], ComputeCost)


# --- the point counter on its own, against brute force, through each strategy ------------

A = Var.fresh("a", 0, 60)
B = Var.fresh("b", -5, 40)
C = Var.fresh("c", 0, 30)
CASES = [
    [2 * A + B <= C * 3, tg.equal(A, 2 * C + 1)],
    [A <= B, B < C + 20, tg.equal(2 * A, B + C)],
    [tg.equal(A + B, C * 2)],
    [A // 3 < B, B <= C],
    [A - B >= 3, tg.not_equal(A % 4, 1)],
]


def brute_points(conds) -> int:
    mask = np.ones((A.extent, B.extent, C.extent), dtype=bool)
    for c in conds:
        mask &= np.asarray(grid_values(c, [A, B, C]), dtype=bool)
    return int(mask.sum())


@pytest.mark.parametrize("conds", CASES)
@pytest.mark.parametrize("limit", [1 << 22, 2000, 50])  # enumerate / eliminate+sweep / bound
def test_point_counter(conds, limit, monkeypatch):
    monkeypatch.setattr(cost, "ENUMERATION_LIMIT", limit)
    got = PointCounter()([A, B, C], conds)
    exact = brute_points(conds)
    if limit > A.extent * B.extent * C.extent:
        assert got == exact
    else:
        assert got >= exact  # exact where a strategy applies, never an undercount


def test_point_counter_exact_without_enumeration(monkeypatch):
    monkeypatch.setattr(cost, "ENUMERATION_LIMIT", 2000)
    for conds in CASES:  # equalities (elimination) and affine bounds (sweep) are exact
        assert PointCounter()([A, B, C], conds) == brute_points(conds)


def test_scatter_form_counted_by_elimination():
    # dA[j0, j1] = sum_{i,j,k} H[i,j] * B[k,j] where i == j0 and k == j1: the (i, j0) box
    # has 2100**2 > 2**22 points, so the equality is solved instead of enumerated
    m, n, k = 2100, 3, 2100
    h = tg.placeholder((m, n), name="H")
    b = tg.placeholder((k, n), name="B")
    ri, rj, rk = tg.reduce_axis(m, "i"), tg.reduce_axis(n, "j"), tg.reduce_axis(k, "k")
    da = tg.compute((m, k), lambda j0, j1: tg.sum(
        h[ri, rj] * b[rk, rj], axis=[ri, rj, rk],
        where=tg.all(tg.equal(ri, j0), tg.equal(rk, j1))), name="dA")
    oc = count_ops(da)
    assert oc.macs == oc.reduction_points == m * n * k
    assert oc.flops == 2 * m * n * k  # the product over (i, j, k) is hoisted out of (j0, j1)


def test_data_dependent_where_counts_full_domain():
    x = tg.placeholder((8, 5), name="x")
    k = tg.reduce_axis(5, "k")
    t = tg.compute((8,), lambda i: tg.sum(x[i, k], axis=k, where=x[i, k] > 0), name="pos")
    oc = count_ops(t)
    assert oc.reduction_points == 40  # unknown mask: every point may be kept
    assert oc.flops == 40 + 40  # the adds, and the comparisons on data
