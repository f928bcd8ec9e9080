"""Kernel forms: the plan picks the intended kernel, and it computes what the reference
evaluator (``evaluate_compute``, the general path) computes.

Every case builds computes by hand, in the forms the simplifier emits: gather form with
padding guards, strided gradients under ``//`` and ``%``, and scatter form for index maps
that cannot be inverted.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu.compiler import compiler
from tegrad.backends.host.evaluate import evaluate_compute
from tegrad.backends.host.kernels import run_kernel
from tegrad.backends.host.ops import HostOps
from tegrad.backends.host.scatter import regions
from tegrad.ir.expr import Binary
from tegrad.ir.tensor import Placeholder
from tegrad.ir.traverse import topo_tensors
from tegrad.lower.contraction import match_contraction
from tegrad.lower.kernels import Contraction
from tegrad.lower.plan import plan
from tegrad.lower.residue import normalize, split_axes

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gradients.py"
_spec = importlib.util.spec_from_file_location("bench_gradients", _BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

F64 = "float64"


def ph(shape, name, dtype=F64):
    return tg.placeholder(shape, dtype, name=name)


def feed_for(t, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in topo_tensors([t]):
        if isinstance(p, Placeholder):
            if p.dtype.startswith("int"):
                out[p] = rng.integers(0, max(p.shape[-1], 2), size=p.shape).astype(p.dtype)
            else:
                out[p] = rng.standard_normal(p.shape).astype(p.dtype)
    return out


HOST = HostOps()  # NumPy's products and copies, the default layout settings


def run_planned(t, arrays, host=HOST):
    """Run every kernel of the plan of ``t``; the last one is ``t``'s."""
    arrays = dict(arrays)
    kinds = []
    for k in plan([t]).kernels:
        arrays[k.tensor] = run_kernel(k, arrays, host)
        kinds.append(k.kind)
    return arrays[t], kinds[-1]


def assert_matches(t, kind, rtol=1e-10, seed=0, host=HOST):
    arrays = feed_for(t, seed)
    got, got_kind = run_planned(t, arrays, host)
    assert got_kind == kind, f"{t.name}: planned {got_kind}, wanted {kind}\n{t}"
    want = evaluate_compute(t, arrays)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max()))
    return got, arrays


# --- cases ---------------------------------------------------------------------------------


def matmul():
    return bench.matmul(ph((7, 5), "A"), ph((5, 6), "B"))


def matmul_grads():
    A, B, H = ph((7, 5), "A"), ph((5, 6), "B"), ph((7, 6), "H")
    return bench.matmul_grads(A, B, H)


def batched_matmul():
    A, B = ph((3, 4, 5), "A"), ph((3, 5, 6), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((3, 4, 6), lambda b, i, j: tg.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")


def batch_outer():
    """Output order (i, b, j): the batch axis in the middle of the output."""
    A, B = ph((3, 4, 5), "A"), ph((3, 5, 6), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 3, 6), lambda i, b, j: tg.sum(A[b, i, k] * B[b, k, j], axis=k),
                      name="C")


def offset_reduce():
    """A reduce axis that starts at 2, a constant factor and a negation."""
    A, B = ph((4, 7), "A"), ph((7, 3), "B")
    k = tg.reduce_axis((2, 6), "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(-(A[i, k] * 2.5) * B[k, j], axis=k), name="C")


def range_conditions():
    """Conditions on one variable shrink its range; the output outside is zero."""
    A, B = ph((4, 7), "A"), ph((7, 3), "B")
    k = tg.reduce_axis(7, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k,
                                                  where=tg.all(k < 5, 1 <= i, 2 * k >= 3)),
                      name="C")


def three_operands():
    A, B, v = ph((4, 5), "A"), ph((5, 3), "B"), ph((5,), "v")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * v[k] * B[k, j], axis=k), name="C")


def broadcast_output():
    """Output axis j read by no factor: the result broadcasts along it."""
    A, v = ph((4, 5), "A"), ph((5,), "v")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * v[k], axis=k), name="C")


def flip():
    """Negative strides: C[i, j] = sum_k A[M-1-i, k] B[k, N-1-j]."""
    A, B = ph((4, 5), "A"), ph((5, 6), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 6), lambda i, j: tg.sum(A[3 - i, k] * B[4 - k, 5 - j], axis=k),
                      name="C")


def diagonal():
    """X[i, i]: one variable in two index positions walks the diagonal."""
    X, B = ph((5, 5), "X"), ph((5, 3), "B")
    i = tg.reduce_axis(5, "i")
    return tg.compute((3,), lambda j: tg.sum(X[i, i] * B[i, j], axis=i), name="T")


def diagonal_out():
    X, v = ph((5, 5, 4), "X"), ph((4,), "v")
    k = tg.reduce_axis(4, "k")
    return tg.compute((5,), lambda i: tg.sum(X[i, i, k] * v[k], axis=k), name="D")


def cast_float32():
    A, B = ph((6, 5), "A", "float32"), ph((5, 4), "B", "float32")
    k = tg.reduce_axis(5, "k")
    return tg.compute((6, 4), lambda i, j: tg.cast(tg.sum(A[i, k] * B[k, j], axis=k), F64),
                      name="C")


