"""The compiled target (``target="cpu"``) against the NumPy reference backend.

Every op of the op table (forward and gradients) and random programs (forward, gradient
and every intermediate compute) give the reference's values on both targets; the plan
fuses what it should (softmax backward is one kernel per row pass, layer-norm weight
gradients reduce with the column order); gathers check their indices; results are
deterministic; a second process loads the compiled library from the disk cache; with no
compiler, ``target=None`` falls back to NumPy with a warning.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.backends.cpu import compiler

try:
    from .optable import SPECS
    from .programs import programs, random_inputs
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from optable import SPECS
    from programs import programs, random_inputs

pytestmark = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")

RTOL = 1e-12  # of the largest magnitude: summation order and libmvec's last bits differ
# random programs: a last-bit difference of a transcendental (glibc's vector tanh against
# NumPy's) is amplified by cancellation downstream: the gradient of tanh near saturation
# is 1 - tanh^2, whose relative error is 2 ulp / (1 - tanh^2); hypothesis finds programs
# amplifying by 1e7-1e8 (5e-9 and 2.5e-8 seen), so 1e-6 (a wrong kernel is off by O(1)).
# A program ill-conditioned in its inputs is allowed CONDITION_FACTOR times the
# difference the reference itself shows when its inputs move by their last bits
RTOL_PROGRAMS = 1e-6
CONDITION_FACTOR = 100


LIMITS = tg.Options().parallel_copy_elements, tg.Options().parallel_transpose_elements

def scaled_difference(got, want) -> float:
    """The largest difference over the finite values of ``want``, per array as a fraction
    of its largest magnitude."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind == "f":
            finite = np.isfinite(w) & np.isfinite(g)
            scale = max(float(np.max(np.abs(w[finite]), initial=0.0)), 1e-300)
            worst = max(worst, float(np.max(np.abs(g[finite] - w[finite]), initial=0.0)) / scale)
    return worst


def assert_agree(got, want, what, rtol=RTOL, floor=0.0):
    """Each array within ``rtol`` of its largest magnitude (at least ``floor``: a gradient
    that cancels to rounding noise, 1e-16 against inputs of 1, is compared at the scale of
    the program)."""
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, what
        if w.dtype.kind == "f":  # NaN and infinities where the reference has them
            finite = np.isfinite(w)
            np.testing.assert_array_equal(np.where(finite, 0, g), np.where(finite, 0, w),
                                          err_msg=f"{what}: non-finite values")
            scale = max(float(np.max(np.abs(w[finite]), initial=0.0)), floor, 1e-300)
            err = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0)) / scale
            assert err <= rtol, f"{what}: scaled difference {err:.3g}"
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


def both_targets(inputs, outputs, arrays):
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    got = tg.build(inputs, outputs, target="cpu")(*arrays)
    return got, want


def agrees_on_op(spec, compare=both_targets, rtol=RTOL):
    """An op-table entry's forward and gradients (a random head) on both sides of
    ``compare(inputs, outputs, arrays) -> (got, want)``."""
    inputs, out = spec.build()
    diff = [inputs[k] for k in spec.diff]
    head = tg.placeholder(out.shape, out.dtype, name="H")
    outputs = [out, *tg.gradient(out, diff, head=head)]
    rng = np.random.default_rng(7)
    arrays = [*spec.make_inputs(rng), rng.standard_normal(out.shape).astype(out.dtype)]
    got, want = compare([*inputs, head], outputs, arrays)
    assert_agree(got, want, spec.name, rtol)


def agrees_on_program(program, seed, compare=both_targets):
    """A random program's computes and gradient on both sides of ``compare``, within what
    the reference itself moves under last-bit changes of the inputs."""
    rng = np.random.default_rng(seed)
    xs = random_inputs(program, rng)
    head = tg.placeholder(program.output.shape, "float64", name="H")
    grads = tg.gradient(program.output, program.inputs, head=head)
    outputs = [*program.computes, *grads]
    h = rng.standard_normal(program.output.shape)
    got, want = compare([*program.inputs, head], outputs, [*xs, h])
    nudged = [x * (1 + np.finfo(x.dtype).eps * rng.uniform(-2, 2, x.shape))
              if x.dtype.kind == "f" else x for x in xs]
    moved = tg.build([*program.inputs, head], outputs, target="numpy")(*nudged, h)
    condition = scaled_difference(moved, want)
    program_scale = max((float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
                         for w in map(np.asarray, want) if w.dtype.kind == "f"), default=0.0)
    assert_agree(got, want, f"random program (reference moves {condition:.3g} under "
                 "last-bit input changes)", max(RTOL_PROGRAMS, CONDITION_FACTOR * condition),
                 floor=1e-6 * program_scale)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_op_table_forward_and_gradients(spec):
    agrees_on_op(spec)


@settings(max_examples=40, deadline=None)
@given(program=programs(), seed=st.integers(0, 2**32 - 1))
def test_random_programs(program, seed):
    agrees_on_program(program, seed)


def _kernels(f):
    return [k for k in f.program.plan.kernels if k.kind == "general"]


def test_softmax_backward_is_fused():
    X = tg.placeholder((8, 300), "float32", "X")
    H = tg.placeholder((8, 300), "float32", "H")
    Y = tg.nn.softmax(X, -1)
    f = tg.build([X, H], tg.gradient(Y, [X], H), target="cpu")
    # the gradient reads the softmax's output (simplify/products.py): one kernel makes it
    # (per row a max loop, one loop for the sum that keeps each exp in a row buffer, the
    # scaling), one reads it with H (per row a sum loop, then the elementwise loop)
    assert len(f.program.plan.kernels) == 2
    forward, backward = (step.src.text for step in f.program.steps)
    assert forward.count("for (int r") == 2 and forward.count("reduction(+") == 1
    assert forward.count("expf(") == 1 and "row" in forward
    # the exp values go into the output's own row, which the last loop scales
    # (lower/nest_build.NestBuilder._row_buffers)
    assert re.search(r"float \*row\d+ = a0 \+ i0 \* 300L;", forward)
    assert backward.count("for (int r") == 1 and backward.count("reduction(+") == 1
    assert "expf(" not in backward


def test_a_row_reduction_keeps_each_costly_value_its_output_loop_reads():
    # Y[i, j] = e(j) sum_k H[i, k] e(k) + H[i, j] e(j), e(k) = exp(X[i, k]): the sum's loop
    # keeps H e(k) and e(k) alone in row buffers, so each exp is evaluated once
    X = tg.placeholder((8, 300), "float32", "X")
    H = tg.placeholder((8, 300), "float32", "H")
    k = tg.reduce_axis(300, "k")
    Y = tg.compute((8, 300), lambda i, j: tg.exp(X[i, j]) * tg.sum(H[i, k] * tg.exp(X[i, k]), k)
                   + H[i, j] * tg.exp(X[i, j]), name="Y")
    f = tg.build([X, H], Y, target="cpu")
    (kernel,) = f.program.steps
    assert kernel.src.text.count("expf(") == 1 and kernel.src.text.count("row") >= 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 300)).astype(np.float32)
    h = rng.standard_normal((8, 300)).astype(np.float32)
    e = np.exp(x.astype(np.float64))
    want = e * (h * e).sum(-1, keepdims=True) + h * e
    np.testing.assert_allclose(f(x, h), want, rtol=1e-4)


def test_weight_gradient_reduces_in_column_order():
    X = tg.placeholder((64, 96), "float32", "X")
    W = tg.placeholder((96,), "float32", "W")
    B = tg.placeholder((96,), "float32", "B")
    H = tg.placeholder((64, 96), "float32", "H")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    f = tg.build([X, W, B, H], tg.gradient(Y, [W], H), target="cpu")
    assert "cacc[j]" in f.program.steps[-1].src.text


def test_guards_on_the_last_axis_split_its_loop():
    """A concatenation along the last axis runs as one branch-free (vectorized) loop per
    part: the guards that pick the part are constant on each range of columns."""
    parts = [tg.placeholder((16, n), "float32", name) for n, name in
             ((136, "A"), (120, "B"), (50, "C"))]
    Y = tg.nn.cat(parts, dim=1)
    f = tg.build(parts, Y, target="cpu")
    text = f.program.steps[-1].src.text
    assert text.count("#pragma omp simd") == 3 and "if (" not in text and " ? " not in text
    assert re.search(r"for \(int (i\d+) = 136; \1 < 256;", text)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(p.shape).astype(np.float32) for p in parts]
    np.testing.assert_array_equal(f(*arrays), np.concatenate(arrays, axis=1))


def test_regions_of_a_column_reduction():
    """A bias gradient over concatenated gates, ``db[j] = sum_t (select(j < 24, sum_n
    G1[t, n, j]) + select(24 <= j, sum_n G2[t, n, j - 24]))``: per range of ``j`` one sum
    over (t, n), reduced in column order."""
    G1 = tg.placeholder((5, 4, 24), "float64", "G1")
    G2 = tg.placeholder((5, 4, 40), "float64", "G2")
    t = tg.reduce_axis((0, 5), "t")
    n1, n2 = tg.reduce_axis((0, 4), "n1"), tg.reduce_axis((0, 4), "n2")
    db = tg.compute((64,), lambda j: tg.sum(
        tg.if_then_else(j < 24, tg.sum(G1[t, n1, j], axis=n1), 0.0)
        + tg.if_then_else(j >= 24, tg.sum(G2[t, n2, j - 24], axis=n2), 0.0), axis=t), "db")
    f = tg.build([G1, G2], db, target="cpu")
    assert f.program.steps[-1].src.text.count("cacc[j] +=") == 2
    rng = np.random.default_rng(1)
    g1, g2 = rng.standard_normal(G1.shape), rng.standard_normal(G2.shape)
    want = np.concatenate([g1.sum((0, 1)), g2.sum((0, 1))])
    np.testing.assert_allclose(f(g1, g2), want, rtol=1e-13, atol=1e-13)


def test_regions_drop_the_where_their_range_satisfies():
    """A bias gradient of concatenated parts whose sums carry the part's guard as their
    ``where`` too (``sum_n G2[n, j - 24] where 0 <= j - 24``, as attention's packed input
    bias gets it): on each range the conjunct holds everywhere, so it is dropped and each
    part sums in column order."""
    G1 = tg.placeholder((40, 24), "float32", "G1")
    G2 = tg.placeholder((40, 40), "float32", "G2")
    n1, n2 = tg.reduce_axis(40, "n1"), tg.reduce_axis(40, "n2")
    db = tg.compute((64,), lambda j: tg.if_then_else(
        j < 24, tg.sum(G1[n1, j], axis=n1, where=j < 24), 0.0)
        + tg.if_then_else(j >= 24, tg.sum(G2[n2, j - 24], axis=n2, where=j - 24 >= 0), 0.0),
        "db")
    f = tg.build([G1, G2], db, target="cpu")
    assert f.program.steps[-1].src.text.count("cacc[j] +=") == 2
    rng = np.random.default_rng(10)
    g1, g2 = (rng.standard_normal(p.shape).astype(np.float32) for p in (G1, G2))
    np.testing.assert_allclose(f(g1, g2), np.concatenate([g1.sum(0), g2.sum(0)]), rtol=1e-5)


