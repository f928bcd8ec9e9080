"""Eager use (issue 7, parts 1-3): ``tg.Variable``, ``tg.GradientTape``, ``tg.grad``,
``tg.value_and_grad``, ``tg.jit`` and function-style ``tg.jvp``.

- the TensorFlow example ``y = x**3 + x**2 + x + 5`` at ``x = 3`` through nested tapes;
- the tape's contract, test by test after TensorFlow's documented behaviour;
- Variables against NumPy (dtypes, operators with broadcasting, indexing, methods);
- the function transforms, against hand results and ``torch.func.jvp``;
- every case of the op-spec table (``tegrad.coverage.CASES``) run eagerly on Variables
  under a tape, forward values and gradients against PyTorch in float64;
- the trace cache: the same op on the same shapes is traced once.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import tegrad as tg
from tegrad.coverage import CASES
from tegrad.coverage.agreement import as_list, run_torch, scaled_error
from tegrad.function import cache_info


def value(v) -> np.ndarray:
    assert isinstance(v, tg.Variable), f"expected a tg.Variable, got {type(v).__name__}"
    return np.asarray(v)


def close(got, expected, tol=1e-12) -> None:
    np.testing.assert_allclose(value(got), expected, rtol=tol, atol=tol)


# ------------------------------------------------------------------ the TensorFlow example


def cubic(x):
    return x**3 + x**2 + x + 5


def test_tensorflow_example_first_second_third_derivative():
    x = tg.Variable(3.0)
    with tg.GradientTape() as t3:
        with tg.GradientTape() as t2:
            with tg.GradientTape() as t1:
                y = cubic(x)
            dy = t1.gradient(y, x)
        d2y = t2.gradient(dy, x)
    d3y = t3.gradient(d2y, x)
    assert float(y) == 44.0
    assert float(dy) == 34.0  # 3 x^2 + 2 x + 1
    assert float(d2y) == 20.0  # 6 x + 2
    assert float(d3y) == 6.0
    for v in (y, dy, d2y, d3y):
        assert v.dtype == "float32" and v.shape == ()


def test_tensorflow_example_second_derivative_two_tapes_float64():
    x = tg.Variable(np.float64(3.0))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = cubic(x)
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    assert (float(dy), float(d2y)) == (34.0, 20.0)
    assert d2y.dtype == "float64"


def test_higher_order_through_nn_ops():
    """d/dx tanh = 1 - tanh^2, d2/dx2 = -2 tanh (1 - tanh^2), elementwise."""
    xs = np.array([-1.5, -0.2, 0.3, 2.0])
    x = tg.Variable(xs)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.tanh(x)
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    t = np.tanh(xs)
    close(dy, 1 - t**2)
    close(d2y, -2 * t * (1 - t**2))


# name: (tegrad function, torch function given (torch.nn.functional, x), input shape)
SECOND_ORDER = {
    "softmax": (lambda x: tg.nn.softmax(x, dim=-1), lambda F, x: F.softmax(x, dim=-1), (3, 5)),
    "log_softmax": (lambda x: tg.nn.log_softmax(x, dim=0), lambda F, x: F.log_softmax(x, dim=0),
                    (4, 3)),
    "conv2d of x with x": (lambda x: tg.nn.conv2d(x, x[:, :, :3, :3]) * 0.5,
                           lambda F, x: F.conv2d(x, x[:, :, :3, :3]) * 0.5, (1, 1, 5, 5)),
    "layer_norm": (lambda x: tg.nn.layer_norm(x, (4,)), lambda F, x: F.layer_norm(x, (4,)),
                   (3, 4)),
    "gelu": (tg.nn.gelu, lambda F, x: F.gelu(x), (6,)),
}


@pytest.mark.parametrize("name", list(SECOND_ORDER))
def test_hessian_vector_products_through_nested_tapes_match_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs, shape = SECOND_ORDER[name]
    rng = np.random.default_rng(7)
    xs, v = rng.standard_normal(shape), rng.standard_normal(shape)
    x = tg.Variable(xs)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = ours(x)
        head = rng.standard_normal(y.shape)
        g = inner.gradient(y, x, output_gradients=[head])
        gv = (g * v).sum()
    hvp = outer.gradient(gv, x)
    tx = torch.from_numpy(xs).requires_grad_()
    ty = theirs(torch.nn.functional, tx)
    (tgrad,) = torch.autograd.grad(ty, tx, torch.from_numpy(head), create_graph=True)
    (thvp,) = torch.autograd.grad((tgrad * torch.from_numpy(v)).sum(), tx)
    close(g, tgrad.detach().numpy(), 1e-10)
    close(hvp, thvp.numpy(), 1e-10)


# ------------------------------------------------------------------ tape semantics


def test_persistent_tape_allows_several_gradient_calls():
    x = tg.Variable(3.0)
    with tg.GradientTape(persistent=True) as tape:
        y = x * x
        z = y * y
    assert float(tape.gradient(z, x)) == 108.0  # 4 x^3
    assert float(tape.gradient(y, x)) == 6.0
    assert float(tape.gradient(z, y)) == 18.0  # 2 y


def test_non_persistent_tape_raises_on_second_gradient_call():
    x = tg.Variable(3.0)
    with tg.GradientTape() as tape:
        y = x * x
    assert float(tape.gradient(y, x)) == 6.0
    with pytest.raises(RuntimeError):
        tape.gradient(y, x)


def test_non_trainable_variable_needs_watch():
    c = tg.Variable(2.0, trainable=False)
    with tg.GradientTape() as tape:
        y = c * c
    assert tape.gradient(y, c) is None
    with tg.GradientTape() as tape:
        tape.watch(c)
        y = c * c
    assert float(tape.gradient(y, c)) == 4.0
    assert any(v is c for v in tape.watched_variables())


def test_trainable_variables_are_watched_automatically():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = x * x
    assert any(v is x for v in tape.watched_variables())
    assert float(tape.gradient(y, x)) == 4.0


def test_watch_accessed_variables_false_disables_automatic_watching():
    x, w = tg.Variable(2.0), tg.Variable(5.0)
    with tg.GradientTape(watch_accessed_variables=False) as tape:
        y = x * w
    assert tape.gradient(y, [x, w]) == [None, None]
    with tg.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(w)
        y = x * w
    gx, gw = tape.gradient(y, [x, w])
    assert gx is None and float(gw) == 2.0
    assert len(tape.watched_variables()) == 1 and tape.watched_variables()[0] is w


def test_unconnected_sources_give_none_or_zeros():
    a, b = tg.Variable([1.0, 2.0]), tg.Variable(np.ones((2, 3)))
    with tg.GradientTape(persistent=True) as tape:
        y = (a * a).sum()
    ga, gb = tape.gradient(y, [a, b])
    close(ga, [2.0, 4.0])
    assert gb is None
    gb = tape.gradient(y, b, unconnected_gradients="zero")
    close(gb, np.zeros((2, 3)))
    assert gb.dtype == "float64"
    with pytest.raises(ValueError):
        tape.gradient(y, b, unconnected_gradients="nan")


def test_target_computed_before_the_tape_is_unconnected():
    x = tg.Variable(2.0)
    before = x * x
    with tg.GradientTape() as tape:
        after = x * 3
    assert tape.gradient(before, x) is None
    del after


def test_output_gradients_weight_the_target():
    a = tg.Variable(np.array([1.0, 2.0, 3.0]))
    head = np.array([10.0, -1.0, 0.5])
    with tg.GradientTape(persistent=True) as tape:
        y = a * a
    close(tape.gradient(y, a, output_gradients=tg.Variable(head)), 2 * a.numpy() * head)
    close(tape.gradient(y, a, output_gradients=[head]), 2 * a.numpy() * head)
    with pytest.raises(ValueError):
        tape.gradient(y, a, output_gradients=[tg.Variable(np.ones(2))])


def test_output_gradients_as_a_plain_array():
    """TensorFlow takes a tensor-like head for a single target (NumPy arrays included)."""
    a = tg.Variable(np.array([1.0, 2.0, 3.0]))
    head = np.array([10.0, -1.0, 0.5])
    with tg.GradientTape() as tape:
        y = a * a
    close(tape.gradient(y, a, output_gradients=head), 2 * a.numpy() * head)


def test_non_scalar_target_is_summed():
    x = tg.Variable(np.array([[1.0, 2.0], [3.0, 4.0]]))
    with tg.GradientTape(persistent=True) as tape:
        y = x**2  # (2, 2)
        s = y.sum()
    close(tape.gradient(y, x), value(tape.gradient(s, x)))
    close(tape.gradient(y, x), 2 * x.numpy())


def test_several_targets_add_up():
    x = tg.Variable(np.array([1.0, -2.0]))
    with tg.GradientTape(persistent=True) as tape:
        y1 = x * x
        y2 = 3 * x
        y3 = tg.exp(x).sum()
    close(tape.gradient([y1, y2, y3], x), 2 * x.numpy() + 3 + np.exp(x.numpy()))
    close(tape.gradient((y1, y2), x, output_gradients=(np.ones(2), 2 * np.ones(2))),
          2 * x.numpy() + 6)


def test_sources_come_back_in_the_same_structure():
    a, b, c = tg.Variable(2.0), tg.Variable(np.array([1.0, 3.0])), tg.Variable(np.eye(2))
    with tg.GradientTape(persistent=True) as tape:
        y = (a * b).sum() + (c * c).sum()
    g = tape.gradient(y, a)
    assert isinstance(g, tg.Variable) and float(g) == 4.0
    g = tape.gradient(y, [a, b])
    assert isinstance(g, list) and len(g) == 2
    g = tape.gradient(y, (a, b, c))
    assert isinstance(g, tuple) and len(g) == 3
    close(g[2], 2 * np.eye(2))
    g = tape.gradient(y, {"scale": a, "vector": b})
    assert isinstance(g, dict) and list(g) == ["scale", "vector"]
    assert float(g["scale"]) == 4.0
    close(g["vector"], [2.0, 2.0])


def test_nested_source_structure_is_refused_not_answered_with_none():
    a, b = tg.Variable(2.0), tg.Variable(np.array([1.0, 3.0]))
    with tg.GradientTape() as tape:
        y = (a * b).sum()
    with pytest.raises(TypeError, match="nested"):
        tape.gradient(y, {"a": a, "rest": (b,)})


def test_stop_recording_excludes_operations():
    x = tg.Variable(np.array([1.0, 2.0]))
    with tg.GradientTape() as tape:
        y = x * x
        with tape.stop_recording():
            z = x * 5  # a constant to the tape
        w = y + z
    close(tape.gradient(w, x), 2 * x.numpy())
    with pytest.raises(ValueError):
        with tape.stop_recording():
            pass


def test_stop_recording_leaves_outer_tapes_recording():
    x = tg.Variable(2.0)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            with inner.stop_recording():
                y = x * x
        assert inner.gradient(y, x) is None
    assert float(outer.gradient(y, x)) == 4.0


def test_jacobian_against_hand_computation():
    xs = np.array([1.0, 2.0, 3.0])
    x = tg.Variable(xs)
    with tg.GradientTape(persistent=True) as tape:
        y = x * x[::-1]  # y_i = x_i x_{2-i}
        z = tg.sin(x[:2, None]) * x  # (2, 3): z_ij = sin(x_i) x_j
    expected = np.diag(xs[::-1]) + np.fliplr(np.diag(xs))
    close(tape.jacobian(y, x), expected)
    jz = np.zeros((2, 3, 3))
    for i in range(2):
        for j in range(3):
            jz[i, j, j] += np.sin(xs[i])
            jz[i, j, i] += np.cos(xs[i]) * xs[j]
    close(tape.jacobian(z, x), jz)
    w = tg.Variable(np.ones(2))
    assert tape.jacobian(y, [x, w])[1] is None


def test_gradient_with_respect_to_an_intermediate_result():
    x = tg.Variable(np.array([1.0, 2.0, 3.0]))
    with tg.GradientTape(persistent=True) as tape:
        y = x * x
        z = (y * y).sum()
    close(tape.gradient(z, y), 2 * x.numpy() ** 2)
    close(tape.gradient(z, [y, x])[1], 4 * x.numpy() ** 3)


def test_integer_operations_pass_through():
    x = tg.Variable(np.array([1.0, 2.0, 3.0, 4.0]))
    with tg.GradientTape(persistent=True) as tape:
        i = tg.Variable(np.array([3, 0, 0]))
        j = (i + 1) - 1  # integer arithmetic on the tape
        y = (x[j] * x[j]).sum()
        k = tg.nn.argmax(x)
    assert j.dtype == "int64" and k.dtype == "int64" and int(k) == 3
    close(tape.gradient(y, x), [4.0, 0.0, 0.0, 8.0])  # x[0] read twice
    with pytest.raises(tg.NotDifferentiableError):  # integers have no gradient (issue 27:
        tape.gradient(y, i)  # this returned None, with no word)
    assert tape.gradient(k, x) is None


def test_gradient_of_a_source_with_respect_to_itself():
    x = tg.Variable(np.array([1.0, 2.0]))
    with tg.GradientTape() as tape:
        tape.watch(x)
    close(tape.gradient(x, x), np.ones(2))


def test_watch_rejects_non_variables():
    with tg.GradientTape() as tape:
        with pytest.raises(TypeError):
            tape.watch(np.ones(2))


# ------------------------------------------------------------------ Variable basics


@pytest.mark.parametrize("given, dtype", [
    (1.5, "float32"),
    ([1.0, 2.0], "float32"),
    (np.float32(2.0), "float32"),
    (np.zeros(3, np.float32), "float32"),
    (np.zeros(3), "float64"),
    (np.float64(1.0), "float64"),
    (3, "int64"),
    ([1, 2], "int64"),
    (np.arange(3, dtype=np.int32), "int64"),
    (True, "bool"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else v)
def test_dtype_rules(given, dtype):
    v = tg.Variable(given)
    assert v.dtype == dtype
    assert np.asarray(v).dtype == np.dtype(dtype)


def test_dtype_argument_and_python_numbers_take_the_variable_dtype():
    assert tg.Variable([1, 2], dtype=np.float64).dtype == "float64"
    f32 = tg.Variable(np.arange(3, dtype=np.float32))
    f64 = tg.Variable(np.arange(3.0))
    assert (f32 * 2.5).dtype == "float32"
    assert (2 + f32).dtype == "float32"
    assert (f64 * 2.5).dtype == "float64"
    assert (f64 + np.float32(1)).dtype == "float64"
    with pytest.raises(TypeError):
        tg.Variable(np.array(["a"]))


A = np.array([[0.5, -1.25, 2.0], [3.0, 0.75, -0.5]])  # (2, 3)
B = np.array([1.5, -2.0, 0.25])  # (3,): broadcasts against A
C = np.array([[2.0], [-0.5]])  # (2, 1)
BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("other", [B, C, A, 2.0, -3], ids=["(3,)", "(2,1)", "(2,3)", "2.0", "-3"])
def test_binary_operators_broadcast_like_numpy(op, other):
    fn = BINARY[op]
    x = tg.Variable(A)
    expected = fn(A, other)
    got = fn(x, other)  # Variable op array/number
    assert got.shape == expected.shape and got.dtype == str(expected.dtype)
    np.testing.assert_array_equal(value(got), expected)
    np.testing.assert_array_equal(value(fn(x, tg.Variable(np.asarray(other, np.float64)))),
                                  expected)
    reversed_expected = fn(other, A)
    got = fn(other, x)  # reversed: array/number op Variable
    assert isinstance(got, tg.Variable)
    np.testing.assert_array_equal(value(got), reversed_expected)


def test_power_and_unary_minus():
    x = tg.Variable(np.abs(A) + 0.5)
    close(x**2, (np.abs(A) + 0.5) ** 2)
    close(x**B, (np.abs(A) + 0.5) ** B)
    close(2.0**x, 2.0 ** (np.abs(A) + 0.5))
    close(np.array([1.5, 2.0, 3.0]) ** x, np.array([1.5, 2.0, 3.0]) ** (np.abs(A) + 0.5))
    close(-tg.Variable(A), -A)
    assert +x is x


def test_integer_operators():
    i = tg.Variable(np.array([[1, 2, 3], [4, 5, 6]]))
    for fn in (operator.add, operator.sub, operator.mul):
        got = fn(i, 2)
        assert got.dtype == "int64"
        np.testing.assert_array_equal(value(got), fn(i.numpy(), 2))
        np.testing.assert_array_equal(value(fn(3, i)), fn(3, i.numpy()))
    np.testing.assert_array_equal(value(i > 3), i.numpy() > 3)


def test_true_division_of_integers_is_float64_like_numpy():
    i = tg.Variable(np.array([1, 2, 3]))
    expected = i.numpy() / 2
    got = i / 2
    np.testing.assert_allclose(value(got), expected)
    assert got.dtype == str(expected.dtype), f"int64 / 2: {got.dtype}, NumPy gives float64"


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
                                    ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                                    ((5, 2, 3), (1, 3, 4))], ids=str)
def test_matmul_like_numpy(shapes):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s) for s in shapes)
    close(tg.Variable(a) @ tg.Variable(b), a @ b)
    close(tg.Variable(a) @ b, a @ b)
    close(a @ tg.Variable(b), a @ b)


X = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5) / 7
INDICES = {
    "int": 1,
    "negative int": -1,
    "ints": (1, 2),
    "negative ints": (-1, -2, 0),
    "slice": slice(1, 3),
    "slice step 2": (slice(None), slice(None, None, 2)),
    "negative step": (slice(None, None, -1), 1),
    "step 3 negative end": (0, 0, slice(0, -1, 3)),
    "slice out of range": slice(-10, 10),
    "None": None,
    "None in the middle": (0, None, slice(1, 3)),
    "ellipsis": (Ellipsis, 2),
    "ellipsis and None": (1, Ellipsis, None, slice(None, None, -2)),
    "int array": np.array([1, 0, 1, 1]),
    "int array 2-d": (slice(None), np.array([[0, 2], [1, 1]])),
    "int list": (0, 1, [3, 1, 0]),
    "int array and adjacent int": (1, np.array([0, 2, 2]), -2),
    "negative entries in an int array": (0, 1, [3, -1, 0]),
    "int array and ints separated by a slice": (1, slice(None), np.array([0, 3, 3]), -2),
    "empty slice": slice(1, 1),
}


@pytest.mark.parametrize("key", list(INDICES.values()), ids=list(INDICES))
def test_indexing_like_numpy(key):
    expected = X[key]
    got = tg.Variable(X)[key]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(value(got), expected)


def test_indexing_gradient_scatters_back():
    x = tg.Variable(X)
    key = (1, slice(None), np.array([0, 3, 3]), slice(None, None, 2))
    with tg.GradientTape() as tape:
        y = x[key]
    expected = np.zeros_like(X)
    np.add.at(expected, key, 1.0)
    close(tape.gradient(y, x), expected)


def test_indexing_errors():
    x = tg.Variable(X)
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0, 0]
    with pytest.raises(IndexError):
        x[np.array([0.5])]


@pytest.mark.parametrize("method", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, -1, 2, (0, 2), [1, 3]], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_like_numpy(method, axis, keepdims):
    expected = getattr(X, method)(axis=tuple(axis) if isinstance(axis, list) else axis,
                                  keepdims=keepdims)
    got = getattr(tg.Variable(X), method)(axis=axis, keepdims=keepdims)
    assert got.shape == expected.shape
    close(got, expected)


def test_reshape_transpose_and_conversions():
    x = tg.Variable(X)
    np.testing.assert_array_equal(value(x.reshape(6, 20)), X.reshape(6, 20))
    np.testing.assert_array_equal(value(x.reshape((4, -1))), X.reshape(4, -1))
    np.testing.assert_array_equal(value(x.T), X.T)
    np.testing.assert_array_equal(value(x.transpose(1, 0, 3, 2)), X.transpose(1, 0, 3, 2))
    assert x.shape == (2, 3, 4, 5) and x.ndim == 4 and x.size == 120 and len(x) == 2
    assert x.dtype == "float64"
    assert isinstance(x.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(x), X)
    assert np.asarray(x, dtype=np.float32).dtype == np.float32
    s = tg.Variable(2.5)
    assert float(s) == 2.5 and int(tg.Variable(7)) == 7 and bool(tg.Variable(True))
    m = tg.Variable(np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(value(m.T), [[1.0], [2.0]])
    assert m.astype(np.float32).dtype == "float32"


def test_assign_updates_in_place():
    w = tg.Variable(np.array([1.0, 2.0]))
    w.assign_sub(np.array([0.5, 0.5]))
    w.assign_add(tg.Variable(np.array([0.25, 0.25])))
    np.testing.assert_array_equal(w.numpy(), [0.75, 1.75])
    with pytest.raises(ValueError):
        w.assign(np.ones(3))


@pytest.mark.parametrize("call", [
    lambda x: tg.nn.cross_entropy(x, np.array([0, 2, 1, 1])),
    lambda x: tg.nn.linear(x, np.ones((2, 3))),
    lambda x: tg.minimum(x, np.zeros((4, 3))),
], ids=["cross_entropy target", "linear weight", "minimum"])
def test_functions_accept_numpy_arrays_next_to_variables(call):
    x = tg.Variable(np.random.default_rng(8).standard_normal((4, 3)))
    assert isinstance(call(x), tg.Variable)


def test_gradients_of_methods_and_operators():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x, y = tg.Variable(a), tg.Variable(b)
    with tg.GradientTape() as tape:
        z = ((x @ y).T.reshape(6) ** 2).mean() - (x / 3).max(axis=1).sum()
    gx, gy = tape.gradient(z, [x, y])
    ab = a @ b
    ex = (2 * ab / 6) @ b.T
    ex[np.arange(3), np.argmax(a, axis=1)] -= 1 / 3
    close(gx, ex)
    close(gy, a.T @ (2 * ab / 6))


# ------------------------------------------------------------------ function transforms


def f_xy(x, y):
    return (x * x * y).sum()


def test_grad_and_value_and_grad():
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    close(tg.grad(f_xy)(x, y), 2 * x * y)
    close(tg.grad(f_xy, argnums=1)(x, y), x * x)
    gx, gy = tg.grad(f_xy, argnums=(0, 1))(x, y)
    close(gx, 2 * x * y)
    close(gy, x * x)
    (g,) = tg.grad(f_xy, argnums=(1,))(x, y)
    close(g, x * x)
    close(tg.grad(f_xy, argnums=-1)(x, y), x * x)
    v, g = tg.value_and_grad(f_xy)(tg.Variable(x), y)
    assert float(v) == 19.0
    close(g, 2 * x * y)
    v, (gx, gy) = tg.value_and_grad(f_xy, argnums=(0, 1))(x, y)
    assert float(v) == 19.0
    close(gy, x * x)


def test_grad_unconnected_argument_is_zero_and_errors():
    close(tg.grad(lambda x, y: (x * 2).sum(), argnums=1)(np.ones(2), np.ones(3)), np.zeros(3))
    with pytest.raises(TypeError):
        tg.grad(lambda x: x * 2)(np.ones(2))  # not a scalar
    with pytest.raises(ValueError):
        tg.grad(f_xy, argnums=2)(np.ones(2), np.ones(2))


def test_grad_composes():
    def f(x):
        return x**3

    assert float(tg.grad(f)(2.0)) == 12.0
    assert float(tg.grad(tg.grad(f))(2.0)) == 12.0  # 6 x
    assert float(tg.grad(tg.grad(tg.grad(f)))(2.0)) == 6.0
    assert float(tg.grad(tg.grad(cubic))(3.0)) == 20.0

    def g(x):
        return tg.sin(x) * x

    xs = 0.7
    d2 = tg.grad(tg.grad(g))(np.float64(xs))
    close(d2, 2 * np.cos(xs) - xs * np.sin(xs))


def test_grad_inside_a_tape():
    """A tape sees the operations of tg.grad's inner tape (mixed composition)."""
    x = tg.Variable(np.float64(1.5))
    with tg.GradientTape() as tape:
        dy = tg.grad(lambda t: t**4)(x)  # 4 x^3
    close(tape.gradient(dy, x), 12 * 1.5**2)


