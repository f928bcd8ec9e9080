"""The IR and front end: interning, printing, dtype rules and validation errors."""

from __future__ import annotations

import numpy as np
import pytest

import tegrad as tg


def test_nodes_are_interned():
    x = tg.placeholder((4, 5), name="X")
    a = tg.compute((4,), lambda i: x[i, 0] * 2.0 + 1.0)
    i = a.axes[0]
    assert (x[i, 0] * 2.0) is (x[i, 0] * 2.0)
    assert x[i, 1] is not x[i, 0]


def test_python_scalars_keep_tensor_dtype():
    x = tg.placeholder((3,), "float64", name="X")
    y = tg.compute((3,), lambda i: x[i] * 2.0 + 1)
    assert y.dtype == "float64"
    z = tg.compute((3,), lambda i: tg.cast(x[i], "float32") * 2.0)
    assert z.dtype == "float32"


def test_str_prints_whole_definition():
    a = tg.placeholder((2, 3), name="A")
    k = tg.reduce_axis(3, name="k")
    s = tg.compute((2,), lambda i: tg.sum(a[i, k], axis=k), name="S")
    text = str(s)
    assert "A = placeholder((2, 3), float32)" in text
    assert "S[i] = sum(A[i, k], k in [0, 3))" in text


def test_broadcast_arithmetic_between_tensors():
    a = tg.placeholder((3, 1), "float64", name="A")
    b = tg.placeholder((4,), "float64", name="B")
    c = a * b + 1.0
    assert c.shape == (3, 4)
    av, bv = np.arange(3.0).reshape(3, 1), np.arange(4.0)
    np.testing.assert_allclose(tg.build([a, b], c)(av, bv), av * bv + 1.0)


def test_zero_dim_tensor():
    x = tg.placeholder((4,), "float64", name="X")
    k = tg.reduce_axis(4, "k")
    s = tg.compute((), lambda: tg.sum(x[k] * x[k], k), name="S")
    (g,) = tg.gradient(s, [x])
    xv = np.arange(4.0)
    assert float(tg.build([x], s)(xv)) == 14.0
    np.testing.assert_allclose(tg.build([x], g)(xv), 2 * xv)


def _compute_error(fn):
    with pytest.raises(tg.IRError) as info:
        fn()
    return str(info.value)


def test_unbound_variable_error():
    x = tg.placeholder((4,), name="X")
    k = tg.reduce_axis(4, "k")
    msg = _compute_error(lambda: tg.compute((4,), lambda i: x[k], name="Bad"))
    assert "Bad" in msg and "k" in msg


def test_reduce_axis_outside_reduction_error():
    x = tg.placeholder((4,), name="X")
    k = tg.reduce_axis(4, "k")
    msg = _compute_error(lambda: tg.compute((4,), lambda i: tg.sum(x[k], k) + x[k], name="Bad"))
    assert "outside the reduction" in msg


def test_nested_reduction_over_same_axis_error():
    x = tg.placeholder((4, 4), name="X")
    k = tg.reduce_axis(4, "k")
    msg = _compute_error(
        lambda: tg.compute((1,), lambda i: tg.sum(tg.sum(x[k, k], k), k), name="Bad")
    )
    assert "nested" in msg


def test_sibling_reductions_may_share_an_axis():
    x = tg.placeholder((4,), "float64", name="X")
    k = tg.reduce_axis(4, "k")
    y = tg.compute((), lambda: tg.sum(x[k], k) / tg.max(x[k], k))
    xv = np.array([1.0, 2.0, 3.0, 4.0])
    assert float(tg.build([x], y)(xv)) == pytest.approx(2.5)


def test_float_index_error():
    x = tg.placeholder((4,), name="X")
    y = tg.placeholder((4,), name="Y")
    with pytest.raises(TypeError, match="integer"):
        tg.compute((4,), lambda i: x[y[i]])


def test_out_of_bounds_read_is_rejected_with_location():
    x = tg.placeholder((8,), name="X")
    msg = _compute_error(lambda: tg.compute((8,), lambda i: x[i + 1], name="Shift"))
    assert "Shift" in msg and "X" in msg and "[0, 8)" in msg and "i=7" in msg


def test_guarded_read_is_accepted():
    x = tg.placeholder((8,), "float64", name="X")
    y = tg.compute((8,), lambda i: tg.if_then_else(i + 1 < 8, x[i + 1], 0.0), name="Shift")
    np.testing.assert_allclose(tg.build([x], y)(np.arange(8.0)), [1, 2, 3, 4, 5, 6, 7, 0])


