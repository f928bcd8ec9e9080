"""The gradient checker against the bug zoo (tests/gradzoo.py), the op table's generated
gradients, NumPy callables, and its own edge cases.

Each buggy zoo case must FAIL on exactly the elements its PyTorch-derived mask names, with
the expected error signature; each correct case (ties and zeros included) must PASS.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import tegrad as tg
from gradzoo import KINK_FAMILIES, ZOO, ZooCase
from optable import SPECS, OpSpec


def run(pair, **opts):
    return tg.check_gradient(pair.output, pair.inputs, pair.grads, head=pair.head,
                             values=pair.values, raise_on_failure=False, **opts)


@pytest.mark.parametrize("case", ZOO, ids=[c.name for c in ZOO])
def test_zoo_case_is_judged_and_located(case: ZooCase):
    pair = case.make()
    report = run(pair)
    if case.bug is None:
        assert report.verdict == "PASS", report.summary()
        for res in report.results.values():
            assert res.wrong_mask is not None and not res.wrong_mask.any()
        if case.name.split(".")[0] in KINK_FAMILIES:
            assert any(r.kinks for r in report.results.values()), "ties/zeros not reported"
        return
    assert report.verdict == "FAIL", report.summary()
    for name, expected in pair.expected_wrong.items():
        res = report.results[name]
        assert res.wrong_mask is not None
        np.testing.assert_array_equal(res.wrong_mask, expected, err_msg=report.summary())
        assert res.verdict == ("FAIL" if expected.any() else "PASS")
        if expected.any():
            assert res.region and res.worst and res.ascii
            if case.kind is not None:
                assert res.signature.startswith(case.kind), res.signature


def test_raises_with_a_located_message():
    pair = next(c for c in ZOO if c.name == "conv2d_s2p1.drop_last_rowcol").make()
    with pytest.raises(tg.GradientCheckError) as info:
        tg.check_gradient(pair.output, pair.inputs, pair.grads, head=pair.head,
                          values=pair.values)
    message = str(info.value)
    assert "axis 2 = 8 (the last) or axis 3 = 8 (the last)" in message
    assert "missing contribution" in message
    assert "h + 1 - kh <= 8" in message and "w + 1 - kw <= 8" in message  # its guards
    assert info.value.report.results["X"].verdict == "FAIL"
    assert isinstance(info.value, AssertionError)


def test_halved_corner_region_is_the_corner():
    pair = next(c for c in ZOO if c.name == "conv2d_s2p1.halved_corner").make()
    res = run(pair).results["X"]
    assert "axis 2 in {8} (the last) and axis 3 in {8} (the last)" in res.region
    assert "0.5 x expected" in res.signature


def spec_params(spec: OpSpec):
    placeholders, output = spec.build()
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))
    arrays = spec.make_inputs(rng)
    values = dict(zip(placeholders, arrays, strict=True))
    return output, [placeholders[k] for k in spec.diff], values


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_generated_gradients_of_the_op_table_pass(spec: OpSpec):
    output, inputs, values = spec_params(spec)
    report = tg.check_gradient(output, inputs, values=values)
    assert report.verdict in ("PASS", "INCONCLUSIVE"), report.summary()
    assert report.verdict == "PASS" or spec.name in ("round_floor",), report.summary()


def test_numpy_matmul_layer_passes_and_transposed_weight_fails():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((8, 5)), rng.standard_normal((5, 5))

    def forward(x, w):
        return x @ w.T

    def backward(dy, x, w):
        return dy @ w, dy.T @ x

    def backward_transposed(dy, x, w):
        return dy @ w.T, dy.T @ x

    report = tg.check_vjp(forward, backward, (x, w))
    assert report.passed and set(report.results) == {"arg0", "arg1"}
    with pytest.raises(tg.GradientCheckError) as info:
        tg.check_vjp(forward, backward_transposed, (x, w))
    res = info.value.report.results["arg0"]
    assert res.verdict == "FAIL" and res.wrong_mask.all()
    assert info.value.report.results["arg1"].verdict == "PASS"
    assert "arg0 (8, 5)" in str(info.value) and "wrong elements: all 40" in str(info.value)


def test_vjp_localises_a_single_wrong_element_of_a_callable():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 7))

    def forward(x):
        return np.tanh(x) * 2.0

    def backward(dy, x):
        g = dy * 2.0 * (1 - np.tanh(x) ** 2)
        g[5, 6] *= 1.001
        return (g,)

    res = tg.check_vjp(forward, backward, (x,), raise_on_failure=False).results["arg0"]
    assert res.verdict == "FAIL" and not res.linear
    assert res.region == "1 of 42 elements: at (5, 6)"


def test_float32_generated_conv_passes_and_detects_small_errors():
    x = tg.placeholder((2, 3, 9, 9), "float32", name="X")
    w = tg.placeholder((4, 3, 3, 3), "float32", name="W")
    c, kh, kw = (tg.reduce_axis(3, name=n) for n in ("c", "kh", "kw"))

    def padded(n, ci, h, q):
        return tg.if_then_else(tg.all(h >= 0, h < 9, q >= 0, q < 9), x[n, ci, h, q], 0.0)

    y = tg.compute((2, 4, 5, 5), lambda n, o, i, j: tg.sum(
        padded(n, c, 2 * i - 1 + kh, 2 * j - 1 + kw) * w[o, c, kh, kw], axis=[c, kh, kw]))
    report = tg.check_gradient(y, [x, w])
    for res in report.results.values():
        assert res.verdict == "PASS" and res.dtype == "float32"
        assert res.detectable < 1e-2  # float32 tolerance: epsilon x accumulation, not 1e-2


def test_large_input_is_screened_then_located_without_a_full_jacobian():
    x = tg.placeholder((1, 2, 48, 48), "float64", name="X")
    y = tg.compute((1, 2, 24, 24), lambda n, c, i, j: (
        x[n, c, 2 * i, 2 * j] + x[n, c, 2 * i + 1, 2 * j + 1]) * 0.5, name="Y")
    dy = tg.placeholder(y.shape, "float64", name="dY")
    (dx,) = tg.gradient(y, [x], head=dy)
    bug = tg.compute(x.shape, lambda n, c, h, q: tg.if_then_else(
        h < 47, dx[n, c, h, q], 0.0), name="dX_bug")
    assert tg.check_gradient(y, [x], [dx], head=dy).passed
    res = tg.check_gradient(y, [x], [bug], head=dy, raise_on_failure=False).results["X"]
    assert res.verdict == "FAIL"
    assert "element-wise J^T h" in " ".join(c.name for c in res.checks)
    assert res.region.startswith("48 of 4608 elements")  # odd columns of the last row
    assert "axis 2 in {47} (the last)" in res.region
    assert "(every index = 1 mod 2)" in res.region


def test_pattern_check_alone_locates_a_border_bug():
    pair = next(c for c in ZOO if c.name == "conv2d_s2p1.drop_last_rowcol").make()
    report = run(pair, elementwise=False)
    res = report.results["X"]
    assert res.verdict == "FAIL"
    assert res.checks[0].name.startswith("dependency pattern")
    np.testing.assert_array_equal(res.wrong_mask, pair.expected_wrong["X"])
    assert report.results["W"].wrong_mask is None  # no element-wise comparison ran


def test_same_seed_same_report_and_counts():
    pair = next(c for c in ZOO if c.name == "softmax.correct").make()
    a, b = run(pair, seed=7), run(pair, seed=7)
    assert a.results["X"].margin == b.results["X"].margin
    assert a.forward_evals == b.forward_evals > 0 and a.backward_evals > 0
    assert "seed 7" in a.summary()


def test_bad_arguments_are_named():
    x = tg.placeholder((3,), "float64", name="x")
    idx = tg.placeholder((2,), "int64", name="idx")
    y = tg.compute((2,), lambda i: x[idx[i]] * 2.0, name="y")
    with pytest.raises(ValueError, match="idx"):
        tg.check_gradient(y, [x])  # the integer input has no value
    with pytest.raises(TypeError, match="only float inputs"):
        tg.check_gradient(y, [idx], values={"idx": np.array([0, 2])})
    head = tg.placeholder((2,), "float64", name="dy")
    wrong = tg.compute((2,), lambda i: head[i], name="g")
    with pytest.raises(ValueError, match="shape"):
        tg.check_gradient(y, [x], [wrong], head=head, values={"idx": np.array([0, 2])})
    with pytest.raises(ValueError, match="1 gradient tensors for 2 inputs"):
        tg.check_gradient(y, [x, x], [wrong], head=head, values={"idx": np.array([0, 2])})
    with pytest.raises(ValueError, match="shape"):
        tg.check_vjp(lambda a: a * 2, lambda d, a: (d[:1],), (np.ones(3),))


def conv_with_dropped_last_row(n: int, c: int, size: int) -> dict:
    """A stride-1 3x3 conv (padding 1) whose hand-written input gradient drops the last row."""
    x = tg.placeholder((n, c, size, size), "float64", name="X")
    w = tg.placeholder((2, c, 3, 3), "float64", name="W")
    ci, kh, kw = tg.reduce_axis(c, name="ci"), tg.reduce_axis(3, name="kh"), tg.reduce_axis(
        3, name="kw")

    def padded(b, ch, h, q):
        inside = tg.all(h >= 0, h < size, q >= 0, q < size)
        return tg.if_then_else(inside, x[b, ch, h, q], 0.0)

    y = tg.compute((n, 2, size, size), lambda b, o, i, j: tg.sum(
        padded(b, ci, i - 1 + kh, j - 1 + kw) * w[o, ci, kh, kw], axis=[ci, kh, kw]), name="Y")
    dy = tg.placeholder(y.shape, "float64", name="dY")
    dx, dw = tg.gradient(y, [x, w], head=dy)
    bug = tg.compute(x.shape, lambda b, ch, h, q: tg.if_then_else(
        h < size - 1, dx[b, ch, h, q], 0.0), name="dX_bug")
    return {"output": y, "inputs": [x, w], "grads": [bug, dw], "head": dy}


def test_shrink_finds_the_smallest_failing_sizes():
    from tegrad.check import shrink

    result = shrink(conv_with_dropped_last_row, {"n": 3, "c": 4, "size": 9})
    assert result.failed and result.report.verdict == "FAIL"
    assert result.sizes == {"n": 1, "c": 1, "size": 1}  # the only row is the last one
    assert "smallest failing case: n=1, c=1, size=1" in result.summary()
    assert len(result.tried) >= 4


def test_shrink_reports_a_passing_case_unchanged():
    from tegrad.check import shrink

    def correct(size: int) -> dict:
        pair = conv_with_dropped_last_row(1, 1, size)
        return {**pair, "grads": None, "head": None}

    result = shrink(correct, {"size": 5})
    assert not result.failed and result.sizes == {"size": 5}


def test_tied_maxima_may_split_the_head_but_not_duplicate_it():
    x = tg.placeholder((1, 1, 2, 4), "float64", name="X")
    kh, kw = tg.reduce_axis(2, name="kh"), tg.reduce_axis(2, name="kw")
    y = tg.compute((1, 1, 1, 2), lambda n, c, i, j: tg.max(
        x[n, c, 2 * i + kh, 2 * j + kw], axis=[kh, kw]), name="Y")
    dy = tg.placeholder(y.shape, "float64", name="dY")
    # every element equal to its window's max gets the whole head: tied maxima count twice
    to_all = tg.compute(x.shape, lambda n, c, h, q: tg.if_then_else(
        tg.equal(x[n, c, h, q], y[n, c, h // 2, q // 2]), dy[n, c, h // 2, q // 2], 0.0),
        name="dX_all")
    values = {"X": np.array([[[[3.0, 3.0, 1.0, 2.0], [0.0, 3.0, 0.5, -1.0]]]])}
    res = tg.check_gradient(y, [x], [to_all], head=dy, values=values,
                            raise_on_failure=False).results["X"]
    assert res.verdict == "FAIL"
    np.testing.assert_array_equal(res.wrong_mask[0, 0], [[1, 1, 0, 0], [0, 1, 0, 0]])
    assert any(c.name == "tie groups moved together" and c.verdict == "FAIL"
               for c in res.checks)
    assert tg.check_gradient(y, [x], values=values).passed  # the generated one splits it


def test_scalar_loss_and_zero_dim_input_in_float32():
    x = tg.placeholder((5, 3), "float32", name="x")
    s = tg.placeholder((), "float32", name="s")
    i, j = tg.reduce_axis(5, name="i"), tg.reduce_axis(3, name="j")
    loss = tg.compute((), lambda: tg.sum((x[i, j] * s[()]) ** 2, axis=[i, j]) / 15.0)
    report = tg.check_gradient(loss, [x, s])
    assert report.results["s"].wrong_mask.shape == ()
    assert report.results["x"].detectable < 1e-4


def test_non_finite_forward_is_inconclusive_and_non_finite_gradient_fails():
    x = tg.placeholder((4,), "float64", name="x")
    y = tg.compute((4,), lambda i: tg.log(x[i]), name="y")
    values = {"x": np.array([1.0, 2.0, -1.0, 3.0])}
    report = tg.check_gradient(y, [x], values=values)  # log(-1) is nan
    assert report.verdict == "INCONCLUSIVE" and report.passed
    head = tg.placeholder((4,), "float64", name="dy")
    inf_grad = tg.compute((4,), lambda i: head[i] / (x[i] - 2.0), name="g")
    res = tg.check_gradient(y, [x], [inf_grad], head=head, values={"x": np.arange(1.0, 5.0)},
                            raise_on_failure=False).results["x"]
    assert res.verdict == "FAIL" and "non-finite" in res.signature
    assert res.region == "1 of 4 elements: at (1,)"


def test_vjp_with_an_integer_argument_checks_only_the_float_ones():
    rng = np.random.default_rng(5)
    w, idx = rng.standard_normal((6, 3)), np.array([1, 4, 1, 0])

    def forward(w, idx):
        return w[idx] * 3.0

    def backward(dy, w, idx):
        dw = np.zeros_like(w)
        np.add.at(dw, idx, 3.0 * dy)
        return dw, None

    report = tg.check_vjp(forward, backward, (w, idx))
    assert set(report.results) == {"arg0"} and report.passed


def test_an_input_the_output_does_not_read_has_a_zero_gradient():
    a = tg.placeholder((3,), "float64", name="A")
    b = tg.placeholder((3,), "float64", name="B")
    y = tg.compute((3,), lambda i: a[i] * a[i], name="Y")
    report = tg.check_gradient(y, [a, b], raise_on_failure=False)
    assert report.results["B"].verdict == tg.check.PASS
    assert report.results["A"].verdict == tg.check.PASS


def test_stop_gradient_is_held_constant_by_the_differences():
    x = tg.placeholder((4,), "float64", name="X")
    y = tg.compute((4,), lambda i: x[i] * tg.stop_gradient(x[i]), name="Y")
    tg.check_gradient(y, [x])  # generated: d/dx = stop_gradient(x), i.e. x
    head = tg.placeholder((4,), "float64", name="H")
    full = tg.compute((4,), lambda i: 2.0 * x[i] * head[i], name="through_the_stop")
    report = tg.check_gradient(y, [x], [full], head=head, raise_on_failure=False)
    assert report.results["X"].verdict == tg.check.FAIL


def test_cancellation_in_the_forward_is_no_false_alarm():
    # gelu (tanh) far in its left tail: x (1 + tanh(u)) cancels to ~1e-5 while its terms
    # are ~1, so the differences' rounding is set by the terms (M(f)), not the value
    x = tg.placeholder((3, 5), "float64", name="X")
    y = tg.nn.gelu(x, approximate="tanh")
    values = {x: np.linspace(-6.0, -3.0, 15).reshape(3, 5)}
    tg.check_gradient(y, [x], values=values)


def test_a_pattern_pass_with_missing_pairs_says_why_they_are_not_counted():
    """Nonlinear in X: the pattern check finds the missing pairs of a backward that drops
    a column but does not count them (the value checks fail it); its detail says so."""
    X = tg.placeholder((4, 6), "float64", name="X")
    Y = tg.compute((4, 6), lambda i, j: tg.exp(X[i, j]) * X[i, j], name="Y")
    dY = tg.placeholder(Y.shape, "float64", name="dY")
    (dX,) = tg.gradient(Y, [X], head=dY)
    dX_bug = tg.compute(X.shape, lambda i, j: tg.if_then_else(j < 5, dX[i, j], 0.0),
                        name="dX_bug")
    report = tg.check_gradient(Y, [X], [dX_bug], head=dY, raise_on_failure=False)
    pattern = report.results["X"].checks[0]
    assert not report.passed
    assert pattern.verdict == "PASS" and "4 missing" in pattern.detail
    assert "not counted: the forward is nonlinear" in pattern.detail