def mlp(x, w1, b1, w2):
    return tg.nn.softmax(tg.tanh(x @ w1 + b1) @ w2, dim=-1)


def test_jit_gives_the_eager_values_and_gradients():
    rng = np.random.default_rng(3)
    x = tg.Variable(rng.standard_normal((5, 4)))
    w1, b1, w2 = (tg.Variable(rng.standard_normal(s)) for s in ((4, 6), (6,), (6, 3)))
    fast = tg.jit(mlp)
    close(fast(x, w1, b1, w2), value(mlp(x, w1, b1, w2)))
    fast(x, w1, b1, w2)
    assert len(fast.cache) == 1  # traced once for these shapes
    head = rng.standard_normal((5, 3))
    grads = []
    for f in (mlp, fast):
        with tg.GradientTape() as tape:
            y = f(x, w1, b1, w2)
        grads.append(tape.gradient(y, [x, w1, b1, w2], output_gradients=[head]))
    for got, expected in zip(grads[1], grads[0], strict=True):
        close(got, value(expected))


def test_jit_captured_variables_are_differentiated():
    rng = np.random.default_rng(4)
    w = tg.Variable(rng.standard_normal((3, 2)))

    @tg.jit
    def layer(x):
        return tg.tanh(x @ w).sum(axis=1)

    x = tg.Variable(rng.standard_normal((4, 3)))
    with tg.GradientTape() as tape:
        y = layer(x).sum()
    gx, gw = tape.gradient(y, [x, w])
    with tg.GradientTape() as tape:
        y_eager = tg.tanh(x @ w).sum(axis=1).sum()
    ex, ew = tape.gradient(y_eager, [x, w])
    close(y, float(y_eager))
    close(gx, value(ex))
    close(gw, value(ew))
    w.assign(w.numpy() * 2)  # a captured Variable is read when the function runs
    close(layer(x), np.tanh(x.numpy() @ w.numpy()).sum(axis=1))
    assert len(layer.cache) == 1


