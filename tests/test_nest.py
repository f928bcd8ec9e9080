"""The loop-nest tree (``lower/nest*.py``): target-neutral, rendered by a dialect that
decides nothing, and shaped by the ``Options`` passed to it."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.c.render import CDialect
from tegrad.backends.cpu.codegen import KernelSource
from tegrad.lower import nest, nest_forms
from tegrad.lower.kernels import General
from tegrad.lower.nest_build import kernel_nest
from tegrad.lower.plan import plan
from tegrad.options import Options


def _general(outputs):
    """``(tensor, body_of, also, columns)`` of each general kernel, as ``blueprint`` has."""
    for kernel in plan(list(outputs), fused=True).kernels:
        if isinstance(kernel, General):
            yield kernel.tensor, kernel.body_of, kernel.also, kernel.columns


def _softmax():
    X, H = tg.placeholder((64, 1000), "float32", "X"), tg.placeholder((64, 1000), "float32", "H")
    Y = tg.nn.softmax(X, -1)
    return [Y, *tg.gradient(Y, [X], H)]


def _layer_norm():
    X = tg.placeholder((3, 40, 96), "float64", "X")
    W, B = tg.placeholder((96,), "float64", "W"), tg.placeholder((96,), "float64", "B")
    Y = tg.nn.layer_norm(X, (96,), W, B)
    return tg.gradient(Y, [X, W, B], tg.placeholder(Y.shape, "float64", "H"))


def _max_pool():
    X = tg.placeholder((4, 8, 12, 20), "float32", "X")
    Y = tg.nn.max_pool2d(X, 2, 2)
    return tg.gradient(Y, [X], tg.placeholder(Y.shape, "float32", "H"))


def _concatenation():
    parts = [tg.placeholder((40, n), "float32", name) for n, name in ((36, "A"), (30, "B"))]
    return [tg.nn.cat(parts, dim=1)]


def _weight_gradient():  # a column-order nest: the reduce loop outside the columns
    X, Y = (tg.placeholder((512, 64), "float32", name) for name in "XY")
    n = tg.reduce_axis(512, "n")
    return [tg.compute((64,), lambda d: tg.sum(X[n, d] * Y[n, d], n), name="dW")]


CASES = [_softmax, _layer_norm, _max_pool, _concatenation, _weight_gradient]
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _walk(x):
    """Every dataclass value reachable from ``x`` (through fields, lists and tuples)."""
    if isinstance(x, list | tuple):
        for y in x:
            yield from _walk(y)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        yield x
        for f in dataclasses.fields(x):
            yield from _walk(getattr(x, f.name))


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_the_tree_holds_no_target_text(make):
    """Every node of every kernel's tree is a ``lower.nest`` (or ``nest_forms``) node,
    and every string in it a name (no C, no types, no pragmas); only the checked reads'
    descriptions are text."""
    for t, body_of, also, columns in _general(make()):
        kernel = kernel_nest(t, body_of, "k0", also, columns, frozenset(), Options())
        for node in _walk(kernel.body):
            assert type(node).__module__ in (nest.__name__, nest_forms.__name__), type(node)
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                if isinstance(value, str) and f.name not in ("dtype", "source_dtype",
                                                              "operand", "op", "kind", "role"):
                    assert NAME.match(value), (type(node).__name__, f.name, value)


def test_the_kinds_of_nest_are_all_built():
    """The cases above reach each shape of nest the pass builds."""
    kinds = set()
    for make in CASES:
        for t, body_of, also, columns in _general(make()):
            kernel = kernel_nest(t, body_of, "k0", also, columns, frozenset(), Options())
            kinds |= {type(x).__name__ for x in _walk(kernel.body)}
    assert {"FlatLoop", "Loop", "ChunkLoop", "Guard", "ResidueIndex", "RowBuffer",
            "PartialRow", "Accumulate"} <= kinds, kinds


def test_a_dialect_overrides_only_what_differs():
    """A dialect that spells the vector pragma its own way changes those lines only."""

    class Other(CDialect):
        def vector_pragma(self, reductions: tuple) -> str:
            return "// vectorized " + " ".join(acc for _, acc, _ in reductions)

    for t, body_of, also, columns in _general(_softmax()):
        kernel = kernel_nest(t, body_of, "k0", also, columns, frozenset(), Options())
        ours, theirs = CDialect().render(kernel).split("\n"), Other().render(kernel).split("\n")
        assert len(ours) == len(theirs)
        changed = [(a, b) for a, b in zip(ours, theirs, strict=True) if a != b]
        assert changed and all("#pragma omp simd" in a and "// vectorized" in b
                               for a, b in changed)


@pytest.mark.parametrize("field, value, present", [
    ("unroll", 0, "#pragma GCC unroll"),
    ("parallel_work", 1 << 62, "omp parallel for"),
    ("row_cache_buffers", 0, "row"),
    ("max_regions", 0, " = 36; "),
])
def test_the_options_passed_shape_the_text(field, value, present):
    """A knob is read from the ``Options`` passed down, not from a global."""
    make = {"unroll": _max_pool, "parallel_work": _softmax, "row_cache_buffers": _softmax,
            "max_regions": _concatenation}[field]
    changed = dataclasses.replace(Options(), **{field: value})
    for_default, for_changed = [], []
    for t, body_of, also, columns in _general(make()):
        for_default.append(KernelSource(t, body_of, "k0", also, columns, options=Options()).text)
        for_changed.append(KernelSource(t, body_of, "k0", also, columns, options=changed).text)
    assert any(present in text for text in for_default)
    assert not any(present in text for text in for_changed)


# guarded gathers: a data-dependent index the select's condition bounds -----------------


def _bounded_gather(low_only: bool = False):
    """``Y[i, j] = idx[i] in [0, 9) ? X[idx[i], j] : 0`` (a bilinear sample's corner), or
    with only ``0 <= idx[i]`` tested (``low_only``: the index may still leave ``X``)."""
    X, idx = tg.placeholder((9, 40), "float32", "X"), tg.placeholder((30,), "int64", "idx")

    def body(i, j):
        inside = idx[i] >= 0 if low_only else tg.all(idx[i] >= 0, idx[i] <= 8)
        return tg.if_then_else(inside, tg.tanh(X[idx[i], j]), 0.0)
    return [X, idx], tg.compute((30, 40), body, name="Y")


def test_a_gather_its_condition_bounds_is_clamped_and_vectorized():
    """No index check is left (the condition keeps the read in ``X`` wherever it is
    taken), so the row loop vectorizes; ids outside give the select's other value."""
    import numpy as np

    inputs, Y = _bounded_gather()
    (text,) = [KernelSource(t, b, "k0", a, c, options=Options()).text for t, b, a, c in
               _general([Y])]
    assert "err[0]" not in text and "#pragma omp simd" in text and "tg_imin" in text, text
    f = tg.build(inputs, Y, target="cpu")
    x = np.random.default_rng(0).standard_normal((9, 40)).astype(np.float32)
    ids = np.array([0, 8, -1, 9, 4, -7, 100, 3] * 3 + [1] * 6)
    want = tg.build(inputs, Y, target="numpy")(x, ids)
    np.testing.assert_allclose(f(x, ids), want, rtol=1e-6)
    assert not want[2].any() and not want[3].any()


def test_a_gather_bounded_on_one_side_keeps_its_check():
    import numpy as np

    inputs, Y = _bounded_gather(low_only=True)
    (text,) = [KernelSource(t, b, "k0", a, c, options=Options()).text for t, b, a, c in
               _general([Y])]
    assert "err[0]" in text
    f = tg.build(inputs, Y, target="cpu")
    with pytest.raises(IndexError, match="got value 9"):
        f(np.ones((9, 40), np.float32), np.array([1, 9] + [0] * 28))


def test_a_gathers_check_is_made_once_per_index_and_its_row_vectorizes():
    """An embedding ``W[ids[i], j]``: the index ``ids[i]`` is checked in the loop over
    ``i``, once per id, not at every ``j``, so the loop over ``j`` vectorizes; a bad id
    still raises, naming its value, and on both sides of good ones the rows are NumPy's."""
    import numpy as np

    W, ids = tg.placeholder((50, 64), "float32", "W"), tg.placeholder((30,), "int64", "ids")
    Y = tg.nn.embedding(ids, W)
    (text,) = [KernelSource(t, b, "k0", a, c, options=Options()).text for t, b, a, c in
               _general([Y])]
    check, simd = text.index("err[0]"), text.index("#pragma omp simd")
    assert check < simd and text.count("err[0] = 1") == 1, text
    f = tg.build([W, ids], Y, target="cpu")
    w = np.random.default_rng(2).standard_normal((50, 64)).astype(np.float32)
    good = np.arange(30) % 50
    np.testing.assert_array_equal(f(w, good), w[good])
    for bad in (50, -1):
        with pytest.raises(IndexError, match=f"got value {bad}"):
            f(w, np.array([3] * 10 + [bad] + [4] * 19))
    np.testing.assert_array_equal(f(w, good[::-1]), w[good[::-1]])


def test_the_same_gather_outside_the_condition_is_checked():
    """A read clamped under a condition is not reused where no condition bounds it."""
    import numpy as np

    X, idx = tg.placeholder((9,), "float64", "X"), tg.placeholder((5,), "int64", "idx")

    def body(i):
        read = X[idx[i]]
        return tg.if_then_else(tg.all(idx[i] >= 0, idx[i] < 9), read, 0.0) + read * read
    Y = tg.compute((5,), body, name="Y")
    f = tg.build([X, idx], Y, target="cpu")
    x = np.arange(9.0)
    np.testing.assert_allclose(f(x, np.array([0, 8, 3, 3, 1])),
                               [0.0, 72.0, 12.0, 12.0, 2.0])
    with pytest.raises(IndexError, match="got value 9"):
        f(x, np.array([0, 9, 3, 3, 1]))


def test_a_gather_under_its_guard_is_not_checked():
    """A branch too costly to evaluate unguarded (a sum over 40 points) runs in a
    ``Guard`` on the condition; its gather at the index the condition bounds needs no
    check there."""
    import numpy as np

    X, idx = tg.placeholder((9, 40), "float32", "X"), tg.placeholder((30,), "int64", "idx")
    k = tg.reduce_axis(40, "k")
    Y = tg.compute((30,), lambda i: tg.if_then_else(
        tg.all(idx[i] >= 0, idx[i] <= 8), tg.sum(tg.exp(X[idx[i], k]), axis=k), 0.0), name="Y")
    (text,) = [KernelSource(t, b, "k0", a, c, options=Options()).text for t, b, a, c in
               _general([Y])]
    assert "if (" in text and "err[0]" not in text, text
    x = np.random.default_rng(1).standard_normal((9, 40)).astype(np.float32)
    ids = np.array([0, 8, -1, 9, 4, -7, 100, 3] * 3 + [1] * 6)
    np.testing.assert_allclose(tg.build([X, idx], Y, target="cpu")(x, ids),
                               tg.build([X, idx], Y, target="numpy")(x, ids), rtol=1e-6)


# padded windows: the ranges where a small window's bounds are constant ------------------


def _depthwise(size=(10, 12), dtype="float32"):
    X = tg.placeholder((2, 3, *size), dtype, "X")
    W = tg.placeholder((3, 1, 3, 3), dtype, "W")
    return [tg.nn.depthwise_conv2d(X, W, None, padding=1)]


def _interior_loops(outputs, options):
    """The vectorized loops of the kernels for ``outputs`` that hold unrolled reduce
    loops (a window's interior), with their ranges."""
    found = []
    for t, body_of, also, columns in _general(outputs):
        kernel = kernel_nest(t, body_of, "k0", also, columns, frozenset(), options)
        found += [(x.lo, x.hi) for x in _walk(kernel.body) if isinstance(x, nest.Loop)
                  and x.vectorize and any(isinstance(i, nest.Loop) and i.unrolled
                                          and i.role == "reduce" for i in x.items)]
    return found


def test_a_padded_window_interior_is_unrolled_and_vectorized():
    """A 3x3 window with padding 1 over 10 x 12 points: the interior rows ``[1, 9)`` and
    columns ``[1, 11)`` have constant bounds, so the window there is unrolled and the
    loop over columns vectorized; not without regions or unrolling."""
    assert _interior_loops(_depthwise(), Options()) == [(1, 11)]
    for off in (dict(max_regions=0), dict(unroll=0)):
        assert _interior_loops(_depthwise(), dataclasses.replace(Options(), **off)) == []


def test_a_max_pool_and_its_tie_counts_are_split_by_region():
    """A 3x3 stride-2 max pool with padding 1: the forward kernel that also writes each
    window's tie count (grouped, ``also``) and the gradient kernel, run by residue class
    over quotients, both unroll their windows inside the interior and vectorize there."""
    X = tg.placeholder((2, 4, 16, 16), "float32", "X")
    Y = tg.nn.max_pool2d(X, 3, 2, 1)
    (dX,) = tg.gradient(Y, [X], tg.placeholder(Y.shape, "float32", "H"))
    kernels = list(_general([dX]))
    assert len(kernels) == 2 and kernels[0][2], "a grouped forward kernel, then the gradient"
    assert len(_interior_loops([dX], Options())) >= 2


def _windows():
    """``(name, tegrad op, torch op of (F, ...), taps)`` for windows whose regions differ:
    padding less than, equal to and more than half the window, strides, dilation, images
    smaller than the window (``F``: ``torch.nn.functional``)."""
    cases = [(f"depthwise k{k} p{p} s{s} d{d}",
              lambda x, w, k=k, p=p, s=s, d=d: tg.nn.conv2d(x, w, None, s, p, d, groups=3),
              lambda F, x, w, k=k, p=p, s=s, d=d: F.conv2d(x, w, None, s, p, d, groups=3), k)
             for k, p, s, d in [(3, 1, 1, 1), (3, 1, 2, 1), (3, 2, 1, 1), (3, 0, 1, 1),
                                (2, 1, 1, 1), (3, 2, 1, 2), (5, 2, 2, 1), (1, 1, 1, 1)]]
    cases += [(f"max_pool k{k} s{s} p{p}{' ceil' if c else ''}",
               lambda x, k=k, s=s, p=p, c=c: tg.nn.max_pool2d(x, k, s, p, ceil_mode=c),
               lambda F, x, k=k, s=s, p=p, c=c: F.max_pool2d(x, k, s, p, ceil_mode=c), None)
              for k, s, p, c in [(3, 2, 1, False), (3, 1, 1, False), (2, 2, 1, True),
                                 (3, 2, 1, True)]]
    cases += [("avg_pool k3 s2 p1 no pad count",
               lambda x: tg.nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
               lambda F, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), None)]
    # bins that start at ``(n i) // m`` and overlap (cut at each bin: _quotient_cuts)
    cases += [(f"adaptive {kind} to {out}",
               lambda x, kind=kind, out=out: getattr(tg.nn, f"adaptive_{kind}_pool2d")(x, out),
               lambda F, x, kind=kind, out=out: getattr(F, f"adaptive_{kind}_pool2d")(x, out),
               None)
              for kind, out in [("max", (2, 3)), ("max", 4), ("avg", (3, 2)), ("avg", 5)]]
    return cases