def test_a_causal_softmax_output_loop_is_branch_free():
    """``P[l, s] = select(s <= l, exp(S[l, s] - m[l]) / z[l], 0)``: the row max and sum
    under the branch are computed once per row, outside the output loop, so the branch is
    no guard there but a choice, and the loop vectorizes."""
    Q = tg.placeholder((2, 64, 16), "float32", "Q")
    Y = tg.nn.scaled_dot_product_attention(Q, Q, Q, is_causal=True)
    f = tg.build([Q], Y, target="cpu")
    (probs,) = [s.src.text for k, s in zip(f.program.plan.kernels, f.program.steps,
                                            strict=True) if k.tensor.name.endswith(".probs")]
    assert "if (t" not in probs and re.search(r"#pragma omp simd\n\s*for \(int i", probs), probs
    torch = pytest.importorskip("torch")
    q = np.random.default_rng(11).standard_normal(Q.shape).astype(np.float32)
    t = torch.tensor(q)
    want = torch.nn.functional.scaled_dot_product_attention(t, t, t, is_causal=True)
    np.testing.assert_allclose(f(q), want.numpy(), rtol=1e-4, atol=1e-5)


def test_gate_gradients_fuse_into_the_concatenation():
    """In an LSTM's adjoint step each gate's gradient is read by one quarter of the
    concatenated gate gradient (a guarded read): counted so, they are inlined."""
    ps = [tg.placeholder(s, "float32", n) for s, n in
          (((3, 2, 4), "x"), ((2, 8), "h0"), ((2, 8), "c0"), ((32, 4), "w_ih"),
           ((32, 8), "w_hh"), ((32,), "b_ih"), ((32,), "b_hh"))]
    out, _, _ = tg.nn.lstm(*ps)
    head = tg.placeholder(out.shape, "float32", "head")
    f = tg.build([*ps, head], tg.gradient(out, [ps[1]], head=head), target="cpu")
    scans = [s for s in f.program.steps if isinstance(s, type(f.program))]
    adjoint = scans[-1].plan.kernels
    assert not any(".gate" in k.tensor.name and "adj" in k.tensor.name for k in adjoint), [
        k.tensor.name for k in adjoint]


def test_a_branch_with_a_small_window_is_a_ternary():
    """``select(x > 0, sum of a 2-wide window, 0)``: the window's reads stay in bounds and
    its loop is unrolled, so the branch is evaluated unguarded and the row vectorizes."""
    X = tg.placeholder((6, 40), "float32", "X")
    r = tg.reduce_axis((0, 2), "r")
    Y = tg.compute((6, 20), lambda i, j: tg.if_then_else(
        X[i, j] > 0, tg.sum(X[i, 2 * j + r], axis=r), 0.0), "Y")
    f = tg.build([X], Y, target="cpu")
    text = f.program.steps[-1].src.text
    assert "#pragma omp simd" in text and "if (" not in text
    x = np.random.default_rng(2).standard_normal((6, 40)).astype(np.float32)
    pairs = x[:, 0::2] + x[:, 1::2]
    np.testing.assert_allclose(f(x), np.where(x[:, :20] > 0, pairs, 0), rtol=1e-6)


def test_a_sum_through_ids_read_under_a_guard_stays_a_kernel_of_its_own():
    """A weighted cross entropy's mean divides by ``sum_n [t_n != ignore] w[t_n]``, which
    its gradient ``dX[i, j]`` reads in the branch ``t_i != ignore``. The loop nest keeps a
    gather under its guard, so inlined there the total would be summed once per element
    (``N^2 C``); fusion counts it so and keeps it a kernel (``_stays_guarded``)."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((16, 10), "float32", "X")
    T = tg.placeholder((16,), "int64", "T")
    W = tg.placeholder((10,), "float32", "W")
    loss = tg.nn.cross_entropy(X, T, weight=W, label_smoothing=0.2)
    H = tg.placeholder((), "float32", "H")
    f = tg.build([X, T, W, H], [loss, *tg.gradient(loss, [X], H)], target="cpu")
    assert any(k.tensor.name.endswith(".weight_total") for k in f.program.plan.kernels)
    gradient = f.program.steps[-1].src.text
    import re  # no sum over the samples in dX's loops (its own loop over them is ``f``)
    assert not re.search(r"\br\d+ < 16;", gradient), gradient
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((16, 10)).astype(np.float32), rng.uniform(0.5, 1, 10)
    t = rng.integers(0, 10, 16)
    t[[0, 7]] = -100
    tx = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.cross_entropy(tx, torch.tensor(t), weight=torch.tensor(
        w, dtype=torch.float32), label_smoothing=0.2)
    (dx,) = torch.autograd.grad(want, [tx])
    got, got_dx = f(x, t, w.astype(np.float32), np.float32(1))
    np.testing.assert_allclose(got, want.item(), rtol=1e-5)
    np.testing.assert_allclose(got_dx, dx.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("bounded", [True, False])
def test_a_class_picked_by_its_index_is_one_point_of_the_loop(bounded):
    """``nll_loss`` picks ``sum_c [c = t_n] x[n, c]``: with ``Options.value_bounds`` the
    loop over the classes runs from ``max(0, t_n)`` to ``min(C, t_n + 1)``, one point (none
    for an ``ignore_index`` of -100 or a class past the end), not ``C`` masked ones."""
    X = tg.placeholder((6, 50), "float64", "X")
    T = tg.placeholder((6,), "int64", "T")
    options = tg.Options.from_environment().replace(value_bounds=bounded)
    f = tg.build([X, T], tg.nn.nll_loss(X, T, reduction="none"), target="cpu",
                 options=options)
    text = f.program.steps[-1].src.text
    assert ("< 50;" not in text and "tg_imin(50, " in text) == bounded, text
    rng = np.random.default_rng(6)
    x, t = rng.standard_normal((6, 50)), np.array([3, -100, 49, 0, 50, 7])
    want = np.where((t >= 0) & (t < 50), -x[np.arange(6), np.clip(t, 0, 49)], 0.0)
    np.testing.assert_array_equal(f(x, t), want)


@pytest.mark.parametrize("size, vectorized", [(7, False), (20, True)])
def test_a_reduction_loop_of_fewer_than_8_points_stays_scalar(size, vectorized):
    """A reduction vectorizes its innermost loop only from ``SIMD_MIN_EXTENT`` (8) points:
    a depthwise weight gradient sums rows of at most 7 points at 7x7 (its window's guards
    bound them), where a vector loop is mostly set-up and tail (twice as long as the
    scalar one at 384 channels); rows of 20 vectorize. The values match torch's."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 4, size, size), "float32", "X")
    W = tg.placeholder((4, 1, 3, 3), "float32", "W")
    H = tg.placeholder((2, 4, size, size), "float32", "H")
    f = tg.build([X, W, H], tg.gradient(tg.nn.conv2d(X, W, padding=1, groups=4), [W], H),
                 target="cpu")
    text = f.program.steps[-1].src.text
    assert ("#pragma omp simd reduction" in text) == vectorized, text
    rng = np.random.default_rng(8)
    x, w, h = (rng.standard_normal(p.shape).astype(np.float32) for p in (X, W, H))
    tw = torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(torch.tensor(x), tw, padding=1, groups=4)
    (want,) = torch.autograd.grad(y, [tw], torch.tensor(h))
    np.testing.assert_allclose(f(x, w, h)[0], want.numpy(), rtol=1e-4, atol=1e-5)


def test_a_group_norm_gradient_sums_along_rows_and_shares_its_passes():
    """The input gradient of a group norm sums ``H[n, 2 g + rho, y, x] ...`` over its
    group, the residue ``rho`` of the scatter-to-gather listed last: the loops visit the
    axes by stride (``Options.order_reductions``), so each innermost loop reads a row of
    10 contiguous floats, not 2 at a stride of 60, and the plane's 6 rows are one loop of
    60 (``Options.coalesce_loops``); the sums of the body written per residue of the
    channel share their passes (siblings)."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 8, 6, 10), "float32", "X")
    H = tg.placeholder(X.shape, "float32", "H")
    for coalesce, row in ((False, "10"), (True, "60")):
        options = tg.Options.from_environment().replace(coalesce_loops=coalesce)
        f = tg.build([X, H], tg.gradient(tg.nn.group_norm(X, 4), [X], H), target="cpu",
                     options=options)
        text = f.program.steps[-1].src.text
        inner = re.findall(
            r"#pragma omp simd reduction[^\n]*\n\s*for \(int r\d+ = 0; r\d+ < (\d+);", text)
        assert inner and set(inner) == {row} and len(inner) <= 2, text
    rng = np.random.default_rng(7)
    x, h = (rng.standard_normal(X.shape).astype(np.float32) for _ in range(2))
    tx = torch.tensor(x, requires_grad=True)
    (want,) = torch.autograd.grad(torch.nn.functional.group_norm(tx, 4), [tx], torch.tensor(h))
    np.testing.assert_allclose(f(x, h)[0], want.numpy(), rtol=1e-4, atol=1e-5)


def test_a_reduction_in_column_order_stays_a_kernel():
    """``P[n, d] = sum_c exp(X[n, c, d])`` over 21 classes runs in column order (rows of
    ``d`` contiguous). Inlined into ``Y[n, d] = log(P[n, d])``, read once per point, its
    loop would step across the rows, one element of each at a stride of 64: fusion keeps
    it a kernel (``fusion._runs_in_columns``)."""
    X = tg.placeholder((3, 21, 64), "float32", "X")
    c = tg.reduce_axis(21, "c")
    P = tg.compute((3, 64), lambda n, d: tg.sum(tg.exp(X[n, c, d]), axis=c), name="P")
    Y = tg.compute((3, 64), lambda n, d: tg.log(P[n, d]), name="Y")
    f = tg.build([X], Y, target="cpu")
    assert [k.tensor.name for k in f.program.plan.kernels] == ["P", "Y"]
    assert "cacc[j] +=" in f.program.steps[0].src.text
    x = np.random.default_rng(8).standard_normal(X.shape).astype(np.float32)
    np.testing.assert_allclose(f(x), np.log(np.exp(x).sum(1)), rtol=1e-5)


def test_max_pool_gradient_runs_window_by_window():
    """``dX[i, j]`` reads the window's maximum, tie count and gradient at ``[i // 2, j //
    2]``: run by residue classes (``i = 2 q + a``, ``a`` unrolled), the three are computed
    once per window in the gradient's one kernel, which holds its comparisons as ints."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 3, 8, 10), "float32", "X")
    Y = tg.nn.max_pool2d(X, 2, 2)
    H = tg.placeholder(Y.shape, "float32", "H")
    f = tg.build([X, H], tg.gradient(Y, [X], H), target="cpu")
    assert len(f.program.plan.kernels) == 1
    text = f.program.steps[-1].src.text
    assert text.count("(-INFINITY)") == 1 and text.count(" = (float)0x0.0p+0;") == 1
    assert text.count("a0[") == 4 and "uint8_t" not in text
    rng = np.random.default_rng(3)
    x, h = (rng.standard_normal(t.shape).astype(np.float32) for t in (X, H))
    tx = torch.tensor(x, requires_grad=True)
    (want,) = torch.autograd.grad(torch.nn.functional.max_pool2d(tx, 2, 2), [tx],
                                  torch.tensor(h))
    np.testing.assert_allclose(f(x, h)[0], want.numpy(), rtol=1e-6)