def test_jit_second_order_and_several_outputs():
    @tg.jit
    def f(x):
        return x**3, tg.exp(x)

    x = tg.Variable(np.array([0.5, 2.0]))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y, e = f(x)
        dy = inner.gradient(y, x)
    close(dy, 3 * x.numpy() ** 2)
    close(outer.gradient(dy, x), 6 * x.numpy())
    close(e, np.exp(x.numpy()))


def _classifier(x, y, w1, b1, w2):
    return tg.nn.cross_entropy(tg.tanh(x @ w1 + b1) @ w2, y)


def _torch_classifier_grads(arrays):
    torch = pytest.importorskip("torch")
    x, y, *weights = (torch.from_numpy(a) for a in arrays)
    weights = [w.requires_grad_() for w in weights]
    w1, b1, w2 = weights
    loss = torch.nn.functional.cross_entropy(torch.tanh(x @ w1 + b1) @ w2, y)
    return loss.item(), [g.numpy() for g in torch.autograd.grad(loss, weights)]


def test_jit_under_one_tape_runs_no_forward_again(monkeypatch):
    """Under one tape a jit graph's forward keeps what its VJP reads: the backward is the
    split VJP's (no ``GraphFunction.vjp``, which would recompute the forward), and its
    gradients are torch's in float64, also from a persistent tape twice."""
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((6, 4)), rng.integers(0, 3, 6), rng.standard_normal((4, 5)),
              rng.standard_normal(5), rng.standard_normal((5, 3))]
    x, y = tg.Variable(arrays[0], trainable=False), tg.Variable(arrays[1])
    weights = [tg.Variable(a) for a in arrays[2:]]
    fast = tg.jit(_classifier)
    want_loss, want = _torch_classifier_grads(arrays)
    with tg.GradientTape(persistent=True) as tape:
        loss = fast(x, y, *weights)
    (record,) = tape._records
    assert record.kept is not None

    def no_recompute(*args, **kwargs):
        raise AssertionError("the tape ran the VJP that recomputes the forward")

    monkeypatch.setattr(tg.function.GraphFunction, "vjp", no_recompute)
    for _ in range(2):
        grads = tape.gradient(loss, weights)
        close(loss, want_loss)
        for got, expected in zip(grads, want, strict=True):
            np.testing.assert_allclose(value(got), expected, rtol=1e-12, atol=1e-14)