WINDOWS = _windows()


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (5, 5), (9, 12)], ids=str)
@pytest.mark.parametrize("case", WINDOWS, ids=lambda case: case[0])
def test_windows_split_by_region_agree_with_torch(case, size):
    """Forward and gradients of the windows above on images from 1 x 1 up, on the cpu
    target with regions and without (``max_regions=0``): torch's values in float64, and
    the NumPy reference's where the inputs have ties (integers), which tegrad's max pool
    gradient splits and torch's routes to one element."""
    from tegrad.backends.cpu.compiler import compiler
    torch = pytest.importorskip("torch")
    if compiler() is None:
        pytest.skip("no C compiler")
    _, ours, torch_op, k = case

    def theirs(*tensors):
        return torch_op(torch.nn.functional, *tensors)
    rng = np.random.default_rng(WINDOWS.index(case))
    arrays = [rng.standard_normal((2, 3, *size))]
    if k is not None:
        arrays.append(rng.standard_normal((3, 1, k, k)))
    tensors = [torch.from_numpy(a).requires_grad_() for a in arrays]
    try:
        ty = theirs(*tensors)
    except RuntimeError:  # (a window larger than the padded image)
        pytest.skip("torch refuses this window here")
    inputs = [tg.placeholder(a.shape, "float64", name)
              for a, name in zip(arrays, "XW"[:len(arrays)], strict=True)]
    Y = ours(*inputs)
    H = tg.placeholder(Y.shape, "float64", "H")
    h = rng.standard_normal(Y.shape)
    program = [*inputs, H], [Y, *tg.gradient(Y, inputs, H)]
    want = [ty.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(
        ty, tensors, torch.from_numpy(h)))]
    ties = [rng.integers(-2, 3, arrays[0].shape).astype(np.float64), *arrays[1:]]
    reference = tg.build(*program, target="numpy")(*ties, h)
    base = Options.from_environment()
    for options in (base, base.replace(max_regions=0)):
        f = tg.build(*program, target="cpu", options=options)
        for a, b in zip(f(*arrays, h), want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        for a, b in zip(f(*ties, h), reference, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_an_axis_read_under_a_quotient_is_cut_at_each_block():
    """An adaptive max pool's gradient over 56 columns with 5 outputs reads its bins'
    values at ``[j // 11]`` and tests ``j % 11``: the axis is cut where ``j // 11``
    changes, and after each block's first column (in two bins), so that on every range
    the quotient is a constant and no ``//`` or ``%`` is left; the forward's bins start
    at ``(56 i) // 5``, a cut at every output. With ``max_regions`` 2, too many."""
    from tegrad.ir.expr import Binary
    from tegrad.ir.traverse import walk
    from tegrad.lower.nest_facts import regions, specialized

    X = tg.placeholder((2, 3, 56, 56), "float64", "X")
    Y = tg.nn.adaptive_max_pool2d(X, 5)
    (dX,) = tg.gradient(Y, [X], tg.placeholder(Y.shape, "float64", "H"))
    (t,) = [k for k, _, _, _ in _general([dX]) if k.shape == X.shape]
    j = t.axes[-1]
    edges = [0, 1, 11, 12, 22, 23, 33, 34, 44, 45, 55, 56]
    assert regions(t.body, j, 56, 8, 16) == list(zip(edges[:-1], edges[1:], strict=True))
    assert regions(t.body, j, 56, 2, 16) is None

    def divides(e):
        return any(isinstance(x, Binary) and x.op in ("floordiv", "floormod") and j.name
                   in str(x) for x in walk(e))
    assert divides(t.body)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        assert not divides(specialized(t.body, j, lo, hi)[1]), (lo, hi)
    (y,) = [k for k, _, _, _ in _general([Y]) if k.shape == Y.shape][:1]
    assert regions(y.body, y.axes[-1], 5, 8) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


@pytest.mark.parametrize("groups", [4, 16], ids=["12 per group", "3 per group"])
def test_an_axis_of_many_residue_classes_before_the_last_is_looped(groups):
    """A group norm of 48 channels in 4 groups reads its group's statistics at ``c //
    12``: the channel axis runs as two loops, group ``q`` and channel ``r`` in it
    (``c = 12 q + r``), the statistics computed once per group above the loop over
    ``r`` and the innermost loop vectorized, and the gradient's sums over a group share
    two passes; 3 channels per group are unrolled as residue classes
    (``Options.looped_residues``). Both agree with torch in float64."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 48, 5, 8), "float64", "X")
    Y = tg.nn.group_norm(X, groups)
    H = tg.placeholder(Y.shape, "float64", "H")
    outputs = [Y, *tg.gradient(Y, [X], H)]
    texts = [KernelSource(t, b, "k0", a, c, options=Options()).text
             for t, b, a, c in _general(outputs)]
    looped = [t for t in texts if re.search(r"for \(int i\d+ = 0; i\d+ < 12; i\d+\+\+\)", t)]
    if groups == 4:
        assert len(looped) == len(texts) == 2
        assert all(re.search(r"#pragma omp simd\n\s*for", t) for t in looped)
        # the gradient's sums share loops (siblings): the mean's pass, then one more,
        # each over the group's 12 channels and their 5 x 8 points (one loop of 40:
        # coalesce.py)
        assert looped[1].count("for (int r") == 4, looped[1]
        assert looped[1].count("r5 < 40") == 1, looped[1]
    else:
        assert not looped
    rng = np.random.default_rng(groups)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(X.shape)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.group_norm(tx, groups)
    (tdx,) = torch.autograd.grad(ty, [tx], torch.from_numpy(h))
    got = tg.build([X, H], outputs, target="cpu")(x, h)
    for a, b in zip(got, [ty.detach().numpy(), tdx.numpy()], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ceil", [False, True], ids=["floor", "ceil"])
def test_a_3d_window_is_cut_by_its_last_axis_bounds(ceil):
    """A 3x3x3 average pool with padding 1 (27 points, more than ``Options.unroll``): its
    last axis is still cut where the bounds on that axis's 3 points change, so the
    interior's loop over them is unrolled; forward and gradient agree with torch in
    float64, with regions and without."""
    from tegrad.lower.nest_facts import regions

    torch = pytest.importorskip("torch")
    X = tg.placeholder((1, 2, 7, 8, 11), "float64", "X")
    Y = tg.nn.avg_pool3d(X, 3, 2, 1, ceil_mode=ceil, count_include_pad=False)
    (t,) = [k for k, _, _, _ in _general([Y])]
    assert regions(t.body, t.axes[-1], Y.shape[-1], 8, 16) is not None
    rng = np.random.default_rng(3)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(Y.shape)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.avg_pool3d(tx, 3, 2, 1, ceil_mode=ceil, count_include_pad=False)
    _agree_with_and_without_regions(X, Y, x, h, tx, ty, rtol=1e-12)


def test_quotient_cuts_are_where_the_quotient_changes():
    """``_quotient_cuts`` finds the block starts from the blocks, never walking the axis:
    over many forms ``(m v + k) // S``, exactly the values where the quotient changes
    (or None: too many, or blocks too short); on an axis of a million points, the three
    starts of a quotient by 300,000."""
    import itertools

    from tegrad.ir.expr import Binary, Var, const
    from tegrad.lower.nest_facts import _quotient_cuts

    def quotient(v, m, k, size):
        x = Binary("mul", const(m, v.dtype), v, v.dtype)
        if k:
            x = Binary("add", x, const(k, v.dtype), v.dtype)
        return Binary("floordiv", x, const(size, v.dtype), v.dtype)

    checked = 0
    for m, size, k, n in itertools.product([1, 2, 3, 5, 8, 56], [2, 3, 5, 11, 19, 171],
                                           [-9, -1, 0, 3, 7, 60], [1, 2, 5, 9, 56, 172]):
        v = Var.fresh("v", 0, n)
        got = _quotient_cuts(quotient(v, m, k, size), v, n, 1 << 20)
        if got is not None:
            checked += 1
            assert got == [u for u in range(1, n)
                           if (m * u + k) // size != (m * (u - 1) + k) // size], (m, size, k, n)
    assert checked > 500
    v = Var.fresh("v", 0, 10**6)
    assert _quotient_cuts(quotient(v, 1, 0, 300_000), v, 10**6, 8) == [300_000, 600_000, 900_000]


def test_too_many_blocks_leave_the_guards_ranges():
    """A linear resampling's gradient (172 -> 9 points, corners aligned) reads the head
    at ``(8 j + 7) // 171`` and guards its ends: with ``max_regions`` 8 the axis is cut
    at each of the 8 blocks and where their guards change (25 ranges, under
    ``BLOCKED_REGIONS`` times 8); with 4, that is too many, and the axis is cut where
    the guards change alone, as without blocks."""
    from tegrad.lower.nest_facts import regions

    X = tg.placeholder((2, 3, 172), "float64", "X")
    Y = tg.nn.interpolate(X, size=9, mode="linear", align_corners=True)
    (dX,) = tg.gradient(Y, [X], tg.placeholder(Y.shape, "float64", "H"))
    (t,) = [k for k, _, _, _ in _general([dX]) if k.shape == X.shape]
    assert len(regions(t.body, t.axes[-1], 172, 8, 16)) == 25
    guards = regions(t.body, t.axes[-1], 172, 4, 16)
    assert guards is not None and 1 < len(guards) < 4, guards


@pytest.mark.parametrize("corners", [False, True], ids=["half pixel", "corners"])
@pytest.mark.parametrize("size", [9, 5, 40], ids=str)
def test_resampling_cut_at_its_blocks_agrees_with_torch(size, corners):
    """Linear resampling of 172 points to ``size``: forward and gradient, with regions
    (its gradient cut at each block of the head it reads) and without, against torch in
    float64."""
    torch = pytest.importorskip("torch")
    X = tg.placeholder((2, 3, 172), "float64", "X")
    Y = tg.nn.interpolate(X, size=size, mode="linear", align_corners=corners)
    rng = np.random.default_rng(size)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(Y.shape)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.interpolate(tx, size=size, mode="linear", align_corners=corners)
    _agree_with_and_without_regions(X, Y, x, h, tx, ty, rtol=1e-10)


# strided reads: no gathers, transposes in residue classes -------------------------------


def test_a_read_far_apart_along_a_loop_is_not_vectorized_over_it():
    """``lower/strides.py``: a read 1024 elements apart per step of ``i`` would be
    gathered by a vectorized loop over ``i``; one 2 apart would not."""
    from tegrad.lower.strides import gathers_along

    X = tg.placeholder((64, 1024), "float32", "X")
    i, j = tg.ir.expr.Var.fresh("i", 0, 64), tg.ir.expr.Var.fresh("j", 0, 512)
    assert gathers_along(X[i, j], i) and not gathers_along(X[i, j], j)
    assert not gathers_along(X[i, 2 * j + 1], j)
    assert gathers_along(X[0, 9 * j], j)


@pytest.mark.parametrize("rows", [1024, 1020], ids=["tiled", "untiled"])
def test_a_transposing_kernel_reads_each_line_for_eight_elements(rows):
    """``Y[i, j] = 2 X[j, i]`` reads ``X`` 1024 floats apart along its inner loop ``j``
    (``rows`` 1024): the loop is not vectorized (a gather) and ``i`` runs by residue
    classes of 8 (``strides.transposing``), so each line read gives 8 consecutive
    elements; where 8 does not divide ``i``'s range (1020), plainly. Values are NumPy's."""
    X = tg.placeholder((64, rows), "float32", "X")
    Y = tg.compute((rows, 64), lambda i, j: X[j, i] * 2.0, name="Y")
    (text,) = [KernelSource(t, b, "k0", a, c, options=Options()).text for t, b, a, c in
               _general([Y])]
    assert "#pragma omp simd" not in text
    assert ("(8L * i0 + 7L)" in text) == (rows == 1024), text
    x = np.random.default_rng(0).standard_normal((64, rows)).astype(np.float32)
    (y,) = tg.build([X], [Y], target="cpu")(x)
    np.testing.assert_array_equal(y, 2 * x.T)


# guards: a point guard's own range, and rows split by guards ---------------------------


def test_a_point_guard_cuts_its_own_range_and_folds_there():
    """A replicate pad's gradient adds its edges under ``select(0 == j, ...)``: the axis
    is cut at ``j = 0`` and after it (and at the last point), and on the range between
    every edge select folds away, leaving the plain read; with both axes specialized so,
    nothing is left to select."""
    from tegrad.ir.expr import Select
    from tegrad.ir.traverse import walk
    from tegrad.lower.nest_facts import regions, specialized

    X = tg.placeholder((5, 6), "float64", "X")
    Y = tg.nn.pad(X, (1, 1, 1, 1), mode="replicate")
    (dX,) = tg.gradient(Y, [X], tg.placeholder(Y.shape, "float64", "H"))
    (t,) = [k for k, _, _, _ in _general([dX])]
    i, j = t.axes
    assert regions(t.body, i, 5, 8) == [(0, 1), (1, 4), (4, 5)]
    assert regions(t.body, j, 6, 8) == [(0, 1), (1, 5), (5, 6)]
    _, rows = specialized(t.body, i, 1, 4)
    _, inside = specialized(rows, j, 1, 5)
    assert any(isinstance(x, Select) for x in walk(rows))  # (the column edges are left)
    assert not any(isinstance(x, Select) for x in walk(inside)), inside
    _, corner = specialized(t.body, i, 0, 1)
    assert any(isinstance(x, Select) for x in walk(corner))


def _guarded():
    """``(name, tegrad op, torch op of (F, ...))`` for bodies split by guards along rows
    and by point guards: pads of every mode and rank, concatenations and stacks."""
    cases = [(f"pad {mode} {len(pad) // 2}-D {pad}",
              lambda x, mode=mode, pad=pad: tg.nn.pad(x, pad, mode=mode),
              lambda F, x, mode=mode, pad=pad: F.pad(x, pad, mode=mode))
             for mode, pad in [("replicate", (1, 2)), ("replicate", (1, 1, 2, 0)),
                               ("replicate", (1, 1, 2, 2, 1, 0)), ("reflect", (1, 1, 1, 1)),
                               ("constant", (2, 1, 0, 3)), ("circular", (1, 1, 1, 1))]]
    cases += [("cat dim 2", lambda x: tg.nn.cat([x, x * 2.0, x], 2),
               lambda F, x: __import__("torch").cat([x, x * 2.0, x], 2)),
              ("stack dim -1", lambda x: tg.nn.stack([x, x * 3.0], -1),
               lambda F, x: __import__("torch").stack([x, x * 3.0], -1))]
    return cases


GUARDED = _guarded()


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (4, 5), (7, 9)], ids=str)
@pytest.mark.parametrize("case", GUARDED, ids=lambda case: case[0])
def test_guarded_bodies_split_by_region_agree_with_torch(case, size):
    """Forward and gradient of the guarded bodies above on 1 x 1 images up, on the cpu
    target with regions and without (``max_regions=0``), against torch in float64."""
    from tegrad.backends.cpu.compiler import compiler
    torch = pytest.importorskip("torch")
    if compiler() is None:
        pytest.skip("no C compiler")
    name, ours, theirs = case
    shape = (2, 3, *size) if "3-D" not in name else (1, 2, 3, *size)
    rng = np.random.default_rng(GUARDED.index(case))
    x = rng.standard_normal(shape)
    tx = torch.from_numpy(x).requires_grad_()
    try:
        ty = theirs(torch.nn.functional, tx)
    except (RuntimeError, NotImplementedError):  # (a reflection wider than the input)
        pytest.skip("torch refuses this pad here")
    X = tg.placeholder(shape, "float64", "X")
    Y = ours(X)
    _agree_with_and_without_regions(X, Y, x, rng.standard_normal(Y.shape), tx, ty, rtol=1e-12)


def _agree_with_and_without_regions(X, Y, x, h, tx, ty, rtol: float) -> None:
    """``Y`` and its gradient for the head ``h`` at ``x`` on the cpu target, with regions
    and without (``max_regions=0``), against torch's ``ty`` of the leaf ``tx`` (float64)."""
    import torch

    (tdx,) = torch.autograd.grad(ty, [tx], torch.from_numpy(h))
    H = tg.placeholder(Y.shape, "float64", "H")
    base = Options.from_environment()
    for options in (base, base.replace(max_regions=0)):
        f = tg.build([X, H], [Y, *tg.gradient(Y, [X], H)], target="cpu", options=options)
        for a, b in zip(f(x, h), [ty.detach().numpy(), tdx.numpy()], strict=True):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12)


def _kernel_texts(outputs, **fields):
    options = Options().replace(**fields)
    return [KernelSource(t, b, "k0", a, c, options=options).text
            for t, b, a, c in _general(outputs)]


def _agrees_both_ways(inputs, outputs, arrays, field: str, tolerance: float) -> None:
    """The cpu target gives the NumPy reference's values with ``Options.<field>`` on and
    off."""
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    for on in (True, False):
        options = tg.Options.from_environment().replace(**{field: on})
        got = tg.build(inputs, outputs, target="cpu", options=options)(*arrays)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def _coalesce_cases():
    """name -> (outputs, inputs, whether the image loops merge): each kernel reads the
    image ``X`` (8 x 3 x 5 x 6) by its own pattern."""
    X = tg.placeholder((8, 3, 5, 6), "float32", "X")
    W = tg.placeholder((3,), "float32", "W")
    C = tg.placeholder((6,), "float32", "C")
    scaled = tg.compute(X.shape, lambda n, c, h, w: tg.maximum(X[n, c, h, w] * W[c], 0.0))
    shifted = tg.compute((8, 3, 4, 6), lambda n, c, h, w: X[n, c, h + 1, w] - X[n, c, h, w])
    columns = tg.compute(X.shape, lambda n, c, h, w: X[n, c, h, w] * C[w])
    guarded = tg.compute(X.shape, lambda n, c, h, w: tg.if_then_else(h >= 1, X[n, c, h, w],
                                                                          0.0))
    checkered = tg.compute(X.shape, lambda n, c, h, w: tg.if_then_else(
        (h + w) % 7 < 3, X[n, c, h, w], 0.0))  # (7: more classes than points, no residues)
    rh, rw = tg.reduce_axis(5, "rh"), tg.reduce_axis(6, "rw")
    total = tg.compute((8, 3), lambda n, c: tg.sum(X[n, c, rh, rw] * X[n, c, rh, rw],
                                                    axis=[rh, rw]))
    return {"scaled": ([scaled], [X, W], True), "sum of squares": ([total], [X], True),
            "shifted rows": ([shifted], [X], False), "per column": ([columns], [X, C], False),
            "rows guarded into regions": ([guarded], [X], True),
            "checkered": ([checkered], [X], False)}


@pytest.mark.parametrize("case", list(_coalesce_cases()))
def test_loops_over_an_image_plane_merge_where_only_addresses_read_them(case):
    """A kernel over ``(N, C, H, W)`` whose body reads and writes ``[.., h, w]`` only
    as addresses of row-major planes loops once over the ``H W`` points of a plane
    (``lower/coalesce.py``), an elementwise map, a reduction and a guard's regions of
    rows (``[1, 5)``: points ``[6, 30)``) alike; a shifted row, a per-column factor or a
    value of ``h`` and ``w`` keep the two loops. Both ways give NumPy's values."""
    outputs, inputs, merges = _coalesce_cases()[case]
    merged = "\n".join(_kernel_texts(outputs))
    nested = "\n".join(_kernel_texts(outputs, coalesce_loops=False))
    assert re.search(r"< 6; [ir]\d+\+\+", nested)
    assert bool(re.search(r"< 30; [ir]\d+\+\+", merged)) == merges, merged
    assert (merged == nested) == (not merges)
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    _agrees_both_ways(inputs, outputs, arrays, "coalesce_loops", 1e-5)


def _lane_cases():
    """name -> (outputs, inputs, whether a sum runs in lanes): float32 sums whose last
    axis is short, inside another loop of the sum (``lower/nest_lanes.py``)."""
    X = tg.placeholder((2, 3, 7, 13), "float32", "X")
    Y = tg.placeholder((2, 3, 7, 13), "float32", "Y")
    V = tg.placeholder((7,), "float32", "V")
    D = tg.placeholder((2, 3, 7, 13), "float64", "D")
    rh, rw = tg.reduce_axis(7, "rh"), tg.reduce_axis(13, "rw")
    # a depthwise convolution's weight gradient: each tap's rows cut by its padding
    w = tg.placeholder((3, 1, 3, 3), "float32", "w")
    conv = tg.nn.conv2d(X, w, padding=1, groups=3)
    head = tg.placeholder(conv.shape, "float32", "H")
    (dw,) = tg.gradient(conv, [w], head=head)

    def plane(body, name, n=7, m=13):
        a, b = tg.reduce_axis(n, "a"), tg.reduce_axis(m, "b")
        return tg.compute((2, 3), lambda i, c: tg.sum(body(i, c, a, b), axis=[a, b]),
                          name=name)

    # a row that ends short of the plane's: no merged loop (coalesce.py) takes it
    cut = tg.compute((2, 3), lambda i, c: tg.sum(X[i, c, rh, rw] * Y[i, c, rh, rw],
                                                  axis=[rh, rw], where=rw < 11), name="cut")
    mixed = plane(lambda i, c, a, b: -(X[i, c, a, b] - V[a] * 2.0) / (Y[i, c, a, b] + 3.0),
                  "mixed")
    strided = tg.compute((2, 3), lambda i, c: tg.sum(X[i, c, rh, rw // 2 * 2] * 1.5,
                                                     axis=[rh, rw]), name="strided")
    short = plane(lambda i, c, a, b: X[i, c, a, b] * Y[i, c, a, b], "short", 7, 3)
    wide = tg.placeholder((2, 3, 7, 70), "float32", "Z")
    longer = plane(lambda i, c, a, b: wide[i, c, a, b] * 2.0, "longer", 7, 70)
    wide64 = plane(lambda i, c, a, b: D[i, c, a, b] * 2.0, "float64", 7, 13)
    big = tg.placeholder((20000, 13), "float32", "B")
    ra, rb = tg.reduce_axis(20000, "ra"), tg.reduce_axis(13, "rb")
    everything = tg.compute((), lambda: tg.sum(big[ra, rb] * 2.0, axis=[ra, rb]), name="all")
    two = tg.placeholder((2, 3, 7, 32), "float32", "T")
    rows28 = plane(lambda i, c, a, b: two[i, c, a, b + 2] * two[i, c, a, b], "rows28", 7, 28)
    rows32 = plane(lambda i, c, a, b: two[i, c, a, b] * 0.5 + 1.0, "rows32", 7, 32)
    return {"depthwise weight gradient": ([dw], [X, head], True),
            "rows cut short": ([cut], [X, Y], True),
            "arithmetic of rows and a broadcast": ([mixed], [X, Y, V], True),
            "a gathered row": ([strided], [X], False),
            "rows of 3": ([short], [X, Y], False),
            "rows of 70": ([longer], [wide], False),
            "float64": ([wide64], [D], False),
            "rows of 28": ([rows28], [two], True), "rows of 32": ([rows32], [two], True),
            # (its first loop shared out over threads, each with its own accumulator)
            "a 0-d sum over threads": ([everything], [big], False)}


@pytest.mark.parametrize("case", list(_lane_cases()))
def test_short_sums_run_in_lanes(case):
    """A float32 sum over rows of 4 to 64 points, inside another loop of it, is masked
    vectors per row whose lanes are summed once, after all the rows
    (``lower/nest_lanes.py``): a depthwise convolution's weight gradient, a row cut short
    by a ``where``, arithmetic of contiguous rows and of a value broadcast to every lane.
    Rows of 28 and 32 are two vectors each (the last masked). A gathered row, rows of 3
    or 70 points, float64 sums and a sum shared out over threads stay loops. With
    ``Options.lanes`` on and off, NumPy's values."""
    outputs, inputs, in_lanes = _lane_cases()[case]
    texts = "\n".join(_kernel_texts(outputs, coalesce_loops=False))
    assert ("_mm512_mask_add_ps" in texts) == in_lanes, texts
    assert "_mm512_mask_add_ps" not in "\n".join(
        _kernel_texts(outputs, coalesce_loops=False, lanes=False))
    rng = np.random.default_rng(5)
    arrays = [rng.uniform(0.5, 1.5, t.shape).astype(t.dtype) for t in inputs]
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    for on in (True, False):
        options = tg.Options.from_environment().replace(lanes=on, coalesce_loops=False)
        got = tg.build(inputs, outputs, target="cpu", options=options)(*arrays)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["max", "min", "tie count"])
def test_short_maxima_run_in_lanes_and_keep_nan(kind):
    """A float32 max or min over short rows inside another of its loops (a pool's
    windows) runs in lanes as a sum does, each lane keeping whether it saw NaN: a NaN
    anywhere in a plane is its max, as in NumPy. A tie count, ``sum [X == m]``, compares
    in lanes as a mask. With ``Options.lanes`` on and off, NumPy's values."""
    X = tg.placeholder((2, 3, 7, 13), "float32", "X")
    M = tg.placeholder((2, 3), "float32", "M")
    a, b = tg.reduce_axis(7, "a"), tg.reduce_axis(13, "b")
    if kind == "tie count":
        y = tg.compute((2, 3), lambda i, c: tg.sum(tg.cast(tg.equal(X[i, c, a, b], M[i, c]),
                                                            "float32"), axis=[a, b]))
        inputs, op = [X, M], "_mm512_mask_add_ps"
    else:
        y = tg.compute((2, 3), lambda i, c: getattr(tg, kind)(X[i, c, a, b], axis=[a, b]))
        inputs, op = [X], f"_mm512_mask_{kind}_ps"
    texts = "\n".join(_kernel_texts([y], coalesce_loops=False))
    assert op in texts, texts
    assert op not in "\n".join(_kernel_texts([y], coalesce_loops=False, lanes=False))
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, (2, 3, 7, 13)).astype(np.float32)  # ties
    x[0, 1, 3, 12] = np.nan  # in a masked tail lane
    x[1, 2, 0, 0] = np.nan
    x[1, 0, :, :] = np.inf if kind == "min" else -np.inf
    arrays = [x, np.full((2, 3), 2.0, np.float32)][:len(inputs)]
    want = tg.build(inputs, [y], target="numpy")(*arrays)[0]
    for on in (True, False):
        options = tg.Options.from_environment().replace(lanes=on, coalesce_loops=False)
        got = tg.build(inputs, [y], target="cpu", options=options)(*arrays)[0]
        np.testing.assert_array_equal(got, want)


