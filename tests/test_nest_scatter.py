"""Scatter-adds compiled to C (``lower/nest_scatter.py``) on the cpu target.

Every indexing gradient (embedding with and without ``padding_idx``, ``index_select``,
``gather`` along either dimension, ``take``, ``grid_sample`` bilinear and nearest) and a
clamped sum runs as a compiled kernel and gives the NumPy reference's values, serial
and shared out over threads; its float sum is the sequential one in grid order (the bits
of ``np.add.at``), the same for every thread count and every run; targets outside the
output are dropped; ``Options.compiled_scatters`` off leaves the scatter to NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler
from tegrad.backends.cpu.kernel_call import CompiledKernel
from tegrad.options import Machine

pytestmark = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")


def _ids(rng, shape, high, low=0):
    """int64 ids in ``[low, high)``, the first repeated at the end and a run of one id."""
    ids = rng.integers(low, high, size=shape).astype(np.int64)
    flat = ids.reshape(-1)
    flat[-1] = flat[0]
    flat[: max(1, flat.size // 3)] = flat[0]
    return ids


def embedding(rng, dtype, padding_idx=None):
    ids, w = _ids(rng, (6, 5), 7), rng.standard_normal((7, 9)).astype(dtype)
    Ids, W = tg.placeholder(ids.shape, "int64", "ids"), tg.placeholder(w.shape, dtype, "W")
    return [Ids, W], [ids, w], tg.nn.embedding(Ids, W, padding_idx=padding_idx), [W]


def index_select(dim):
    def make(rng, dtype):
        x = rng.standard_normal((5, 4, 6)).astype(dtype)
        ids = _ids(rng, (8,), x.shape[dim])
        X, Ids = tg.placeholder(x.shape, dtype, "X"), tg.placeholder(ids.shape, "int64", "ids")
        return [X, Ids], [x, ids], tg.nn.index_select(X, dim, Ids), [X]
    return make


def gather(dim):
    def make(rng, dtype):
        x = rng.standard_normal((4, 6)).astype(dtype)
        shape = (7, 6) if dim == 0 else (4, 9)
        ids = _ids(rng, shape, x.shape[dim])
        X, Ids = tg.placeholder(x.shape, dtype, "X"), tg.placeholder(ids.shape, "int64", "ids")
        return [X, Ids], [x, ids], tg.nn.gather(X, dim, Ids), [X]
    return make


def take(rng, dtype):
    x, ids = rng.standard_normal((3, 5)).astype(dtype), _ids(rng, (4, 6), 15)
    X, Ids = tg.placeholder(x.shape, dtype, "X"), tg.placeholder(ids.shape, "int64", "ids")
    return [X, Ids], [x, ids], tg.nn.take(X, Ids), [X]


def grid_sample(mode, padding):
    def make(rng, dtype):
        x = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
        g = rng.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(dtype)
        X, G = tg.placeholder(x.shape, dtype, "X"), tg.placeholder(g.shape, dtype, "G")
        out = tg.nn.grid_sample(X, G, mode=mode, padding_mode=padding, align_corners=False)
        return [X, G], [x, g], out, [X, G]
    return make


def clamped_sum(rng, dtype):
    """``dX[j, c] = sum_i H[i, c] where clamp(i - 1) == j`` (an edge padding's gradient
    written in scatter form): an affine target, the free axis innermost."""
    h = rng.standard_normal((9, 70)).astype(dtype)
    H = tg.placeholder(h.shape, dtype, "Hd")
    i = tg.reduce_axis(9, "i")
    out = tg.compute((7, 70), lambda j, c: tg.sum(
        H[i, c], axis=i, where=tg.equal(tg.minimum(tg.maximum(i - 1, 0), 6), j)), name="dX")
    return [H], [h], out, []


CASES = {
    "embedding": embedding,
    "embedding padding_idx": lambda rng, dtype: embedding(rng, dtype, padding_idx=2),
    "index_select dim 0": index_select(0),
    "index_select last dim": index_select(2),
    "gather dim 0": gather(0),
    "gather dim 1": gather(1),
    "take": take,
    "grid_sample bilinear zeros": grid_sample("bilinear", "zeros"),
    "grid_sample bilinear border": grid_sample("bilinear", "border"),
    "grid_sample nearest zeros": grid_sample("nearest", "zeros"),
    "clamped sum": clamped_sum,
}


def _program(case, dtype, options, seed=0):
    rng = np.random.default_rng(seed)
    inputs, arrays, out, wrt = CASES[case](rng, dtype)
    head = tg.placeholder(out.shape, dtype, "H")
    outputs = [out, *tg.gradient(out, wrt, head)] if wrt else [out]
    arrays = [*arrays, rng.standard_normal(out.shape).astype(dtype)]
    f = tg.build([*inputs, head], outputs, target="cpu", options=options)
    return f, [*inputs, head], outputs, arrays


def _options(threads=2, parallel=True, compiled=True):
    base = tg.Options.from_environment()
    return base.replace(machine=Machine(threads=threads), compiled_scatters=compiled,
                        parallel_work=0 if parallel else 1 << 62)


def _scatter_steps(f):
    return [(k, s) for k, s in zip(f.program.plan.kernels, f.program.steps, strict=True)
            if k.kind == "scatter"]


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_scatter_matches_the_reference(case, dtype, parallel):
    f, inputs, outputs, arrays = _program(case, dtype, _options(parallel=parallel))
    steps = _scatter_steps(f)
    assert steps and all(isinstance(s, CompiledKernel) for _, s in steps), \
        f.program.plan.describe()
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    rtol = 1e-12 if dtype == "float64" else 2e-6
    for got, w in zip(f(*arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=rtol, atol=rtol * np.abs(w).max())


@pytest.mark.parametrize("case", list(CASES))
def test_same_bits_for_every_thread_count(case):
    runs = []
    for threads in (1, 2, 3, 5):
        f, _, _, arrays = _program(case, "float32", _options(threads=threads))
        runs.append(f(*arrays))
        runs.append(f(*arrays))
    for run in runs[1:]:
        for got, first in zip(run, runs[0], strict=True):
            np.testing.assert_array_equal(got, first)


def test_the_sum_is_sequential_in_grid_order():
    """Many float32 addends per row, of mixed magnitudes: the kernel's rows are the
    sequential float32 sums of ``np.add.at`` (ids in order), not a reordered sum."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 3, 4000).astype(np.int64)
    head = (rng.standard_normal((4000, 70)) * 10.0 ** rng.integers(-3, 4, (4000, 1))
            ).astype(np.float32)
    Ids, W = tg.placeholder((4000,), "int64", "ids"), tg.placeholder((3, 70), "float32", "W")
    out = tg.nn.embedding(Ids, W)
    H = tg.placeholder(out.shape, "float32", "H")
    want = np.zeros((3, 70), np.float32)
    np.add.at(want, ids, head)
    for threads in (1, 2, 4):
        f = tg.build([Ids, W, H], tg.gradient(out, [W], H), target="cpu",
                     options=_options(threads=threads))
        (got,) = f(ids, np.zeros((3, 70), np.float32), head)
        np.testing.assert_array_equal(got, want)