def test_jit_kept_values_are_those_of_the_call():
    """Weights assigned after the forward (an optimizer step) leave the kept values, as
    the eager tape's recorded arrays: the gradient is at the values the call saw."""
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((6, 4)), rng.integers(0, 3, 6), rng.standard_normal((4, 5)),
              rng.standard_normal(5), rng.standard_normal((5, 3))]
    x, y = tg.Variable(arrays[0], trainable=False), tg.Variable(arrays[1])
    weights = [tg.Variable(a.copy()) for a in arrays[2:]]
    with tg.GradientTape() as tape:
        loss = tg.jit(_classifier)(x, y, *weights)
    for w in weights:
        w.assign(w.numpy() * 3)
    _, want = _torch_classifier_grads(arrays)
    for got, expected in zip(tape.gradient(loss, weights), want, strict=True):
        np.testing.assert_allclose(value(got), expected, rtol=1e-12, atol=1e-14)


def test_jit_under_nested_tapes_records_its_backward():
    """Two tapes: the jit graph runs whole (no kept values), and the inner backward is
    recorded on the outer tape (second order of a jit graph with weights)."""
    w = tg.Variable(np.array([0.3, -0.7]))

    @tg.jit
    def f(x):
        return (tg.sin(x * w)).sum()

    x = tg.Variable(np.array([1.2, 0.4]))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = f(x)
        assert inner._records[0].kept is None
        dx = inner.gradient(y, x)
    close(dx, w.numpy() * np.cos(x.numpy() * w.numpy()))
    close(outer.gradient(dx, x), -(w.numpy() ** 2) * np.sin(x.numpy() * w.numpy()))