def _odd_cases():
    """``(name, tegrad op, torch op of (F, x), input shape)``: strided windows over
    extents their stride does not divide, on both image axes."""
    return [
        ("max_pool k3 s2 p1", lambda x: tg.nn.max_pool2d(x, 3, 2, 1),
         lambda F, x: F.max_pool2d(x, 3, 2, 1), (2, 3, 13, 11)),
        ("avg_pool k3 s2 p1 ceil, pad not counted",
         lambda x: tg.nn.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         (2, 3, 12, 9)),
        ("lp_pool p3 k(2, 3) s2 ceil", lambda x: tg.nn.lp_pool2d(x, 3.0, (2, 3), 2, True),
         lambda F, x: F.lp_pool2d(x, 3.0, (2, 3), 2, ceil_mode=True), (2, 3, 9, 11)),
        ("max_pool k2 s3", lambda x: tg.nn.max_pool2d(x, 2, 3),
         lambda F, x: F.max_pool2d(x, 2, 3), (1, 2, 10, 8)),
    ]


@pytest.mark.parametrize("case", _odd_cases(), ids=lambda c: c[0])
def test_odd_extents_run_by_residue_class(case):
    """A stride-2 pool's gradient over 13 x 11 points reads ``dY[i // 2, j // 2]``: with
    ``Options.ragged_residues`` both axes run by residue class though 2 divides neither,
    the last quotient a range of its own without the classes past the end (no ``/ 2`` is
    left in the C); without it, the kernel divides at every point. Either way the values
    are torch's in float64."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    name, op, ref, shape = case
    X = tg.placeholder(shape, "float64", "X")
    Y = op(X)
    H = tg.placeholder(Y.shape, "float64", "H")
    (dX,) = tg.gradient(Y, [X], H)
    rng = np.random.default_rng(5)
    x = rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape) + 0.5  # (no ties)
    h = rng.standard_normal(Y.shape)
    tx = torch.from_numpy(x).requires_grad_()
    ty = ref(F, tx)
    (tdx,) = torch.autograd.grad(ty, [tx], torch.from_numpy(h))
    for ragged in (True, False):
        options = Options().replace(ragged_residues=ragged)
        (text,) = [KernelSource(t, b, "k0", a, c, options=options).text
                   for t, b, a, c in _general([dX]) if t is dX]
        divides = re.search(r"\w+ [/%] \(\(int32_t\)[23]\)", text)
        assert (divides is None) == ragged, f"{name}, ragged={ragged}:\n{text}"
        got = tg.build([X, H], [Y, dX], target="cpu", options=options)(x, h)
        for a, b in zip(got, [ty.detach().numpy(), tdx.numpy()], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def _counted_cases():
    """name -> (outputs, inputs, whether a sum's axis is counted): sums whose source does
    not use their last axes."""
    X = tg.placeholder((6, 5), "float32", "X")
    N = tg.placeholder((6, 5), "int32", "N")
    k, a, b = tg.reduce_axis((0, 8), "k"), tg.reduce_axis((0, 5), "a"), tg.reduce_axis((1, 5), "b")
    # k's bound from i: min(8, i + 1) points of X[i, j]
    tri = tg.compute((6, 5), lambda i, j: tg.sum(X[i, j], axis=k, where=k <= i), name="tri")
    # two free axes of constant range: 5 x 4 points
    both = tg.compute((6, 5), lambda i, j: tg.sum(X[i, j] * 2.0, axis=[a, b]), name="both")
    # b's bound names a: b alone is counted (a + 1 - 1 points), a stays a loop
    nested = tg.compute((6, 5), lambda i, j: tg.sum(X[i, a] * X[i, j], axis=[a, b],
                                                    where=tg.all(b <= a, a <= j)), name="nested")
    # a window from a start that is not affine in the output: an adaptive pool's offsets
    window = tg.compute((6, 5), lambda i, j: tg.sum(
        X[i, j], axis=k, where=tg.all(k + j >= (i * 7) // 3, k + j < (i * 7 + 9) // 3)),
        name="window")
    ints = tg.compute((6, 5), lambda i, j: tg.sum(N[i, j], axis=k, where=k <= j), name="ints")
    # a conjunct that is not a bound (k even) tests every point: k stays a loop
    even = tg.compute((6, 5), lambda i, j: tg.sum(X[i, j], axis=k, where=tg.equal(k % 2, 0)),
                      name="even")
    return {"triangle": ([tri], [X], True), "two constant axes": ([both], [X], True),
            "dependent bounds": ([nested], [X], True), "window": ([window], [X], True),
            "integers": ([ints], [N], True), "not a bound": ([even], [X], False)}


@pytest.mark.parametrize("case", list(_counted_cases()))
def test_a_sum_over_axes_its_source_does_not_use_is_a_product(case):
    """``sum_{k in [lo, hi)} x = max(0, hi - lo) x`` where neither ``x`` nor a conjunct
    left over uses ``k`` and no later axis's bounds name it (``Options.count_sums``,
    ``nest_reduce.counted_axes``): no loop over ``k``. Both ways give NumPy's values."""
    outputs, inputs, counts = _counted_cases()[case]
    counted = "\n".join(_kernel_texts(outputs))
    looped = "\n".join(_kernel_texts(outputs, count_sums=False))
    loops = [len(re.findall(r"for \(int r\d+", text)) for text in (counted, looped)]
    assert (loops[0] < loops[1]) == counts and (counted == looped) == (not counts), counted
    rng = np.random.default_rng(5)
    arrays = [rng.integers(-9, 9, t.shape).astype(t.dtype) if t.dtype == "int32"
              else rng.standard_normal(t.shape).astype(t.dtype) for t in inputs]
    _agrees_both_ways(inputs, outputs, arrays, "count_sums", 1e-6)


