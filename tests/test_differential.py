"""The compiled target against the NumPy reference on random programs (``differential.py``),
and the regressions that generator found.

- 240 programs as shipped, in blocks of 20 seeds (a failure names its seed: rerun it
  with ``python tests/differential.py --seed N --show``);
- every setting of ``differential.SETTINGS`` forced on and turned off, each alone, on 12
  programs each way, so that each optimisation is proven separately;
- 80 programs on the cuda target, half with its contractions as einsums, half as
  generated kernels;
- the programs of issue 27 (a padded read of a fused producer, the square root and
  ``e^2 - e`` forms at both shapes), a guarded row read three times (upsampling), a max
  gradient's ties through a recomputed ``tanh``, and a scan over a 1-d state.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler

sys.path.insert(0, os.path.dirname(__file__))
import differential  # noqa: E402
from programs import id_table  # noqa: E402

pytestmark = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")

BLOCK = 20


@pytest.mark.parametrize("start", range(0, 240, BLOCK), ids=lambda s: f"seeds{s}-{s + BLOCK - 1}")
def test_random_programs_agree(start):
    failed = [o for o in map(differential.compare, range(start, start + BLOCK)) if not o.ok]
    assert not failed, "; ".join(f"seed {o.seed}: {o.what}" for o in failed)


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
@pytest.mark.parametrize("setting", sorted(differential.SETTINGS))
def test_each_setting_on_and_off(setting, on):
    first = 1000 + 97 * sorted(differential.SETTINGS).index(setting)
    seeds = range(first, first + 12)
    failed = [o for o in (differential.compare(s, {setting: on}) for s in seeds) if not o.ok]
    assert not failed, "; ".join(f"seed {o.seed}: {o.what}" for o in failed)


@pytest.mark.parametrize("products", [True, False], ids=["einsum", "kernels"])
def test_random_programs_agree_on_the_cuda_target(products):
    """The same generator on the cuda target (Triton's interpreter without a GPU), its
    contractions as einsums and as generated kernels."""
    from tegrad.backends.cuda import device

    if device.unavailable() is not None:
        pytest.skip(str(device.unavailable()))
    seeds = range(5000 + 40 * products, 5040 + 40 * products)
    failed = [o for o in (differential.compare(s, {"cuda_products": products}, "cuda")
                          for s in seeds) if not o.ok]
    assert not failed, "; ".join(f"seed {o.seed}: {o.what}" for o in failed)


def test_settings_cover_bench_ab_knobs():
    """Every knob that benchmarks/bench_ab.py turns off is proven on and off here."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_ab

    for name, (field, off) in bench_ab.KNOBS.items():
        on_fields, off_fields = differential.SETTINGS[name]
        assert field in on_fields and off_fields.get(field) == off, name


def test_settings_are_options_and_leave_the_defaults():
    before = tg.Options.from_environment()
    chosen = differential.options_for({"parallel": True, "merge": False})
    assert chosen.parallel_work == 0 and not chosen.merge_products
    assert tg.Options.from_environment() == before and before.merge_products
    fields = {f.name for f in dataclasses.fields(tg.Options)}
    assert all(set(side) <= fields for sides in differential.SETTINGS.values()
               for side in sides)


def test_the_generator_builds_every_step():
    """Over 300 seeds every step kind is drawn and every program builds and runs."""
    seen = set()
    for seed in range(300):
        program = differential.random_program(seed)
        seen.update(s.split("_")[0].rstrip("0123456789,:+-()i") for s in program.steps)
    for step in ("unary", "reads", "binary", "pad", "concat", "slice", "rows", "flip",
                 "upsample", "tile", "clamp", "transpose", "select", "reduce", "softmax",
                 "window", "matmul", "gather", "scan", "logsumexp", "max", "exp", "guarded",
                 "masked", "along", "take", "sample"):
        assert any(s.startswith(step) for s in seen), step


def test_a_wrong_kernel_is_caught(monkeypatch):
    """The comparison fails when the compiled target is wrong: every select of the C
    kernels one more than it should be, on a program whose output is a padding (with
    regions off: they split a pad's loops where its selects fold away)."""
    from tegrad.lower.nest_forms import Apply, Lit
    from tegrad.lower.nest_values import ExprLowering

    original = ExprLowering.select

    def broken(self, e):
        return self.emit(e, Apply("add", (original(self, e), Lit(1, e.dtype)), e.dtype, e.dtype))

    seed = next(s for s in range(500)
                if differential.random_program(s).steps[-1].startswith("pad"))
    assert differential.compare(seed, {"regions": False}).ok
    monkeypatch.setattr(ExprLowering, "select", broken)
    outcome = differential.compare(seed, {"regions": False})
    assert not outcome.ok and "output: scaled difference" in outcome.what, outcome.what


# ---------------------------------------------------------------------------
# regressions


def _padded(n, m, p, body):
    X = tg.placeholder((n, m), "float64", name="X")
    U = tg.compute((n, m), lambda i, j: body(X[i, j]), name="U")
    P = tg.compute((n + 2 * p, m), lambda i, j: tg.if_then_else(
        tg.all(i >= p, i < n + p), U[i - p, j], 0.0), name="P")
    return X, P


@pytest.mark.parametrize("shape", [(2, 2, 1), (3, 2, 1), (5, 2, 2), (2, 3, 1)])
@pytest.mark.parametrize("form", ["sqrt", "square_minus"])
def test_issue_27_padded_fused_producer(shape, form):
    body = {"sqrt": lambda e: tg.sqrt(e * e + 1.0), "square_minus": lambda e: e ** 2 - e}[form]
    X, P = _padded(*shape, body)
    a = np.random.default_rng(75).uniform(-1.5, 1.5, shape[:2])
    want = tg.build([X], P, target="numpy")(a)
    got = tg.build([X], P, target="cpu")(a)
    n, _, p = shape
    inner = np.sqrt(a * a + 1.0) if form == "sqrt" else a ** 2 - a
    np.testing.assert_allclose(want[p:n + p], inner, rtol=1e-15)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    H = tg.placeholder(P.shape, "float64", name="H")
    (dX,) = tg.gradient(P, [X], head=H)
    h = np.random.default_rng(1).standard_normal(P.shape)
    np.testing.assert_allclose(tg.build([X, H], dX, target="cpu")(a, h),
                               tg.build([X, H], dX, target="numpy")(a, h), rtol=1e-12)


def test_guarded_row_read_three_times():
    """Upsampled rows of a padded producer (seed 500): gcc stored the guarded row without
    its permutation."""
    X = tg.placeholder((4, 3), "float64", name="X")
    T0 = tg.compute((4, 3), lambda i, j: tg.maximum(X[i, j], 0.25), name="T0")
    T1 = tg.compute((6, 3), lambda i, j: tg.if_then_else(i < 4, T0[i, j], 0.0), name="T1")
    T2 = tg.compute((18, 3), lambda i, j: T1[i // 3, j], name="T2")
    a = np.arange(12.0).reshape(4, 3)
    want = np.repeat(np.vstack([np.maximum(a, 0.25), np.zeros((2, 3))]), 3, axis=0)
    np.testing.assert_array_equal(tg.build([X], T2, target="cpu")(a), want)


def test_max_gradient_ties_through_a_recomputed_producer():
    """``T1 = max_k tanh(X[k, i])``: the gradient's tie test ``tanh(X) == T1`` must see one
    evaluation of tanh (vector and scalar tanh differ in the last bit; seed 1635)."""
    X = tg.placeholder((2, 3), "float64", name="X")
    T0 = tg.compute((2, 3), lambda i, j: tg.tanh(X[i, j]), name="T0")
    k = tg.reduce_axis(2)
    T1 = tg.compute((3,), lambda i: tg.max(T0[k, i], axis=k), name="T1")
    T5 = tg.compute((3,), lambda i: tg.log1p(T1[i] * T1[i]), name="T5")
    H = tg.placeholder((3,), "float64", name="H")
    (dX,) = tg.gradient(T5, [X], head=H)
    cpu = tg.build([X, H], [T5, dX], target="cpu")
    reference = tg.build([X, H], [T5, dX], target="numpy")
    rng = np.random.default_rng(1636)
    for _ in range(20):
        a, h = rng.uniform(-1.5, 1.5, (2, 3)), rng.standard_normal(3)
        got, want = cpu(a, h)[1], reference(a, h)[1]
        assert np.count_nonzero(want) == 3  # one maximum per column gets the gradient
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_scan_of_a_1d_state(target):
    T = 5
    X = tg.placeholder((T,), "float64", name="X")
    s = tg.placeholder((T,), "float64", name="s")
    init = tg.compute((1,), lambda _: X[0], name="init")
    update = tg.compute((T,), lambda t: 0.5 * s[t - 1] + X[t], name="update")
    S = tg.scan(init, update, s, inputs=[X])
    x = np.arange(1.0, T + 1)
    want = np.empty(T)
    want[0] = x[0]
    for t in range(1, T):
        want[t] = 0.5 * want[t - 1] + x[t]
    np.testing.assert_allclose(tg.build([X], S, target=target)(x), want, rtol=1e-15)
    H = tg.placeholder((T,), "float64", name="H")
    (dX,) = tg.gradient(S, [X], head=H)
    h = np.ones(T)
    jac = np.array([[0.5 ** (t - u) if t >= u else 0.0 for u in range(T)] for t in range(T)])
    np.testing.assert_allclose(tg.build([X, H], dX, target=target)(x, h), h @ jac, rtol=1e-14)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_guard_of_a_select_is_kept_by_the_part_it_encloses(target):
    """``select(0 <= ids[i] < 3 && j == 0, sum_k tanh(X[ids[i], k]) where k // 2 == m, 0)``:
    the sum planned as a scatter of its own kept none of the select's conjunction, since
    one conjunct names ``j``, and read ``X[-1]`` (a CI fuzz failure)."""
    table = [-1, 2, 3, 0, 5]
    X = tg.placeholder((3, 4), "float64", name="X")
    ids = id_table(table, "ids")
    k = tg.reduce_axis((0, 4), "k")
    T = tg.compute((5, 2, 2), lambda i, j, m: tg.if_then_else(
        tg.all(ids[i] >= 0, ids[i] < 3, tg.equal(j, 0)),
        tg.sum(tg.tanh(X[ids[i], k]), k, where=tg.equal(k // 2, m)), 0.0), name="T")
    x = np.random.default_rng(5).standard_normal((3, 4))
    want = np.zeros((5, 2, 2))
    for i, v in enumerate(table):
        if 0 <= v < 3:
            want[i, 0] = np.tanh(x[v]).reshape(2, 2).sum(1)
    np.testing.assert_allclose(tg.build([X], T, target=target)(x), want, rtol=1e-14)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_scatter_conditions_are_read_under_the_ones_before_them(target):
    """The gradient of ``sum_a max_b X[a, ids[a, b]] where 0 <= ids[a, b] < 3`` is a scatter
    whose tie test reads ``X[a, ids[a, b]]``: in bounds only under the bounds before it in
    the ``where`` (the reference evaluated each condition alone; a CI fuzz failure)."""
    table = np.array([[0, -1, 2], [3, 1, 2], [2, -1, 3], [1, 0, 2]])
    X = tg.placeholder((4, 3), "float64", name="X")
    ids = id_table(table, "ids")
    a, b = tg.reduce_axis((0, 4), "a"), tg.reduce_axis((0, 3), "b")
    T = tg.compute((), lambda: tg.sum(tg.max(
        X[a, ids[a, b]], b, where=tg.all(ids[a, b] >= 0, ids[a, b] < 3)), a), name="T")
    (dX,) = tg.gradient(T, [X])
    x = np.random.default_rng(6).permutation(12).reshape(4, 3).astype(float)  # no ties
    want = np.zeros((4, 3))
    for row in range(4):
        valid = [v for v in table[row] if 0 <= v < 3]
        want[row, max(valid, key=lambda v: x[row, v])] = 1.0
    value, grad = tg.build([X], [T, dX], target=target)(x)
    assert value == sum(max(x[r, v] for v in table[r] if 0 <= v < 3) for r in range(4))
    np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_a_guard_that_reads_through_ids_is_checked_under_the_guards_before_it(target):
    """``sum_{a in {2, 3}} tanh(max_b X[a // 2, ids[b, a]] where 0 <= ids[b, a] < 3)``: the
    gradient's scatter has the tie test ``X[j0, ids[b, 2 j0 + rho]] == max(...)`` among its
    conditions; the reference checked a gather's index under each condition evaluated
    alone, so that test's own read of ``X[.., -1]`` raised (a fuzz failure, seed 11)."""
    table = np.array([[1, 2, 0, 0], [-1, 2, 2, 0]])
    X = tg.placeholder((4, 3), "float64", name="X")
    ids = id_table(table, "ids")
    a, b = tg.reduce_axis((0, 4), "a"), tg.reduce_axis((0, 2), "b")
    T = tg.compute((), lambda: tg.sum(tg.tanh(tg.max(
        X[a // 2, ids[b, a]], b, where=tg.all(ids[b, a] >= 0, ids[b, a] < 3))), a,
        where=tg.any(a < 0, 1 < a)), name="T")
    (dX,) = tg.gradient(T, [X])
    x = np.random.default_rng(0).standard_normal((4, 3))

    def value(v):
        return sum(np.tanh(max(v[k // 2, i] for i in table[:, k] if 0 <= i < 3)) for k in (2, 3))

    want = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[idx] = 1e-6
        want[idx] = (value(x + step) - value(x - step)) / 2e-6
    got_value, got = tg.build([X], [T, dX], target=target)(x)
    np.testing.assert_allclose(got_value, value(x), rtol=1e-14)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


def test_a_grouped_one_dimensional_kernel_with_a_triangular_window():
    """``T3[i] = sum_{k <= i} T0[i, k]^2`` grouped with ``T4 = log1p(T3^2)`` in one 1-D
    kernel (seed 92624): the window's bounds are constant from ``i = 4`` on, but such a
    kernel's parts nest on their own, so it is not split there (the grouped output's
    store then named the unsplit axis: "variable i0 is not bound")."""
    X = tg.placeholder((5, 5), "float32", name="X")
    T0 = tg.compute((5, 5), lambda i, j: X[i, j] / (1.0 + X[i, j] * X[i, j]), name="T0")
    k = tg.reduce_axis(5, "k")
    T3 = tg.compute((5,), lambda i: tg.sum(T0[i, k] * T0[i, k], axis=k, where=k <= i),
                    name="T3")
    T4 = tg.compute((5,), lambda i: tg.log1p(T3[i] * T3[i]), name="T4")
    a = np.random.default_rng(3).standard_normal((5, 5)).astype(np.float32)
    t0 = (a / (1 + a * a)).astype(np.float64)
    t3 = np.array([np.sum(t0[i, :i + 1] ** 2) for i in range(5)])
    options = tg.Options.from_environment().replace(max_inline_ratio=1.0,
                                                    max_cheap_inline_ratio=1.0)
    got = tg.build([X], [T3, T4], target="cpu", options=options)(a)
    np.testing.assert_allclose(got[0], t3, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.log1p(t3 * t3), rtol=1e-5)


def test_a_sum_picked_by_an_index_inside_an_unrolled_loop():
    """``T3[i, j] = sum_{rk in [1, 3)} |T2[rk, i, j]| + T2[rk, i, j] / 2, where rk ==
    Z[i, j]`` (seed 109042), its loop over ``rk`` not unrolled by tegrad (``unroll=0``)
    nor bounded by ``Z`` (``value_bounds``): gcc 12.2 unrolled that loop and the one over
    ``j`` whole on its own, vectorized the loop around them, and dropped ``rk = 2``
    (``cpu/compiler.py``'s flags now keep it from unrolling whole what is not asked)."""
    Y = tg.placeholder((3, 6, 6), "float64", name="Y")
    Z = tg.placeholder((6, 6), "int64", name="Z")
    T1 = tg.compute((3, 6, 6), lambda i, j, k: Y[2 - i, j, k], name="T1")
    T2 = tg.compute((3, 6, 6), lambda i, j, k: T1[tg.minimum(tg.maximum(i + 1, 0), 2), j, k],
                    name="T2")
    rk = tg.reduce_axis((1, 3), "rk")
    def picked(i, j):
        term = tg.abs(T2[rk, i, j]) + 0.5 * T2[rk, i, j]
        return tg.sum(term, axis=rk, where=tg.equal(tg.cast(rk, "int64"), Z[i, j]))

    T3 = tg.compute((6, 6), picked, name="T3")
    rng = np.random.default_rng(9)
    y, z = rng.standard_normal(Y.shape), rng.integers(-1, 4, Z.shape)
    t2 = y[::-1][np.minimum(np.arange(3) + 1, 2)]
    picked = np.where((z >= 1) & (z < 3), np.take_along_axis(t2, np.clip(z, 0, 2)[None], 0)[0],
                      0.0)
    want = np.where((z >= 1) & (z < 3), np.abs(picked) + 0.5 * picked, 0.0)
    options = tg.Options.from_environment().replace(unroll=0, value_bounds=False,
                                                    max_regions=0, parallel_work=1 << 62)
    got = tg.build([Y, Z], [T1, T2, T3], target="cpu", options=options)(y, z)
    np.testing.assert_allclose(got[2], want, rtol=1e-14, atol=0)


def test_a_grouped_kernel_whose_inlined_body_has_residue_classes():
    """The gradients of ``T5[i, j] = tanh(X[4 - i, j]) / (1 + T2[j % 7, j, j]^2)``, sliced
    to ``T5[:, 2:3]`` (seed 122495): ``dY`` and ``dT2`` were grouped in one kernel,
    judged a plain row nest on ``dY``'s body, which gains ``j % 7`` only once ``T2``'s
    gradient is inlined; its nest then ran by residue classes of ``j``, which write the
    body alone, and ``dT2`` (read by ``dZ``) was never written: ``dZ`` came out of an
    unset buffer. Against NumPy."""
    X = tg.placeholder((5, 4), "float64", name="X")
    Y = tg.placeholder((7, 4, 4), "float64", name="Y")
    Z = tg.placeholder((5,), "float64", name="Z")
    W = tg.placeholder((7,), "int64", name="W")
    rk = tg.reduce_axis(7, "rk")
    T1 = tg.compute((), lambda: tg.sum(tg.if_then_else(W[rk] >= 0, Z[W[rk]], 0.0), axis=rk),
                    name="T1")
    T2 = tg.compute(Y.shape, lambda i, j, k: tg.if_then_else(
        W[i] >= 0, Y[i, j, k] * T1[()], 0.5 * Y[i, j, k]), name="T2")
    T5 = tg.compute((5, 4), lambda i, j: tg.tanh(X[4 - i, j]) / (
        1.0 + T2[j % 7, j, j] * T2[j % 7, j, j]), name="T5")
    T6 = tg.compute((5, 1), lambda i, j: T5[i, j + 2], name="T6")
    H = tg.placeholder(T6.shape, "float64", name="H")
    outputs = [T6, *tg.gradient(T6, [X, Y, Z], head=H)]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((5, 4)), rng.standard_normal((7, 4, 4)),
              rng.standard_normal(5), np.array([-1, 2, 0, 2, -1, 4, 4]),
              rng.standard_normal((5, 1))]
    want = tg.build([X, Y, Z, W, H], outputs, target="numpy")(*arrays)
    got = tg.build([X, Y, Z, W, H], outputs, target="cpu")(*arrays)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