def test_jit_traced_values_cannot_be_read():
    @tg.jit
    def f(x):
        return x * float(x.sum())

    with pytest.raises(TypeError):
        f(np.ones(2))


def test_jvp_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a, b, ta, tb = (rng.standard_normal((3, 4)) for _ in range(4))
    w = rng.standard_normal((4, 2))

    def ours(x, y):
        return tg.nn.softmax(tg.sin(x) * y + x * x, dim=-1) @ w, tg.exp(y).sum()

    def theirs(x, y):
        return torch.softmax(torch.sin(x) * y + x * x, dim=-1) @ torch.from_numpy(w), \
            torch.exp(y).sum()

    values, dots = tg.jvp(ours, (a, b), (ta, tb))
    t_values, t_dots = torch.func.jvp(theirs, tuple(map(torch.from_numpy, (a, b))),
                                      tuple(map(torch.from_numpy, (ta, tb))))
    for got, expected in zip([*values, *dots], [*t_values, *t_dots], strict=True):
        close(got, expected.numpy())


def test_jvp_of_a_power_of_a_negative_base():
    y, dy = tg.jvp(lambda v: v**2 + v**3, (np.array([-2.0, 2.0]),), (np.ones(2),))
    close(y, [-4.0, 12.0])
    close(dy, [8.0, 16.0])


