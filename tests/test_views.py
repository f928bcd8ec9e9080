"""Views (``lower/reindex.py``, ``lower/views.py``, ``host/view_kernel.py``): a compute that
only re-indexes one tensor is a strided view of its source when its readers take strides,
on both targets, equal to the copy ``Options(views=False)`` makes, and never overwritten
by a later call of its program."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu.buffers import BufferPool
from tegrad.backends.cpu.compiler import compiler
from tegrad.lower.kernels import View
from tegrad.lower.reindex import match_reindexing

sys.path.insert(0, os.path.dirname(__file__))
import differential  # noqa: E402

TARGETS = ["numpy", "cpu"] if compiler() is not None else ["numpy"]
COPIES = tg.Options.from_environment().replace(views=False)


def ph(shape, name, dtype="float32"):
    return tg.placeholder(shape, dtype, name=name)


def normal(shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- recognition ------------------------------------------------------------------------

def test_a_permute_is_strides_over_the_source_dims():
    found = match_reindexing(tg.nn.permute(ph((2, 3, 4), "X"), (2, 0, 1)))
    assert found.layout == "dims" and not found.overlapping
    assert found.coefficients == ((0, 0, 1), (1, 0, 0), (0, 1, 0)) and found.offset == (0, 0, 0)


def test_a_reshape_and_its_gradient_are_row_major_strides():
    """Merging axes reads through ``//`` and ``%``, and the reshape's generated gradient
    through a quotient of a quotient; both addresses are affine."""
    X = ph((64, 32, 16), "X")
    Y = tg.nn.reshape(X, (4, -1))
    found = match_reindexing(Y)
    assert found.layout == "flat" and found.coefficients == ((8192,), (1,))
    (dX,) = tg.gradient(Y, [X], ph(Y.shape, "H"))
    assert "//" in str(dX)
    back = match_reindexing(dX)
    assert back.layout == "flat" and back.coefficients == ((512,), (16,), (1,))


def _factorings(n: int) -> list[tuple[int, ...]]:
    """Every shape of ``n`` elements of at most four axes above 1, and three of them with
    an axis of extent 1 inserted."""
    out = []

    def go(rest: int, shape: list[int]) -> None:
        if rest == 1 and shape:
            out.append(tuple(shape))
        for f in range(2, rest + 1):
            if rest % f == 0 and len(shape) < 4:
                go(rest // f, [*shape, f])

    go(n, [])
    return out + [(s[0], 1, *s[1:]) for s in out[:3]]


@pytest.mark.parametrize("n", [12, 30, 64])
def test_every_reshape_is_a_view(n):
    """Between any two shapes of ``n`` elements, nested or not (``(2, 3, 2) -> (3, 4)``
    crosses its axes), the reshape is a row-major view equal to NumPy's."""
    from tegrad.backends.host.view_kernel import ViewOf

    for a in _factorings(n):
        X = ph(a, "X", "float64")
        x = np.arange(n, dtype=np.float64).reshape(a)
        for b in _factorings(n):
            found = match_reindexing(tg.nn.reshape(X, b))
            assert found is not None, (a, b)
            assert np.array_equal(ViewOf(found)({X: x}), x.reshape(b)), (a, b)


@pytest.mark.parametrize("target", TARGETS)
def test_the_first_rows_reshaped_are_a_view_of_part_of_the_source(target):
    """``X[:, :3].reshape(1, 12)`` of a ``(1, 7, 4)`` array reads its first 12 elements in
    row-major order: a flat view of the source that is not the whole of it. It was taken
    for a plain reshape of the source, which raised (differential seed 134065)."""
    x = ph((1, 7, 4), "X", "float64")
    made = tg.compute((1, 7, 4), lambda a, b, c: tg.exp(x[a, b, c]), name="made")
    rows = tg.compute((1, 3, 4), lambda a, b, c: made[a, b, c], name="rows")
    flat = tg.nn.reshape(rows, (1, 12))
    from tegrad.lower.plan import plan

    views = [k for k in plan([flat, made], fused=True).kernels if isinstance(k, View)]
    assert [(k.strides.source, k.strides.layout) for k in views] == [(made, "flat")]
    xv = normal((1, 7, 4), dtype="float64")
    got_flat, got_made = tg.build([x], [flat, made], target=target)(xv)
    np.testing.assert_allclose(got_flat, np.exp(xv[:, :3]).reshape(1, 12), rtol=1e-15)
    np.testing.assert_allclose(got_made, np.exp(xv), rtol=1e-15)