def _hoist_cases():
    """name -> (outputs, inputs, buffers ``hoist`` makes)."""
    X = tg.placeholder((4, 6, 40), "float32", "X")
    W = tg.placeholder((3,), "float32", "W")
    o = tg.reduce_axis((0, 3), "o")
    # only o and the columns: nothing to move (o alone gives constants once unrolled)
    plain = tg.compute((4, 6, 40), lambda n, h, w: tg.sum(X[n, o, w] * W[o], axis=o),
                       name="plain")
    # an adaptive max pool's gradient (14 rows to 3 windows), as a user writes it
    image = tg.placeholder((2, 3, 14, 40), "float32", "I")
    pooled = tg.nn.adaptive_max_pool2d(image, (3, None))
    head = tg.placeholder(pooled.shape, "float32", "H")
    (pool_grad,) = tg.gradient(pooled, [image], head=head)
    return {"nothing to move": ([plain], [X, W], 0),
            "adaptive max pool": ([pool_grad], [image, head], 1)}


@pytest.mark.parametrize("case", list(_hoist_cases()))
def test_values_of_an_unrolled_loop_move_out_of_the_vector_loop(case):
    """An unrolled loop inside a vectorized one computes, before the vectorized loop,
    into a buffer per value, what does not depend on the vectorized loop's variable but
    on its own and an outer one (``lower/hoist.py``, ``Options.hoist_unrolled``). Both
    ways give NumPy's values."""
    outputs, inputs, buffers = _hoist_cases()[case]
    moved = "\n".join(_kernel_texts(outputs))
    kept = "\n".join(_kernel_texts(outputs, hoist_unrolled=False))
    assert len(re.findall(r"\bh\d+_\w+\[\d+\];", moved)) >= buffers, moved
    assert (buffers == 0) == (moved == kept)
    assert "#pragma omp simd" in moved
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(t.shape).astype(t.dtype) for t in inputs]
    _agrees_both_ways(inputs, outputs, arrays, "hoist_unrolled", 1e-6)