def test_jvp_single_output_and_captured_variable():
    torch = pytest.importorskip("torch")
    w = tg.Variable(np.array([0.5, -1.0, 2.0]))
    x, t = np.array([0.1, 0.4, -0.3]), np.array([1.0, 2.0, 3.0])
    y, dy = tg.jvp(lambda v: tg.tanh(v * w), (x,), (t,))
    ty, tdy = torch.func.jvp(lambda v: torch.tanh(v * torch.from_numpy(w.numpy())),
                             (torch.from_numpy(x),), (torch.from_numpy(t),))
    close(y, ty.numpy())
    close(dy, tdy.numpy())
    with pytest.raises(ValueError):
        tg.jvp(lambda v: v * 2, (x,), (np.ones(2),))


# ------------------------------------------------------------------ the op-spec table, eagerly

# Cases that cannot run eagerly as ``case.tegrad_fn()(*variables, **case.kwargs)``, with
# the reason. Empty: all of the table runs eagerly (checked on 2026-11-30).
NOT_EAGER: dict[str, str] = {}


def eager_case(case, seed: int = 0):
    """Forward and gradients of one case on Variables under a tape, and PyTorch's."""
    rng = np.random.default_rng(seed)
    arrays = case.inputs(rng)
    diff = case.differentiable(arrays)
    variables = [tg.Variable(a, trainable=False) for a in arrays]
    with tg.GradientTape(watch_accessed_variables=False) as tape:
        for k in diff:
            tape.watch(variables[k])
        outputs = as_list(case.tegrad_fn()(*variables, **case.kwargs))
    floats = [y for y in outputs if y.dtype.startswith("float")]
    heads = [rng.standard_normal(y.shape).astype(y.dtype) for y in floats]
    grads = []
    if diff and floats:
        grads = tape.gradient(floats, [variables[k] for k in diff], output_gradients=heads,
                              unconnected_gradients="zero")
    ref_out, ref_grads = run_torch(case, arrays, heads, diff if floats else ())
    return arrays, outputs, grads, ref_out, ref_grads


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_eager_op_table_against_torch(case):
    if case.name in NOT_EAGER:
        pytest.skip(NOT_EAGER[case.name])
    arrays, outputs, grads, ref_out, ref_grads = eager_case(case)
    assert all(isinstance(y, tg.Variable) for y in outputs)
    assert len(outputs) == len(ref_out), f"{len(outputs)} outputs, torch gives {len(ref_out)}"
    assert len(grads) == len(ref_grads)
    errors = {f"output {k}": scaled_error(value(y), r)
              for k, (y, r) in enumerate(zip(outputs, ref_out, strict=True))}
    diff = case.differentiable(arrays)
    errors |= {f"d/d input {k}": scaled_error(value(g), r)
               for k, g, r in zip(diff, grads, ref_grads, strict=True)}
    worst = max(errors.values(), default=0.0)
    assert worst <= case.rtol, f"{case.name}: {errors} (tolerance {case.rtol:.0e})"