def aligned_split():
    """Grouped channels o // 3 with a range divisible by 3: one piece, o = 3*g + r."""
    X, W = ph((2, 4, 5), "X"), ph((12, 5), "W")
    c = tg.reduce_axis(5, "c")
    return tg.compute((2, 12), lambda n, o: tg.sum(X[n, o // 3, c] * W[o, c], axis=c), name="Y")


def uneven_residue():
    """(i + 1) // 3 and % 3 over an extent 8 not divisible by 3: classes of sizes 3, 3, 2."""
    A, B = ph((4, 3, 5), "A"), ph((5,), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((8,), lambda i: tg.sum(A[(i + 1) // 3, (i + 1) % 3, k] * B[k], axis=k),
                      name="R")


def reduce_residue():
    """A reduce axis under % 2: residue classes of k accumulate into the same output."""
    A, B = ph((4, 6), "A"), ph((6, 2), "B")
    k = tg.reduce_axis(6, "k")
    return tg.compute((4,), lambda i: tg.sum(A[i, k] * B[k, k % 2], axis=k,
                                             where=tg.equal(k % 2, 1)), name="R")


CONTRACTIONS = {
    "matmul": matmul,
    "matmul dA": lambda: matmul_grads()[0],
    "matmul dB": lambda: matmul_grads()[1],
    "batched matmul": batched_matmul,
    "batch in the middle": batch_outer,
    "reduce axis from 2, constant factor": offset_reduce,
    "single-variable conditions": range_conditions,
    "three operands": three_operands,
    "broadcast output axis": broadcast_output,
    "flip": flip,
    "diagonal read": diagonal,
    "diagonal with output axis": diagonal_out,
    "float32 under a cast": cast_float32,
    "aligned split o // 3": aligned_split,
    "uneven residue classes": uneven_residue,
    "residues of a reduce axis": reduce_residue,
}


@pytest.mark.parametrize("case", list(CONTRACTIONS))
def test_contraction(case):
    t = CONTRACTIONS[case]()
    rtol = 1e-5 if case.startswith("float32") else 1e-10
    assert_matches(t, "contraction", rtol=rtol)


# --- convolutions -----------------------------------------------------------------------

CONVS = [
    # (N, C, H, W, K, R, S, stride, padding, dilation, groups)
    (2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1),
    (2, 3, 8, 8, 4, 3, 3, 2, 1, 1, 1),
    (1, 2, 9, 7, 3, 3, 2, 2, 0, 1, 1),
    (2, 3, 9, 9, 2, 3, 3, 3, 2, 1, 1),
    (1, 2, 9, 8, 3, 3, 3, 1, 2, 2, 1),
    (2, 4, 7, 7, 6, 3, 3, 1, 1, 1, 2),
    (1, 4, 8, 8, 4, 3, 3, 2, 1, 1, 4),
    (1, 2, 5, 5, 2, 1, 1, 1, 0, 1, 1),
]


def _conv_ids(c):
    return "N{}C{}H{}W{}K{}R{}S{}-s{}p{}d{}g{}".format(*c)


def _conv_problem(cfg):
    N, C, H, W, K, R, S, stride, padding, dilation, groups = cfg
    X, Wt = ph((N, C, H, W), "X"), ph((K, C // groups, R, S), "W")
    Y = bench.conv2d(X, Wt, stride, padding, dilation, groups)
    Hd = ph(Y.shape, "H")
    return X, Wt, Y, Hd, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("cfg", CONVS, ids=_conv_ids)
@pytest.mark.parametrize("which", ["forward", "input grad", "weight grad"])
def test_conv(cfg, which):
    X, Wt, Y, Hd, kw = _conv_problem(cfg)
    if which == "forward":
        t = Y
    elif which == "input grad":
        if kw["stride"] > 1 and kw["dilation"] > 1:
            pytest.skip("not written by hand")
        t = bench.conv2d_input_grad(Hd, Wt, X.shape, **kw)
    else:
        t = bench.conv2d_weight_grad(Hd, X, Wt.shape, **kw)
    assert_matches(t, "contraction")


@pytest.mark.parametrize("cfg", CONVS, ids=_conv_ids)
def test_conv_handwritten_forms_match_torch(cfg):
    """The hand-written gather forms (used by the benchmark) are the true gradients."""
    torch = pytest.importorskip("torch")
    X, Wt, Y, Hd, kw = _conv_problem(cfg)
    if kw["stride"] > 1 and kw["dilation"] > 1:
        pytest.skip("not written by hand")
    dX = bench.conv2d_input_grad(Hd, Wt, X.shape, **kw)
    dW = bench.conv2d_weight_grad(Hd, X, Wt.shape, **kw)
    rng = np.random.default_rng(1)
    x, w, h = (rng.standard_normal(p.shape) for p in (X, Wt, Hd))
    y, dx, dw = tg.build([X, Wt, Hd], [Y, dX, dW])(x, w, h)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, **kw)
    gx, gw = torch.autograd.grad(ty, [tx, tw], torch.tensor(h))
    for got, want in ((y, ty.detach()), (dx, gx), (dw, gw)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-10)


def test_strided_input_grad_is_split_by_residue():
    """Stride 2: four residue classes of (y, x), each an affine contraction; no %-guards
    are evaluated per element and nothing is zero-dilated."""
    _, Wt, _, Hd, kw = _conv_problem(CONVS[1])
    dX = bench.conv2d_input_grad(Hd, Wt, (2, 3, 8, 8), **kw)
    c = match_contraction(dX)
    assert c is not None and c.split == "residue" and len(c.pieces) == 4 and c.covers
    # taps per class: t in {0} or {0, 1} (the guard p + 2t < 3 shrank the range)
    taps = sorted(np.prod([hi - lo + 1 for v, lo, hi in p.ranges if v in p.red_vars]) // 4
                  for p in c.pieces)
    assert taps == [1, 2, 2, 4]


@pytest.mark.parametrize("cfg, grid", [(CONVS[1], (2, 2)), (CONVS[3], (3, 3)),
                                       (CONVS[2], None)], ids=["s2", "s3", "s2 uneven"])
def test_strided_input_grad_writes_its_phases_with_one_copy(cfg, grid):
    """The residue classes of a strided input gradient are the phases of its output: each
    piece's product fills a block of one workspace, and one copy interleaves them
    (``host/views.phase_grid``); classes of unequal sizes keep a copy each. Values:
    ``test_conv``."""
    from tegrad.backends.host.views import phase_grid, ranges_of, view

    _, Wt, _, Hd, kw = _conv_problem(cfg)
    dX = bench.conv2d_input_grad(Hd, Wt, cfg[:4], **kw)
    c = match_contraction(dX)
    out = np.zeros(c.shape, "float32")
    targets = [view(out, p.out_index, ranges_of(p), writeable=True)[0] for p in c.pieces]
    found = phase_grid(out, targets)
    if grid is None:
        assert found is None
        return
    _, stacked, view = found
    assert stacked.shape[:2] == grid and view.shape == stacked.shape
    _assert_slots_land(found, targets)
    assert (out > 0).all()


def _assert_slots_land(found, targets):
    """Each slot of ``phase_grid``'s workspace, once copied to its grid, is exactly its
    target's elements."""
    slots, stacked, grid = found
    for k, slot in enumerate(slots):
        slot[...] = k + 1
    grid[...] = stacked
    for k, target in enumerate(targets):
        assert (target == k + 1).all()


@pytest.mark.parametrize("case", ["2 x 2", "1 x 3", "unit stride", "not a grid"])
def test_phase_grid_of_views(case):
    from tegrad.backends.host.views import phase_grid

    out = np.zeros((4, 6, 9), "float32")
    targets = {"2 x 2": [out[:, a::2, b::2][:, :3, :4] for a in (0, 1) for b in (0, 1)],
               "1 x 3": [out[:, :, b::3] for b in (2, 0, 1)],
               "unit stride": [out[0], out[1]],
               "not a grid": [out[:, a::2, b::3][:, :3, :3] for a, b in
                              ((0, 0), (0, 1), (1, 0), (1, 2))]}[case]
    found = phase_grid(out, targets)
    if case in ("unit stride", "not a grid"):
        assert found is None
        return
    _assert_slots_land(found, targets)


@pytest.mark.parametrize("case", ["2 x 2 phases", "uneven", "one"])
def test_phase_plane_copies_are_joined_where_they_line_up(case):
    """``joined``: copies at addresses affine in a grid index, of one shape and strides,
    become one copy with the grid's dims leading (a stride-2 input's four phase planes);
    otherwise None, and each is copied on its own."""
    from tegrad.backends.host.views import joined

    x = np.arange(2 * 9 * 10, dtype="float32").reshape(2, 9, 10)
    planes = np.zeros((2, 2, 2, 5, 6), "float32")
    rows = 4 if case != "uneven" else None
    pairs = []
    for a in (0, 1):
        for b in (0, 1):
            n = rows or 4 + a  # uneven: the planes' copies differ in shape
            pairs.append((planes[a, b, :, 1 - a:1 - a + n, 1 - b:1 - b + 5],
                          x[:, 1 - a::2, 1 - b::2][:, :n, :5]))
    pairs = pairs[:1] if case == "one" else pairs
    found = joined(pairs, [1] if case == "one" else [2, 2])
    if case != "2 x 2 phases":
        assert found is None
        return
    dst, src = found
    assert dst.shape == src.shape == (2, 2, 2, 4, 5)
    dst[...] = src
    for d, s in pairs:
        np.testing.assert_array_equal(d, s)


def test_grouped_conv_uses_one_aligned_piece():
    X, Wt, Y, _, _ = _conv_problem(CONVS[5])
    c = match_contraction(Y)
    assert c is not None and c.split == "aligned" and len(c.pieces) == 1


def test_gradient_of_conv_plans_contractions():
    """tg.gradient's own output, whatever form the simplifier gives, computes the same
    as the reference; gather forms become contractions."""
    X, Wt, Y, Hd, _ = _conv_problem(CONVS[1])
    for g in tg.gradient(Y, [X, Wt], head=Hd):
        arrays = feed_for(g)
        got, kind = run_planned(g, arrays)
        np.testing.assert_allclose(got, evaluate_compute(g, arrays), rtol=1e-10, atol=1e-10)


def _plan_of(outputs, inputs):
    return plan(outputs, inputs, fused=True)


@pytest.mark.parametrize("kind, blas", [
    ("one output channel per group", True),  # 48 ms -> 2.3 ms forward at 136 channels
    ("depthwise window", False),  # taps only: no long reduction off the row
    ("column of unit steps", False),  # sum_i H[i] A[i, k]: a column-order loop
    ("long unit run", False),  # sum_k A[i, k] v[k]: the loop streams A
])
def test_a_matrix_vector_product_goes_to_blas_only_where_its_loop_reads_strided(kind, blas):
    """``fusion.worth_blas``'s one-owner products: a reduction across 40 channels, the
    row index moving by 2 taps of stride 2, is BLAS's; the others stay fused loops. The
    values are torch's in float64 either way."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    if kind == "one output channel per group":
        shapes = [(1, 80, 20, 24), (80, 1, 3, 2)]
        make = lambda x, w: tg.nn.conv_transpose2d(  # noqa: E731
            x, w, stride=(2, 1), padding=(2, 1), output_padding=(1, 0), groups=2,
            dilation=(1, 2))
        reference = lambda x, w: torch.nn.functional.conv_transpose2d(  # noqa: E731
            x, w, stride=(2, 1), padding=(2, 1), output_padding=(1, 0), groups=2,
            dilation=(1, 2))
    elif kind == "depthwise window":
        shapes = [(2, 16, 30, 30), (16, 1, 9, 9)]
        make = lambda x, w: tg.nn.conv2d(x, w, padding=4, groups=16)  # noqa: E731
        reference = lambda x, w: torch.nn.functional.conv2d(x, w, padding=4,  # noqa: E731
                                                            groups=16)
    elif kind == "column of unit steps":
        shapes = [(300, 200), (300,)]
        make = lambda a, h: tg.nn.matmul(h, a)  # noqa: E731
        reference = lambda a, h: h @ a  # noqa: E731
    else:
        shapes = [(300, 200), (200,)]
        make = lambda a, v: tg.nn.matmul(a, v)  # noqa: E731
        reference = lambda a, v: a @ v  # noqa: E731
    X, W = ph(shapes[0], "X"), ph(shapes[1], "W")
    Y = make(X, W)
    kinds = {type(k).__name__ for k in _plan_of([Y], [X, W]).kernels}
    assert ("Contraction" in kinds) == blas, kinds
    x, w = (rng.standard_normal(s) for s in shapes)
    got = tg.build([X, W], Y, target="cpu" if compiler() else "numpy")(x, w)
    want = reference(torch.tensor(x), torch.tensor(w)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# --- not contractions -----------------------------------------------------------------------


def coupled_condition():
    A, B = ph((4, 5), "A"), ph((5, 3), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k, where=i + k < 4),
                      name="C")


def stronger_guard():
    """A guard stricter than the padding (1 <= i + k - 1) must not be dropped."""
    A, B = ph((4, 6), "A"), ph((6, 3), "B")
    k = tg.reduce_axis(3, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(
        tg.if_then_else(tg.all(1 <= i + k - 1, i + k - 1 < 4), A[i, i + k - 1], 0.0) * B[k, j],
        axis=k), name="C")


def nonlinear_factor():
    A, B = ph((4, 5), "A"), ph((5, 3), "B")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4, 3), lambda i, j: tg.sum(tg.exp(A[i, k]) * B[k, j], axis=k), name="C")


def max_reduction():
    A = ph((4, 5), "A")
    k = tg.reduce_axis(5, "k")
    return tg.compute((4,), lambda i: tg.max(A[i, k], axis=k), name="M")


GENERAL = {
    "condition coupling two variables": coupled_condition,
    "guard stronger than padding": stronger_guard,
    "non-linear factor": nonlinear_factor,
    "max reduction": max_reduction,
}


@pytest.mark.parametrize("case", list(GENERAL))
def test_general_fallback(case):
    assert_matches(GENERAL[case](), "general")


# --- scatter ------------------------------------------------------------------------------


def clamp_scatter():
    """Gradient of Y[i, c] = X[clamp(i - 1), c] (edge padding), in scatter form."""
    Hd = ph((9, 3), "H")
    i = tg.reduce_axis(9, "i")
    return tg.compute((7, 3), lambda j0, c: tg.sum(
        Hd[i, c], axis=i, where=tg.equal(tg.minimum(tg.maximum(i - 1, 0), 6), j0)), name="dX")


def reflect_scatter():
    """Reflect padding: index |i - 2| pinned to j0, weighted by a second factor."""
    Hd, v = ph((8,), "H"), ph((8,), "v")
    i = tg.reduce_axis(8, "i")
    return tg.compute((6,), lambda j0: tg.sum(
        Hd[i] * v[i], axis=i, where=tg.equal(tg.abs(i - 2), j0)), name="dX")


def embedding_scatter():
    """dW[j0, j1] = sum_{n, d} H[n, d] where idx[n] == j0 && d == j1 (duplicates in idx)."""
    Hd = ph((10, 4), "H")
    idx = ph((10,), "idx", "int64")
    n, d = tg.reduce_axis(10, "n"), tg.reduce_axis(4, "d")
    return tg.compute((4, 4), lambda j0, j1: tg.sum(
        Hd[n, d], axis=[n, d], where=tg.all(tg.equal(idx[n], j0), tg.equal(d, j1))), name="dW")


def scatter_with_rest():
    """A pinned axis plus a remaining condition on the grid and a value using j0."""
    Hd = ph((6, 5), "H")
    b = ph((5,), "b")
    i = tg.reduce_axis(6, "i")
    return tg.compute((5, 5), lambda j0, c: tg.sum(
        Hd[i, c] * b[j0], axis=i,
        where=tg.all(tg.equal(tg.minimum(i, 4), j0), i + c < 8)), name="dX")


SCATTERS = {
    "clamp": clamp_scatter,
    "reflect": reflect_scatter,
    "data-dependent index with duplicates": embedding_scatter,
    "remaining condition, value uses the pinned axis": scatter_with_rest,
}


@pytest.mark.parametrize("case", list(SCATTERS))
def test_scatter(case):
    assert_matches(SCATTERS[case](), "scatter")


def test_scatter_duplicates_accumulate():
    t = embedding_scatter()
    arrays = feed_for(t)
    idx = np.array([0, 1, 1, 3, 3, 3, 0, 2, 2, 1])
    arrays[next(p for p in arrays if p.name == "idx")] = idx
    got, kind = run_planned(t, arrays)
    h = arrays[next(p for p in arrays if p.name == "H")]
    want = np.zeros((4, 4))
    np.add.at(want, idx, h)
    assert kind == "scatter"
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_scatter_chunks(monkeypatch):
    import tegrad.backends.host.scatter as scatter

    monkeypatch.setattr(scatter, "SCATTER_GRID_POINTS", 7)
    for case in SCATTERS.values():
        assert_matches(case(), "scatter")


def test_regions_cover_the_grid():
    for extents, limit in (([5, 7, 3], 10), ([4, 4], 100), ([3, 50], 7), ([2, 0, 3], 4)):
        seen = np.zeros(extents, dtype=int)
        for r in regions(extents, limit):
            assert np.prod([hi - lo for lo, hi in r]) <= max(limit, 1)
            seen[tuple(slice(lo, hi) for lo, hi in r)] += 1
        assert (seen == 1).all()


# --- residue normaliser -------------------------------------------------------------------


def test_normalize_residues():
    q = tg.Var.fresh("q", 0, 10)
    t = tg.Var.fresh("t", 0, 2)
    e = ((2 * q + 1) + 1) // 2 - t
    assert repr(normalize(e)) == repr(q + 1 - t)
    assert repr(normalize((2 * q + 3) % 2 + 2 * t < 3)) == repr(normalize(1 + 2 * t < 3))
    assert repr(normalize(tg.equal((4 * q + 2) % 2, 0))) == "true"
    r = tg.Var.fresh("r", 0, 3)
    assert repr(normalize((3 * q + r) // 3)) == "q"  # r in [0, 3): stays in its block
    stuck = (3 * q + r + 1) // 3  # r + 1 in [1, 4): crosses a block
    assert isinstance(normalize(stuck), Binary) and normalize(stuck).op == "floordiv"


def test_split_axes_counts_pieces():
    y = tg.Var.fresh("y", 0, 8)
    t = tg.Var.fresh("t", 0, 2)
    pieces = split_axes([y], [t], [(y + 1) // 2 - t, (y + 1) % 2 + 2 * t])
    assert len(pieces) == 2 and all(p.kind == "residue" for p in pieces)
    assert sorted(p.out_index[0][1] for p in pieces) == [0, 1]


# --- random programs ------------------------------------------------------------------------

try:
    from hypothesis import given
    from hypothesis import strategies as st

    try:
        from .programs import programs
    except ImportError:  # tests/ is not a package: pytest puts it on sys.path
        from programs import programs
except ImportError:  # pragma: no cover - hypothesis ships with the test extra
    given = None


if given is not None:

    @given(programs(), st.integers(0, 2**32 - 1))
    def test_every_kernel_agrees_with_the_reference(program, seed):
        """Each kernel of the plan of a random program and of its gradients (contraction,
        scatter or general, a general one reading the parts extracted from it) equals
        ``evaluate_compute`` of its compute on the same inputs."""
        rng = np.random.default_rng(seed)
        head = tg.placeholder(program.output.shape, F64, name="H")
        outputs = [program.output]
        try:
            outputs += tg.gradient(program.output, program.inputs, head=head)
            kernels = plan(outputs).kernels
        except (tg.IRError, tg.NotDifferentiableError, NotImplementedError):
            kernels = plan([program.output]).kernels  # the simplifier's business, not ours
        arrays = {p: rng.standard_normal(p.shape) for p in (*program.inputs, head)}
        ran = dict(arrays)
        # a part extracted from a compute is read only where the guards of its path hold
        # (elsewhere its value is unused): it is checked through the compute reading it
        parts = {t for k in kernels for t in getattr(k, "parts", ())}
        for k in kernels:
            got = ran[k.tensor] = run_kernel(k, ran, HOST)
            if k.tensor in parts:  # (its reference, for a kernel that reads it directly)
                arrays[k.tensor] = evaluate_compute(k.tensor, arrays)
                continue
            want = arrays[k.tensor] = evaluate_compute(k.tensor, arrays)
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * scale,
                                       err_msg=f"{k.kind} kernel of\n{k.tensor}")
            ran[k.tensor] = want


@pytest.mark.parametrize("knob", ["parallel copies", "blocked GEMMs"])
def test_large_problem_paths(monkeypatch, knob):
    """Copies split over threads and GEMMs made in blocks (along a batch axis, or along a
    reduced axis with the blocks added up) give the same values; forced on small arrays."""
    import functools

    import tegrad.backends.host.ops as ops
    import tegrad.backends.host.products as products

    host = HOST
    if knob == "parallel copies":
        monkeypatch.setattr(ops, "PARALLEL_COPY_MIN", 1)
        host = HostOps(copy=functools.partial(ops.numpy_copy, threads=3))
    else:
        monkeypatch.setattr(products, "BLOCK_ELEMENTS", 16)
    for cfg in CONVS[:3] + CONVS[5:6]:
        X, Wt, Y, Hd, kw = _conv_problem(cfg)
        for t in (Y, bench.conv2d_weight_grad(Hd, X, Wt.shape, **kw),
                  bench.conv2d_input_grad(Hd, Wt, X.shape, **kw)):
            assert_matches(t, "contraction", host=host)
    for case in ("uneven residue classes", "batched matmul", "matmul dB", "three operands"):
        assert_matches(CONTRACTIONS[case](), "contraction", host=host)


def test_row_widening_of_residue_classes(monkeypatch):
    """A stride-2 input gradient's classes that read two taps along x write columns that
    step by 2: they are widened too (their products loop over the taps), and the values
    still match (``test_conv``). With ``max_widened_step`` 1 none is."""

    _, Wt, _, Hd, kw = _conv_problem(CONVS[1])
    dX = bench.conv2d_input_grad(Hd, Wt, CONVS[1][:4], **kw)
    widened = [p.widen for p in match_contraction(dX).pieces if p.widen is not None]
    assert len(widened) == 2 and all(w[1] == 5 for w in widened)  # 4 columns + 1 tap
    assert_matches(dX, "contraction")
    assert all(p.widen is None for p in match_contraction(dX, max_widened_step=1).pieces)


def test_row_widening_is_exercised():
    """A stride-1 forward widens x to the padded row (the extra columns dropped); its weight
    gradient, which sums over x, does not (``_overlap_layout`` copies its input). The conv
    tests above check the values."""
    X, Wt, Y, Hd, kw = _conv_problem(CONVS[0])
    piece = match_contraction(Y).pieces[0]
    assert piece.widen is not None and piece.widen[0].name == "x" and piece.widen[1] == 8
    assert piece.widen[0] in piece.out_vars
    dW = bench.conv2d_weight_grad(Hd, X, Wt.shape, **kw)
    assert match_contraction(dW).pieces[0].widen is None


def test_row_widening_wastes_at_most_a_third():
    """Rows of 6 padded to 8 are widened (a third more columns); rows of 4 padded to 6
    (half as many again: a 3x3 convolution of 4x4 images) are not, unless
    ``max_waste`` allows it, and the values match either way."""
    for width, padded, widened in ((6, 8, True), (4, 6, False)):
        _, _, Y, _, _ = _conv_problem((2, 3, 5, width, 4, 3, 3, 1, 1, 1, 1))
        piece = match_contraction(Y).pieces[0]
        assert (piece.widen is not None) == widened
        loose = match_contraction(Y, max_waste=0.5).pieces[0]
        assert loose.widen is not None and loose.widen[1] == padded
        assert_matches(Y, "contraction")


def _copied_shapes(monkeypatch, **settings):
    """``(shapes, host)``: a host whose copies record their shapes in ``shapes``, with
    ``settings`` (``HostOps`` fields), the engine's layout choices forgotten so that they
    are made again under them."""
    from tegrad.backends.host import ops, products

    shapes = []
    monkeypatch.setattr(products, "_LOOPED", {})

    def copy(dst, src):
        shapes.append(dst.shape)
        ops.numpy_copy(dst, src)

    return shapes, HostOps(copy=copy, **settings)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_weight_gradient_copies_its_input_three_times_not_nine(monkeypatch, dtype):
    """``dW[k, c, r, s] = sum_{n, y, x} H[n, k, y, x] X[n, c, y + r - 1, x + s - 1]`` reads
    ``X`` with ``r`` and ``y`` at one stride: the overlap copy holds the padded ``X`` over
    ``(n, c, s, y + r, x)``, three shifted copies (im2col's over ``(c, r, s, y, x)`` holds
    nine), the kernel rows a batch of products and the images their terms. H is wider than
    the columns the sum reads (9 against 6). With ``overlap_bytes`` below that copy's size
    the copy is made in two parts, one image each; below one image's, the im2col copy
    comes back. All equal the reference."""
    X, Hd = ph((2, 3, 7, 6), "X", dtype), ph((2, 4, 7, 9), "H", dtype)
    n, y, x = tg.reduce_axis(2, "n"), tg.reduce_axis(7, "y"), tg.reduce_axis(6, "x")

    def body(k, c, r, s):
        h, w = y + r - 1, x + s - 1
        read = tg.if_then_else(tg.all(0 <= h, h < 7, 0 <= w, w < 6), X[n, c, h, w], 0.0)
        return tg.sum(Hd[n, k, y, x] * read, axis=[n, y, x])

    t = tg.compute((4, 3, 3, 3), body, name="dW")
    rtol = 1e-10 if dtype == "float64" else 1e-5
    copied, host = _copied_shapes(monkeypatch)
    assert_matches(t, "contraction", rtol=rtol, host=host)
    overlap, im2col = (2, 3, 3, 7 + 3 - 1, 6), 9 * 2 * 3 * 7 * 6  # (n, c, r, s, y, x)
    assert overlap in copied and im2col not in map(np.prod, copied)
    size = np.dtype(dtype).itemsize * int(np.prod(overlap))
    copied, host = _copied_shapes(monkeypatch, overlap_bytes=size - 1)
    assert_matches(t, "contraction", rtol=rtol, host=host)
    assert copied.count((1, *overlap[1:])) == 2 and overlap not in copied
    copied, host = _copied_shapes(monkeypatch, overlap_bytes=size // 2 - 1)
    assert_matches(t, "contraction", rtol=rtol, host=host)
    assert (1, *overlap[1:]) not in copied and im2col in map(np.prod, copied)


@pytest.mark.parametrize("order", ["kcrs", "crsk"])
def test_overlap_copy_on_either_side_of_the_product(monkeypatch, order):
    """The weight gradient stored as ``(k, c, r, s)`` puts the input on the right of the
    product, as ``(c, r, s, k)`` on the left: both take the overlap copy and equal the
    reference."""
    X, Hd = ph((2, 3, 7, 6), "X"), ph((2, 4, 7, 6), "H")
    n, y, x = tg.reduce_axis(2, "n"), tg.reduce_axis(7, "y"), tg.reduce_axis(6, "x")
    shape = {"k": 4, "c": 3, "r": 3, "s": 3}

    def body(*at):
        k, c, r, s = (at[order.index(name)] for name in "kcrs")
        h, w = y + r - 1, x + s - 1
        read = tg.if_then_else(tg.all(0 <= h, h < 7, 0 <= w, w < 6), X[n, c, h, w], 0.0)
        return tg.sum(Hd[n, k, y, x] * read, axis=[n, y, x])

    copied, host = _copied_shapes(monkeypatch)
    assert_matches(tg.compute(tuple(shape[v] for v in order), body, name="dW"), "contraction",
                   host=host)
    assert any(len(c) == 5 and c[-2:] == (9, 6) for c in copied)  # (.., y + r, x)


@pytest.mark.parametrize("flipped", ["both", "kernel row"])
def test_overlap_copy_of_reads_backwards(monkeypatch, flipped):
    """Kernel row and image row read backwards together (``X[.., 8 - y - r, ..]``: one
    negative stride) pair as forward ones do; a kernel row read against the image row
    (``X[.., y - r + 2, ..]``: strides of opposite sign) pairs with nothing, so im2col
    copies it. Both equal the reference."""
    G, X = ph((2, 4, 7, 6), "G"), ph((2, 3, 9, 8), "X")
    n, y, x = tg.reduce_axis(2, "n"), tg.reduce_axis(7, "y"), tg.reduce_axis(6, "x")

    def body(k, c, r, s):
        row, col = (8 - y - r, 7 - x - s) if flipped == "both" else (y - r + 2, x - s + 2)
        return tg.sum(G[n, k, 6 - y, 5 - x] * X[n, c, row, col], axis=[n, y, x])

    copied, host = _copied_shapes(monkeypatch)
    assert_matches(tg.compute((4, 3, 3, 3), body, name="dWflip"), "contraction", host=host)
    assert ((2, 3, 3, 9, 6) in copied) == (flipped == "both")


if given is not None:
    from hypothesis import settings

    @st.composite
    def conv_configs(draw):
        groups = draw(st.sampled_from([1, 1, 2]))
        stride, dilation = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        if stride > 1:
            dilation = 1
        r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        padding = draw(st.integers(0, 2))
        h = draw(st.integers(dilation * (r - 1) + 1, 9))
        w = draw(st.integers(dilation * (s - 1) + 1, 9))
        c, k = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
        return (draw(st.integers(1, 2)), c, h, w, k, r, s, stride, padding, dilation, groups)

    @settings(max_examples=60)
    @given(conv_configs(), st.sampled_from(["forward", "input grad", "weight grad"]))
    def test_random_convolutions(cfg, which):
        """Random shapes, strides, paddings, dilations and groups: always a contraction
        (residue-split, widened or blocked as it comes), equal to the reference."""
        X, Wt, Y, Hd, kw = _conv_problem(cfg)
        t = {"forward": lambda: Y,
             "input grad": lambda: bench.conv2d_input_grad(Hd, Wt, X.shape, **kw),
             "weight grad": lambda: bench.conv2d_weight_grad(Hd, X, Wt.shape, **kw)}[which]()
        assert_matches(t, "contraction")


def test_a_part_that_the_graph_also_reads_is_planned_once():
    """A sum extracted from ``T0`` (a part) is also a compute the gradient reads directly
    (``simplify/products.py`` names it as the extraction does, and interning makes both
    one tensor): the plan makes it once, and every kernel agrees with the reference
    (found by hypothesis in ``test_every_kernel_agrees_with_the_reference``)."""
    X = tg.placeholder((1,), F64, "X")
    rk = tg.reduce_axis((0, 2), "rk")
    T0 = tg.compute((1, 1), lambda i, j: tg.sum(tg.if_then_else(rk < 1, X[rk * 0 + rk], 0.0),
                                                axis=rk) * X[i], name="T0")
    T1 = tg.compute((), lambda: T0[0, 0] / (1.0 + T0[0, 0] * T0[0, 0]), name="T1")
    H = tg.placeholder((), F64, "H")
    outputs = [T1, *tg.gradient(T1, [X], head=H)]
    kernels = plan(outputs).kernels
    made = [k.tensor for k in kernels]
    assert len(made) == len(set(made)), [t.name for t in made]
    x, h = np.array([0.7]), np.array(1.3)
    got = tg.build([X, H], outputs, target="numpy")(x, h)
    s = x[0] * x[0]
    np.testing.assert_allclose(got[0], s / (1 + s * s))
    np.testing.assert_allclose(got[1], h * (1 - s * s) / (1 + s * s) ** 2 * 2 * x, rtol=1e-12)


def _shared_products(g: int, read_h=lambda H, t, n, j: H[t + 1, n, j]):
    """``A = G^T X`` and ``B = G^T H`` over ``(t, n)`` (an LSTM's weight gradients; ``H``
    read one step on, an affine read), ``G`` with ``g`` columns."""
    G, X, H = ph((6, 5, g), "G"), ph((6, 5, 8), "X"), ph((7, 5, 12), "H")
    t, n = tg.reduce_axis((0, 6), "t"), tg.reduce_axis((0, 5), "n")
    A = tg.compute((g, 8), lambda a, i: tg.sum(G[t, n, a] * X[t, n, i], axis=[t, n]),
                   name="A")
    t2, n2 = tg.reduce_axis((0, 6), "t"), tg.reduce_axis((0, 5), "n")
    B = tg.compute((g, 12), lambda a, j: tg.sum(G[t2, n2, a] * read_h(H, t2, n2, j),
                                                axis=[t2, n2]), name="B")
    return [G, X, H], A, B


@pytest.mark.parametrize("target", [
    "numpy", pytest.param("cpu", marks=pytest.mark.skipif(compiler() is None,
                                                          reason="no C compiler"))])
def test_products_of_one_operand_are_made_as_one(target):
    """``G`` read by both products (more than the merged copies move): one product over
    ``X`` and ``H`` side by side, then the two slices (``lower/merge.py``)."""
    ins, A, B = _shared_products(100)
    kernels = plan([A, B]).kernels
    contractions = [k.tensor.name for k in kernels if k.kind == "contraction"]
    assert contractions == ["A.merged"]
    assert [k.kind for k in kernels if k.tensor in (A, B)] == ["general", "general"]
    rng = np.random.default_rng(3)
    g, x, h = (rng.standard_normal(p.shape) for p in ins)
    got = tg.build(ins, [A, B], target=target)(g, x, h)
    np.testing.assert_allclose(got[0], np.einsum("tna,tni->ai", g, x), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.einsum("tna,tnj->aj", g, h[1:]), rtol=1e-12)


def test_products_stay_apart_where_merging_does_not_pay_or_fit():
    """Not merged: a ``G`` smaller than the copies would be; a ``B`` whose ``H`` is made
    after a kernel that reads ``A`` (no place for the merged product); and an ``H`` read
    at two output columns (not a side-by-side operand)."""
    def apart(outputs):
        return sum(k.kind == "contraction" for k in plan(outputs).kernels)

    _, A, B = _shared_products(20)
    assert apart([A, B]) == 2
    ins, A, _ = _shared_products(100)
    G, _, H = ins
    late = tg.compute(H.shape, lambda t, n, j: H[t, n, j] * 2.0, name="late")
    after = tg.compute(A.shape, lambda a, i: A[a, i] + 1.0, name="after")
    t, n = tg.reduce_axis((0, 6), "t"), tg.reduce_axis((0, 5), "n")
    B = tg.compute((100, 12), lambda a, j: tg.sum(G[t, n, a] * late[t + 1, n, j],
                                                  axis=[t, n]), name="B")
    kernels = plan([after, B]).kernels
    made = [k.tensor.name for k in kernels]
    assert made.index("after") < made.index("late")  # (the order that leaves no place)
    assert not any(name.endswith("merged") for name in made)
    _, A, B = _shared_products(100, lambda H, t, n, j: H[t, n, j] * H[t + 1, n, 11 - j])
    assert apart([A, B]) == 2


def test_products_over_heads_are_batches_of_matrix_products():
    """``dQ[n, l, h D + d] = sum_s dS[n, h, l, s] K[n, s, h D + d]`` (attention's query
    gradient): the head ``h``, read by both operands, is the inner part of the output's
    columns. The products are batches over ``h`` of ``(L x S) @ (S x D)``, one per image
    ``n`` (``(n, h)`` is no single batch stride), not ``N L H`` products of ``1 x D``."""
    from tegrad.backends.host.ops import product_sum, terms

    N, H, L, S, D = 2, 3, 5, 4, 6
    dS, K = ph((N, H, L, S), "dS"), ph((N, S, H * D), "K")
    s = tg.reduce_axis(S, "s")
    dQ = tg.compute((N, L, H * D), lambda n, l_, j: tg.sum(
        dS[n, j // D, l_, s] * K[n, s, j], axis=s), name="dQ")
    products = []

    def matmul(a, b, out=None, accumulate=False):
        products.append((terms(a)[0].shape, terms(b)[0].shape))
        return product_sum(a, b, out, accumulate)

    assert_matches(dQ, "contraction", host=HostOps(matmul=matmul))
    assert len(products) == N
    assert all(a == (1, H, L, S) and b == (1, H, S, D) for a, b in products), products


@pytest.mark.parametrize("target", ["numpy", "cpu"])
@pytest.mark.parametrize("shape", [(4, 8, 16, 2, 1, 3), (4, 8, 16, 4, 2, 3), (4, 8, 16, 4, 2, 1),
                                   (3, 6, 10, 3, 1, 1)], ids=str)
def test_thin_products_over_small_images(monkeypatch, target, shape):
    """A convolution of small images and its gradients, with the images joined to the
    products' free dimensions (``products._merge_thin_batch``) and a 3 x 3 input gradient
    run through its taps (``products._through_taps``), both of which must happen on the
    reference target (the cpu target may write a product this small as a loop nest), and
    without either (``thin_batch=0``): torch's values in float64 each time."""
    torch = pytest.importorskip("torch")
    if target == "cpu" and compiler() is None:
        pytest.skip("no C compiler")
    from tegrad.backends.host import products

    merged, tapped = [], []
    real, real_taps = products._merge_thin_batch, products._through_taps

    def spy(prefix, *args):
        out = real(prefix, *args)
        merged.append(len(out[0]) < len(prefix))
        return out

    def spy_taps(*args):
        tapped.append(real_taps(*args))
        return tapped[-1]

    monkeypatch.setattr(products, "_merge_thin_batch", spy)
    monkeypatch.setattr(products, "_through_taps", spy_taps)
    n, c, o, s, stride, k = shape
    X = tg.placeholder((n, c, s, s), "float64", name="X")
    W = tg.placeholder((o, c, k, k), "float64", name="W")
    Y = tg.nn.conv2d(X, W, None, stride=stride, padding=k // 2)
    H = tg.placeholder(Y.shape, "float64", name="H")
    dX, dW = tg.gradient(Y, [X, W], head=H)
    rng = np.random.default_rng(sum(shape))
    x, w, h = (rng.standard_normal(t.shape) for t in (X, W, H))
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    ty = torch.nn.functional.conv2d(tx, tw, None, stride, k // 2)
    want = [ty.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(ty, [tx, tw],
                                                                            torch.from_numpy(h)))]
    base = tg.Options.from_environment()
    for thin in (base.thin_batch, 0):
        merged.clear()
        tapped.clear()
        got = tg.build([X, W, H], [Y, dX, dW], target=target,
                       options=base.replace(thin_batch=thin))(x, w, h)
        if target == "numpy":
            assert any(merged) == bool(thin)
            # the input gradient of a 3 x 3 convolution through its taps
            assert any(tapped) == (bool(thin) and k == 3)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size, split", [(4, False), (32, True)])
def test_a_strided_conv_of_small_images_is_not_split_into_phases(size, split):
    """Stride 2, 3 x 3 taps: on 32 x 32 images ``X`` is read through its phase planes
    (``contraction.phase_split``), on 4 x 4 ones with a larger weight it is not (the split
    would pad the weight to 4 x 4 taps on every call); with ``thin=0`` always."""
    X = tg.placeholder((2, 64, size, size), "float32", name="X")
    W = tg.placeholder((128, 64, 3, 3), "float32", name="W")
    Y = tg.nn.conv2d(X, W, None, stride=2, padding=1)
    thin = tg.Options.from_environment().thin_batch
    (piece,) = match_contraction(Y, thin=thin).pieces
    assert any(f.phases for f in piece.factors) == split
    (piece,) = match_contraction(Y, thin=0).pieces
    assert any(f.phases for f in piece.factors)


@pytest.mark.parametrize("kernel, stride, padding, extra", [
    (2, 2, 0, 0), (3, 2, 1, 1), (4, 2, 1, 0), (3, 3, 0, 2), (1, 2, 0, 1)], ids=str)
def test_transposed_convolution_classes_are_disjoint_pieces(kernel, stride, padding, extra):
    """A strided transposed convolution's residue classes split its reduce axes with its
    output axes, yet write apart (``contraction._apart``): where they cover the output,
    each is written once, in place (no zeroing, no accumulation), interleaved by one copy
    (``views.phase_grid``); torch's values in float64 on both targets either way."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 3, 5, 4), "float64", name="X")
    W = tg.placeholder((3, 2, kernel, kernel), "float64", name="W")
    Y = tg.nn.conv_transpose2d(X, W, None, stride=stride, padding=padding,
                               output_padding=extra)
    H = tg.placeholder(Y.shape, "float64", name="H")
    c = match_contraction(Y)  # (None with output_padding: a general kernel pads it)
    assert c is None or c.disjoint
    if kernel % stride == 0 and padding == 0 and extra == 0:
        assert c.covers and len(c.pieces) == stride * stride
    rng = np.random.default_rng(kernel * 10 + stride)
    x, w, h = (rng.standard_normal(t.shape) for t in (X, W, H))
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    ty = torch.nn.functional.conv_transpose2d(tx, tw, None, stride, padding, extra)
    want = [ty.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(
        ty, [tx, tw], torch.from_numpy(h)))]
    program = [X, W, H], [Y, *tg.gradient(Y, [X, W], H)]
    for target in ("numpy", "cpu"):
        for a, b in zip(tg.build(*program, target=target)(x, w, h), want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_reduction_the_gradient_keeps_is_summed_once():
    """An Lp pool ``T[i] = (k / D(i) sum_r x^p)^(1/p)``: its gradient keeps the window sum
    as ``T.aux0`` over ``T``'s axes, the same node as in ``T``'s body. Planned together,
    ``T`` reads it (``lower/shared_reductions.py``): one kernel sums the windows, and the
    values are torch's."""
    import torch
    import torch.nn.functional as F

    from tegrad.ir.expr import Reduce
    from tegrad.ir.traverse import tensors_read, walk
    from tegrad.lower.kernels import General

    x = tg.placeholder((2, 3, 9, 8), "float64", name="X")
    y = tg.nn.lp_pool2d(x, 3.0, (2, 3), 2, ceil_mode=True)
    h = tg.placeholder(y.shape, "float64", name="H")
    (g,) = tg.gradient(y, [x], h)
    for fused in (False, True):
        kernels = plan([y, g], fused=fused).kernels
        sums = [k for k in kernels if isinstance(k, General) and any(
            isinstance(e, Reduce) and x in tensors_read(e) and e.combiner.kind == "sum"
            and len(e.axes) == 2 for e in walk(k.body_of.body))]
        assert len(sums) == 1, [k.tensor.name for k in sums]
    rng = np.random.default_rng(3)
    xv, hv = rng.uniform(0.5, 2.0, x.shape), rng.standard_normal(y.shape)
    xt = torch.tensor(xv, requires_grad=True)
    yt = F.lp_pool2d(xt, 3.0, (2, 3), 2, ceil_mode=True)
    (gt,) = torch.autograd.grad(yt, xt, torch.tensor(hv))
    for target in ("numpy", "cpu"):
        got_y, got_g = tg.build([x, h], [y, g], target=target)(xv, hv)
        np.testing.assert_allclose(got_y, yt.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(got_g, gt.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernel, stride", [(2, 3), (3, 4), (3, 3), (5, 3)], ids=str)
def test_a_stride_past_its_taps_reads_a_phase_plane_per_tap(kernel, stride):
    """``X[3 p + k - 1]`` for ``k`` in ``[0, 2)``: the phase split of ``k`` by the stride
    (``contraction._apply_phases``) reads one plane per tap, not one per residue of 3 (the
    third plane would meet only the weight's zero padding: copied and multiplied for
    nothing). With as many taps as the stride or more, every residue has a plane. The
    forward and both gradients are torch's in float64, on both targets."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 96, 40), "float64", name="X")
    W = tg.placeholder((4, 96, kernel), "float64", name="W")
    Y = tg.nn.conv1d(X, W, stride=stride, padding=1)
    H = tg.placeholder(Y.shape, "float64", name="H")
    split = tg.Options.from_environment().replace(thin_batch=0)  # (phases at any size)
    (kernel_of_y,) = [k for k in plan([Y], options=split, fused=True).kernels
                      if isinstance(k, Contraction)]
    (piece,) = kernel_of_y.contraction.pieces
    (phased,) = [f for f in piece.factors if f.phases]
    planes = phased.index[0][0][0][0]  # the phase variable, the plane's leading index
    assert planes.extent == (kernel if kernel < stride else stride)
    rng = np.random.default_rng(kernel * 10 + stride)
    x, w, h = (rng.standard_normal(t.shape) for t in (X, W, H))
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    ty = torch.nn.functional.conv1d(tx, tw, None, stride, 1)
    want = [ty.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(
        ty, [tx, tw], torch.from_numpy(h)))]
    dX, dW = tg.gradient(Y, [X, W], head=H)
    for target in ("numpy", "cpu"):
        got = tg.build([X, W, H], [Y, dX, dW], target=target, options=split)(x, w, h)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
