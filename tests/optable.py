"""The op table: forward operators written directly as tensor expressions, each with a
PyTorch float64 reference.

Every entry is an ``OpSpec``:
  name          pytest id
  build()       -> (placeholders, output tensor); fresh placeholders on every call
  torch_fn      the reference, taking torch tensors in the placeholders' order
  make_inputs   rng -> arrays in the placeholders' order (float64 for float inputs,
                int64/int32 index arrays for gathers)
  diff          positions of the differentiable inputs
  gather_form   True where every index map of the forward is affine (with //, %) or
                guarded affine, so the simplifier is expected to turn the backward into
                gather form; False where a data-dependent index (embedding, argmax) or a
                clamp/reflection through min/max leaves an explicit scatter (DESIGN.md)
  second_order  False where torch's double backward is zero/undefined at kinks

Shapes are small (<= ~200 elements per tensor): until the simplifier lands, backward
tensors are evaluated in scatter form, at a Jacobian's cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import tegrad as tg

F64 = "float64"


@dataclass(frozen=True)
class OpSpec:
    name: str
    build: Callable[[], tuple[list, object]]
    torch_fn: Callable
    make_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    diff: tuple[int, ...]
    gather_form: bool = True
    second_order: bool = True

    def __repr__(self) -> str:
        return f"OpSpec({self.name})"


def ph(shape, name, dtype=F64):
    return tg.placeholder(shape, dtype, name=name)


def normal(*shapes):
    return lambda rng: [rng.standard_normal(s) for s in shapes]


def positive(*shapes, lo=0.5, hi=2.0):
    return lambda rng: [rng.uniform(lo, hi, size=s) for s in shapes]


def away_from_zero(*shapes):
    """|x| in [0.5, 1.5], random signs (products, divisions)."""
    return lambda rng: [rng.uniform(0.5, 1.5, size=s) * rng.choice([-1.0, 1.0], size=s)
                        for s in shapes]


def raxis(n, name):
    return tg.reduce_axis(n, name=name)


SPECS: list[OpSpec] = []


def op(name, torch_fn, make_inputs, diff=(0,), gather_form=True, second_order=True):
    def register(build):
        SPECS.append(OpSpec(name, build, torch_fn, make_inputs, tuple(diff), gather_form,
                            second_order))
        return build

    return register


# ---------------------------------------------------------------------------- linear algebra


@op("matmul", lambda a, b: a @ b, normal((4, 5), (5, 3)), diff=(0, 1))
def _matmul():
    A, B = ph((4, 5), "A"), ph((5, 3), "B")
    k = raxis(5, "k")
    return [A, B], tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), "C")


@op("batched_matmul", lambda a, b: torch.bmm(a, b), normal((2, 3, 4), (2, 4, 3)), diff=(0, 1))
def _bmm():
    A, B = ph((2, 3, 4), "A"), ph((2, 4, 3), "B")
    k = raxis(4, "k")
    return [A, B], tg.compute((2, 3, 3), lambda b, i, j: tg.sum(A[b, i, k] * B[b, k, j], axis=k),
                              "C")


# ---------------------------------------------------------------------------- convolutions


@op("conv2d_s2_p1_d2_g2",
    lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
    normal((1, 4, 7, 7), (4, 2, 3, 3), (4,)), diff=(0, 1, 2))
def _conv2d():
    # groups 2: 4 in / 4 out channels, 2 per group; padding as a reduction where=
    x, w, b = ph((1, 4, 7, 7), "x"), ph((4, 2, 3, 3), "w"), ph((4,), "b")
    ci, kh, kw = raxis(2, "ci"), raxis(3, "kh"), raxis(3, "kw")

    def body(n, co, oh, ow):
        ih, iw = oh * 2 - 1 + kh * 2, ow * 2 - 1 + kw * 2
        inside = tg.all(0 <= ih, ih < 7, 0 <= iw, iw < 7)
        return tg.sum(x[n, (co // 2) * 2 + ci, ih, iw] * w[co, ci, kh, kw],
                      axis=[ci, kh, kw], where=inside) + b[co]

    return [x, w, b], tg.compute((1, 4, 3, 3), body, "conv")


@op("conv_transpose2d_s2_p1",
    lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
    normal((1, 2, 3, 3), (2, 3, 3, 3)), diff=(0, 1))
def _conv_transpose2d():
    # y[oh] = sum_{ih, kh : oh = 2 ih - 1 + kh} x[ih] w[kh], written as a gather
    x, w = ph((1, 2, 3, 3), "x"), ph((2, 3, 3, 3), "w")
    ci, kh, kw = raxis(2, "ci"), raxis(3, "kh"), raxis(3, "kw")

    def body(n, co, oh, ow):
        th, tw = oh + 1 - kh, ow + 1 - kw
        ok = tg.all(tg.equal(th % 2, 0), 0 <= th, th <= 4, tg.equal(tw % 2, 0), 0 <= tw, tw <= 4)
        return tg.sum(x[n, ci, th // 2, tw // 2] * w[ci, co, kh, kw], axis=[ci, kh, kw], where=ok)

    return [x, w], tg.compute((1, 3, 5, 5), body, "convT")


@op("depthwise_conv2d",
    lambda x, w: F.conv2d(x, w, padding=1, groups=3),
    normal((1, 3, 5, 5), (3, 1, 3, 3)), diff=(0, 1))
def _depthwise():
    # padding as an if_then_else guard inside the sum
    x, w = ph((1, 3, 5, 5), "x"), ph((3, 1, 3, 3), "w")
    kh, kw = raxis(3, "kh"), raxis(3, "kw")

    def body(n, c, h, v):
        ih, iw = h + kh - 1, v + kw - 1
        inside = tg.all(0 <= ih, ih < 5, 0 <= iw, iw < 5)
        return tg.sum(tg.if_then_else(inside, x[n, c, ih, iw], 0.0) * w[c, 0, kh, kw],
                      axis=[kh, kw])

    return [x, w], tg.compute((1, 3, 5, 5), body, "dwconv")


# ---------------------------------------------------------------------------- pooling


@op("avg_pool_3x3_s2", lambda x: F.avg_pool2d(x, 3, 2), normal((1, 2, 7, 7)))
def _avg_pool():
    x = ph((1, 2, 7, 7), "x")
    kh, kw = raxis(3, "kh"), raxis(3, "kw")
    return [x], tg.compute(
        (1, 2, 3, 3),
        lambda n, c, h, w: tg.sum(x[n, c, 2 * h + kh, 2 * w + kw], axis=[kh, kw]) / 9.0, "avgpool")


@op("max_pool_3x3_s2", lambda x: F.max_pool2d(x, 3, 2), normal((1, 2, 7, 7)))
def _max_pool():
    x = ph((1, 2, 7, 7), "x")
    kh, kw = raxis(3, "kh"), raxis(3, "kw")
    return [x], tg.compute(
        (1, 2, 3, 3), lambda n, c, h, w: tg.max(x[n, c, 2 * h + kh, 2 * w + kw], axis=[kh, kw]),
        "maxpool")


# ---------------------------------------------------------------------------- data movement


@op("transpose", lambda x: x.permute(2, 0, 1), normal((3, 4, 5)))
def _transpose():
    x = ph((3, 4, 5), "x")
    return [x], tg.compute((5, 3, 4), lambda a, b, c: x[b, c, a], "transpose")


@op("reshape_flatten", lambda x: x.reshape(4, 6), normal((2, 3, 4)))
def _reshape():
    x = ph((2, 3, 4), "x")

    def body(a, b):
        f = a * 6 + b
        return x[f // 12, (f // 4) % 3, f % 4]

    return [x], tg.compute((4, 6), body, "reshape")


@op("flip", lambda x: torch.flip(x, (0, 1)), normal((4, 5)))
def _flip():
    x = ph((4, 5), "x")
    return [x], tg.compute((4, 5), lambda i, j: x[3 - i, 4 - j], "flip")


@op("strided_slice", lambda x: x[1:8:2, 0:8:3], normal((9, 8)))
def _strided_slice():
    x = ph((9, 8), "x")
    return [x], tg.compute((4, 3), lambda i, j: x[1 + 2 * i, 3 * j], "slice")


@op("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), normal((1, 8, 3, 3)))
def _pixel_shuffle():
    x = ph((1, 8, 3, 3), "x")
    def body(n, c, h, w):
        return x[n, c * 4 + (h % 2) * 2 + w % 2, h // 2, w // 2]

    return [x], tg.compute((1, 2, 6, 6), body, "shuffle")


@op("bias_add_broadcast", lambda x, b: x + b[None, :, None], normal((2, 4, 3), (4,)), diff=(0, 1))
def _bias_add():
    x, b = ph((2, 4, 3), "x"), ph((4,), "b")
    return [x, b], tg.compute((2, 4, 3), lambda n, c, s: x[n, c, s] + b[c], "biasadd")


@op("constant_pad", lambda x: F.pad(x, (1, 2, 2, 1), value=0.5), normal((3, 4)))
def _constant_pad():
    x = ph((3, 4), "x")
    return [x], tg.compute(
        (6, 7),
        lambda i, j: tg.if_then_else(tg.all(2 <= i, i < 5, 1 <= j, j < 5), x[i - 2, j - 1], 0.5),
        "pad")


@op("upsample_nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    normal((1, 2, 3, 3)))
def _upsample():
    x = ph((1, 2, 3, 3), "x")
    return [x], tg.compute((1, 2, 6, 6), lambda n, c, h, w: x[n, c, h // 2, w // 2], "upsample")


@op("tile", lambda x: x.repeat(2, 3), normal((2, 3)))
def _tile():
    x = ph((2, 3), "x")
    return [x], tg.compute((4, 9), lambda i, j: x[i % 2, j % 3], "tile")


@op("diagonal", lambda x: torch.diagonal(x), normal((5, 5)))
def _diagonal():
    x = ph((5, 5), "x")
    return [x], tg.compute((5,), lambda i: x[i, i], "diag")


@op("clamp_pad", lambda x: F.pad(x[None, None], (1, 1, 1, 1), mode="replicate")[0, 0],
    normal((4, 5)), gather_form=False)
def _clamp_pad():
    x = ph((4, 5), "x")
    return [x], tg.compute(
        (6, 7),
        lambda i, j: x[tg.minimum(tg.maximum(i - 1, 0), 3), tg.minimum(tg.maximum(j - 1, 0), 4)],
        "clamppad")


def _reflect(i, pad, n):
    a = tg.maximum(i - pad, pad - i)  # |i - pad| without abs
    return tg.minimum(a, 2 * (n - 1) - a)


@op("reflect_pad_minmax", lambda x: F.pad(x[None, None], (2, 2, 2, 2), mode="reflect")[0, 0],
    normal((4, 5)), gather_form=False)
def _reflect_pad_minmax():
    x = ph((4, 5), "x")
    return [x], tg.compute((8, 9), lambda i, j: x[_reflect(i, 2, 4), _reflect(j, 2, 5)],
                           "reflectpad")


@op("reflect_pad_select", lambda x: F.pad(x[None], (2, 2), mode="reflect")[0], normal((3, 6)))
def _reflect_pad_select():
    x = ph((3, 6), "x")

    def body(i, j):
        return tg.if_then_else(j < 2, x[i, 2 - j],
                               tg.if_then_else(j >= 8, x[i, 12 - j], x[i, j - 2]))

    return [x], tg.compute((3, 10), body, "reflectpad_sel")


# ---------------------------------------------------------------------------- gathers


def _embedding_inputs(rng):
    idx = rng.integers(0, 6, size=(2, 4)).astype(np.int64)
    idx[1, 3] = idx[0, 0]  # duplicates for sure
    idx[1, 0] = idx[0, 1]
    return [rng.standard_normal((6, 4)), idx]


@op("embedding_dup_indices", lambda w, idx: w[idx], _embedding_inputs, gather_form=False)
def _embedding():
    W, idx = ph((6, 4), "W"), ph((2, 4), "idx", "int64")
    return [W, idx], tg.compute((2, 4, 4), lambda a, b, e: W[idx[a, b], e], "embed")


def _take_inputs(rng):
    idx = rng.integers(0, 5, size=(3, 4)).astype(np.int32)
    idx[:, 3] = idx[:, 0]
    return [rng.standard_normal((3, 5)), idx]


@op("take_along_axis_int32", lambda x, idx: torch.gather(x, 1, idx.long()), _take_inputs,
    gather_form=False)
def _take_along():
    x, idx = ph((3, 5), "x"), ph((3, 4), "idx", "int32")
    return [x, idx], tg.compute((3, 4), lambda i, j: x[i, idx[i, j]], "take")


def _argmax_read_ref(x, w):
    a = x.argmax(1)
    return x.gather(1, a[:, None]) * w[a]


@op("argmax_index_read", _argmax_read_ref, normal((4, 5), (5, 3)), diff=(0, 1),
    gather_form=False)
def _argmax_read():
    x, w = ph((4, 5), "x"), ph((5, 3), "w")
    k = raxis(5, "k")
    am = tg.compute((4,), lambda i: tg.argmax(x[i, k], axis=k), "am")
    return [x, w], tg.compute((4, 3), lambda i, j: x[i, am[i]] * w[am[i], j], "argmax_read")


# ---------------------------------------------------------------------------- normalizations


@op("softmax_one_compute", lambda x: torch.softmax(x, 1), normal((4, 6)))
def _softmax():
    x = ph((4, 6), "x")
    k, k2 = raxis(6, "k"), raxis(6, "k2")

    def body(i, j):
        m = tg.max(x[i, k], axis=k)
        return tg.exp(x[i, j] - m) / tg.sum(tg.exp(x[i, k2] - m), axis=k2)

    return [x], tg.compute((4, 6), body, "softmax")


@op("layer_norm",
    lambda x, g, b: F.layer_norm(x, (6,), g, b, eps=1e-5),
    normal((4, 6), (6,), (6,)), diff=(0, 1, 2))
def _layer_norm():
    x, g, b = ph((4, 6), "x"), ph((6,), "gamma"), ph((6,), "beta")
    k, k2 = raxis(6, "k"), raxis(6, "k2")
    mean = tg.compute((4,), lambda i: tg.sum(x[i, k], axis=k) / 6.0, "mean")
    var = tg.compute((4,), lambda i: tg.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2)
                     / 6.0, "var")
    return [x, g, b], tg.compute(
        (4, 6), lambda i, j: (x[i, j] - mean[i]) * tg.rsqrt(var[i] + 1e-5) * g[j] + b[j], "ln")


def _attention_ref(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(3)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


@op("causal_attention", _attention_ref, normal((2, 4, 3), (2, 4, 3), (2, 4, 3)), diff=(0, 1, 2))
def _attention():
    Q, K, V = ph((2, 4, 3), "Q"), ph((2, 4, 3), "K"), ph((2, 4, 3), "V")
    d, m_ax, z_ax, j_ax = raxis(3, "d"), raxis(4, "m"), raxis(4, "z"), raxis(4, "jj")
    S = tg.compute((2, 4, 4), lambda b, i, j: tg.sum(Q[b, i, d] * K[b, j, d], axis=d)
                   / math.sqrt(3), "S")

    def probs(b, i, j):
        m = tg.max(S[b, i, m_ax], axis=m_ax, where=m_ax <= i)
        z = tg.sum(tg.exp(S[b, i, z_ax] - m), axis=z_ax, where=z_ax <= i)
        return tg.if_then_else(j <= i, tg.exp(S[b, i, j] - m) / z, 0.0)

    P = tg.compute((2, 4, 4), probs, "P")
    return [Q, K, V], tg.compute((2, 4, 3), lambda b, i, e: tg.sum(P[b, i, j_ax] * V[b, j_ax, e],
                                                                   axis=j_ax), "attn")


@op("center_x_minus_mean", lambda x: x - x.mean(1, keepdim=True), normal((4, 5)))
def _center():
    x = ph((4, 5), "x")
    k = raxis(5, "k")
    return [x], tg.compute((4, 5), lambda i, j: x[i, j] - tg.sum(x[i, k], axis=k) / 5.0, "center")


# ---------------------------------------------------------------------------- reductions


@op("logsumexp_comm_reducer", lambda x: torch.logsumexp(x, 1), normal((3, 5)))
def _lse_reducer():
    lse = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                          lambda dtype: tg.const(-math.inf, dtype), name="logsumexp")
    x = ph((3, 5), "x")
    k = raxis(5, "k")
    return [x], tg.compute((3,), lambda i: lse(x[i, k], axis=k), "lse")


@op("prod_comm_reducer", lambda x: torch.prod(x, 0), away_from_zero((4, 3)))
def _prod_reducer():
    mul = tg.comm_reducer(lambda a, b: a * b, lambda dtype: tg.const(1, dtype), name="mul")
    x = ph((4, 3), "x")
    k = raxis(4, "k")
    return [x], tg.compute((3,), lambda j: mul(x[k, j], axis=k), "cprod")


@op("prod_reduce", lambda x: torch.prod(x, 1), away_from_zero((3, 4)))
def _prod():
    x = ph((3, 4), "x")
    k = raxis(4, "k")
    return [x], tg.compute((3,), lambda i: tg.prod(x[i, k], axis=k), "prod")


@op("min_reduce", lambda x: torch.amin(x, 1), normal((4, 5)))
def _min():
    x = ph((4, 5), "x")
    k = raxis(5, "k")
    return [x], tg.compute((4,), lambda i: tg.min(x[i, k], axis=k), "min")


@op("full_sum_0d", lambda x: x.sum(), normal((5, 6)))
def _full_sum():
    x = ph((5, 6), "x")
    a, b = raxis(5, "a"), raxis(6, "b")
    return [x], tg.compute((), lambda: tg.sum(x[a, b], axis=[a, b]), "total")


@op("cumsum_triangular", lambda x: torch.cumsum(x, 1), normal((3, 5)))
def _cumsum():
    x = ph((3, 5), "x")
    k = raxis(5, "k")
    return [x], tg.compute((3, 5), lambda i, j: tg.sum(x[i, k], axis=k, where=k <= j), "cumsum")


@op("mse_loss_scalar", lambda x, t: F.mse_loss(x, t), normal((4, 5), (4, 5)), diff=(0, 1))
def _mse():
    x, t = ph((4, 5), "x"), ph((4, 5), "t")
    a, b = raxis(4, "a"), raxis(5, "b")
    return [x, t], tg.compute(
        (), lambda: tg.sum((x[a, b] - t[a, b]) * (x[a, b] - t[a, b]), axis=[a, b]) / 20.0, "mse")


# ---------------------------------------------------------------------------- elementwise


def _unary_chain_ref(x):
    return (torch.exp(torch.sin(x)) * torch.log(x) + torch.sqrt(x) * torch.tanh(x)
            + torch.sigmoid(torch.cos(x)) + torch.erf(x) * torch.abs(x - 3.0)
            + torch.log1p(x) * torch.expm1(-x) + torch.rsqrt(x) - x ** 2.5)


@op("elementwise_unary_chain", _unary_chain_ref, positive((3, 4)))
def _unary_chain():
    x = ph((3, 4), "x")

    def body(i, j):
        v = x[i, j]
        return (tg.exp(tg.sin(v)) * tg.log(v) + tg.sqrt(v) * tg.tanh(v)
                + tg.sigmoid(tg.cos(v)) + tg.erf(v) * tg.abs(v - 3.0)
                + tg.log1p(v) * tg.expm1(-v) + tg.rsqrt(v) - v ** 2.5)

    return [x], tg.compute((3, 4), body, "chain")


@op("elementwise_binary_pow_div",
    lambda x, y: torch.pow(x, y) + x / y - x * y + (x - y) ** 2,
    positive((3, 4), (3, 4)), diff=(0, 1))
def _binary_math():
    x, y = ph((3, 4), "x"), ph((3, 4), "y")
    return [x, y], tg.compute(
        (3, 4),
        lambda i, j: tg.power(x[i, j], y[i, j]) + x[i, j] / y[i, j] - x[i, j] * y[i, j]
        + (x[i, j] - y[i, j]) ** 2, "binmath")


@op("maximum_minimum_binary",
    lambda x, y: torch.maximum(x, y) + torch.minimum(x, 0.3 * y) * x + torch.relu(x),
    normal((3, 4), (3, 4)), diff=(0, 1))
def _max_min_binary():
    x, y = ph((3, 4), "x"), ph((3, 4), "y")
    return [x, y], tg.compute(
        (3, 4),
        lambda i, j: tg.maximum(x[i, j], y[i, j]) + tg.minimum(x[i, j], 0.3 * y[i, j]) * x[i, j]
        + tg.maximum(x[i, j], 0.0), "maxmin")


def _cast_inputs(rng):
    return [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4))]


@op("cast_f32_to_f64", lambda x, y: torch.exp(x.double()) * y, _cast_inputs, diff=(0, 1))
def _cast():
    x, y = ph((3, 4), "x", "float32"), ph((3, 4), "y")
    return [x, y], tg.compute((3, 4), lambda i, j: tg.exp(tg.cast(x[i, j], F64)) * y[i, j], "cast")


SPEC_BY_NAME = {s.name: s for s in SPECS}
assert len(SPEC_BY_NAME) == len(SPECS), "duplicate spec names"