def test_targets_outside_the_output_are_dropped():
    """ids of -1 read under a guard (a loss's ignore_index) add nothing."""
    Ids, W = tg.placeholder((6,), "int64", "ids"), tg.placeholder((4, 3), "float64", "W")
    out = tg.compute((6, 3), lambda i, e: tg.if_then_else(Ids[i] >= 0, W[Ids[i], e], 0.0), "rows")
    H = tg.placeholder(out.shape, "float64", "H")
    f = tg.build([Ids, W, H], tg.gradient(out, [W], H), target="cpu", options=_options())
    assert all(isinstance(s, CompiledKernel) for _, s in _scatter_steps(f))
    ids = np.array([1, -1, 3, 1, -1, 0])
    head = np.arange(18.0).reshape(6, 3)
    want = np.zeros((4, 3))
    np.add.at(want, ids[ids >= 0], head[ids >= 0])
    np.testing.assert_array_equal(f(ids, np.zeros((4, 3)), head)[0], want)


def test_switched_off_the_scatter_runs_on_numpy():
    f, _, _, arrays = _program("embedding", "float64", _options(compiled=False))
    assert [s for _, s in _scatter_steps(f)] == [None]
    on = _program("embedding", "float64", _options())[0]
    for got, want in zip(f(*arrays), on(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_an_embedding_row_is_one_vectorized_loop():
    """The free last axis is innermost and vectorized, the ids read once per row."""
    f, *_ = _program("embedding", "float32", _options())
    ((_, step),) = _scatter_steps(f)
    text = step.src.text
    assert text.count("memset") == 1 and "#pragma omp simd" in text
    assert text.index("for (int r0") < text.index("#pragma omp simd"), text


def test_a_scan_steps_scatter_is_compiled():
    """``s[t] = tanh(0.8 s[t - 1, idx] + u[t])``: the adjoint's step holds a scatter
    (repeated ids), compiled in the step program and run through its trace."""
    T, n = 6, 5
    u, idx = tg.placeholder((T, n), "float64", "u"), tg.placeholder((n,), "int64", "idx")
    s = tg.placeholder((T, n), "float64", name="s")
    init = tg.compute((1, n), lambda _, i: tg.tanh(u[0, i]), name="init")
    step = tg.compute((T, n), lambda t, i: tg.tanh(0.8 * s[t - 1, idx[i]] + u[t, i]),
                      name="step")
    out = tg.scan(init, step, s, inputs=[u])
    H = tg.placeholder(out.shape, "float64", "H")
    outputs = [out, *tg.gradient(out, [u], H)]
    f = tg.build([u, idx, H], outputs, target="cpu", options=_options())
    programs = [p for p in f.program.steps if isinstance(p, type(f.program))]
    assert any(k.kind == "scatter" and isinstance(st, CompiledKernel)
               for p in programs for k, st in zip(p.plan.kernels, p.steps, strict=True))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((T, n)), np.array([1, 1, 0, 4, 4]), rng.standard_normal((T, n))]
    want = tg.build([u, idx, H], outputs, target="numpy")(*args)
    for _ in range(2):  # the second run goes through the step traces
        for got, w in zip(f(*args), want, strict=True):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_a_plane_owner_zeroes_its_own_plane():
    """grid_sample's input gradient is shared out by (n, c) planes, the leading output
    dimensions: each iteration zeroes its plane before adding to it (one parallel loop,
    no zeroing pass of its own)."""
    f, *_ = _program("grid_sample bilinear zeros", "float32", _options())
    ((_, step),) = _scatter_steps(f)
    text = step.src.text
    assert "memset(a0 + f * 30L, 0, 30L * sizeof(float));" in text, text
    assert text.count("#pragma omp parallel for") == 1


def test_the_scatter_tree_holds_no_target_text():
    """As a general kernel's (test_nest.py): nest nodes only, every string a name."""
    import dataclasses

    from tegrad.lower import nest, nest_forms
    from tegrad.lower.nest_scatter import scatter_nest

    def walk(x):
        if isinstance(x, list | tuple):
            for y in x:
                yield from walk(y)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            yield x
            for fd in dataclasses.fields(x):
                yield from walk(getattr(x, fd.name))

    for case in CASES:
        f, *_ = _program(case, "float32", _options())
        for kernel, _ in _scatter_steps(f):
            tree = scatter_nest(kernel.tensor, kernel.scatter, "k0", _options())
            for node in walk(tree.body):
                assert type(node).__module__ in (nest.__name__, nest_forms.__name__), node
