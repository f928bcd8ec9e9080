"""The gradient bug zoo: hand-written backward operators with planted bugs, and their
correct versions, for testing a gradient checker (``tg.check_gradient``).

Every entry of ``ZOO`` is a ``ZooCase``; ``case.make()`` returns a ``ZooPair``:
  output          the forward tensor, written directly as a tensor expression
  inputs          the float placeholders whose gradients are checked
  grads           hand-written backward tensors, one per input (same shape), reading
                  ``head`` (the output gradient), forward placeholders and forward tensors
  head            a placeholder of ``output.shape`` and ``output.dtype``
  values          placeholder name -> array for every placeholder the output and the grads
                  read, except ``head`` (float64 arrays for float64 placeholders, float32
                  for float32, int64 for index tensors)
  expected_wrong  input name -> boolean mask (input's shape) of the elements whose
                  gradient is wrong for a generic (random Gaussian) head. ``{}`` for a
                  correct version; a buggy version has a mask for every input (all False
                  for an input whose gradient the bug leaves right).

Case names are ``family.variant``: variants starting with ``correct`` have ``bug=None``;
every family with a bug has at least one correct variant. One builder per family builds the
forward, the placeholders and the values, and writes the backward once, with the planted
bug selected by the variant name, so the buggy and correct versions share everything else.

``expected_wrong`` is computed, never written by hand: in ``make()`` the buggy grads are
evaluated with ``tg.build`` on ``values`` and two seeded Gaussian heads and compared with
PyTorch float64 autograd (``reference_grads``). float64 cases: an element is wrong where
``|got - ref| > 1e-9 (|ref| + max |ref|)``. float32 cases (``dtype="float32"``): the
backward is evaluated in float32 and an element is wrong where it differs from the float64
truth by more than 100x the largest error of the correct float32 version of the same
backward. Both heads must give the same mask, else ``make()`` raises.

Kinds (``ZooCase.kind``), the signature of the error on the wrong elements, ``None`` where
none fits:
  "missing contribution"   received = expected minus some of the terms that form it
                           (possibly all of them: received 0)
  "spurious contribution"  received = expected plus terms that do not belong to it
  "constant scale"         received = s * expected for one constant s (not 0, 1 or -1)
  "sign flip"              received = -expected
  "shifted index"          received[i] = expected[i + d] for a fixed offset d

Families at kinks (``KINK_FAMILIES``: max pool at exact ties, relu at exact zeros) have
several correct backwards, all valid subgradients; PyTorch's is only one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

import tegrad as tg
from tegrad.ir.traverse import topo_tensors

F64 = "float64"
F32 = "float32"

KINDS = ("missing contribution", "spurious contribution", "constant scale", "sign flip",
         "shifted index")
RTOL_F64 = 1e-9  # float64 masks: relative to |ref| + max |ref|
F32_MARGIN = 100.0  # float32 masks: times the correct float32 version's largest error
MASK_HEAD_SEEDS = (101, 202)


@dataclass(frozen=True)
class ZooPair:
    output: object
    inputs: list
    grads: list
    head: object
    values: dict
    expected_wrong: dict


@dataclass(frozen=True)
class ZooCase:
    name: str
    bug: str | None
    kind: str | None
    make: Callable[[], ZooPair]
    dtype: str = F64

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    def __repr__(self) -> str:
        return f"ZooCase({self.name})"


# ---------------------------------------------------------------------------- references


@dataclass(frozen=True)
class Reference:
    """PyTorch forward of a family: keyword tensors named like the placeholders."""

    fn: Callable[..., torch.Tensor]
    diff: tuple[str, ...]  # the inputs whose gradients are checked


LN_EPS = 1e-5


def _layer_norm_ref(X: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(X, X.shape[-1:], G, B, eps=LN_EPS)


REFERENCES: dict[str, Reference] = {
    "conv2d_s2p1": Reference(lambda X, W: F.conv2d(X, W, stride=2, padding=1), ("X", "W")),
    "grouped_conv2d_g2": Reference(lambda X, W: F.conv2d(X, W, padding=1, groups=2),
                                   ("X", "W")),
    "avg_pool2x2": Reference(lambda X: F.avg_pool2d(X, 2), ("X",)),
    "squared_error": Reference(lambda X, T: (X - T) ** 2, ("X", "T")),
    "softmax": Reference(lambda X: torch.softmax(X, -1), ("X",)),
    "layer_norm": Reference(_layer_norm_ref, ("X", "G", "B")),
    "layer_norm_f32": Reference(_layer_norm_ref, ("X", "G", "B")),
    "max_pool2x2": Reference(lambda X: F.max_pool2d(X, 2), ("X",)),
    "max_pool2x2_ties": Reference(lambda X: F.max_pool2d(X, 2), ("X",)),
    "relu_at_zero": Reference(lambda X: F.relu(X), ("X",)),
    "embedding_repeated": Reference(lambda W, idx: F.embedding(idx, W), ("W",)),
    "cumsum": Reference(lambda X: torch.cumsum(X, -1), ("X",)),
}

# families evaluated exactly at kinks: several backwards are right (valid subgradients)
KINK_FAMILIES = frozenset({"max_pool2x2_ties", "relu_at_zero"})


def reference_grads(case: str | ZooCase, values: dict[str, np.ndarray],
                    head: np.ndarray) -> dict[str, np.ndarray]:
    """PyTorch float64 autograd gradients (input name -> array) for a family's forward at
    ``values``, with output gradient ``head``. ``case``: a ZooCase, its name or family."""
    family = (case.name if isinstance(case, ZooCase) else case).split(".")[0]
    ref = REFERENCES[family]
    args = {}
    for name, v in values.items():
        if np.issubdtype(v.dtype, np.integer):
            args[name] = torch.from_numpy(v.astype(np.int64))
        else:
            args[name] = torch.tensor(v, dtype=torch.float64, requires_grad=name in ref.diff)
    out = ref.fn(**args)
    gs = torch.autograd.grad(out, [args[n] for n in ref.diff],
                             grad_outputs=torch.tensor(head, dtype=torch.float64))
    return {n: g.numpy() for n, g in zip(ref.diff, gs, strict=True)}


def placeholders_of(tensors: Sequence) -> list:
    """Every placeholder the tensors read, in dependency order."""
    return [t for t in topo_tensors(list(tensors)) if isinstance(t, tg.Placeholder)]


def evaluate_grads(pair: ZooPair, head: np.ndarray) -> list[np.ndarray]:
    """The pair's hand-written grads, evaluated with tegrad on ``values`` and ``head``."""
    phs = placeholders_of(pair.grads)
    feed = [head if p is pair.head else pair.values[p.name] for p in phs]
    return list(tg.build(phs, list(pair.grads))(*feed))