def test_where_guard_counts_for_bounds():
    x = tg.placeholder((8,), "float64", name="X")
    k = tg.reduce_axis(3, "k")
    y = tg.compute((8,), lambda i: tg.sum(x[i + k - 1], k, where=tg.all(i + k >= 1, i + k <= 8)))
    xv = np.arange(8.0)
    ref = [sum(xv[j] for j in range(i - 1, i + 2) if 0 <= j < 8) for i in range(8)]
    np.testing.assert_allclose(tg.build([x], y)(xv), ref)


def test_large_domain_guard_by_matching():
    x = tg.placeholder((3000,), "float64", name="X")
    k = tg.reduce_axis(3000, "k")
    y = tg.compute(
        (3000,),
        lambda i: tg.sum(tg.if_then_else(tg.all(0 <= i - k, i - k < 3000), x[i - k], 0.0), k),
    )
    assert y.shape == (3000,)


def test_gather_index_checked_at_run_time():
    w = tg.placeholder((5, 2), "float64", name="W")
    idx = tg.placeholder((3,), "int64", name="Idx")
    e = tg.compute((3, 2), lambda n, j: w[idx[n], j], name="E")
    f = tg.build([w, idx], e)
    with pytest.raises(IndexError, match="W.*value 7"):
        f(np.zeros((5, 2)), np.array([0, 7, 1]))


def test_build_checks_shapes_dtypes_and_inputs():
    x = tg.placeholder((2, 3), "float32", name="X")
    y = tg.compute((2, 3), lambda i, j: x[i, j] + 1.0)
    f = tg.build([x], y)
    with pytest.raises(ValueError, match=r"X.*\(2, 3\).*\(3, 2\)"):
        f(np.zeros((3, 2), "float32"))
    with pytest.raises(TypeError, match="X.*float32.*int"):
        f(np.zeros((2, 3), "int64"))
    with pytest.raises(ValueError, match="not in inputs"):
        tg.build([], y)
    with pytest.raises(ValueError, match="no value fed"):
        tg.evaluate(y, {})


def test_python_bool_condition_is_rejected():
    x = tg.placeholder((3,), name="X")
    with pytest.raises(TypeError, match="equal"):
        tg.compute((3,), lambda i: tg.if_then_else(i == 0, x[i], 0.0))


def test_argmax_and_custom_reducer_forward():
    x = tg.placeholder((3, 5), "float64", name="X")
    k = tg.reduce_axis(5, "k")
    am = tg.compute((3,), lambda i: tg.argmax(x[i, k], k))
    mul = tg.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="mul")
    k2 = tg.reduce_axis(5, "k2")
    pr = tg.compute((3,), lambda i: mul(x[i, k2], k2))
    xv = np.random.default_rng(0).standard_normal((3, 5))
    a, p = tg.build([x], [am, pr])(xv)
    np.testing.assert_array_equal(a, xv.argmax(1))
    np.testing.assert_allclose(p, xv.prod(1))


def test_a_tensor_is_not_iterable():
    # iteration would call T[0], T[1], ... without end: every integer is a symbolic read
    t = tg.placeholder((3,), name="T")
    with pytest.raises(TypeError, match="not iterable"):
        list(t)


@pytest.mark.parametrize("shape, fcompute, arity", [
    ((3, 2), lambda i: i, "2 axes"),
    ((3,), lambda i, j: i, "1 axis"),
    ((), lambda i: i, "0 axes"),
])
def test_wrong_arity_names_the_compute(shape, fcompute, arity):
    with pytest.raises(TypeError, match=f"tg.compute Bad: shape .* has {arity}"):
        tg.compute(shape, fcompute, name="Bad")


def test_read_of_an_earlier_row_outside_a_scan_is_refused_everywhere():
    """``X[i - 1]`` at ``i = 0`` is out of bounds. tg.compute accepts it (a scan update is
    written that way before tg.scan is called); tg.build, tg.gradient and tg.jvp refuse it
    with the same message as X[i + 1] at construction (issue 27)."""
    X = tg.placeholder((3, 2), "float64", name="X")
    with pytest.raises(tg.IRError, match=r"X\[i \+ 1, j\] can leave the bounds"):
        tg.compute((3, 2), lambda i, j: X[i + 1, j], name="Z")
    Y = tg.compute((3, 2), lambda i, j: X[i - 1, j], name="Y")
    Z = tg.compute((3, 2), lambda i, j: Y[i, j] * 2.0, name="Z")
    for use in (lambda t: tg.build([X], t, target="numpy"), lambda t: tg.gradient(t, [X]),
                lambda t: tg.jvp(t, [X], [X])):
        for t in (Y, Z):
            with pytest.raises(tg.IRError, match=r"X\[i - 1, j\] can leave the bounds"):
                use(t)