def test_op_table_covers_every_nn_function():
    names = {n for n in dir(tg.nn) if hasattr(getattr(tg.nn, n), "tensor_function")}
    missing = names - {c.op for c in CASES} - {"eager_aware"}
    assert not missing, f"tg.nn functions without a case: {sorted(missing)}"


# ------------------------------------------------------------------ the trace cache


def test_same_op_same_shapes_is_a_cache_hit():
    a = tg.Variable(np.ones((7, 11, 3)))
    b = tg.Variable(np.ones((11, 1)))
    before = cache_info()
    a * b
    first = cache_info()
    a * b
    second = cache_info()
    tg.Variable(np.zeros((7, 11, 3))) * tg.Variable(np.full((11, 1), 2.0))  # new values
    third = cache_info()
    assert first.misses == before.misses + 1 and first.hits == before.hits
    assert second.hits == first.hits + 1 and second.misses == first.misses
    assert second.builds == first.builds  # the kernel is built once
    assert third.hits == second.hits + 1 and third.misses == second.misses
    a.astype(np.float32) * tg.Variable(np.ones((11, 1), np.float32))  # a new dtype
    assert cache_info().misses > third.misses


def test_quick_paths_give_numpys_values_and_hit_the_cache():
    """The eager layer's quick paths (a binary operator's key, ``eager_aware``'s key, a
    one-kernel or one-view program run straight): each repeated call is a hit, keys
    that differ only inside an index key or by a number's type are distinct templates,
    and inputs the kernel cannot take as they are (a view, another layout) are copied."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((8, 8)).astype(np.float32)
    m = tg.Variable(base)
    for _ in range(2):  # the second time round, every call is a hit
        before = cache_info()
        np.testing.assert_array_equal((m[1:5, ::2]).numpy(), base[1:5, ::2])
        np.testing.assert_array_equal((m[1:5, ::3]).numpy(), base[1:5, ::3])
        np.testing.assert_array_equal((m[::-1, 2]).numpy(), base[::-1, 2])
        view = m[1:7, ::2]  # a strided view of m's array, fed to compiled kernels
        np.testing.assert_array_equal((view + view).numpy(), base[1:7, ::2] * 2)
        np.testing.assert_allclose(tg.exp(view).numpy(), np.exp(base[1:7, ::2]), rtol=1e-6)
        t = tg.Variable(base.T)  # a transposed (Fortran-order) array
        np.testing.assert_array_equal((t + m).numpy(), base.T + base)
        np.testing.assert_allclose(tg.nn.sum(t, dim=(0,)).numpy(), base.T.sum(0), atol=1e-5)
        np.testing.assert_array_equal(tg.nn.relu(t).numpy(), np.maximum(base.T, 0))
        after = cache_info()
    assert after.misses == before.misses and after.hits > before.hits
    # the same call with an int, a float and a bool: three templates
    x = tg.Variable(np.array([-2.0, 1.0, 3.0]))
    assert x[1].numpy() == 1.0
    for static in (2, 2.0, True, 0.5, False):
        np.testing.assert_allclose(tg.nn.leaky_relu(x, static).numpy(), [-2.0 * static, 1, 3])


def test_operators_and_nn_calls_find_their_template_without_apply(monkeypatch):
    """A binary operator and a one-Variable ``tg.nn`` call build ``apply``'s quick key
    themselves: once the template exists, they must find it under that same key, not
    fall back to the general key or ``apply`` (which would still answer, only slower)."""
    import tegrad.eager
    import tegrad.eager.variable as variable

    a, b = tg.Variable(np.ones((3, 2))), tg.Variable(np.full((3, 2), 2.0))
    calls = [lambda: a + b, lambda: a * b, lambda: tg.nn.relu(a), lambda: tg.exp(b)]
    want = [c().numpy() for c in calls]  # (traced and filed under their quick keys)

    def refused(*args, **kwargs):
        raise AssertionError("the quick path fell back to apply")
    monkeypatch.setattr(variable, "apply", refused)
    monkeypatch.setattr(tegrad.eager, "apply", refused)
    monkeypatch.setattr(tegrad.eager, "quick_key", refused)
    for c, w in zip(calls, want, strict=True):
        np.testing.assert_array_equal(c().numpy(), w)


def test_quick_path_raises_a_gathers_index_error():
    table = tg.Variable(np.arange(12.0).reshape(4, 3))
    ids = tg.Variable(np.array([0, 3, 1]))
    np.testing.assert_array_equal(table[ids].numpy(), np.arange(12.0).reshape(4, 3)[[0, 3, 1]])
    with pytest.raises(IndexError):
        table[tg.Variable(np.array([0, 4, 1]))]
    np.testing.assert_array_equal(table[ids].numpy(), np.arange(12.0).reshape(4, 3)[[0, 3, 1]])


def test_nn_op_and_its_backward_are_built_once():
    x = tg.Variable(np.random.default_rng(6).standard_normal((1, 1, 5, 6)))
    w = tg.Variable(np.ones((2, 1, 3, 3)))
    stats = []
    for _ in range(3):
        with tg.GradientTape() as tape:
            y = tg.nn.conv2d(x, w, padding=1)
        tape.gradient(y, [x, w])
        stats.append(cache_info())
    assert stats[2].hits > stats[1].hits
    assert stats[2].misses == stats[1].misses
    assert stats[2].builds == stats[1].builds  # forward and VJP kernels reused
    assert stats[2].derivations == stats[1].derivations  # the VJP graph is derived once


@pytest.mark.parametrize("arg", [np.arange(3), 3, np.array([1, 2], dtype="int32")],
                         ids=["int64 array", "python int", "int32 array"])
def test_grad_refuses_integer_arguments(arg):
    """An integer argument has no gradient: raise as tg.gradient does, not zeros (issue 27)."""
    with pytest.raises(tg.NotDifferentiableError, match="argument 0 .* int"):
        tg.grad(lambda v: (v * v).sum())(arg)
    with pytest.raises(tg.NotDifferentiableError):
        tg.value_and_grad(lambda v: (v * v).sum())(arg)


def test_grad_of_float_arguments_still_works():
    np.testing.assert_allclose(np.asarray(tg.grad(lambda v: (v * v).sum())(np.arange(3.0))),
                               [0.0, 2.0, 4.0])
    assert float(tg.grad(lambda v: v * v)(3.0)) == 6.0


def test_tape_refuses_integer_sources():
    v = tg.Variable(np.arange(3))
    w = tg.Variable(np.arange(3.0))
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(v)
        y = (v * w).sum()
    with pytest.raises(tg.NotDifferentiableError, match="source 0 is int64"):
        tape.gradient(y, v)
    with pytest.raises(tg.NotDifferentiableError, match="source 1 is int64"):
        tape.gradient(y, [w, v])
    np.testing.assert_allclose(np.asarray(tape.gradient(y, w)), [0.0, 1.0, 2.0])