@pytest.mark.parametrize("make", [
    lambda x: tg.nn.flip(x, (0,)),  # a negative stride
    lambda x: tg.compute((36,), lambda f: x[f % 6, f // 6]),  # a transpose merged: no cancel
    lambda x: tg.nn.pad(x, (1, 1)),  # a guarded read
    lambda x: tg.compute((12, 6), lambda i, j: x[i // 2, j]),  # upsampling
    lambda x: tg.tanh(x),
], ids=["flip", "transpose_merge", "pad", "upsample", "tanh"])
def test_what_is_no_reindexing(make):
    assert match_reindexing(make(ph((6, 6), "X"))) is None


def test_a_broadcast_overlaps():
    found = match_reindexing(tg.nn.expand(ph((1, 5), "X"), 4, -1))
    assert found.overlapping and found.coefficients == ((0, 0), (0, 1))


# -- realization: every form, on sources of every layout ------------------------------------

FORMS = {
    "transpose": ((6, 4), lambda x: tg.nn.transpose(x, 0, 1)),
    "slices": ((6, 4), lambda x: tg.compute((2, 3), lambda i, j: x[2 * i + 1, j + 1])),
    "fixed": ((6, 4), lambda x: tg.compute((4,), lambda j: x[3, j])),
    "unsqueeze": ((6, 4), lambda x: tg.compute((4, 1, 6), lambda i, u, j: x[j, i])),
    "broadcast": ((6, 4), lambda x: tg.compute((3, 6, 4), lambda b, i, j: x[i, j])),
    "diagonal": ((6, 4), lambda x: tg.compute((4,), lambda i: x[i, i])),
    "window": ((6, 4), lambda x: tg.compute((3, 4), lambda i, k: x[i + k, 1])),
    "merge": ((6, 4), lambda x: tg.nn.reshape(x, (24,))),
    "split": ((6, 4), lambda x: tg.nn.reshape(x, (3, 2, 2, 2))),
    "merge_slice": ((6, 4), lambda x: tg.compute((5,), lambda f: x[(f + 7) // 4, (f + 7) % 4])),
}


@pytest.mark.parametrize("layout", ["c_order", "transposed", "strided"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_view_reads_what_the_compute_reads(form, layout):
    """``ViewOf`` against the reference evaluator, on a C-ordered source, a transposed
    one and one with gaps between its elements (the flat forms copy the last two)."""
    from tegrad.backends.host.evaluate import evaluate_compute
    from tegrad.backends.host.view_kernel import ViewOf

    shape, make = FORMS[form]
    X = ph(shape, "X", "float64")
    t = make(X)
    found = match_reindexing(t)
    assert found is not None and found.source is X
    base = normal(shape, dtype="float64")
    array = {"c_order": base, "transposed": np.asfortranarray(base),
             "strided": np.repeat(base, 2, axis=1)[:, ::2]}[layout]
    got = ViewOf(found)({X: array})
    assert np.array_equal(got, evaluate_compute(t, {X: base}))
    assert got.flags.writeable == (not found.overlapping)
    if found.layout == "dims" or layout == "c_order":
        assert np.shares_memory(got, array)


# -- outputs are views, equal to copies ---------------------------------------------------

CASES = {
    "transpose": ([(5, 7)], lambda x: [tg.nn.transpose(x, 0, 1)]),
    "permute": ([(2, 3, 4, 5)], lambda x: [tg.nn.permute(x, (2, 0, 3, 1))]),
    "reshape": ([(2, 3, 4)], lambda x: [tg.nn.reshape(x, (4, -1))]),
    "flatten": ([(2, 3, 4, 5)], lambda x: [tg.nn.flatten(x, 1, 2)]),
    "expand": ([(1, 5)], lambda x: [tg.nn.expand(x, 6, -1)]),
    "split": ([(3, 5, 2)], lambda x: list(tg.nn.split(x, 2, 1))),
    "slice_step": ([(9, 4)], lambda x: [tg.nn.slice_copy(x, 0, 1, 8, 2)]),
    "squeeze": ([(3, 1, 4, 1)], lambda x: [tg.nn.unsqueeze(tg.nn.squeeze(x), 0)]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_reindexings_and_their_gradients_are_views_of_their_sources(name, target):
    shapes, make = CASES[name]
    xs = [ph(s, f"X{k}") for k, s in enumerate(shapes)]
    outs = make(*xs)
    heads = [ph(o.shape, f"H{k}") for k, o in enumerate(outs)]
    grads = [g for o, h in zip(outs, heads, strict=True) for g in tg.gradient(o, xs, h)]
    arrays = [normal(s, k) for k, s in enumerate(shapes)]
    arrays += [normal(o.shape, 10 + k) for k, o in enumerate(outs)]
    f = tg.build([*xs, *heads], [*outs, *grads], target=target)
    got = f(*arrays)
    want = tg.build([*xs, *heads], [*outs, *grads], target="numpy", options=COPIES)(*arrays)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
    for y in got[:len(outs)]:
        assert np.shares_memory(y, arrays[0]), f.program.plan.describe()
    assert not any(isinstance(k, View) for k in tg.build(
        [*xs, *heads], [*outs, *grads], target=target, options=COPIES).program.plan.kernels)


@pytest.mark.parametrize("target", TARGETS)
def test_a_broadcast_view_is_read_only_and_a_permutation_writable(target):
    X = ph((1, 5), "X")
    f = tg.build([X], [tg.nn.expand(X, 4, -1), tg.nn.transpose(X, 0, 1)], target=target)
    x = normal((1, 5))
    wide, turned = f(x)
    assert not wide.flags.writeable and turned.flags.writeable
    assert np.array_equal(wide, np.broadcast_to(x, (4, 5))) and np.array_equal(turned, x.T)


@pytest.mark.parametrize("target", TARGETS)
def test_cat_and_stack_gradients_are_views_of_the_head(target):
    a, b, c = ph((8, 3), "a"), ph((8, 3), "b"), ph((8, 3), "c")
    for joined in (tg.nn.cat([a, b, c], 1), tg.nn.stack([a, b, c], 1)):
        head = ph(joined.shape, "H")
        f = tg.build([a, b, c, head], tg.gradient(joined, [a, b, c], head), target=target)
        assert [k.kind for k in f.program.plan.kernels] == ["view"] * 3
        h = normal(joined.shape)
        for k, g in enumerate(f(normal((8, 3)), normal((8, 3)), normal((8, 3)), h)):
            assert np.shares_memory(g, h)
            assert np.array_equal(g, h[:, 3 * k:3 * k + 3] if joined.ndim == 2 else h[:, k])


# -- buffers ---------------------------------------------------------------------------------

@pytest.mark.skipif(compiler() is None, reason="no C compiler")
def test_a_view_of_a_pooled_product_survives_later_calls_and_its_buffer_returns():
    """``Y = reshape(X @ W)``: the product's buffer comes from the pool and the caller
    gets a view of it. A later call must not write it while the view is held, and takes
    it back once the caller lets go."""
    X, W = ph((256, 128), "X"), ph((128, 64), "W")
    k = tg.reduce_axis(128)
    P = tg.compute((256, 64), lambda i, j: tg.sum(X[i, k] * W[k, j], axis=k), name="P")
    f = tg.build([X, W], tg.nn.reshape(P, (64, 256)), target="cpu")
    assert [k.kind for k in f.program.plan.kernels] == ["contraction", "view"]
    x, w = normal((256, 128)), normal((128, 64), 1)
    first = f(x, w)
    kept = first.copy()
    for seed in range(3):
        f(normal((256, 128), 2 + seed), w)
    assert np.array_equal(first, kept)
    assert np.allclose(first, (x @ w).reshape(64, 256), rtol=1e-4, atol=1e-4)
    source = first.base
    del first
    f(x, w)  # the held product went back to the pool when the view was dropped ...
    pool: BufferPool = f.program.pool
    assert any(a is source for stack in pool.free.values() for a in stack) or any(
        a is source for a in pool.lent)


@pytest.mark.skipif(compiler() is None, reason="no C compiler")
def test_views_feed_products_on_the_compiled_target():
    """Attention's head split: a linear's output reshaped and permuted is read by the
    next product as a strided view, not copied first."""
    N, L, H, D = 2, 64, 4, 32
    x, wq, wk = ph((N, L, H * D), "x"), ph((H * D, H * D), "wq"), ph((H * D, H * D), "wk")

    def heads(w):
        return tg.nn.permute(tg.nn.reshape(tg.nn.linear(x, w), (N, L, H, D)), (0, 2, 1, 3))

    q, kt = heads(wq), tg.nn.transpose(heads(wk), 2, 3)
    scores = tg.nn.matmul(q, kt)
    head = ph(scores.shape, "S")
    outs = [scores, *tg.gradient(scores, [x, wq, wk], head)]
    arrays = [normal((N, L, H * D)), 0.1 * normal((H * D, H * D), 1),
              0.1 * normal((H * D, H * D), 2), normal(scores.shape, 3)]
    f = tg.build([x, wq, wk, head], outs, target="cpu")
    assert any(k.kind == "view" for k in f.program.plan.kernels), f.program.plan.describe()
    want = tg.build([x, wq, wk, head], outs, target="numpy", options=COPIES)(*arrays)
    for _ in range(2):
        for g, w in zip(f(*arrays), want, strict=True):
            assert np.allclose(g, w, rtol=1e-4, atol=1e-3)


# -- the reference's views on random programs ---------------------------------------------

@pytest.mark.parametrize("start", [40000, 40040])
def test_numpy_views_equal_copies_on_random_programs(start):
    """Equal up to the rounding of a product that reads a view in another layout than
    the copy's (BLAS sums in another order)."""
    for seed in range(start, start + 40):
        p = differential.random_program(seed)
        inputs, outputs, _ = differential._outputs(p)
        head = np.random.default_rng(seed).standard_normal(p.output.shape).astype(p.dtype)
        feed = [*p.values, head]
        viewed = tg.build(inputs, outputs, target="numpy")(*feed)
        copied = tg.build(inputs, outputs, target="numpy", options=COPIES)(*feed)
        allowed = 1e-5 if p.dtype == "float32" else 1e-12
        for g, w in zip(viewed, copied, strict=True):
            assert differential._difference(g, w) <= allowed, seed


# -- the torch bridge ------------------------------------------------------------------------

def test_to_torch_copies_a_view_of_its_input():
    torch = pytest.importorskip("torch")
    op = tg.to_torch(lambda t: tg.nn.transpose(t, 0, 1))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = op(x)
    assert torch.equal(y, x.t()) and y.data_ptr() != x.data_ptr()
    y.backward(torch.ones(4, 3, dtype=torch.float64) * 2)
    assert torch.equal(x.grad, torch.full((3, 4), 2.0, dtype=torch.float64))