def test_the_sums_of_a_grouped_output_are_ordered_by_stride_too():
    """A group norm's gradient writes its per-group sums with another output of the same
    point (``grouping.py``); that output's sum over ``(x y, channel in group)`` was
    left in its written order, the channel (stride 729) innermost, and, so ordered, was
    not the main output's sum of the same terms either. Both bodies are ordered now
    (``Options.order_reductions``): the contiguous axis innermost, the sum computed
    once. Both ways give NumPy's values."""
    x = tg.placeholder((2, 54, 27, 27), "float32", "X")
    g, b = tg.placeholder((54,), "float32", "G"), tg.placeholder((54,), "float32", "B")
    y = tg.nn.group_norm(x, 3, g, b)
    head = tg.placeholder(y.shape, "float32", "H")
    grads = tg.gradient(y, [x, g, b], head=head)
    strided = re.compile(r"< 729; r\d+\+\+\) \{\n\s*for \(int r\d+ = 0; r\d+ < 18;")
    ordered = "\n".join(_kernel_texts(grads))
    assert not strided.search(ordered), ordered
    assert strided.search("\n".join(_kernel_texts(grads, order_reductions=False)))
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (x, g, b, head)]
    want = tg.build([x, g, b, head], grads, target="numpy")(*arrays)
    for on in (True, False):
        options = tg.Options.from_environment().replace(order_reductions=on)
        got = tg.build([x, g, b, head], grads, target="cpu", options=options)(*arrays)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-4)


