"""TVM interop: ``from_tvm`` and ``to_tvm`` (``tegrad.interop.tvm_bridge``).

(a) Forwards written in TVM ``te`` (by hand the way topi writes them, and topi's own
    definitions) read with ``from_tvm`` evaluate, with tegrad's NumPy backend, to what
    TVM's own build of the same graph computes.
(b) Their generated backward, written back with ``to_tvm`` and built by TVM (llvm),
    matches PyTorch's autograd in float64.
(c) ``tg.nn`` ops and tegrad-only constructs (reductions inside expressions, custom
    reducers, argmax, guarded and gathered reads, second order) and their backwards
    build and run in TVM and match tegrad's NumPy results.
(d) Unsupported constructs raise errors that name them.

One table of cases drives (a) and (b); one drives (c). Each case builds one or two TVM
functions (forward and backward together), so the file stays fast.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

import tegrad as tg  # noqa: E402
from tegrad.interop.tvm_bridge import build_tvm, from_tvm, load_tvm, to_tvm  # noqa: E402
from tegrad.ir.tensor import ScanOutput  # noqa: E402

try:  # only (b) needs PyTorch
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch ships with the test extra
    torch = F = None

te = tvm.te
tir = load_tvm().tir
F64 = "float64"
topi = getattr(tvm, "topi", None)


def tvm_run(outs, ins, arrays):
    """Build the TVM graph ``ins -> outs`` as it stands and run it on NumPy arrays."""
    mod = tvm.compile(te.create_prim_func([*ins, *outs]), target="llvm")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    res = [tvm.runtime.empty([int(s) for s in o.shape], str(o.dtype), dev) for o in outs]
    mod(*args, *res)
    return [r.numpy() for r in res]


def random_inputs(ins, ints: dict, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for k, p in enumerate(ins):
        shape, dtype = tuple(int(s) for s in p.shape), str(p.dtype)
        if k in ints:
            out.append(rng.integers(0, ints[k], shape).astype(dtype))
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


# ---------------------------------------------------------------------------
# (a), (b): forwards written in TVM


@dataclass
class TvmCase:
    name: str
    graph: Callable  # () -> (outputs, inputs): a TVM te graph in float64
    torch_fn: Callable | None  # the first output from torch tensors (None: forward only)
    ints: dict = field(default_factory=dict)  # input position -> high of its integer data


def _matmul():
    A = te.placeholder((6, 8), F64, name="A")
    B = te.placeholder((8, 5), F64, name="B")
    k = te.reduce_axis((0, 8), name="k")
    return [te.compute((6, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")], [A, B]


def _pad(X, p, value):
    n, c, h, w = (int(s) for s in X.shape)

    def body(a, b, y, x):
        inside = tir.all(y >= p, y < h + p, x >= p, x < w + p)
        return tir.if_then_else(inside, X[a, b, y - p, x - p], tir.const(value, X.dtype))

    return te.compute((n, c, h + 2 * p, w + 2 * p), body, name="pad")


def _conv2d():
    X = te.placeholder((2, 3, 9, 9), F64, name="X")
    W = te.placeholder((4, 3, 3, 3), F64, name="W")
    b = te.placeholder((4,), F64, name="b")
    Xp = _pad(X, 1, 0.0)
    rc = te.reduce_axis((0, 3), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute(
        (2, 4, 5, 5),
        lambda n, f, y, x: te.sum(
            Xp[n, rc, y * 2 + ry, x * 2 + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    out = te.compute((2, 4, 5, 5), lambda n, f, y, x: conv[n, f, y, x] + b[f], name="out")
    return [out], [X, W, b]


def _max_pool():
    X = te.placeholder((2, 3, 9, 9), F64, name="X")
    Xp = _pad(X, 1, float(np.finfo(np.float64).min))  # topi pads with the lowest value
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    pool = te.compute(
        (2, 3, 5, 5),
        lambda n, c, y, x: te.max(Xp[n, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]),
        name="pool",
    )
    return [pool], [X]


def _softmax():
    X = te.placeholder((4, 7), F64, name="X")
    k = te.reduce_axis((0, 7), name="k")
    mx = te.compute((4,), lambda i: te.max(X[i, k], axis=k), name="maxelem")
    ex = te.compute((4, 7), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, 7), name="k2")
    sm = te.compute((4,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    return [te.compute((4, 7), lambda i, j: ex[i, j] / sm[i], name="softmax")], [X]


def _embedding():
    idx = te.placeholder((6,), "int32", name="idx")
    W = te.placeholder((10, 3), F64, name="W")
    return [te.compute((6, 3), lambda i, j: W[idx[i], j], name="embed")], [idx, W]


def _layer_norm():
    X = te.placeholder((4, 7), F64, name="X")
    g = te.placeholder((7,), F64, name="gamma")
    b = te.placeholder((7,), F64, name="beta")
    k = te.reduce_axis((0, 7), name="k")
    mean = te.compute((4,), lambda i: te.sum(X[i, k] / 7.0, axis=k), name="mean")
    k2 = te.reduce_axis((0, 7), name="k2")
    var = te.compute(
        (4,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]) / 7.0, axis=k2),
        name="var",
    )
    out = te.compute(
        (4, 7),
        lambda i, j: (X[i, j] - mean[i]) * te.rsqrt(var[i] + 1e-5) * g[j] + b[j],
        name="layer_norm",
    )
    return [out], [X, g, b]


def _logsumexp():
    X = te.placeholder((4, 7), F64, name="X")
    lse = te.comm_reducer(
        lambda x, y: tir.max(x, y) + tir.log1p(tir.exp(0.0 - tir.abs(x - y))),
        lambda t: tir.const(float("-inf"), t),
        name="lse",
    )
    k = te.reduce_axis((0, 7), name="k")
    return [te.compute((4,), lambda i: lse(X[i, k], axis=k), name="logsumexp")], [X]


def _intrinsics():
    X = te.placeholder((5, 6), F64, name="X")

    def body(i, j):
        x = X[i, j]
        ax = tir.abs(x)
        terms = [
            te.exp(x) * 0.1, te.log(x * x + 1.0), te.sqrt(ax + 1.0), te.rsqrt(x * x + 1.0),
            te.tanh(x), te.sigmoid(x), te.erf(x), tir.power(ax + 1.0, tir.const(1.5, F64)),
            te.sin(x) * te.cos(x), tir.log1p(ax), tir.max(x, 0.0) - tir.min(x, 0.5),
            tir.Select(x > 0.0, x, x * 2.0), te.floor(x) + te.ceil(x) + te.round(x),
            X[tir.floormod(i * 3 + 1, 5), tir.floordiv(j, 2)],
            tir.if_then_else(i >= 1, X[i - 1, j], tir.const(0.0, F64)),
            (i - 2).astype(F64) * tir.truncdiv(i - 2, 2).astype(F64) * x,
            tir.if_then_else(tir.any(tir.Not(x > 0.5), i == 0), x * x, x),
        ]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out

    return [te.compute((5, 6), body, name="soup")], [X]


def _intrinsics_torch(x):
    n, m = x.shape
    ii = torch.arange(n).reshape(-1, 1).double()
    shifted = torch.cat([torch.zeros_like(x[:1]), x[:-1]])
    trunc = torch.trunc((ii - 2) / 2)
    return (
        torch.exp(x) * 0.1 + torch.log(x * x + 1) + torch.sqrt(x.abs() + 1)
        + torch.rsqrt(x * x + 1) + torch.tanh(x) + torch.sigmoid(x) + torch.erf(x)
        + (x.abs() + 1) ** 1.5 + torch.sin(x) * torch.cos(x) + torch.log1p(x.abs())
        + torch.clamp(x, min=0) - torch.clamp(x, max=0.5) + torch.where(x > 0, x, 2 * x)
        + torch.floor(x) + torch.ceil(x) + torch.round(x)
        + x[(torch.arange(n) * 3 + 1) % n][:, torch.arange(m) // 2]
        + shifted + (ii - 2) * trunc * x
        + torch.where((x <= 0.5) | (ii == 0), x * x, x)
    )


def _more_intrinsics():
    """Intrinsics tegrad reads as compositions, integer division, Let, likely, bool."""
    X = te.placeholder((5, 6), F64, name="X")
    N = te.placeholder((5, 6), "int32", name="N")

    def real(i, j):
        x = X[i, j]
        a = tir.abs(x) + 1.0
        v = tir.Var("v", F64)
        terms = [
            tir.exp2(x), tir.exp10(x * 0.1), tir.log2(a), tir.log10(a), tir.tan(x * 0.5),
            tir.sinh(x), tir.cosh(x), tir.trunc(x * 3.0), tir.nearbyint(x * 2.0),
            tir.call_pure_extern(F64, "expm1", x), tir.Let(v, x * 2.0, v * v),
            tir.Select(tir.Or(tir.isnan(x), tir.isinf(x)), tir.const(0.0, F64), a),
            tir.Select(tir.isfinite(x), x, tir.const(0.0, F64)),
            (N[i, j] - 3).astype(F64) * x,
        ]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out

    def integer(i, j):
        n = N[i, j] - 3  # negative too: truncating division differs from floor division
        return (tir.truncdiv(n, 2) + tir.truncmod(n, 3) * 10 + tir.floordiv(n, 2) * 100
                + tir.floormod(n, 4) * 1000 + tir.truncdiv(-7, n + 10) * 10000)

    outs = [
        te.compute((5, 6), real, name="real"),
        te.compute((5, 6), integer, name="integer"),
        te.compute((5, 6), lambda i, j: tir.And(tir.likely(X[i, j] > 0.0), N[i, j] > 2),
                   name="flag"),
    ]
    return outs, [X, N]


def _topi_cases() -> list[TvmCase]:
    if topi is None:
        return []

    def conv():
        X = te.placeholder((2, 3, 9, 9), F64, name="X")
        W = te.placeholder((4, 3, 3, 3), F64, name="W")
        return [topi.nn.conv2d_nchw(X, W, stride=2, padding=1, dilation=1)], [X, W]

    def pool():
        X = te.placeholder((2, 3, 9, 9), F64, name="X")
        return [topi.nn.pool2d(X, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW")], [X]

    def avg_pool():
        X = te.placeholder((2, 3, 9, 9), F64, name="X")
        out = topi.nn.pool2d(X, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "avg", layout="NCHW",
                             count_include_pad=False)
        return [out], [X]

    def softmax():
        X = te.placeholder((4, 7), F64, name="X")
        return [topi.nn.softmax(X, axis=1)], [X]

    def log_softmax():
        X = te.placeholder((4, 7), F64, name="X")
        return [topi.nn.log_softmax(X)], [X]

    def dense():
        X = te.placeholder((4, 7), F64, name="X")
        W = te.placeholder((5, 7), F64, name="W")
        return [topi.nn.dense(X, W)], [X, W]

    def take():
        X = te.placeholder((8, 3), F64, name="X")
        idx = te.placeholder((5,), "int32", name="idx")
        return [topi.take(X, idx, axis=0)], [X, idx]

    def argmax():
        X = te.placeholder((4, 7), F64, name="X")
        return [topi.argmax(X, axis=1), topi.argmin(X, axis=1)], [X]

    return [
        TvmCase("topi_conv2d_nchw", conv, lambda x, w: F.conv2d(x, w, stride=2, padding=1)),
        TvmCase("topi_max_pool2d", pool, lambda x: F.max_pool2d(x, 3, 2, 1)),
        TvmCase("topi_avg_pool2d", avg_pool,
                lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
        TvmCase("topi_softmax", softmax, lambda x: torch.softmax(x, 1)),
        TvmCase("topi_log_softmax", log_softmax, lambda x: torch.log_softmax(x, 1)),
        TvmCase("topi_dense", dense, lambda x, w: x @ w.T),
        TvmCase("topi_take", take, lambda x, i: x[i.long()], ints={1: 8}),
        TvmCase("topi_argmax", argmax, None),
    ]


TVM_CASES = [
    TvmCase("matmul", _matmul, lambda a, b: a @ b),
    TvmCase("conv2d_stride2_pad1", _conv2d,
            lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1)),
    TvmCase("max_pool2d", _max_pool, lambda x: F.max_pool2d(x, 3, 2, 1)),
    TvmCase("softmax", _softmax, lambda x: torch.softmax(x, 1)),
    TvmCase("embedding_gather", _embedding, lambda i, w: w[i.long()], ints={0: 10}),
    TvmCase("layer_norm", _layer_norm, lambda x, g, b: F.layer_norm(x, (7,), g, b)),
    TvmCase("logsumexp_comm_reducer", _logsumexp, lambda x: torch.logsumexp(x, 1)),
    TvmCase("intrinsics", _intrinsics, _intrinsics_torch),
    TvmCase("more_intrinsics", _more_intrinsics, None, ints={1: 7}),
    *_topi_cases(),
]
GRAD_CASES = [c for c in TVM_CASES if c.torch_fn is not None]


@pytest.mark.parametrize("case", TVM_CASES, ids=[c.name for c in TVM_CASES])
def test_from_tvm_matches_tvm_build(case):
    outs, ins = case.graph()
    arrays = random_inputs(ins, case.ints)
    want = tvm_run(outs, ins, arrays)
    got_t, feeds = from_tvm(outs)
    assert set(feeds) == set(ins)
    for p in ins:
        q = feeds[p]
        assert (q.name, q.shape, q.dtype) == (p.name, tuple(int(s) for s in p.shape), p.dtype)
    for o, g in zip(outs, got_t, strict=True):
        assert (g.name, g.shape, g.dtype) == (o.op.name, tuple(int(s) for s in o.shape), o.dtype)
    got = tg.build([feeds[p] for p in ins], got_t, target="numpy")(*arrays)
    for o, g, w in zip(outs, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12, err_msg=o.op.name)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.name for c in GRAD_CASES])
def test_generated_backward_built_by_tvm_matches_torch(case):
    if torch is None:
        pytest.skip("needs PyTorch")
    outs, ins = case.graph()
    y, feeds = from_tvm(outs[0])
    params = [feeds[p] for p in ins]
    wrt = [p for p in params if p.dtype == F64]
    H = tg.placeholder(y.shape, y.dtype, name="H")
    grads = tg.gradient(y, wrt, head=H)
    run = build_tvm([y, *grads], [*params, H])
    arrays = random_inputs(ins, case.ints, seed=1)
    head = np.random.default_rng(2).standard_normal(y.shape)
    got = run(*arrays, head)

    xs = [torch.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    ty = case.torch_fn(*xs)
    tgrads = torch.autograd.grad(ty, [x for x in xs if x.requires_grad], torch.tensor(head))
    np.testing.assert_allclose(got[0], ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for p, g, w in zip(wrt, got[1:], tgrads, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-9, atol=1e-10, err_msg=p.name)


def test_where_is_honoured():
    """TVM 0.27's create_prim_func drops a te.sum's where=; tegrad keeps it when reading,
    and to_tvm folds it into the source, so the TVM build of the result is right."""
    X = te.placeholder((5, 6), F64, name="X")
    k = te.reduce_axis((0, 6), name="k")
    Y = te.compute((5,), lambda i: te.sum(X[i, k], axis=k, where=k <= i), name="causal")
    x = random_inputs([X], {})[0]
    want = np.array([x[i, : i + 1].sum() for i in range(5)])
    y, feeds = from_tvm(Y)
    np.testing.assert_allclose(tg.evaluate(y, {feeds[X]: x}, target="numpy"), want)
    H = tg.placeholder((5,), F64, name="H")
    (gx,) = tg.gradient(y, [feeds[X]], head=H)
    h = np.arange(1.0, 6.0)
    fy, fg = build_tvm([y, gx], [feeds[X], H])(x, h)
    np.testing.assert_allclose(fy, want)
    np.testing.assert_allclose(fg, np.tril(np.ones((5, 6))) * h[:, None])


def test_fmod_reads_as_truncated_remainder():
    """tirx.fmod has no llvm lowering in TVM 0.27; tegrad reads it exactly."""
    X = te.placeholder((7,), F64, name="X")
    Y = te.compute((7,), lambda i: tir.fmod(X[i], tir.const(1.5, F64)), name="fmod")
    y, feeds = from_tvm(Y)
    x = np.array([-4.0, -2.9, -1.5, 0.0, 0.7, 3.1, 4.5])
    np.testing.assert_allclose(tg.evaluate(y, {feeds[X]: x}, target="numpy"), np.fmod(x, 1.5),
                               atol=1e-15)


def test_multi_output_compute_and_tensor_names():
    X = te.placeholder((3, 4), F64, name="X")
    a, b = te.compute((3, 4), lambda i, j: (X[i, j] * 2.0, X[i, j] + 1.0), name="two")
    (ta, tb), feeds = from_tvm([a, b])
    assert (ta.name, tb.name) == ("two.v0", "two.v1")
    x = random_inputs([X], {})[0]
    ga, gb = tg.build([feeds[X]], [ta, tb], target="numpy")(x)
    np.testing.assert_allclose(ga, 2 * x)
    np.testing.assert_allclose(gb, x + 1)


# ---------------------------------------------------------------------------
# (c): tegrad graphs written to TVM


def _constructs(A, idx):
    k = tg.reduce_axis(6, name="k")
    k1 = tg.reduce_axis((1, 5), name="k1")
    j2 = tg.reduce_axis(6, name="j2")
    i2 = tg.reduce_axis(5, name="i2")
    lse = tg.comm_reducer(
        lambda x, y: tg.maximum(x, y) + tg.log1p(tg.exp(-tg.abs(x - y))),
        lambda d: tg.const(-np.inf, d), name="lse",
    )
    return [
        # a softmax in one compute: reductions inside expressions
        tg.compute((5, 6), lambda i, j: tg.exp(A[i, j] - tg.max(A[i, k], k))
                   / tg.sum(tg.exp(A[i, k] - tg.max(A[i, j2], j2)), k), name="softmax1"),
        # a reduction inside a reduction over an axis starting at 1
        tg.compute((5,), lambda i: tg.sum(A[i, k1] * tg.max(A[k1 - 1, j2] * A[i, j2], j2), k1),
                   name="nested"),
        # a reduction whose reads are in bounds only under the select's condition
        tg.compute((5,), lambda i: tg.if_then_else(i >= 1, tg.sum(A[i - 1, k], k), 0.0),
                   name="guarded"),
        # a gather inside a guarded reduction
        tg.compute((5,), lambda i: tg.if_then_else(
            tg.all(idx[i] >= 0, idx[i] < 5), tg.sum(A[idx[i], k] * A[i, k], k), 0.0),
            name="gathered"),
        tg.compute((5,), lambda i: lse(A[i, k], k), name="logsumexp"),
        tg.compute((5,), lambda i: tg.prod(A[i, k], k, where=k < 4), name="prod"),
        tg.compute((5, 6), lambda i, j: tg.sign(A[i, j]) * tg.expm1(A[i, j])
                   + tg.round(A[i, j] * 2.0) + tg.power(tg.abs(A[i, j]), 1.5), name="unary"),
    ], [
        tg.compute((), lambda: tg.argmax(A[i2, k], [i2, k], where=tg.not_equal(k, 2)),
                   name="argmax2"),
        tg.compute((5,), lambda i: tg.argmin(A[i, k1], k1), name="argmin1"),
        tg.compute((5,), lambda i: A[i, 0] > A[i, 1], name="bool_out"),
        tg.compute((5,), lambda i: tg.min((i - 2) * k, k), name="int_min"),
    ]


@dataclass
class NnCase:
    name: str
    fn: Callable  # placeholders -> (differentiable outputs, other outputs)
    specs: list  # (shape, dtype) per input
    ints: dict = field(default_factory=dict)


def _single(f):
    return lambda *xs: ([f(*xs)], [])


NN_CASES = [
    NnCase("conv2d", _single(lambda x, w, b: tg.nn.conv2d(x, w, b, stride=2, padding=1)),
           [((2, 3, 9, 9), F64), ((4, 3, 3, 3), F64), ((4,), F64)]),
    NnCase("max_pool2d", _single(lambda x: tg.nn.max_pool2d(x, 3, stride=2, padding=1)),
           [((2, 3, 9, 9), F64)]),
    NnCase("softmax", _single(lambda x: tg.nn.softmax(x, dim=1)), [((4, 7), F64)]),
    NnCase("layer_norm", _single(lambda x, w, b: tg.nn.layer_norm(x, (7,), w, b)),
           [((4, 7), F64), ((7,), F64), ((7,), F64)]),
    NnCase("cross_entropy", _single(tg.nn.cross_entropy), [((4, 7), F64), ((4,), "int64")],
           ints={1: 7}),
    NnCase("embedding", _single(tg.nn.embedding), [((5,), "int64"), ((10, 3), F64)],
           ints={0: 10}),
    NnCase("gelu", _single(tg.nn.gelu), [((4, 7), F64)]),
    NnCase("constructs", _constructs, [((5, 6), F64), ((5,), "int32")]),
    NnCase("constructs_float32", _constructs, [((5, 6), "float32"), ((5,), "int32")]),
]


@pytest.mark.parametrize("case", NN_CASES, ids=[c.name for c in NN_CASES])
def test_to_tvm_forward_and_backward_match_numpy(case):
    ps = [tg.placeholder(s, d, name=f"in{k}") for k, (s, d) in enumerate(case.specs)]
    diff, other = case.fn(*ps)
    wrt = [p for p in ps if p.dtype in ("float32", F64)]
    heads, grads = [], []
    for k, y in enumerate(diff):
        H = tg.placeholder(y.shape, y.dtype, name=f"H{k}")
        heads.append(H)
        grads += tg.gradient(y, wrt, head=H)
    outs = [*diff, *other, *grads]
    rng = np.random.default_rng(3)
    arrays = random_inputs(ps, case.ints)
    if case.name.startswith("constructs"):
        # far out of range (guarded): an unguarded read would crash, not just differ
        arrays[1] = np.array([0, 4, -2_000_000_000, 2, 2_000_000_000], "int32")
    hs = [rng.standard_normal(h.shape).astype(h.dtype) for h in heads]
    tol = dict(rtol=2e-5, atol=1e-5) if wrt[0].dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    want = tg.build([*ps, *heads], outs, target="numpy")(*arrays, *hs)
    got = build_tvm(outs, [*ps, *heads])(*arrays, *hs)
    for t, g, w in zip(outs, got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, t.name
        np.testing.assert_allclose(g, w, **tol, err_msg=t.name)


def test_conjunctions_that_guard_reads_are_lazy_in_tvm():
    """A conjunct may guard a read in another (the verifier lets each assume the others);
    TVM's And evaluates both sides, so to_tvm nests them in if_then_else. Unguarded, the
    gather below reads 2e9 elements away: a crash, not a wrong value. (tegrad's NumPy
    backend rejects this gather: its run-time check does not take sibling conjuncts as
    guards, so the reference here is NumPy.)"""
    A = tg.placeholder((5, 3), F64, name="A")
    idx = tg.placeholder((5,), "int32", name="idx")
    Y = tg.compute((5,), lambda i: tg.if_then_else(
        tg.all(A[idx[i], 0] > 0.0, idx[i] >= 0, idx[i] < 5), A[i, 1], A[i, 2]), name="Y")
    Z = tg.compute((5,), lambda t: tg.if_then_else(
        tg.all(A[t - 1, 0] > 0.0, t >= 1), 1.0, 0.0), name="Z")
    a = random_inputs([A], {})[0]
    ix = np.array([0, 4, -2_000_000_000, 2, 2_000_000_000], "int32")
    y, z = build_tvm([Y, Z], [A, idx])(a, ix)
    valid = [0 <= j < 5 and a[j, 0] > 0 for j in ix]
    np.testing.assert_array_equal(y, np.where(valid, a[:, 1], a[:, 2]))
    np.testing.assert_array_equal(z, [0.0] + [float(a[t - 1, 0] > 0) for t in range(1, 5)])


def test_second_order_in_tvm():
    A = tg.placeholder((3, 4), F64, name="A")
    k = tg.reduce_axis(4, name="k")
    y = tg.compute((), lambda: tg.sum(tg.exp(A[0, k]) * tg.sin(A[1, k]) * A[2, k], k), name="y")
    (ga,) = tg.gradient(y, [A])
    V = tg.placeholder(A.shape, F64, name="V")
    (hv,) = tg.gradient(ga, [A], head=V)
    a, v = random_inputs([A, V], {})
    want = tg.build([A, V], hv, target="numpy")(a, v)
    np.testing.assert_allclose(build_tvm(hv, [A, V])(a, v), want, rtol=1e-12, atol=1e-12)


def test_to_tvm_params_outputs_and_script():
    A = tg.placeholder((3, 4), F64, name="A")
    B = tg.placeholder((4,), F64, name="B")
    C = tg.compute((3, 4), lambda i, j: A[i, j] * B[j], name="C.grad.A")
    (tc, ta), params = to_tvm([C, A], inputs=[B, A])
    assert [p.name for p in params] == ["B", "A"]
    assert tc.name == "C.grad.A" and ta.name == "A.copy"  # a placeholder output is copied
    script = te.create_prim_func([*params, tc, ta]).script()
    assert "C_grad_A" in script
    single, params = to_tvm(C)
    assert [p.name for p in params] == ["A", "B"] and single.name == "C.grad.A"


def test_import_tegrad_does_not_import_tvm():
    code = ("import sys, tegrad, tegrad.interop.tvm_bridge; "
            "assert 'tvm' not in sys.modules, 'tvm imported'; "
            "assert tegrad.from_tvm and tegrad.to_tvm; "
            "assert 'tvm' not in sys.modules, 'tvm imported by the exports'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------
# (d): errors


def _scan():
    X = te.placeholder((4, 3), F64, name="X")
    s = te.placeholder((4, 3), F64, name="s")
    init = te.compute((1, 3), lambda _, i: X[0, i], name="init")
    update = te.compute((4, 3), lambda t, i: s[t - 1, i] + X[t, i], name="update")
    return tvm.te.scan(init, update, s, inputs=[X], name="scan")


def _extern():
    X = te.placeholder((4,), F64, name="X")
    return te.extern((4,), [X], lambda ins, outs: tir.call_packed("f", ins[0], outs[0]),
                     name="ext", dtype=F64)


def _symbolic():
    n = te.var("n")
    X = te.placeholder((n,), F64, name="X")
    return te.compute((n,), lambda i: X[i] * 2.0, name="twice")


def _float16():
    X = te.placeholder((4,), "float16", name="X")
    return te.compute((4,), lambda i: X[i], name="half")


def _bitwise():
    X = te.placeholder((4,), "int32", name="X")
    return te.compute((4,), lambda i: X[i] & 3, name="bits")


def _free_var():
    X = te.placeholder((4,), F64, name="X")
    alpha = te.var("alpha", F64)
    return te.compute((4,), lambda i: X[i] * alpha, name="scaled")


def _tuple_reducer():
    X = te.placeholder((4, 5), F64, name="X")
    both = te.comm_reducer(lambda x, y: (x[0] + y[0], tir.max(x[1], y[1])),
                           lambda t0, t1: (tir.const(0.0, t0), tir.const(-1e30, t1)))
    k = te.reduce_axis((0, 5), name="k")
    return te.compute((4,), lambda i: both((X[i, k], X[i, k]), axis=k), name="pair")[0]


FROM_TVM_ERRORS = [
    ("scan", _scan, NotImplementedError, "ScanOp"),
    ("extern", _extern, NotImplementedError, "ExternOp"),
    ("symbolic_shape", _symbolic, NotImplementedError, "symbolic shape"),
    ("float16", _float16, TypeError, "float16"),
    ("bitwise", _bitwise, NotImplementedError, "bits"),
    ("free_var", _free_var, NotImplementedError, "alpha"),
    ("tuple_reducer", _tuple_reducer, NotImplementedError, "2-value comm_reducer"),
]


@pytest.mark.parametrize("name,graph,error,words", FROM_TVM_ERRORS,
                         ids=[e[0] for e in FROM_TVM_ERRORS])
def test_from_tvm_errors_name_the_construct(name, graph, error, words):
    with pytest.raises(error, match=words):
        from_tvm(graph())


def test_to_tvm_errors():
    X = tg.placeholder((4, 3), F64, name="X")
    s = tg.placeholder((4, 3), F64, name="s")
    init = tg.compute((1, 3), lambda _, i: X[0, i], name="init")
    update = tg.compute((4, 3), lambda t, i: s[t - 1, i] + X[t, i], name="update")
    out = tg.scan(init, update, s, inputs=[X], name="cumsum")
    with pytest.raises(NotImplementedError, match="scan cumsum"):
        to_tvm(out)
    Y = tg.compute((4, 3), lambda i, j: X[i, j] * 2.0, name="Y")
    with pytest.raises(ValueError, match="inputs lack X"):
        to_tvm(Y, inputs=[s])
    with pytest.raises(TypeError, match="tegrad tensors"):
        to_tvm([Y, 3.0])
    with pytest.raises(TypeError, match="TVM te.Tensors"):
        from_tvm(Y)


# -- the op table of the core issue (tests/optable.py), through TVM -----------------------
def _optable():
    from optable import SPECS
    return [s for s in SPECS if not any(isinstance(t, ScanOutput) for t in _tensors(s))]


def _tensors(spec):
    from tegrad.ir.traverse import topo_tensors
    _, out = spec.build()
    return topo_tensors([out])


OPTABLE = _optable()


@pytest.mark.parametrize("spec", OPTABLE, ids=[s.name for s in OPTABLE])
def test_optable_forward_and_backward_built_by_tvm_match_torch(spec):
    """Each forward of the core op table and its generated VJP, written with to_tvm and
    built by TVM in one function, against PyTorch autograd in float64."""
    import torch

    ins, out = spec.build()
    head = tg.placeholder(out.shape, out.dtype, name="H")
    grads = tg.gradient(out, [ins[k] for k in spec.diff], head=head)
    f = build_tvm([out, *grads], [*ins, head])
    rng = np.random.default_rng(0)
    arrays = spec.make_inputs(rng)
    h = rng.standard_normal(out.shape)
    got = f(*arrays, h)
    ts = [torch.from_numpy(np.array(a)) for a in arrays]
    for k in spec.diff:
        ts[k].requires_grad_(True)
    y = spec.torch_fn(*ts)
    wrt = [ts[k] for k in spec.diff]
    expected = torch.autograd.grad(y, wrt, torch.from_numpy(h), allow_unused=True)
    def close(a, b):  # float32 results (a float32 input's gradient) to one rounding
        tol = 1e-9 if np.asarray(a).dtype == np.float64 else 2e-6
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

    close(got[0], y.detach().numpy())
    for g, e, w in zip(got[1:], expected, wrt, strict=True):
        close(g, (torch.zeros_like(w) if e is None else e).numpy())