def random_head(pair: ZooPair, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(pair.head.shape).astype(pair.head.dtype)


def f64_wrong(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """float64 rule: elements that differ from the reference beyond rounding."""
    return np.abs(got - ref) > RTOL_F64 * (np.abs(ref) + np.abs(ref).max(initial=0.0))


def f32_wrong(got: np.ndarray, correct: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """float32 rule: elements off the float64 truth by more than 100x the largest error of
    the correct float32 kernel (floored at 1e-7 of the tensor's scale)."""
    err_correct = max(np.abs(correct - ref).max(), 1e-7 * np.abs(ref).max(initial=0.0))
    return np.abs(got - ref) > F32_MARGIN * err_correct


GradsOf = Callable[[str], list]  # variant name -> backward tensors


def _pair(family: str, variant: str, output, inputs: list, grads_of: GradsOf, head,
          values: dict[str, np.ndarray]) -> ZooPair:
    """Assemble a ZooPair; for a buggy variant, compute its expected_wrong masks."""
    pair = ZooPair(output, list(inputs), grads_of(variant), head, values, {})
    if variant.startswith("correct"):
        return pair
    # float32: the rule compares with the correct float32 kernel of the same family
    correct = dataclasses.replace(pair, grads=grads_of("correct")) if head.dtype == F32 else None
    masks = []
    for seed in MASK_HEAD_SEEDS:
        h = random_head(pair, seed)
        ref = reference_grads(family, values, h)
        got = evaluate_grads(pair, h)
        if correct is not None:
            good = evaluate_grads(correct, h)
            masks.append({x.name: f32_wrong(g, c, ref[x.name])
                          for x, g, c in zip(inputs, got, good, strict=True)})
        else:
            masks.append({x.name: f64_wrong(g, ref[x.name])
                          for x, g in zip(inputs, got, strict=True)})
    first, second = masks
    for name in first:
        if not np.array_equal(first[name], second[name]):
            raise AssertionError(f"{family}.{variant}: mask of {name} depends on the head")
    return dataclasses.replace(pair, expected_wrong=first)


def _ph(shape: tuple[int, ...], name: str, dtype: str = F64):
    return tg.placeholder(shape, dtype, name=name)


def _rax(n: int, name: str):
    return tg.reduce_axis(n, name=name)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------- conv2d s2 p1

# Y[n,o,p,q] = sum_{c,kh,kw} X[n,c,2p-1+kh,2q-1+kw] W[o,c,kh,kw], zero padding 1.
# O == C so that a weight gradient with o and c swapped still has W's shape.
CONV_BUGS = {
    "pad_off_by_one": (
        "dX solves h = 2p + kh (padding 0) instead of h = 2p - 1 + kh: dX[h,w] = true "
        "dX[h+1,w+1] (row/col 8 get the out-of-range row/col 9's taps)", "shifted index"),
    "drop_last_rowcol": (
        "dX loops h, w < 8: the last row and column of dX are 0", "missing contribution"),
    "wrong_stride_phase": (
        "dX tests the stride phase of h instead of h+1 ((h-kh)%2 == 0) while reading "
        "dY[(h+1-kh)//2]: each row gets the other phase's taps", None),
    "halved_corner": (
        "dX[n,c,8,8] (bottom-right pixel of every map) is multiplied by 0.5",
        "constant scale"),
    "one_element_1pct": ("dX[0,0,8,8] alone is multiplied by 1.01", "constant scale"),
    "transposed_weight": (
        "dW[o,c] = sum dY[n,c,...] X[n,o,...]: the weight gradient with o and c swapped",
        None),
    "flipped_kernel": (
        "dX reads the flipped taps W[o,c,2-kh,2-kw] in the gather where W[o,c,kh,kw] "
        "belongs", None),
}


def _conv2d_s2p1(variant: str) -> ZooPair:
    n_, c_, size, k_, osize = 2, 3, 9, 3, 5
    X, W = _ph((n_, c_, size, size), "X"), _ph((c_, c_, k_, k_), "W")

    def inside(a, b):
        return tg.all(0 <= a, a < size, 0 <= b, b < size)

    def forward(n, o, p, q):
        c, kh, kw = _rax(c_, "c"), _rax(k_, "kh"), _rax(k_, "kw")
        ih, iw = 2 * p - 1 + kh, 2 * q - 1 + kw
        return tg.sum(X[n, c, ih, iw] * W[o, c, kh, kw], axis=[c, kh, kw], where=inside(ih, iw))

    Y = tg.compute((n_, c_, osize, osize), forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def dx(n, c, h, w):
            # dX[n,c,h,w] = sum_{o,kh,kw : h+1-kh = 2p, w+1-kw = 2q} dY[n,o,p,q] W[o,c,kh,kw]
            o, kh, kw = _rax(c_, "o"), _rax(k_, "kh"), _rax(k_, "kw")
            th, tw = h + 1 - kh, w + 1 - kw  # 2p, 2q
            if v == "pad_off_by_one":
                th, tw = h - kh, w - kw  # the padding forgotten: dX[h] picks up dX[h+1]'s taps
            phase = tg.equal(th % 2, 0)
            if v == "wrong_stride_phase":
                phase = tg.equal((h - kh) % 2, 0)  # parity of h, not of h+1
            th_, tw_ = (k_ - 1 - kh, k_ - 1 - kw) if v == "flipped_kernel" else (kh, kw)
            ok = tg.all(phase, 0 <= th, th <= 2 * (osize - 1),
                        tg.equal(tw % 2, 0), 0 <= tw, tw <= 2 * (osize - 1))
            val = tg.sum(dY[n, o, th // 2, tw // 2] * W[o, c, th_, tw_], axis=[o, kh, kw],
                         where=ok)
            last = size - 1
            if v == "drop_last_rowcol":
                val = tg.if_then_else(tg.all(h < last, w < last), val, 0.0)
            if v == "halved_corner":
                val = val * tg.if_then_else(tg.all(tg.equal(h, last), tg.equal(w, last)), 0.5, 1.0)
            if v == "one_element_1pct":
                at = tg.all(tg.equal(n, 0), tg.equal(c, 0), tg.equal(h, last), tg.equal(w, last))
                val = val * tg.if_then_else(at, 1.01, 1.0)
            return val

        def dw(o, c, kh, kw):
            # dW[o,c,kh,kw] = sum_{n,p,q} dY[n,o,p,q] X[n,c,2p-1+kh,2q-1+kw]
            n, p, q = _rax(n_, "n"), _rax(osize, "p"), _rax(osize, "q")
            a, b = (c, o) if v == "transposed_weight" else (o, c)
            ih, iw = 2 * p - 1 + kh, 2 * q - 1 + kw
            return tg.sum(dY[n, a, p, q] * X[n, b, ih, iw], axis=[n, p, q], where=inside(ih, iw))

        return [tg.compute(X.shape, dx, "dX"), tg.compute(W.shape, dw, "dW")]

    rng = _rng(1)
    values = {"X": rng.standard_normal(X.shape), "W": rng.standard_normal(W.shape)}
    return _pair("conv2d_s2p1", variant, Y, [X, W], grads, dY, values)


# ---------------------------------------------------------------------------- grouped conv2d

# groups 2, stride 1, padding 1: channels 2g, 2g+1 in, outputs 2g, 2g+1 out.
# Y[n,o,h,w] = sum_{ci,kh,kw} X[n,2(o//2)+ci,h-1+kh,w-1+kw] W[o,ci,kh,kw]
GROUPED_BUGS = {
    "wrong_group": (
        "dX of channel c in group g = c//2 sums over the output channels and weights of "
        "group 1-g", None),
}


def _grouped_conv2d_g2(variant: str) -> ZooPair:
    size = 7
    X, W = _ph((1, 4, size, size), "X"), _ph((4, 2, 3, 3), "W")

    def inside(a, b):
        return tg.all(0 <= a, a < size, 0 <= b, b < size)

    def forward(n, o, h, w):
        ci, kh, kw = _rax(2, "ci"), _rax(3, "kh"), _rax(3, "kw")
        ih, iw = h - 1 + kh, w - 1 + kw
        return tg.sum(X[n, (o // 2) * 2 + ci, ih, iw] * W[o, ci, kh, kw], axis=[ci, kh, kw],
                      where=inside(ih, iw))

    Y = tg.compute((1, 4, size, size), forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def dx(n, c, h, w):
            # dX[n,c,h,w] = sum_{j,kh,kw} dY[n,2g+j,h+1-kh,w+1-kw] W[2g+j,c%2,kh,kw], g = c//2
            j, kh, kw = _rax(2, "j"), _rax(3, "kh"), _rax(3, "kw")
            g = 1 - c // 2 if v == "wrong_group" else c // 2
            oh, ow = h + 1 - kh, w + 1 - kw
            return tg.sum(dY[n, g * 2 + j, oh, ow] * W[g * 2 + j, c % 2, kh, kw],
                          axis=[j, kh, kw], where=inside(oh, ow))

        def dw(o, ci, kh, kw):
            n, p, q = _rax(1, "n"), _rax(size, "p"), _rax(size, "q")
            ih, iw = p - 1 + kh, q - 1 + kw
            return tg.sum(dY[n, o, p, q] * X[n, (o // 2) * 2 + ci, ih, iw], axis=[n, p, q],
                          where=inside(ih, iw))

        return [tg.compute(X.shape, dx, "dX"), tg.compute(W.shape, dw, "dW")]

    rng = _rng(2)
    values = {"X": rng.standard_normal(X.shape), "W": rng.standard_normal(W.shape)}
    return _pair("grouped_conv2d_g2", variant, Y, [X, W], grads, dY, values)


# ---------------------------------------------------------------------------- average pool

# Y[n,c,p,q] = (1/4) sum_{kh,kw} X[n,c,2p+kh,2q+kw];  dX[n,c,h,w] = dY[n,c,h//2,w//2] / 4
AVG_POOL_BUGS = {"missing_scale": ("dX = dY[h//2,w//2] without the 1/4", "constant scale")}


def _avg_pool2x2(variant: str) -> ZooPair:
    X = _ph((2, 3, 6, 6), "X")

    def forward(n, c, p, q):
        kh, kw = _rax(2, "kh"), _rax(2, "kw")
        return tg.sum(X[n, c, 2 * p + kh, 2 * q + kw], axis=[kh, kw]) / 4.0

    Y = tg.compute((2, 3, 3, 3), forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        scale = 1.0 if v == "missing_scale" else 0.25
        return [tg.compute(X.shape, lambda n, c, h, w: dY[n, c, h // 2, w // 2] * scale, "dX")]

    values = {"X": _rng(3).standard_normal(X.shape)}
    return _pair("avg_pool2x2", variant, Y, [X], grads, dY, values)


# ---------------------------------------------------------------------------- squared error

# Y = (X - T)^2 elementwise;  dX = 2 (X - T) dY,  dT = -2 (X - T) dY
SQUARED_ERROR_BUGS = {
    "sign_flip_target": ("dT = +2 (X - T) dY: the minus of the subtraction dropped",
                         "sign flip"),
}


def _squared_error(variant: str) -> ZooPair:
    X, T = _ph((4, 5), "X"), _ph((4, 5), "T")
    Y = tg.compute((4, 5), lambda i, j: (X[i, j] - T[i, j]) * (X[i, j] - T[i, j]), "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        sign_t = 1.0 if v == "sign_flip_target" else -1.0
        return [
            tg.compute(X.shape, lambda i, j: 2.0 * (X[i, j] - T[i, j]) * dY[i, j], "dX"),
            tg.compute(T.shape, lambda i, j: sign_t * 2.0 * (X[i, j] - T[i, j]) * dY[i, j], "dT"),
        ]

    rng = _rng(4)
    values = {"X": rng.standard_normal(X.shape), "T": rng.standard_normal(T.shape)}
    return _pair("squared_error", variant, Y, [X, T], grads, dY, values)


# ---------------------------------------------------------------------------- softmax

# Y[i,j] = exp(X[i,j] - m_i) / sum_k exp(X[i,k] - m_i);  dX = Y (dY - sum_k dY[i,k] Y[i,k])
SOFTMAX_BUGS = {
    "missing_subtraction": ("dX = Y * dY: the - Y * sum_k(dY Y) term is missing",
                            "missing contribution"),
}


def _softmax(variant: str) -> ZooPair:
    rows, cols = 4, 6
    X = _ph((rows, cols), "X")

    def forward(i, j):
        k, k2 = _rax(cols, "k"), _rax(cols, "k2")
        m = tg.max(X[i, k], axis=k)
        return tg.exp(X[i, j] - m) / tg.sum(tg.exp(X[i, k2] - m), axis=k2)

    Y = tg.compute((rows, cols), forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def dx(i, j):
            if v == "missing_subtraction":
                return Y[i, j] * dY[i, j]
            k = _rax(cols, "k")
            return Y[i, j] * (dY[i, j] - tg.sum(dY[i, k] * Y[i, k], axis=k))

        return [tg.compute(X.shape, dx, "dX")]

    values = {"X": _rng(5).standard_normal(X.shape)}
    return _pair("softmax", variant, Y, [X], grads, dY, values)


# ---------------------------------------------------------------------------- layer norm

# Y = xhat G + B, xhat = (X - mean) rstd, rstd = (var + eps)^-1/2, over the last axis (D).
# g = dY G;  dX = rstd (g - mean_k g - xhat mean_k(g xhat));  dG = sum_i dY xhat;  dB = sum_i dY
LAYER_NORM_BUGS = {
    "missing_mean_term": ("dX = rstd (g - xhat mean(g xhat)): the - mean(g) term is missing",
                          "missing contribution"),
}
LAYER_NORM_F32_BUGS = {
    "naive_variance": (
        "float32 backward recomputes var as E[X^2] - E[X]^2 (one pass) on rows of mean 1024 "
        "and std ~0.07: catastrophic cancellation makes rstd, hence dX and dG, wrong by "
        "factors", None),
}


def _layer_norm(variant: str, dtype: str = F64) -> ZooPair:
    rows, d = 4, 8
    X, G, B = _ph((rows, d), "X", dtype), _ph((d,), "G", dtype), _ph((d,), "B", dtype)

    def mean_of(f, name: str):
        def body(i):
            k = _rax(d, "k")
            return tg.sum(f(i, k), axis=k) / float(d)

        return tg.compute((rows,), body, name)

    mean = mean_of(lambda i, k: X[i, k], "mean")
    var = mean_of(lambda i, k: (X[i, k] - mean[i]) * (X[i, k] - mean[i]), "var")
    Y = tg.compute((rows, d), lambda i, j: (X[i, j] - mean[i]) * tg.rsqrt(var[i] + LN_EPS)
                   * G[j] + B[j], "Y")
    dY = _ph(Y.shape, "dY", dtype)

    def grads(v: str) -> list:
        # the backward recomputes its statistics
        mu = mean_of(lambda i, k: X[i, k], "mu")
        if v == "naive_variance":
            # var = E[X^2] - E[X]^2: a difference of two ~1e6 numbers in float32
            ex2 = mean_of(lambda i, k: X[i, k] * X[i, k], "ex2")
            sigma2 = tg.compute((rows,), lambda i: tg.maximum(ex2[i] - mu[i] * mu[i], 0.0),
                                "sigma2")
        else:
            sigma2 = mean_of(lambda i, k: (X[i, k] - mu[i]) * (X[i, k] - mu[i]), "sigma2")
        rstd = tg.compute((rows,), lambda i: tg.rsqrt(sigma2[i] + LN_EPS), "rstd")
        xhat = tg.compute((rows, d), lambda i, j: (X[i, j] - mu[i]) * rstd[i], "xhat")
        g = tg.compute((rows, d), lambda i, j: dY[i, j] * G[j], "g")
        mean_g = mean_of(lambda i, k: g[i, k], "mean_g")
        mean_gx = mean_of(lambda i, k: g[i, k] * xhat[i, k], "mean_gx")

        def dx(i, j):
            if v == "missing_mean_term":
                return rstd[i] * (g[i, j] - xhat[i, j] * mean_gx[i])
            return rstd[i] * (g[i, j] - mean_g[i] - xhat[i, j] * mean_gx[i])

        def dg(j):
            i = _rax(rows, "i")
            return tg.sum(dY[i, j] * xhat[i, j], axis=i)

        def db(j):
            i = _rax(rows, "i")
            return tg.sum(dY[i, j], axis=i)

        return [tg.compute(X.shape, dx, "dX"), tg.compute(G.shape, dg, "dG"),
                tg.compute(B.shape, db, "dB")]

    rng = _rng(6)
    if dtype == F32:
        # mean 1024, std ~0.07: X = 1024 + multiples of 1/128 in [-1/8, 1/8]. On this grid
        # the two-pass statistics are exact in float32 (sums need at most 20 bits), so the
        # correct float32 kernel is accurate to rounding (~1e-7 of the gradient's scale). In
        # E[X^2] - E[X]^2 both terms are ~2^20, rounded to float32's spacing there (0.125),
        # far coarser than var (~0.005): the naive var is a multiple of ~0.06 (or clamped
        # to 0), so rstd is off by a large factor on every row, whatever the summation order.
        x = 1024.0 + rng.integers(-16, 17, size=X.shape) / 128.0
    else:
        x = rng.standard_normal(X.shape)
    values = {"X": x, "G": rng.standard_normal(G.shape), "B": rng.standard_normal(B.shape)}
    values = {k: a.astype(dtype) for k, a in values.items()}
    family = "layer_norm_f32" if dtype == F32 else "layer_norm"
    return _pair(family, variant, Y, [X, G, B], grads, dY, values)


# ---------------------------------------------------------------------------- max pool

# Y[n,c,p,q] = max_{kh,kw} X[n,c,2p+kh,2q+kw] (2x2, stride 2). dX routes dY[n,c,h//2,w//2]
# to the maxima of the window. Rules (correct ones, variant names):
#   correct          to every element equal to the max (right only without ties)
#   correct_average  split evenly among tied maxima: dY / #maxima
#   correct_first    all to the first maximum in row-major order of the window
MAX_POOL_BUGS = {
    "route_top_left": (
        "dX gives dY to the top-left element of every window instead of its max "
        "(tie-free data)", None),
}


def _max_pool2x2(variant: str, ties: bool = False) -> ZooPair:
    shape = (1, 2, 4, 4) if ties else (2, 2, 6, 6)
    X = _ph(shape, "X")
    pooled = (shape[0], shape[1], shape[2] // 2, shape[3] // 2)

    def window(n, c, h, w, kh, kw):  # element (kh, kw) of the window holding (h, w)
        return X[n, c, (h // 2) * 2 + kh, (w // 2) * 2 + kw]

    def forward(n, c, p, q):
        kh, kw = _rax(2, "kh"), _rax(2, "kw")
        return tg.max(X[n, c, 2 * p + kh, 2 * q + kw], axis=[kh, kw])

    Y = tg.compute(pooled, forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def is_max(n, c, h, w):
            return tg.equal(X[n, c, h, w], Y[n, c, h // 2, w // 2])

        def ties_before(n, c, h, w):  # maxima of the window before (h, w) in row-major order
            kh, kw = _rax(2, "kh"), _rax(2, "kw")
            hit = tg.equal(window(n, c, h, w, kh, kw), Y[n, c, h // 2, w // 2])
            return tg.sum(tg.if_then_else(hit, 1.0, 0.0), axis=[kh, kw],
                          where=kh * 2 + kw < (h % 2) * 2 + w % 2)

        def count(n, c, h, w):  # maxima in the window
            kh, kw = _rax(2, "kh"), _rax(2, "kw")
            hit = tg.equal(window(n, c, h, w, kh, kw), Y[n, c, h // 2, w // 2])
            return tg.sum(tg.if_then_else(hit, 1.0, 0.0), axis=[kh, kw])

        before = tg.compute(shape, ties_before, "before")
        cnt = tg.compute(shape, count, "count")

        def dx(n, c, h, w):
            head = dY[n, c, h // 2, w // 2]
            if v == "route_top_left":
                return tg.if_then_else(tg.all(tg.equal(h % 2, 0), tg.equal(w % 2, 0)), head, 0.0)
            if v == "correct_average":
                return tg.if_then_else(is_max(n, c, h, w), head / cnt[n, c, h, w], 0.0)
            if v == "correct_first":
                first = tg.all(is_max(n, c, h, w), tg.equal(before[n, c, h, w], 0.0))
                return tg.if_then_else(first, head, 0.0)
            return tg.if_then_else(is_max(n, c, h, w), head, 0.0)

        return [tg.compute(shape, dx, "dX")]

    values = {"X": _max_pool_ties_data() if ties else _rng(7).standard_normal(shape)}
    return _pair("max_pool2x2_ties" if ties else "max_pool2x2", variant, Y, [X], grads, dY,
                 values)


def _max_pool_ties_data() -> np.ndarray:
    """(1, 2, 4, 4): windows with 2, 3 and 4 exactly equal maxima, and two without ties."""
    windows = [
        # channel 0
        [[2.0, 2.0], [0.3, -1.0]],  # two maxima, adjacent in a row
        [[1.5, 1.5], [1.5, 1.5]],  # four maxima
        [[-0.7, 0.1], [0.1, -0.2]],  # two maxima on the anti-diagonal
        [[0.4, -0.3], [1.1, 0.2]],  # no tie
        # channel 1
        [[-0.5, -0.5], [-0.5, -0.5]],  # four negative maxima
        [[0.2, 0.9], [-0.4, 0.9]],  # two maxima in a column
        [[0.7, 0.7], [-1.2, 0.7]],  # three maxima
        [[0.0, -2.0], [0.6, 0.25]],  # no tie
    ]
    x = np.zeros((1, 2, 4, 4))
    for k, win in enumerate(windows):
        c, p, q = k // 4, (k % 4) // 2, k % 2
        x[0, c, 2 * p:2 * p + 2, 2 * q:2 * q + 2] = win
    return x


# ---------------------------------------------------------------------------- relu at zero

# Y = max(X, 0) with X exactly 0.0 (and -0.0) in places: dX = [X > 0] dY and [X >= 0] dY
# are both valid subgradients (variants correct_gt, correct_ge).


def _relu_at_zero(variant: str) -> ZooPair:
    X = _ph((4, 5), "X")
    Y = tg.compute(X.shape, lambda i, j: tg.maximum(X[i, j], 0.0), "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def dx(i, j):
            on = X[i, j] >= 0.0 if v == "correct_ge" else X[i, j] > 0.0
            return tg.if_then_else(on, dY[i, j], 0.0)

        return [tg.compute(X.shape, dx, "dX")]

    x = _rng(8).standard_normal(X.shape)
    for i, j in [(0, 0), (1, 3), (2, 2), (3, 4)]:
        x[i, j] = 0.0
    x[3, 1] = -0.0
    return _pair("relu_at_zero", variant, Y, [X], grads, dY, {"X": x})


# ---------------------------------------------------------------------------- embedding

# Y[i,d] = W[idx[i], d] with repeated indices;  dW[v,d] = sum_{i : idx[i] = v} dY[i,d]
EMBEDDING_BUGS = {
    "drop_repeated": (
        "dW[v] keeps only the last occurrence of v in idx (index assignment dW[idx] = dY "
        "instead of accumulation): rows of repeated indices lose contributions",
        "missing contribution"),
}
EMBEDDING_IDX = np.array([1, 3, 1, 0, 3, 1], dtype=np.int64)


def _embedding_repeated(variant: str) -> ZooPair:
    vocab, dim, length = 5, 4, len(EMBEDDING_IDX)
    W, idx = _ph((vocab, dim), "W"), _ph((length,), "idx", "int64")
    Y = tg.compute((length, dim), lambda i, e: W[idx[i], e], "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def later(i):  # occurrences of idx[i] after position i
            j = _rax(length, "j")
            return tg.sum(tg.if_then_else(tg.equal(idx[j], idx[i]), 1.0, 0.0), axis=j,
                          where=j > i)

        n_later = tg.compute((length,), later, "later")

        def dw(r, e):
            i = _rax(length, "i")
            hit = tg.equal(idx[i], r)
            if v == "drop_repeated":
                hit = tg.all(hit, tg.equal(n_later[i], 0.0))
            return tg.sum(dY[i, e], axis=i, where=hit)

        return [tg.compute(W.shape, dw, "dW")]

    values = {"W": _rng(9).standard_normal(W.shape), "idx": EMBEDDING_IDX.copy()}
    return _pair("embedding_repeated", variant, Y, [W], grads, dY, values)


# ---------------------------------------------------------------------------- cumsum

# Y[i,j] = sum_{k <= j} X[i,k];  dX[i,k] = sum_{j >= k} dY[i,j]
CUMSUM_BUGS = {
    "ignores_mask": ("dX[i,k] = sum_j dY[i,j] over all j: the terms j < k do not belong",
                     "spurious contribution"),
}


def _cumsum(variant: str) -> ZooPair:
    X = _ph((3, 5), "X")

    def forward(i, j):
        k = _rax(5, "k")
        return tg.sum(X[i, k], axis=k, where=k <= j)

    Y = tg.compute(X.shape, forward, "Y")
    dY = _ph(Y.shape, "dY")

    def grads(v: str) -> list:
        def dx(i, k):
            j = _rax(5, "j")
            if v == "ignores_mask":
                return tg.sum(dY[i, j], axis=j)
            return tg.sum(dY[i, j], axis=j, where=j >= k)

        return [tg.compute(X.shape, dx, "dX")]

    values = {"X": _rng(10).standard_normal(X.shape)}
    return _pair("cumsum", variant, Y, [X], grads, dY, values)


# ---------------------------------------------------------------------------- the table


def _family(family: str, build: Callable[[str], ZooPair], bugs: dict[str, tuple[str, str | None]],
            correct: Sequence[str] = ("correct",), dtype: str = F64) -> list[ZooCase]:
    cases = [ZooCase(f"{family}.{v}", None, None, partial(build, v), dtype) for v in correct]
    cases += [ZooCase(f"{family}.{v}", bug, kind, partial(build, v), dtype)
              for v, (bug, kind) in bugs.items()]
    return cases


ZOO: list[ZooCase] = [
    *_family("conv2d_s2p1", _conv2d_s2p1, CONV_BUGS),
    *_family("grouped_conv2d_g2", _grouped_conv2d_g2, GROUPED_BUGS),
    *_family("avg_pool2x2", _avg_pool2x2, AVG_POOL_BUGS),
    *_family("squared_error", _squared_error, SQUARED_ERROR_BUGS),
    *_family("softmax", _softmax, SOFTMAX_BUGS),
    *_family("layer_norm", _layer_norm, LAYER_NORM_BUGS),
    *_family("layer_norm_f32", partial(_layer_norm, dtype=F32), LAYER_NORM_F32_BUGS,
             dtype=F32),
    *_family("max_pool2x2", _max_pool2x2, MAX_POOL_BUGS),
    *_family("max_pool2x2_ties", partial(_max_pool2x2, ties=True), {},
             correct=("correct_average", "correct_first")),
    *_family("relu_at_zero", _relu_at_zero, {}, correct=("correct_gt", "correct_ge")),
    *_family("embedding_repeated", _embedding_repeated, EMBEDDING_BUGS),
    *_family("cumsum", _cumsum, CUMSUM_BUGS),
]

ZOO_BY_NAME: dict[str, ZooCase] = {c.name: c for c in ZOO}
assert len(ZOO_BY_NAME) == len(ZOO), "duplicate case names"
assert all(c.kind is None or c.kind in KINDS for c in ZOO)