def test_a_tie_count_masks_the_edges_of_its_windows():
    """An adaptive max pool's bins of 12 or 13 points (56 -> 5) are counted for ties,
    ``sum_r [x(r) == max_k x(k)]`` under the bin's bound. With regions (the bins' starts
    are ``(56 i) // 5``: ``nest_facts.regions`` cuts the axis at each), every bin has
    constant bounds: the count's loops are vectorized with no branch. Without them, the
    count is in the forward kernel and the max computed once outside its loops
    (``nest_facts.eager``'s ``axes``), so the bound is a mask in a vectorized loop, not a
    branch. Values with ties (integer inputs) are the reference's, where ties share the
    gradient equally."""
    X = tg.placeholder((4, 4, 56, 56), "float32", "X")  # (16 planes: rows are looped)
    Y = tg.nn.adaptive_max_pool2d(X, 5)
    H = tg.placeholder(Y.shape, "float32", "H")
    outputs = [Y, *tg.gradient(Y, [X], H)]
    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, X.shape).astype(np.float32)  # ties in every bin
    h = rng.standard_normal(H.shape).astype(np.float32)
    want = tg.build([X, H], outputs, target="numpy")(x, h)
    base = tg.Options.from_environment()
    for options in (base, base.replace(max_regions=0)):
        f = tg.build([X, H], outputs, target="cpu", options=options)
        counting = [s.src.text for s in f.program.steps  # (a kernel of Y's shape)
                    if s.src.tensor.shape == Y.shape and " == " in s.src.text]
        assert counting and re.search(r"#pragma omp simd reduction\(\+:acc\d+\)\n\s*for",
                                      counting[0])
        if options.max_regions:
            assert "if (" not in counting[0] and " / ((int32_t)5)" not in counting[0]
        else:
            assert "(-INFINITY)" in counting[0]
            assert re.search(r"acc\d+ \+= t\d+ \? t\d+ : 0;", counting[0])
        assert_agree(f(x, h), want, "adaptive max", rtol=1e-6)