def test_an_unrolled_loop_from_one_reads_its_buffers_at_its_offset(tmp_path):
    """``hoist`` on a built nest whose unrolled loop runs over ``[1, 4)`` and moves two
    values: the buffers are indexed ``r - 1``, computed once in the filling loop and once
    at the head of the unrolled one, and the C compiles (a name defined twice in one
    scope would not)."""
    import subprocess

    from tegrad.backends.c.c_ops import PRELUDE
    from tegrad.backends.cpu import compiler
    from tegrad.lower import hoist
    from tegrad.lower.nest_forms import Apply, IndexTerm, Lit, Load, Ref

    X = tg.placeholder((4, 40), "float32", "X")
    Y = tg.placeholder((4, 40), "float32", "Y")
    unrolled = nest.Loop(loop=True, unrolled=True, var="r0", lo=1, hi=4, role="reduce",
                         unroll=16)
    unrolled.items += [
        nest.Let("t1", "int32", Apply("mul", (Ref("i0"), Ref("r0")), "int32", "int32")),
        nest.Let("t2", "float32", Apply("cast", (Ref("t1"),), "float32", "int32")),
        nest.Let("t3", "bool", Apply("lt", (Ref("t1"), Lit(5, "int32")), "bool", "int32")),
        nest.Let("t4", "float32", Load(1, (IndexTerm(Ref("r0"), 40), IndexTerm(Ref("i1"), 1)))),
        nest.Let("t5", "float32", Apply("mul", (Ref("t4"), Ref("t2")), "float32", "float32")),
        nest.Accumulate("sum", Ref("acc"), Ref("t5"), "float32", mask=(Ref("t3"),))]
    columns = nest.Loop(loop=True, var="i1", lo=0, hi=40, vectorize=True)
    columns.items += [nest.Accumulator("acc", "float32", Lit(0.0, "float32")), unrolled,
                      nest.Store(0, nest_forms.RowIndex((("i0", 40), ("i1", 1))), Ref("acc"))]
    rows = nest.Loop(loop=True, var="i0", lo=0, hi=4, items=[columns])
    kernel = hoist.hoisted(nest.LoopNest("k0", [Y, X], 1, nest.Block(items=[rows]), []))
    fill = [i for i in rows.items if isinstance(i, nest.Loop) and not i.vectorize]
    assert len(fill) == 1 and fill[0].lo == 1
    buffers = [i for i in rows.items if isinstance(i, nest.RowBuffer)]
    assert sorted(b.name.split("_", 1)[1] for b in buffers) == ["t2", "t3"]
    assert sum(isinstance(i, nest.Let) and i.name == "r0_at" for i in fill[0].items) == 1
    rewritten = columns.items[1]
    assert rewritten.items[0].name == "r0_at"
    loads = [i.value for i in rewritten.items
             if isinstance(i, nest.Let) and isinstance(i.value, nest_forms.BufferLoad)]
    assert len(loads) == 2 and all(v.index == Ref("r0_at") for v in loads)
    source = tmp_path / "k.c"
    source.write_text(PRELUDE + "\n\n" + CDialect().render(kernel))
    flags = [f for f in compiler.FLAGS if f not in ("-shared", "-w")]
    subprocess.run([compiler.compiler(), *flags, "-c", str(source), "-o",
                    str(tmp_path / "k.o")], check=True, capture_output=True)