def test_a_kernel_read_at_its_own_point_joins_its_reader():
    """A layer norm's row mean is read by its variance at the same row and by the weight
    gradient elsewhere, so fusion keeps it; grouping computes it in the variance's loop
    and stores both. Its output and input gradient share inputs only: left apart."""
    X = tg.placeholder((64, 96), "float64", "X")
    W, B = tg.placeholder((96,), "float64", "W"), tg.placeholder((96,), "float64", "B")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    H = tg.placeholder(Y.shape, "float64", "H")
    outputs = [Y, *tg.gradient(Y, [X, W, B], H)]
    f = tg.build([X, W, B, H], outputs, target="cpu")
    name = Y.name  # (made unique among the tensors built so far)
    kernels = {k.tensor.name: k for k in f.program.plan.kernels}
    assert f"{name}.mean" not in kernels, f.program.plan.describe()
    assert [t.name for t, _ in kernels[f"{name}.var"].also] == [f"{name}.mean"]
    assert name in kernels and not kernels[f"{name}.grad.X"].also
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(t.shape) for t in (X, W, B, H)]
    want = tg.build([X, W, B, H], outputs, target="numpy")(*arrays)
    for got, w in zip(f(*arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def _softmax_program():  # the forward's output is read by the gradient: not streamed
    X, H = tg.placeholder((64, 1000), "float32", "X"), tg.placeholder((64, 1000), "float32", "H")
    Y = tg.nn.softmax(X, -1)
    return [X, H], [Y, *tg.gradient(Y, [X], H)], [False, True]


def _layer_norm_program():  # an input gradient with its weight and bias gradients' sums
    X = tg.placeholder((3, 40, 96), "float64", "X")
    W, B = tg.placeholder((96,), "float64", "W"), tg.placeholder((96,), "float64", "B")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    H = tg.placeholder(Y.shape, "float64", "H")
    return [X, W, B, H], tg.gradient(Y, [X, W, B], H), [True]


def _max_pool_program():  # residue classes: four stores per window (merged loop: n, c)
    X = tg.placeholder((4, 8, 12, 20), "float32", "X")
    Y = tg.nn.max_pool2d(X, 2, 2)
    H = tg.placeholder(Y.shape, "float32", "H")
    return [X, H], tg.gradient(Y, [X], H), [True]


def _concatenation_program():  # one loop per range of columns
    parts = [tg.placeholder((40, n), "float32", name) for n, name in ((36, "A"), (30, "B"))]
    return parts, [tg.nn.cat(parts, dim=1)], [True]


def _grouped_program():  # Y1, read by Y2 at its own point only, made in Y2's loop
    X = tg.placeholder((48, 200), "float32", "X")
    Y1 = tg.compute(X.shape, lambda i, j: tg.exp(X[i, j]), name="Y1")
    Y2 = tg.compute(X.shape, lambda i, j: Y1[i, j] * X[i, j], name="Y2")
    return [X], [Y1, Y2], [True]


@pytest.fixture
def stream_small():
    """``Options`` with the streaming limits lowered so that small kernels stream their
    outputs (only parallel loops stage: every kernel runs parallel)."""
    return tg.Options.from_environment().replace(
        stream_bytes=0, stream_traffic_bytes=0, stage_min_bytes=64, parallel_work=0)


@pytest.mark.parametrize("make", [_softmax_program, _layer_norm_program, _max_pool_program,
                                  _concatenation_program, _grouped_program])
def test_outputs_no_kernel_reads_later_are_streamed(make, stream_small):
    """Outputs that no later kernel reads are staged per iteration of the parallel loop
    and streamed past the caches (``lower/nest_build.NestBuilder._stage``); with the size limits
    lowered, every kind of row loop does so and agrees with the NumPy backend (rows of
    4000 and 800 bytes: streams that start and end inside a cache line)."""
    inputs, outputs, streamed = make()
    f = tg.build(inputs, outputs, target="cpu", options=stream_small)
    texts = [step.src.text for step in f.program.steps]
    assert ["tg_stream(" in text for text in texts] == streamed
    if make is _grouped_program:  # both outputs, from one loop
        assert len(texts) == 1 and texts[0].count("tg_stream(") == 2
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(p.shape).astype(p.dtype) for p in inputs]
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    for _ in range(2):  # (the second run writes into the first run's buffers)
        assert_agree(f(*arrays), want, make.__name__, rtol=1e-5)


def test_step_programs_do_not_stream(stream_small):
    """A scan's step writes rows the next step reads: never past the caches."""
    from tegrad.backends.cpu import program

    ph = lambda shape, name: tg.placeholder(shape, "float32", name)  # noqa: E731
    x, h0, c0 = ph((5, 16, 8), "x"), ph((16, 32), "h0"), ph((16, 32), "c0")
    wih, whh = ph((128, 8), "wih"), ph((128, 32), "whh")
    out = tg.nn.lstm(x, h0, c0, wih, whh)[0]
    f = tg.build([x, h0, c0, wih, whh], out, target="cpu", options=stream_small)
    steps = [s for s in f.program.steps if isinstance(s, program.CpuProgram)]
    texts = [k.src.text for s in steps for k in s.steps if hasattr(k, "src")]
    assert texts and not any("tg_stream(" in text for text in texts)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_sums_are_made_in_the_loops_of_a_row_kernel(dtype):
    """A layer norm's weight and bias gradients sum over the rows that its input gradient
    visits: they are summed in that kernel's loops (per thread, then added up); the row
    mean and variance, then read by that kernel alone, are computed in its row loop; the
    three gradients match torch's. A sum over fewer rows stays a kernel of its own."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((3, 40, 96), dtype, "X")
    W, B = tg.placeholder((96,), dtype, "W"), tg.placeholder((96,), dtype, "B")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    H = tg.placeholder(Y.shape, dtype, "H")
    q = tg.reduce_axis((0, 39), "q")
    partial = tg.compute((96,), lambda j: tg.sum(H[0, q, j], axis=q), "partial")
    f = tg.build([X, W, B, H], [*tg.gradient(Y, [X, W, B], H), partial], target="cpu")
    kernels = {k.tensor.name: k for k in f.program.plan.kernels}
    dx = kernels[f"{Y.name}.grad.X"]
    assert [t.name for t, _ in dx.columns] == [f"{Y.name}.grad.W", f"{Y.name}.grad.B"]
    assert sorted(kernels) == sorted([dx.tensor.name, "partial"]), f.program.plan.describe()
    assert "omp_get_thread_num" in f.program.steps[list(kernels).index(dx.tensor.name)].src.text
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(t.shape).astype(dtype) for t in (X, W, B, H)]
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays[:3])
    ty = torch.nn.functional.layer_norm(tx, (96,), tw, tb)
    want = torch.autograd.grad(ty, [tx, tw, tb], torch.tensor(arrays[3], dtype=torch.float64))
    got = f(*arrays)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for g, w in zip(got, [*want, torch.tensor(arrays[3][0, :39].sum(0, dtype=np.float64))],
                    strict=True):
        w = w.numpy()
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())
    again = f(*arrays)  # the same threads add their partial sums in the same order
    for g, a in zip(got, again, strict=True):
        np.testing.assert_array_equal(g, a)


def test_column_sums_go_to_the_row_kernel_that_reads_their_rows():
    """In a forward+backward layer norm both the output and the input gradient are row
    kernels before the weight and bias gradients; the sums go into the input gradient's
    loops, which read ``H`` and ``X`` anyway, so the output's loops do not read ``H``."""
    X = tg.placeholder((64, 96), "float32", "X")
    W, B = tg.placeholder((96,), "float32", "W"), tg.placeholder((96,), "float32", "B")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    H = tg.placeholder(Y.shape, "float32", "H")
    f = tg.build([X, W, B, H], [Y, *tg.gradient(Y, [X, W, B], H)], target="cpu")
    kernels = {k.tensor.name: k for k in f.program.plan.kernels}
    dx, y = kernels[f"{Y.name}.grad.X"], kernels[Y.name]
    assert [t.name for t, _ in dx.columns] == [f"{Y.name}.grad.W", f"{Y.name}.grad.B"]
    assert not y.columns and H not in tg_reads(y)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(t.shape).astype("float32") for t in (X, W, B, H)]
    reference = tg.build([X, W, B, H], [Y, *tg.gradient(Y, [X, W, B], H)], target="numpy")
    for got, want in zip(f(*arrays), reference(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def tg_reads(kernel) -> set:
    from tegrad.lower.kernels import reads_and_makes

    return set(reads_and_makes(kernel)[0])


def test_an_lstm_step_writes_its_cell_and_hidden_state_in_one_kernel():
    ps = [tg.placeholder(s, "float64", n) for s, n in
          (((3, 2, 4), "x"), ((2, 8), "h0"), ((2, 8), "c0"), ((32, 4), "w_ih"),
           ((32, 8), "w_hh"), ((32,), "b_ih"), ((32,), "b_hh"))]
    out, h, c = tg.nn.lstm(*ps)
    f = tg.build(ps, [out, h, c], target="cpu")
    (scan,) = [s for s in f.program.steps if isinstance(s, type(f.program))]
    grouped = [k for k in scan.plan.kernels if getattr(k, "also", ())]
    assert [(k.tensor.name.split(".", 1)[1], [t.name.split(".", 1)[1] for t, _ in
                                              k.also]) for k in grouped] == [
        ("h_new.step", ["c_new.step"])]
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(p.shape) for p in ps]
    for got, w in zip(f(*arrays), tg.build(ps, [out, h, c], target="numpy")(*arrays),
                      strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_an_lstm_step_that_keeps_its_gates_writes_them_in_its_one_kernel():
    """With a backward, the forward step keeps its activated gates and cell activation
    (``lower/saved_steps.py``): ``h_new`` takes ``c_new`` into its loops together with the
    gates that ``c_new`` had taken, so the step is a product and one loop nest, not one
    per gate (``grouping._absorb`` asks a kernel again after each kernel it takes)."""
    ps = [tg.placeholder(s, "float64", n) for s, n in
          (((3, 2, 4), "x"), ((2, 8), "h0"), ((2, 8), "c0"), ((32, 4), "w_ih"),
           ((32, 8), "w_hh"), ((32,), "b_ih"), ((32,), "b_hh"))]
    out = tg.nn.lstm(*ps)[0]
    head = tg.placeholder(out.shape, "float64", "head")
    outputs = [out, *tg.gradient(out, ps, head=head)]
    f = tg.build([*ps, head], outputs, target="cpu")
    forward = next(s for s in f.program.steps if isinstance(s, type(f.program)))
    general = [k for k in forward.plan.kernels if k.kind == "general"]
    assert len(general) == 1, forward.plan.describe()
    (step,) = general
    assert step.tensor.name.endswith(".h_new.step")
    assert sorted(t.name.split(".", 1)[1] for t, _ in step.also) == sorted(
        f"{v}.step" for v in ("c_new", "c_act", "gatei", "gatef", "gateg", "gateo"))
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(p.shape) for p in [*ps, head]]
    reference = tg.build([*ps, head], outputs, target="numpy")
    for got, w in zip(f(*arrays), reference(*arrays), strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_bad_gather_index_raises():
    E = tg.placeholder((5, 3), "float64", "E")
    idx = tg.placeholder((4,), "int64", "idx")
    out = tg.compute((4, 3), lambda i, j: E[idx[i], j], "rows")
    f = tg.build([E, idx], out, target="cpu")
    e = np.arange(15.0).reshape(5, 3)
    np.testing.assert_array_equal(f(e, np.array([4, 0, 2, 2])), e[[4, 0, 2, 2]])
    with pytest.raises(IndexError, match=r"rows: gather E\[\.\.\.\] index 0 got value 7"):
        f(e, np.array([1, 7, 0, 0]))


def test_scatter_results_are_deterministic():
    E = tg.placeholder((50, 16), "float32", "E")
    idx = tg.placeholder((4000,), "int64", "idx")
    out = tg.compute((4000, 16), lambda i, j: E[idx[i], j], "emb")
    H = tg.placeholder(out.shape, "float32", "H")
    f = tg.build([E, idx, H], tg.gradient(out, [E], H), target="cpu")
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((50, 16)).astype("float32"), rng.integers(0, 50, 4000),
            rng.standard_normal((4000, 16)).astype("float32"))
    first = f(*args)[0]
    for _ in range(3):
        np.testing.assert_array_equal(f(*args)[0], first)


PROGRAM = """
import sys, time
import numpy as np
import tegrad as tg
from tegrad.backends.cpu import compiler
if sys.argv[1] == "warm":
    def refuse(*a):
        raise AssertionError("compiled again although the cache holds the library")
    compiler._compile = refuse
X = tg.placeholder((16, 40), "float32", "X")
H = tg.placeholder((16, 40), "float32", "H")
f = tg.build([X, H], tg.gradient(tg.nn.log_softmax(X, -1), [X], H), target="cpu")
x = np.linspace(-2, 2, 640, dtype="float32").reshape(16, 40)
print(float(f(x, np.ones_like(x))[0].sum()))
"""


def test_second_process_loads_from_the_disk_cache(tmp_path):
    env = {**os.environ, "TEGRAD_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(tg.__file__).parents[1])}
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    cold = subprocess.run([sys.executable, str(script), "cold"], env=env, capture_output=True,
                          text=True, check=True)
    libraries = sorted((tmp_path / "cpu").glob("*.so"))
    # the program's kernels, the product and the copy helpers, the call extension
    headers = (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
    assert len(libraries) == 3 + headers
    warm = subprocess.run([sys.executable, str(script), "warm"], env=env, capture_output=True,
                          text=True, check=False)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == cold.stdout
    assert sorted((tmp_path / "cpu").glob("*.so")) == libraries


def test_kernels_are_dealt_into_balanced_translation_units():
    from tegrad.backends.cpu.compiler import split_units

    functions = ["void a(){}" * 4, "void b(){}" * 2, "void c(){}" * 2, "void d(){}"]
    units = split_units("/*p*/", functions, 2)
    assert len(units) == 2 and all(u.startswith("/*p*/") for u in units)
    assert sorted(f for u in units for f in u.split("\n\n")[1:]) == sorted(functions)
    # longest first, each to the lighter unit: 40 (+ 10), against 20 + 20
    assert [u.split("\n\n")[1:] for u in units] == [[functions[0], functions[3]],
                                                     functions[1:3]]
    assert split_units("/*p*/", functions[:1], 8) == ["/*p*/\n\n" + functions[0]]


def test_without_a_compiler_none_falls_back_and_cpu_refuses(monkeypatch):
    from tegrad.backends import target

    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    monkeypatch.delenv("TEGRAD_TARGET", raising=False)
    compiler.compiler.cache_clear()
    monkeypatch.setattr(target, "_WARNED", set())
    try:
        X = tg.placeholder((3,), "float64", "X")
        Y = tg.compute((3,), lambda i: X[i] * 2.0, "Y")
        with pytest.raises(compiler.CompilerMissing, match="needs a C compiler"):
            tg.build([X], Y, target="cpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f = tg.build([X], Y)
        assert f.target == "numpy"
        assert any("falls back to the NumPy backend" in str(w.message) for w in caught)
        np.testing.assert_array_equal(f(np.arange(3.0)), [0.0, 2.0, 4.0])
    finally:
        compiler.compiler.cache_clear()


LAYOUTS = {  # name: (a, b) builders from an rng; every one a view BLAS can take or not
    "plain": lambda r: (r.standard_normal((33, 20)), r.standard_normal((20, 17))),
    "a transposed": lambda r: (r.standard_normal((20, 33)).T, r.standard_normal((20, 17))),
    "b transposed": lambda r: (r.standard_normal((33, 20)), r.standard_normal((17, 20)).T),
    "row vector": lambda r: (r.standard_normal((1, 20)), r.standard_normal((20, 300))),
    "column result": lambda r: (r.standard_normal((300, 20)), r.standard_normal((20, 1))),
    "padded rows": lambda r: (r.standard_normal((33, 32))[:, :20], r.standard_normal((20, 17))),
    "batched": lambda r: (r.standard_normal((3, 33, 20)), r.standard_normal((3, 20, 17))),
    "broadcast batch": lambda r: (r.standard_normal((4, 1, 33, 20)),
                                  r.standard_normal((1, 2, 20, 17))),
    "strided columns": lambda r: (r.standard_normal((33, 40))[:, ::2], r.standard_normal((20, 17))),
    "large": lambda r: (r.standard_normal((256, 300)), r.standard_normal((300, 200))),
}


def _blas_library(name):
    """The BLAS ``name`` as the compiled target would call it; skips if not installed."""
    from tegrad.backends.cpu import gemm

    blas = gemm.Blas(mkl=name == "mkl")
    if blas.name != name and name == "mkl":
        pytest.skip("MKL is not installed (pip install tegrad[mkl])")
    assert blas.found, "no cblas_?gemm among the loaded libraries"
    return blas


@pytest.mark.parametrize("library", ["mkl", "openblas"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_parallel_matmul_matches_numpy(layout, dtype, library):
    from tegrad.backends.cpu.gemm import matmul, one_blas_thread

    blas = _blas_library(library)
    a, b = (x.astype(dtype) for x in LAYOUTS[layout](np.random.default_rng(3)))
    want = np.matmul(a, b)
    with one_blas_thread():
        got = matmul(a, b, threads=2, blas=blas)
        out = np.full(want.shape, np.nan, dtype)
        matmul(a, b, out=out, threads=2, blas=blas)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


def _shifted_terms(rng, dtype, rows, depth, cols, shifts, a_transposed=False, batch=(),
                   shared_a=False):
    """Operands of a looped product: term ``t`` multiplies its own ``(rows, depth)`` block
    of A (stored transposed if asked) by B's columns shifted by ``shifts[t]`` (a
    convolution's taps), every term's views at fixed offsets from the first's. With
    ``shared_a``, one A for the whole batch (a convolution's weights, stride 0 over it)."""
    width = cols + max(shifts) - min(shifts)
    own = () if shared_a else batch
    a = rng.standard_normal((len(shifts), *own, depth, rows) if a_transposed
                            else (len(shifts), *own, rows, depth)).astype(dtype)
    b = rng.standard_normal((*batch, depth, width)).astype(dtype)
    if shared_a:
        a = np.broadcast_to(a[:, None], (len(shifts), *batch, *a.shape[1:]))
    a_terms = [np.swapaxes(a[t], -1, -2) if a_transposed else a[t] for t in range(len(shifts))]
    b_terms = [b[..., s - min(shifts): s - min(shifts) + cols] for s in shifts]
    return a_terms, b_terms


TERMS = {  # name: (rows, depth, cols, shifts, A transposed, batch[, A shared by the
    # batch]); each thread of two gets half the columns of one matrix, whole matrices of
    # an even batch, or half of each matrix of an odd one
    "nine taps": (20, 16, 403, [0, 1, 2, 30, 31, 32, 60, 61, 62], False, ()),
    "negative shifts": (64, 8, 300, [0, -1, -2, -30, -31], False, ()),
    "a transposed": (9, 24, 290, [3, 0, 7], True, ()),
    "batched": (16, 12, 140, [0, 5], False, (3,)),
    "one shallow product": (33, 64, 301, [0], False, ()),
    "one shallow product, a transposed": (17, 40, 260, [0], True, (2,)),
    "one deep wide product": (40, 300, 1100, [0], False, ()),
    "one deep wide product, a transposed": (600, 270, 520, [0], True, ()),
    "one deep narrow product": (24, 300, 400, [0], False, ()),
    # deeper than term_kernel.SLICE_DEPTH: slices of 512 and a shorter last one
    "one product in slices": (20, 1100, 300, [0], False, ()),
    "one product in slices, a transposed": (30, 1030, 200, [0], True, (2,)),
    "narrow": (40, 16, 100, [0, 1, 2], False, ()),
    "one row": (1, 16, 200, [0, 1], False, ()),
    # one A packed for every product of the batch, narrow products (a 3x3 convolution of
    # 8x8 images, rows widened to 10: 80 columns, tiles of three vectors and of two) and
    # tails of one vector and of part of one
    "batched, A shared": (20, 16, 80, [0, 1, 2, 10, 11, 12, 20, 21, 22], False, (8,), True),
    "batched, A shared, transposed": (12, 8, 37, [0, 3], True, (3,), True),
    "batched, A shared, one product": (24, 64, 100, [0], False, (4,), True),
    "batched, A shared, one deep product": (24, 300, 50, [0], False, (4,), True),
    # more rows than columns: split by rows, each thread's block from the one pack (64
    # rows: halves of 32, blocks of the pack), or not packed once (60: halves of 30)
    "batched, A shared, rows split": (64, 16, 47, [0, 1, 2, 7, 8, 9], False, (3,), True),
    "batched, A shared, rows split unaligned": (60, 16, 50, [0, 1], False, (3,), True),
    "tails of one vector": (8, 12, 16 * 3 + 16 + 5, [0, 1], False, ()),
}


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(TERMS))
def test_looped_products_match_numpy(case, dtype, accumulate, direct):
    """Sums of products over shifted operands (a convolution's looped reduction) and
    shallow products, through ``term_kernel``'s kernel where it applies (float32, AVX-512)
    and through BLAS calls: every row and column tail, transposed and batched operands,
    written or added to ``out``."""
    from tegrad.backends.cpu.gemm import Blas, matmul, one_blas_thread

    rows, depth, cols, shifts, transposed, batch, *shared = TERMS[case]
    rng = np.random.default_rng(5)
    a, b = _shifted_terms(rng, dtype, rows, depth, cols, shifts, transposed, batch, *shared)
    want = sum(np.matmul(x.astype(np.float64), y.astype(np.float64))
               for x, y in zip(a, b, strict=True))
    start = rng.standard_normal(want.shape).astype(dtype)
    out = start.copy() if accumulate else np.full(want.shape, np.nan, dtype)
    blas = Blas(direct_terms=direct)
    assert blas.found
    with one_blas_thread():
        matmul(a if len(a) > 1 else a[0], b if len(b) > 1 else b[0], out=out, threads=2,
               blas=blas, accumulate=accumulate)
    if accumulate:
        want = want + start
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


TRANSPOSED_B = {  # name: (rows, depth, cols, batch, B shared by the batch, A transposed,
    # terms), the blocks that take term_kernel's kernel on two threads (each block's B
    # copied to rows); term t reads both operands' columns t * depth + 3 t on (a
    # convolution's weight gradient: dY X^T summed over images)
    "linear, columns split": ((96, 70, 301, (), False, False, 1), 2),
    "deep, rows split": ((600, 300, 130, (), False, False, 1), 2),
    "in slices": ((80, 1100, 270, (), False, False, 1), 2),
    "both transposed": ((100, 50, 262, (), False, True, 1), 2),
    "batch sharing B": ((64, 40, 300, (3,), True, False, 1), 6),
    "batch of own Bs": ((64, 40, 300, (2,), False, False, 1), 2),
    "terms": ((70, 33, 290, (), False, False, 4), 2),
    "terms, batch sharing A": ((64, 16, 300, (3,), False, False, 8), 6),
    # dot products of rows (tg_dots): deep, or less deep but too few rows for the copy;
    # tails of rows, columns and K
    "dot products, deep": ((37, 1100, 53, (), False, False, 1), 2),
    "dot products, few rows": ((9, 300, 130, (), False, False, 1), 2),
    "dot products, terms": ((50, 130, 77, (), False, False, 8), 2),
    "dot products, batch": ((20, 270, 33, (3,), False, False, 1), 6),
    "too few rows for the copy": ((40, 64, 400, (), False, False, 1), 0),
    "blocks too narrow": ((100, 64, 200, (), False, False, 1), 0),
}


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("case", list(TRANSPOSED_B))
def test_products_of_a_transposed_b_match_numpy(case, accumulate):
    """Float32 products whose ``B`` is stored transposed (``x W^T``, a linear layer's
    weight; sums of them over terms, a convolution's weight gradient): dot products of
    rows where deep enough, else each block's ``B`` copied to rows for ``term_kernel``'s
    kernel where the block is high and wide enough (the helper counts both), else the
    BLAS's; every way gives NumPy's product, written or added to ``out``."""
    from tegrad.backends.cpu.gemm import Blas, matmul, one_blas_thread

    (rows, depth, cols, batch, shared, a_transposed, terms), blocks = TRANSPOSED_B[case]
    rng = np.random.default_rng(8)
    span = terms * (depth + 3)
    a = rng.standard_normal((*batch, span, rows) if a_transposed
                            else (*batch, rows, span)).astype(np.float32)
    a = np.swapaxes(a, -1, -2) if a_transposed else a
    b = rng.standard_normal((cols, span) if shared else (*batch, cols, span))
    b = np.swapaxes(b.astype(np.float32), -1, -2)
    if terms > 1 and batch and not shared:  # A shared by the batch: a stride of 0
        a = np.broadcast_to(a[:1], a.shape)
    a_terms = [a[..., t * (depth + 3):t * (depth + 3) + depth] for t in range(terms)]
    b_terms = [b[..., t * (depth + 3):t * (depth + 3) + depth, :] for t in range(terms)]
    want = sum(np.matmul(x.astype(np.float64), y.astype(np.float64))
               for x, y in zip(a_terms, b_terms, strict=True))
    start = rng.standard_normal(want.shape).astype(np.float32)
    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f" in f.read()
    for direct in (True, False):
        blas = Blas(direct_terms=direct)
        out = start.copy() if accumulate else np.full(want.shape, np.nan, np.float32)
        before = blas.term_blocks
        with one_blas_thread():
            matmul(a_terms if terms > 1 else a_terms[0], b_terms if terms > 1 else b_terms[0],
                   out=out, threads=2, blas=blas, accumulate=accumulate)
        assert blas.term_blocks - before == (blocks if direct and avx512 else 0)
        expected = want + start if accumulate else want
        np.testing.assert_allclose(out, expected, rtol=1e-5,
                                   atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("case, blocks", [("nine taps", 2), ("one deep wide product", 2),
                                          ("one deep narrow product", 2),
                                          ("batched, A shared, one deep product", 4),
                                          ("batched, A shared", 8),
                                          ("batched, A shared, rows split", 6)])
def test_term_kernel_runs_where_it_can(case, blocks):
    """On a processor with AVX-512 the helper has the kernel, and a float32 convolution's
    sum and deep products take it for both threads' blocks (the helper's count; bits
    alone cannot tell: on an Intel Xeon, MKL's sums of a single product ran in the
    kernel's order). So does a batch of narrow sums sharing one A (a convolution of 8x8
    images: 80 columns each), which packs that A once for all of them, deep or shallow."""
    from tegrad.backends.cpu.gemm import Blas, matmul, one_blas_thread

    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f" in f.read()
    assert Blas(direct_terms=True).direct == avx512
    assert not Blas(direct_terms=False).direct
    if not avx512:
        pytest.skip("no AVX-512 here: products are BLAS calls")
    rows, depth, cols, shifts, transposed, batch, *shared = TERMS[case]
    a, b = _shifted_terms(np.random.default_rng(6), "float32", rows, depth, cols, shifts,
                          transposed, batch, *shared)
    a, b = (a, b) if len(shifts) > 1 else (a[0], b[0])
    results = []
    for direct in (True, False):
        out = np.empty((*batch, rows, cols), np.float32)
        blas = Blas(direct_terms=direct)
        before = blas.term_blocks
        with one_blas_thread():
            matmul(a, b, out=out, threads=2, blas=blas)
        assert blas.term_blocks - before == (blocks if direct else 0)
        results.append(out)
    np.testing.assert_allclose(*results, rtol=1e-5, atol=1e-5 * np.abs(results[1]).max())


def test_term_kernel_default_follows_the_processor_and_the_variable(reread_environment):
    """``TEGRAD_TERM_KERNEL`` decides where set; else the kernel is wanted off Intel's
    processors (where MKL ran every product shape faster) and on others."""
    from tegrad.backends.cpu import term_kernel
    from tegrad.backends.cpu.gemm import Blas

    for value, wanted in (("1", True), ("0", False)):
        reread_environment.setenv("TEGRAD_TERM_KERNEL", value)
        assert tg.Options.from_environment(refresh=True).term_kernel is wanted
        assert term_kernel.wanted_here() is wanted
        assert Blas(mkl=False).direct_terms is wanted
    reread_environment.delenv("TEGRAD_TERM_KERNEL")
    tg.Options.from_environment(refresh=True)
    with open("/proc/cpuinfo") as f:
        vendor = next((line for line in f if line.startswith("vendor_id")), "")
    assert term_kernel.wanted_here() is ("GenuineIntel" not in vendor)


def test_numpy_blas_is_found():
    """NumPy's wheels bundle OpenBLAS; the compiled target calls it from its own threads
    (if this fails, products fall back to np.matmul and its competing thread pool)."""
    from tegrad.backends.cpu import gemm

    np.matmul(np.ones((2, 2)), np.ones((2, 2)))
    assert gemm.Blas(mkl=False).found, "no cblas_?gemm among the loaded libraries"


@pytest.mark.parametrize("setting", ["", "openblas"])
def test_products_use_mkl_when_installed_unless_told_otherwise(setting, reread_environment):
    from tegrad.backends.cpu import gemm

    reread_environment.setenv("TEGRAD_BLAS", setting)
    tg.Options.from_environment(refresh=True)
    gemm._blas.cache_clear()
    want = "mkl" if gemm._mkl_path() is not None and not setting else "openblas"
    assert gemm.blas_name() == want


_OPENBLAS_PROGRAM = """
import numpy as np, tegrad as tg
from tegrad.backends.cpu import gemm
X = tg.placeholder((2, 8, 12, 12), "float64", "X")
W = tg.placeholder((16, 8, 3, 3), "float64", "W")
Y = tg.nn.conv2d(X, W, stride=2, padding=1)
H = tg.placeholder(Y.shape, "float64", "H")
outs = [Y, *tg.gradient(Y, [X, W], H)]
rng = np.random.default_rng(7)
arrays = [rng.standard_normal(t.shape) for t in (X, W, H)]
got = tg.build([X, W, H], outs, target="cpu")(*arrays)
want = tg.build([X, W, H], outs, target="numpy")(*arrays)
assert gemm.blas_name() == "openblas", gemm.blas_name()
for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
print("ok")
"""


def test_a_program_runs_on_openblas_when_told():
    """``TEGRAD_BLAS=openblas`` (a new process: the BLAS is chosen once): a convolution's
    forward and gradients, products on NumPy's OpenBLAS held to one thread, agree with
    the NumPy target."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TEGRAD_BLAS": "openblas"}
    done = subprocess.run([sys.executable, "-c", _OPENBLAS_PROGRAM], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def _exp_inputs(dtype: str) -> np.ndarray:
    """Every binade exp reaches, densely, with the ends of its range and its specials."""
    info = np.finfo(dtype)
    top = np.log(info.max.astype(np.float64))
    bottom = np.log(float(info.smallest_subnormal)) - 1
    rng = np.random.default_rng(3)
    dense = np.concatenate([rng.uniform(bottom - 5, top + 5, 200_000),
                            rng.uniform(-1, 1, 50_000), rng.standard_normal(50_000) * 1e-6])
    edges = [top, bottom, np.log(float(info.tiny)), np.log(2) / 2, 0.0, -0.0]
    edges = np.array(edges, dtype).astype(np.float64)
    near = [np.nextafter(e, d) for e in edges.astype(dtype) for d in (-np.inf, np.inf)]
    special = [np.nan, np.inf, -np.inf, info.max, -info.max]
    return np.concatenate([dense, edges, np.array(near, np.float64), special]).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exp_is_within_one_ulp_of_the_correctly_rounded_value(dtype):
    """The C target's own ``exp`` (``backends/c/c_ops._EXP``: a polynomial, no libmvec, whose
    vector exp is ten times slower when one lane underflows) against exp in higher precision
    rounded once to ``dtype``: at most one unit in the last place apart over every binade,
    subnormal results included; NaN, inf, overflow and underflow as NumPy gives them."""
    x = _exp_inputs(dtype)
    X = tg.placeholder(x.shape, dtype, "X")
    got = tg.build([X], tg.compute(x.shape, lambda i: tg.exp(X[i]), "e"), target="cpu")(x)
    wider = np.float64 if dtype == "float32" else np.longdouble
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(wider)).astype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(x))
    finite = ~np.isnan(x)
    bits = np.int32 if dtype == "float32" else np.int64
    apart = np.abs(got[finite].view(bits).astype(np.int64) - want[finite].view(bits))
    assert apart.max() <= 1, x[finite][np.argmax(apart)]
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert (got[want == 0] == 0).all() and (got[x == 0] == 1).all()


@pytest.mark.parametrize("kind", ["max", "min", "argmax", "argmin"])
def test_extreme_reductions_propagate_nan_like_numpy(kind):
    X = tg.placeholder((5, 40), "float32", "X")
    k = tg.reduce_axis(40, name="k")
    out = tg.compute((5,), lambda i: getattr(tg, kind)(X[i, k], axis=k), kind)
    x = np.random.default_rng(1).standard_normal((5, 40)).astype("float32")
    x[1, 7] = np.nan
    x[2, 39] = np.nan
    x[3, :] = -np.inf if kind in ("max", "argmax") else np.inf
    assert_agree([tg.build([X], out, target="cpu")(x)], [tg.build([X], out, target="numpy")(x)],
                 kind)


@pytest.mark.parametrize("kind, dtype, nan", [
    ("sum", "float32", False), ("max", "float32", False), ("max", "float32", True),
    ("min", "float64", True), ("prod", "float64", False), ("sum", "int64", False)])
def test_a_0d_reduction_shares_its_loop_out_over_threads(kind, dtype, nan):
    """A 0-d kernel's reduction over ``parallel_work`` or more (here 0) runs its first
    loop on every thread, each into its own accumulators, combined in thread order: the
    reference's value (NaN where a part has one), the same bits at every run."""
    X = tg.placeholder((37, 50), dtype, "X")
    a, b = tg.reduce_axis(37, name="a"), tg.reduce_axis(50, name="b")
    out = tg.compute((), lambda: getattr(tg, kind)(X[a, b], axis=[a, b]), kind)
    options = tg.Options.from_environment().replace(parallel_work=0)
    f = tg.build([X], out, target="cpu", options=options)
    assert "#pragma omp parallel num_threads" in f.program.steps[-1].src.text
    rng = np.random.default_rng(9)
    x = (rng.integers(-9, 9, X.shape) if dtype == "int64" else
         rng.uniform(0.99, 1.01, X.shape) if kind == "prod" else
         rng.standard_normal(X.shape)).astype(dtype)
    if nan:
        x[30, 3] = np.nan
    got = f(x)
    assert_agree([got], [tg.build([X], out, target="numpy")(x)], kind, rtol=1e-6)
    assert np.array_equal(got, f(x), equal_nan=True)


def test_output_buffers_are_reused_only_when_dropped():
    X = tg.placeholder((256, 300), "float32", "X")
    f = tg.build([X], tg.compute(X.shape, lambda i, j: X[i, j] * 2.0, "Y"), target="cpu")
    a, b = np.ones((256, 300), "float32"), np.full((256, 300), 3.0, "float32")
    held = f(a)
    view = f(a)[::2]  # a view keeps its base alive
    again = f(b)
    np.testing.assert_array_equal(held, 2 * a)  # not overwritten by later runs
    np.testing.assert_array_equal(view, (2 * a)[::2])
    np.testing.assert_array_equal(again, 2 * b)
    address = again.ctypes.data
    del again
    assert f(a).ctypes.data == address  # dropped: its buffer serves the next run


def test_an_unread_scan_history_returns_to_the_pool(monkeypatch):
    """An LSTM's forward returns its hidden states; its cells' history, made by the scan
    and read by nothing after it, goes back to the pool like any dead intermediate, so a
    second run allocates no new buffer (each costs a page fault per 4 KiB written), and
    the results are unchanged (the numpy target drops it too)."""
    from tegrad.backends.cpu.buffers import BufferPool

    ph = lambda shape, name: tg.placeholder(shape, "float32", name)  # noqa: E731
    x, h0, c0 = ph((6, 32, 8), "x"), ph((32, 128), "h0"), ph((32, 128), "c0")
    wih, whh = ph((512, 8), "wih"), ph((512, 128), "whh")  # histories: 7 x 32 x 128
    out = tg.nn.lstm(x, h0, c0, wih, whh)[0]
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(p.shape).astype("float32") * 0.5
              for p in (x, h0, c0, wih, whh)]
    f = tg.build([x, h0, c0, wih, whh], out, target="cpu")
    first = f(*arrays).copy()
    misses = []
    take = BufferPool.take

    def spy(self, shape, dtype):
        if not self.free.get((shape, dtype)):
            misses.append(shape)
        return take(self, shape, dtype)

    monkeypatch.setattr(BufferPool, "take", spy)
    again = f(*arrays)
    min_bytes = tg.Options.from_environment().pool_min_bytes
    assert not [m for m in misses if np.prod(m) * 4 >= min_bytes], misses
    np.testing.assert_array_equal(again, first)
    reference = tg.build([x, h0, c0, wih, whh], out, target="numpy")(*arrays)
    np.testing.assert_allclose(again, reference, rtol=1e-4, atol=1e-5)


def _copy_source(case: str) -> tuple[np.ndarray, tuple]:
    """A source of ``test_parallel_copy_matches_numpy``'s case and its destination's shape."""
    rng = np.random.default_rng(5)
    src = {"contiguous": rng.standard_normal((300, 400)),
           "transposed": rng.standard_normal((400, 300)).T,
           "broadcast": rng.standard_normal((1, 400)),
           "strided": rng.standard_normal((600, 800))[::2, ::2],
           "3d": rng.standard_normal((7, 90, 130)).astype("float32"),
           # transposes, copied in tiles: edges not a multiple of the tile, 4 and 8 bytes
           "3d transposed": rng.standard_normal((7, 130, 90)).astype("float32")
           .transpose(0, 2, 1),
           "strided transpose": rng.standard_normal((800, 301))[::2].T}[case]
    shape = {"3d": (7, 90, 130), "3d transposed": (7, 90, 130),
             "strided transpose": (301, 400)}.get(case, (300, 400))
    return src, shape


COPY_CASES = ["contiguous", "transposed", "broadcast", "strided", "3d", "3d transposed",
              "strided transpose"]


@pytest.mark.parametrize("case", COPY_CASES)
def test_parallel_copy_matches_numpy(case):
    from tegrad.backends.cpu.copy import copy

    src, shape = _copy_source(case)
    dst = np.zeros((shape[0] + 4, *shape[1:]), src.dtype)[2:-2]
    copy(dst, src, threads=2, limits=LIMITS)
    np.testing.assert_array_equal(dst, np.broadcast_to(src, shape))


@pytest.mark.parametrize("case", COPY_CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_add_matches_numpy(case, threads):
    """``copy.add`` (``tg_add``: a product's blocks added into a thin convolution's
    output, the shifted views of ``products._through_taps`` summed) walks the dims a copy
    would, adding; a destination that is itself a view."""
    from tegrad.backends.cpu.copy import add, prepare_add

    src, shape = _copy_source(case)
    base = np.random.default_rng(6).standard_normal((shape[0] + 4, *shape[1:]))
    dst = base.astype(src.dtype)[2:-2]
    want = dst + np.broadcast_to(src, shape)
    assert prepare_add(dst, src, LIMITS) is not None  # (the helper's, not NumPy's)
    add(dst, src, threads=threads, limits=(1, 1))
    np.testing.assert_array_equal(dst, want)


SHORT_ROWS = {  # name: (source, destination shape); rows of at most 64 bytes are masked
    # moves, a longer one memcpy's
    "a weight gradient's taps": (lambda rng: rng.standard_normal((3, 40, 64, 3))
                                 .astype("float32").transpose(1, 2, 0, 3), (40, 64, 3, 3)),
    "rows of 64 bytes": (lambda rng: rng.standard_normal((5, 30, 8)).transpose(1, 0, 2),
                         (30, 5, 8)),
    "rows of 68 bytes": (lambda rng: rng.standard_normal((5, 30, 17)).astype("float32")
                         .transpose(1, 0, 2), (30, 5, 17)),
    "flipped, one row a block": (lambda rng: rng.standard_normal((9, 7, 5)).astype("float32")
                                 [::-1, ::-2], (9, 4, 5)),
    # rows gathered a line apart: cut in chunks of 16 (a weight laid out in a stride-2
    # convolution's phases), or a transpose where an outer axis is contiguous in the source
    "a weight's phases": (lambda rng: np.lib.stride_tricks.as_strided(
        rng.standard_normal((48, 8, 4, 4)).astype("float32"), (2, 2, 2, 2, 8, 48),
        (16, 4, 32, 8, 64, 512)), (2, 2, 2, 2, 8, 48)),
    "a weight's taps transposed": (lambda rng: rng.standard_normal((40, 6, 3, 3))
                                   .astype("float32").transpose(1, 2, 3, 0), (6, 3, 3, 40)),
    "rows of 40 a line apart": (lambda rng: rng.standard_normal((40, 3, 7, 5))
                                .transpose(2, 1, 3, 0), (7, 3, 5, 40)),
    "im2col": (lambda rng: np.lib.stride_tricks.as_strided(
        rng.standard_normal((2, 16, 6, 6)).astype("float32"), (16, 3, 3, 2, 4, 4),
        (144, 24, 4, 2304, 24, 4)), (16, 3, 3, 2, 4, 4)),
}


@pytest.mark.parametrize("case", list(SHORT_ROWS))
@pytest.mark.parametrize("threads", [1, 2])
def test_short_rows_copy_matches_numpy(case, threads):
    """Copies of short contiguous rows (a weight gradient laid out by taps, im2col's rows
    of 4): each row one masked move where AVX-512 has them, in a loop over a dimension
    that keeps both sides near (``copy._local_rows_inside``: the weight gradient's
    channels, not its taps, which lie far apart in the source), dims that step by each
    other's whole on both sides merged (``copy._merged``); and rows that gather elements a
    line apart, as a tiled transpose or in chunks (``copy._gathered_rows``)."""
    from tegrad.backends.cpu.copy import CopyCall, copy

    make, shape = SHORT_ROWS[case]
    src = make(np.random.default_rng(7))
    dst = np.zeros((shape[0] + 2, *shape[1:]), src.dtype)[1:-1]
    copy(dst, src, threads=threads, limits=(1, 1))
    np.testing.assert_array_equal(dst, src)
    call = CopyCall(dst, src, LIMITS)
    if case == "a weight gradient's taps":  # (o, c) one dim, as both sides step over it
        assert list(call.shape[-2:]) == [40 * 64, 3] and list(call.ss[-2:]) == [12, 4]
    if case == "a weight's phases":  # chunks of 16 outermost, the source's order inside
        assert call.shape[0] == 3 and call.shape[-1] == 16 and list(call.ss[1:-1]) == [
            64, 32, 16, 8, 4]
    if case == "a weight's taps transposed":  # (the taps merged: the transpose's rows)
        assert list(call.shape) == [54, 40] and call.ss[-2] == 4


@pytest.mark.parametrize("source", ["contiguous", "strided"])
def test_interleaving_copy_matches_numpy(source):
    """Two rows interleaved into one (the phases of a stride-2 output, ``tg_copy``'s pair
    case): ``dst[.., 2i + j] = src[j, .., i]``."""
    from tegrad.backends.cpu.copy import copy

    rng = np.random.default_rng(7)
    out = np.zeros((300, 262), "float32")
    dst = out.reshape(300, 131, 2).transpose(2, 0, 1)  # (2, 300, 131): strides 4, 1048, 8
    src = rng.standard_normal((2, 300, 262)).astype("float32")
    src = src[..., :131] if source == "contiguous" else src[..., ::2]
    copy(dst, src, threads=2, limits=LIMITS)
    np.testing.assert_array_equal(out[:, 0::2], src[0])
    np.testing.assert_array_equal(out[:, 1::2], src[1])


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_splitting_copy_matches_numpy(order):
    """One row split in two (a stride-2 input's phase planes, ``tg_copy``'s unpair case,
    which ``CopyCall`` puts second to last): ``dst[j, .., i] = src[.., 2i + j]``, the
    phases in either order in memory."""
    from tegrad.backends.cpu.copy import CopyCall, copy

    rng = np.random.default_rng(8)
    x = rng.standard_normal((100, 3, 2 * 131 + 1)).astype("float32")
    pairs = x[..., :262].reshape(100, 3, 131, 2).transpose(3, 0, 1, 2)  # (2, 100, 3, 131)
    if order == "backward":  # phase j reads src[2i + 1 - j]: a source stride of -4
        pairs = x[..., 1:263].reshape(100, 3, 131, 2)[..., ::-1].transpose(3, 0, 1, 2)
    dst = np.zeros((2, 100, 3, 140), "float32")[..., 5:136]
    assert dst.size >= LIMITS[0]  # (the helper's, not NumPy's)
    assert CopyCall(dst, pairs, LIMITS).ss[-2] in (4, -4)  # (the phases second to last)
    copy(dst, pairs, threads=2, limits=LIMITS)
    np.testing.assert_array_equal(dst, pairs)


def test_an_output_listed_twice_is_one_buffer():
    X = tg.placeholder((256, 300), "float32", "X")
    Y = tg.compute(X.shape, lambda i, j: X[i, j] + 1.0, "Y")
    f = tg.build([X], [Y, Y], target="cpu")
    a, b = f(np.zeros((256, 300), "float32"))
    assert a is b
    del a, b
    c, d = f(np.ones((256, 300), "float32"))
    e, g = f(np.full((256, 300), 5.0, "float32"))
    np.testing.assert_array_equal(c, 2.0)  # not the buffer handed out again for e
    np.testing.assert_array_equal(e, 6.0)


def test_a_failing_compiler_falls_back_when_the_target_is_ours_to_choose(monkeypatch, tmp_path):
    from tegrad.backends.cpu.errors import CompileError

    monkeypatch.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TEGRAD_TARGET", raising=False)
    monkeypatch.setattr(compiler, "FLAGS", (*compiler.FLAGS, "-fno-such-flag-anywhere"))
    compiler._toolchain_id.cache_clear()
    try:
        X = tg.placeholder((4,), "float64", "X")
        Y = tg.compute((4,), lambda i: X[i] * 3.0, "Y")
        with pytest.raises(CompileError, match="gcc failed"):
            tg.build([X], Y, target="cpu")
        with pytest.warns(RuntimeWarning, match="compiled cpu target failed"):
            f = tg.build([X], Y)
        assert f.target == "numpy"
        np.testing.assert_array_equal(f(np.arange(4.0)), [0.0, 3.0, 6.0, 9.0])
    finally:
        compiler._toolchain_id.cache_clear()


def _scan_steps(f) -> list:
    return [s for s in f.program.steps if isinstance(s, type(f.program))]


def test_scan_steps_run_by_their_trace_as_the_general_path_does(monkeypatch):
    """An LSTM's forward and adjoint steps run through ``StepTrace`` after their first
    step (a later call's first step through ``run``, the rest in one C loop,
    ``step_loop.py``): the same values, bitwise, as with every step on the general path,
    and torch's."""
    import torch

    from tegrad.backends.cpu import step_trace

    steps, batch, inputs, hidden = 6, 3, 4, 5
    ps = [tg.placeholder(s, "float64", n) for s, n in
          (((steps, batch, inputs), "x"), ((batch, hidden), "h0"), ((batch, hidden), "c0"),
           ((4 * hidden, inputs), "w_ih"), ((4 * hidden, hidden), "w_hh"),
           ((4 * hidden,), "b_ih"), ((4 * hidden,), "b_hh"))]
    out = tg.nn.lstm(*ps)[0]
    head = tg.placeholder(out.shape, "float64", "head")
    grads = tg.gradient(out, ps, head=head)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(p.shape) * 0.5 for p in [*ps, head]]
    traced = tg.build([*ps, head], [out, *grads], target="cpu")
    got = [traced(*arrays), traced(*arrays)]  # the trace is made by the first call's step 1
    assert all(isinstance(s.trace.made, step_trace.StepTrace) for s in _scan_steps(traced))
    written = []  # per step: outputs the trace wrote straight into their history rows

    def counting(run):
        def counted(feed, targets=None):
            values = run(feed, targets)
            written.append(sum(v is r for v, r in zip(values, targets, strict=True)))
            return values
        return counted

    def counting_loop(run_steps):
        def counted(start, stop, fed, targets):
            done = run_steps(start, stop, fed, targets)
            if done:  # (the loop writes every output with a target in place, or fails)
                written.extend([sum(t is not None for t in targets)] * (stop - start))
            return done
        return counted

    def count(program):
        for scan in _scan_steps(program):
            scan.trace.made.run = counting(scan.trace.made.run)
            scan.trace.made.run_steps = counting_loop(scan.trace.made.run_steps)

    count(traced)
    got.append(traced(*arrays))
    assert len(written) == 2 * steps and all(written), written  # forward and adjoint steps
    monkeypatch.setattr(step_trace.StepTrace, "make", classmethod(lambda cls, *a: None))
    general = tg.build([*ps, head], [out, *grads], target="cpu")
    want = general(*arrays)
    assert all(s.trace.made is None for s in _scan_steps(general))
    for run in got:
        for g, w in zip(run, want, strict=True):
            np.testing.assert_array_equal(g, w)
    module = torch.nn.LSTM(inputs, hidden).double()
    with torch.no_grad():
        for name, a in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                           arrays[3:7], strict=True):
            getattr(module, name).copy_(torch.from_numpy(a))
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
    ref, _ = module(leaves[0], (leaves[1][None], leaves[2][None]))
    wrt = [*leaves, module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0,
           module.bias_hh_l0]
    ref_grads = torch.autograd.grad(ref, wrt, torch.from_numpy(arrays[-1]))
    for g, r in zip(got[0], [ref, *ref_grads], strict=True):
        np.testing.assert_allclose(g, r.detach().numpy(), rtol=1e-9, atol=1e-11)


def _decaying_sum(steps: int, width: int):
    """``s[t] = a * s[t-1] + x[t]``: a step that reads rows of an input directly."""
    x, a = tg.placeholder((steps, width), "float64", "x"), tg.placeholder((width,), "float64", "a")
    s = tg.placeholder((steps, width), "float64", "s")
    init = tg.compute((1, width), lambda r, i: x[r, i], name="init")
    update = tg.compute((steps, width), lambda t, i: a[i] * s[t - 1, i] + x[t, i], name="upd")
    return tg.scan(init, update, s, name="decay"), x, a


def _decaying_sum_reference(x, a):
    rows = [x[0]]
    for t in range(1, len(x)):
        rows.append(a * rows[-1] + x[t])
    return np.stack(rows)


def test_a_step_fed_rows_of_another_layout_takes_the_general_path():
    """The trace is made for C-order rows of ``x``; a Fortran-order ``x`` (rows strided)
    later runs every step on the general path, which copies such a read, with the same
    values."""
    out, x, a = _decaying_sum(7, 64)
    f = tg.build([x, a], out, target="cpu")
    rng = np.random.default_rng(4)
    xv, av = rng.standard_normal(x.shape), rng.uniform(-1, 1, a.shape)
    np.testing.assert_allclose(f(xv, av), _decaying_sum_reference(xv, av), rtol=1e-13)
    (step,) = _scan_steps(f)
    trace = step.trace.made
    assert trace is not None
    answers, looped = [], []
    traced_run, traced_steps = trace.run, trace.run_steps
    trace.run = lambda *args: answers.append(traced_run(*args)) or answers[-1]
    trace.run_steps = lambda *args: looped.append(traced_steps(*args)) or looped[-1]
    strided = np.asfortranarray(rng.standard_normal(x.shape))
    assert strided[1].strides != xv[1].strides
    np.testing.assert_allclose(f(strided, av), _decaying_sum_reference(strided, av),
                               rtol=1e-13)
    assert answers and all(a is None for a in answers)  # every step: the general path
    assert looped == [False, False, False]  # (the C loop, step_loop.py, refused 3 tries)
    answers.clear()
    looped.clear()
    np.testing.assert_allclose(f(xv, av), _decaying_sum_reference(xv, av), rtol=1e-13)
    assert answers == []  # a traced program's run: no step on its own,
    assert looped == [True]  # all six in the C loop


def test_two_threads_running_one_program_each_have_their_own_trace():
    from concurrent.futures import ThreadPoolExecutor

    out, x, a = _decaying_sum(60, 512)
    f = tg.build([x, a], out, target="cpu")
    rng = np.random.default_rng(6)
    jobs = [(rng.standard_normal(x.shape), rng.uniform(-1, 1, a.shape)) for _ in range(24)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: f(*job), jobs))
    for (xv, av), got in zip(jobs, results, strict=True):
        np.testing.assert_allclose(got, _decaying_sum_reference(xv, av), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cubes_and_fourth_powers_are_products(dtype):
    """``x ** 3`` and ``x ** 4`` compile to products, not ``pow`` (``c_ops.power``): within
    2 ulp of NumPy's power, with its signs, zeros, infinities and NaNs; ``x ** 5`` stays
    ``pow``."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from c_text import c_text

    x = tg.placeholder((12,), dtype, name="X")
    powers = [tg.compute((12,), lambda i, p=p: x[i] ** float(p), name=f"P{p}") for p in (3, 4, 5)]
    text = c_text(powers)
    assert text.count("pow") == 1, text
    xv = np.array([-2.5, -1.0, -0.0, 0.0, 1e-3, 0.7, 1.3, 3e12, -3e12, np.inf, -np.inf, np.nan],
                  dtype=dtype)
    got = tg.build([x], powers, target="cpu")(xv)
    for p, g in zip((3, 4, 5), got, strict=True):
        with np.errstate(over="ignore"):
            want = np.power(xv, np.dtype(dtype).type(p))
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
        np.testing.assert_array_equal(np.signbit(g), np.signbit(want))
        finite = np.isfinite(want)
        np.testing.assert_array_equal(g[~finite], want[~finite])
        np.testing.assert_array_max_ulp(g[finite], want[finite], maxulp=2)


def _vectorizer_report(tmp_path, outputs) -> str:
    """gcc's report of the loops it vectorized in the C of ``outputs``, compiled with the
    generated kernels' flags."""
    from tegrad.backends.c.c_ops import PRELUDE

    sys.path.insert(0, str(Path(__file__).parent))
    from c_text import c_text

    text = c_text(outputs)
    assert "omp parallel" in text  # (outlined, as a large array's kernel is)
    source = tmp_path / "k.c"
    source.write_text(PRELUDE + "\n\n" + text)
    flags = [f for f in compiler.FLAGS if f not in ("-shared", "-w")]
    return subprocess.run([compiler.compiler(), *flags, *compiler.GENERATED_FLAGS,
                           "-fopt-info-vec-optimized", "-c", str(source), "-o",
                           str(tmp_path / "k.o")], capture_output=True, text=True,
                          check=True).stderr


def test_a_gradient_whose_selects_retest_their_conditions_vectorizes(tmp_path):
    """prelu's input gradient tests ``x < 0`` and ``0 < x`` in several selects; with
    gcc's jump threading its loop body became branches that if-conversion could not
    flatten, and the loop ran scalar (7x the forward's time). ``GENERATED_FLAGS`` turns
    threading off: gcc's own report says the loop is vectorized."""
    x = tg.placeholder((128, 8192), "float32", name="X")
    w = tg.placeholder((1,), "float32", name="W")
    head = tg.placeholder((128, 8192), "float32", name="H")
    (dx,) = tg.gradient(tg.nn.prelu(x, w), [x], head=head)
    report = _vectorizer_report(tmp_path, [dx])
    assert "loop vectorized" in report, report
    xv = np.array([[-2.0, -0.0, 0.0, 3.0] * 2048] * 128, np.float32)
    wv = np.array([0.25], np.float32)
    hv = np.random.default_rng(0).standard_normal(xv.shape).astype(np.float32)
    (got,) = tg.build([x, w, head], [dx], target="cpu")(xv, wv, hv)
    np.testing.assert_array_equal(got, tg.build([x, w, head], [dx], target="numpy")(xv, wv, hv)[0])


@pytest.mark.parametrize("clamp", ["hardtanh", "relu6", "clamp by arrays"])
def test_a_clamp_vectorizes_and_keeps_nan(tmp_path, clamp):
    """A max or min keeps a NaN of either operand, as np.maximum does: ``(a != a || a >
    b) ? a : b``. With jump threading off (``GENERATED_FLAGS``) gcc left a chain of two
    of these scalar (hardtanh: 14x torch's forward). Against a literal other than NaN
    one comparison does (``c_ops.binary``), and the chain vectorizes; between two arrays
    the NaN test stays. The values are NumPy's, NaN, infinities and signed zeros
    included."""
    x = tg.placeholder((128, 8192), "float32", name="X")
    lo = tg.placeholder((128, 8192), "float32", name="L")
    hi = tg.placeholder((128, 8192), "float32", name="U")
    inputs = [x]
    if clamp == "hardtanh":
        y = tg.nn.hardtanh(x, -0.5, 2.0)
    elif clamp == "relu6":
        y = tg.nn.relu6(x)
    else:
        y = tg.minimum(tg.maximum(x, lo), hi)
        inputs = [x, lo, hi]
    if clamp != "clamp by arrays":
        assert "loop vectorized" in _vectorizer_report(tmp_path, [y])
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, -0.5, 2.0, 6.0, 7.0, -3.0, 1.0]
    rng = np.random.default_rng(1)
    arrays = [rng.choice(np.array(special, np.float32), size=(128, 8192)) for _ in inputs]
    got = tg.build(inputs, [y], target="cpu")(*arrays)[0]
    want = tg.build(inputs, [y], target="numpy")(*arrays)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_a_flattened_roll_reads_by_its_flat_index():
    """A roll of the flattened array read back in its shape indexes ``X[f // n, f % n]``
    with ``f = (i n + j + s) % L``: the pair is element ``f`` (``nest_values.flat_pairs``),
    and ``%`` of a value that wraps at most once is a compare and a select
    (``one_wrap``), so no division is left; the values are NumPy's, in both
    directions."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from c_text import c_text

    x = tg.placeholder((30, 40), "float32", name="X")
    head = tg.placeholder((30, 40), "float32", name="H")
    for shift in (5, -37):
        y = tg.nn.roll(x, shift)
        (dx,) = tg.gradient(y, [x], head=head)
        text = c_text([y, dx])
        assert " % " not in text and " / " not in text, text
        rng = np.random.default_rng(shift % 7)
        xv, hv = (rng.standard_normal((30, 40)).astype(np.float32) for _ in range(2))
        got_y, got_dx = tg.build([x, head], [y, dx], target="cpu")(xv, hv)
        np.testing.assert_array_equal(got_y, np.roll(xv, shift))
        np.testing.assert_array_equal(got_dx, np.roll(hv, -shift))


@pytest.mark.parametrize("chosen", ["select", "cast"])
def test_a_read_at_a_chosen_index_is_a_choice_of_reads(chosen):
    """``X[select(3 i + j >= 17, 1, 0)]`` (or the condition cast to an integer): gcc 12.2
    vectorized the load at that index as a load at the lanes' mask, -1 where the
    condition holds, and the cpu target gave 0 there. The read is now a choice of two
    reads (``nest_values.chosen_index``), with NumPy's values."""
    x = tg.placeholder((2,), "float32", name="X")
    z = tg.placeholder((16, 32), "float32", name="Z")

    def index(i, j):
        cond = i * 3 + j >= 17
        return tg.if_then_else(cond, 1, 0) if chosen == "select" else tg.cast(cond, "int32")

    y = tg.compute((16, 32), lambda i, j: z[i, j] * x[index(i, j)], name="Y")
    xv = np.array([0.3, -0.7], np.float32)
    zv = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32)
    (got,) = tg.build([x, z], [y], target="cpu")(xv, zv)
    i, j = np.indices((16, 32))
    np.testing.assert_array_equal(got, zv * xv[(3 * i + j >= 17).astype(int)])


def test_a_weight_gradient_of_tiny_products_is_one_product():
    """A stride-3 1-D convolution with 4 output channels and a 2-tap kernel: its weight
    gradient, looped over the images for each channel, was 6144 BLAS calls of 4 x 2
    outputs (``products._calls_too_small``); now the input's im2col copy and one product
    of 4 x 192 outputs, deep over every image's points. The values are torch's."""
    import torch

    from tegrad.backends.cpu import gemm, replay

    x = tg.placeholder((64, 96, 40), "float32", name="X")
    w = tg.placeholder((4, 96, 2), "float32", name="W")
    y = tg.nn.conv1d(x, w, stride=3, padding=1)
    head = tg.placeholder(y.shape, "float32", name="H")
    (dw,) = tg.gradient(y, [w], head=head)
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((64, 96, 40), np.float32)
    wv = rng.standard_normal((4, 96, 2), np.float32)
    hv = rng.standard_normal(y.shape, np.float32)
    built = tg.build([x, head], [dw], target="cpu")
    (got,) = built(xv, hv)
    calls = [call for step in built.program.steps if isinstance(step, replay.ReplayedContraction)
             for recipe in step.recipes.values() if recipe is not None
             for call, _ in recipe.actions if isinstance(call, gemm.GemmCall)]
    assert calls and all(c.batch * (len(c.terms) // 2) == 1 for c in calls), calls
    tx, th = torch.from_numpy(xv.astype(np.float64)), torch.from_numpy(hv.astype(np.float64))
    tw = torch.from_numpy(wv.astype(np.float64)).requires_grad_()
    (want,) = torch.autograd.grad(torch.nn.functional.conv1d(tx, tw, stride=3, padding=1), tw, th)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-3)
