"""Losses, as ``torch.nn.functional`` computes them.

Every loss takes ``reduction="mean" | "sum" | "none"``: an elementwise (or per-sample)
loss tensor, then one 0-d compute that sums it (and divides by the element count, or
by the summed class weights where torch does). torch's legacy ``size_average`` and
``reduce`` arguments are refused. Unlike torch, an ``input`` and ``target`` of different
shapes are an error, never broadcast. Class indices are int64 tensors; a class is picked
by a one-hot select over the class axis (``sum_c [c = t] x_c``), so the backward is
elementwise (gather form) and an ``ignore_index`` outside ``[0, C)`` is never read; a
target outside ``[0, C)`` that is not ``ignore_index`` picks no class (torch raises).
The distances (``pairwise_distance``, ``cosine_similarity``) live with the norms in
``normalization.py``.
"""

from __future__ import annotations

from ..frontend.math import abs as tabs
from ..frontend.math import (
    const,
    equal,
    exp,
    if_then_else,
    log,
    log1p,
    maximum,
    minimum,
    not_equal,
    rsqrt,
)
from ..frontend.reduce import max as tmax
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .normalization import pairwise_distance
from .softmax import _shift

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cosine_embedding_loss",
    "cross_entropy",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "margin_ranking_loss",
    "mse_loss",
    "nll_loss",
    "smooth_l1_loss",
    "triplet_margin_loss",
]

_REDUCTIONS = ("mean", "sum", "none")

# ---------------------------------------------------------------------------- helpers


def _check(op: str, reduction: str, size_average=None, reduce=None,
           allowed: tuple[str, ...] = _REDUCTIONS) -> None:
    if size_average is not None or reduce is not None:
        raise ValueError(f"{op}: the legacy size_average/reduce arguments are not supported; "
                         f"pass reduction= one of {allowed}")
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {reduction!r}")


def _same_shape(op: str, **tensors: Tensor) -> tuple[int, ...]:
    (first, a), *rest = tensors.items()
    for name, t in rest:
        if t.shape != a.shape:
            raise ValueError(f"{op}: {name} must have the shape of {first} {a.shape}, "
                             f"got {t.shape}")
    return a.shape


def _reduce(loss: Tensor, reduction: str, name: str, denominator=None) -> Tensor:
    """``none`` -> ``loss``; ``sum`` -> ``sum(loss)``; ``mean`` (``batchmean``) ->
    ``sum(loss) / denominator`` (a number, or a function giving a 0-d expression)."""
    if reduction == "none":
        return loss
    axes = tuple(reduce_axis(n, name=f"r{d}") for d, n in enumerate(loss.shape))
    if reduction == "batchmean":
        denominator = loss.shape[0] if loss.shape else 1
    elif reduction == "mean" and denominator is None:
        denominator = loss.size

    def body():
        total = tsum(loss[axes], axis=list(axes)) if axes else loss[()]
        if reduction == "sum":
            return total
        return total / (denominator() if callable(denominator) else float(denominator))

    return compute((), body, name=name)


def _elementwise(op: str, reduction: str, f, shape, weight=None, mean_by_weight=False):
    """The loss ``f(i)`` (times ``weight[i]``) at every index of ``shape``, reduced; with a
    weight, ``mean`` divides by ``sum(weight)`` where torch does (``mse``/``l1_loss``)."""
    name = unique_name(op)
    if weight is not None and weight.shape != tuple(shape):
        raise ValueError(f"{op}: weight must have the input's shape {tuple(shape)}, "
                         f"got {weight.shape}")
    loss = compute(shape, lambda *i: f(i) if weight is None else f(i) * weight[i],
                   name=_inner(reduction, name))
    denominator = None
    if weight is not None and mean_by_weight:
        axes = tuple(reduce_axis(n, name=f"w{d}") for d, n in enumerate(weight.shape))
        denominator = lambda: tsum(weight[axes], axis=list(axes)) if axes else weight[()]  # noqa: E731
    return _reduce(loss, reduction, name, denominator)


def _inner(reduction: str, name: str) -> str:
    return name if reduction == "none" else f"{name}.elementwise"


# ---------------------------------------------------------------------------- regression


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``(x - y)^2``; with ``weight`` the mean is ``sum(w (x - y)^2) / sum(w)`` (torch's)."""
    _check("mse_loss", reduction, size_average, reduce)
    shape = _same_shape("mse_loss", input=input, target=target)

    def f(i):
        d = input[i] - target[i]
        return d * d

    return _elementwise("mse_loss", reduction, f, shape, weight, mean_by_weight=True)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``|x - y|``; with ``weight`` the mean is ``sum(w |x - y|) / sum(w)`` (torch's)."""
    _check("l1_loss", reduction, size_average, reduce)
    shape = _same_shape("l1_loss", input=input, target=target)
    return _elementwise("l1_loss", reduction, lambda i: tabs(input[i] - target[i]), shape,
                        weight, mean_by_weight=True)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean",
                   beta=1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = x - y``);
    ``beta = 0`` is the L1 loss."""
    _check("smooth_l1_loss", reduction, size_average, reduce)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    shape = _same_shape("smooth_l1_loss", input=input, target=target)

    def f(i):
        d = input[i] - target[i]
        if beta == 0:
            return tabs(d)
        return if_then_else(tabs(d) < beta, 0.5 * d * d / beta, tabs(d) - 0.5 * beta)

    return _elementwise("smooth_l1_loss", reduction, f, shape)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``; with ``weight``
    the mean divides by the element count (torch's)."""
    _check("huber_loss", reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    shape = _same_shape("huber_loss", input=input, target=target)

    def f(i):
        d = input[i] - target[i]
        return if_then_else(tabs(d) < delta, 0.5 * d * d, delta * (tabs(d) - 0.5 * delta))

    return _elementwise("huber_loss", reduction, f, shape, weight)


# ---------------------------------------------------------------------------- classification


def _class_layout(op: str, input: Tensor):
    """``(positions shape, C, index(pos, c))`` for an input ``(C,)`` or ``(N, C, d1...)``."""
    if input.ndim == 0:
        raise ValueError(f"{op}: input must be (C,) or (N, C, d1, ...), got a 0-d tensor")
    if input.ndim == 1:
        return (), input.shape[0], lambda pos, c: (c,)
    positions = (input.shape[0], *input.shape[2:])
    return positions, input.shape[1], lambda pos, c: (pos[0], c, *pos[1:])


def _class_target(op, input, target, weight, positions, classes):
    if target.shape != positions:
        raise ValueError(f"{op}: class-index target must have shape {positions} for input "
                         f"{input.shape}, got {target.shape}")
    if not target.dtype.startswith("int"):
        raise ValueError(f"{op}: class-index target must be an integer tensor, "
                         f"got {target.dtype}")
    if weight is not None and weight.shape != (classes,):
        raise ValueError(f"{op}: weight must have shape ({classes},), got {weight.shape}")


def _picked_weight_total(target, weight, ignore_index, name):
    """``sum_n [t_n != ignore] w[t_n]`` (the count of kept targets without a weight): the
    divisor of torch's ``mean``; ``w[t_n]`` is read only where ``t_n`` is kept."""
    axes = tuple(reduce_axis(n, name=f"n{d}") for d, n in enumerate(target.shape))

    def picked():
        t = target[axes]
        value = 1.0 if weight is None else weight[t]
        return if_then_else(not_equal(t, ignore_index), value, 0.0)

    total = compute((), lambda: tsum(picked(), axis=list(axes)) if axes else picked(),
                    name=f"{name}.weight_total")
    return lambda: total[()]


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """``-w[t] x[t]`` per sample (0 where ``t = ignore_index``); mean divides by
    ``sum w[t]`` over kept samples. ``weight`` is not differentiated (as in torch)."""
    _check("nll_loss", reduction, size_average, reduce)
    positions, classes, at = _class_layout("nll_loss", input)
    _class_target("nll_loss", input, target, weight, positions, classes)
    name = unique_name("nll_loss")
    c = reduce_axis(classes, name="c")

    def body(*pos):
        t = target[pos]
        w = 1.0 if weight is None else weight[c]
        picked = tsum(-w * input[at(pos, c)], axis=c, where=equal(c, t))
        return if_then_else(not_equal(t, ignore_index), picked, 0.0)

    loss = compute(positions, body, name=_inner(reduction, name))
    return _reduce(loss, reduction, name,
                   _picked_weight_total(target, weight, ignore_index, name))


def _log_sum_exp(input: Tensor, positions, classes, at, name: str):
    """``lse(pos) = m + log sum_c exp(x_c - m)`` with ``m = max_c x_c``: the max and the sum
    are computes of their own, plain reductions (over an ``(N, C, d)`` input they run in
    column order), the log applied where ``lse`` is read. ``lse`` is invariant to the
    shift ``m``, so ``m`` is held constant (``softmax._shift``): the backward neither
    counts the max's ties nor tests each element against it."""
    k = reduce_axis(classes, name="k")
    top = compute(positions, lambda *pos: tmax(input[at(pos, k)], axis=k), name=f"{name}.max")
    k2 = reduce_axis(classes, name="k")
    total = compute(positions, lambda *pos: tsum(
        exp(input[at(pos, k2)] - _shift(top[pos])), axis=k2), name=f"{name}.sum")
    return lambda pos: _shift(top[pos]) + log(total[pos])


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """``-sum_c w_c q_c log_softmax(x)_c`` with ``q = (1 - e) onehot(t) + e / C`` (class
    indices; 0 where ``t = ignore_index``) or ``q = (1 - e) p + e / C`` (probabilities)."""
    _check("cross_entropy", reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], "
                         f"got {label_smoothing}")
    positions, classes, at = _class_layout("cross_entropy", input)
    probabilities = target.dtype.startswith("float")
    if probabilities:
        _same_shape("cross_entropy", input=input, target=target)
        if weight is not None and weight.shape != (classes,):
            raise ValueError(f"cross_entropy: weight must have shape ({classes},), "
                             f"got {weight.shape}")
    else:
        _class_target("cross_entropy", input, target, weight, positions, classes)
    name = unique_name("cross_entropy")
    lse = _log_sum_exp(input, positions, classes, at, name)
    eps, c = float(label_smoothing), reduce_axis(classes, name="c")

    def body(*pos):
        w = 1.0 if weight is None else weight[c]
        logp = input[at(pos, c)] - lse(pos)
        if probabilities:
            q = target[at(pos, c)] if eps == 0 else (1 - eps) * target[at(pos, c)] + eps / classes
            return -tsum(w * q * logp, axis=c)
        t = target[pos]
        # constants in the input's dtype: a Python float would default to float32
        q = if_then_else(equal(c, t), const(1.0 - eps + eps / classes, input.dtype),
                         const(eps / classes, input.dtype))
        if eps == 0:
            kept = -tsum(w * logp, axis=c, where=equal(c, t))
        else:
            kept = -tsum(w * q * logp, axis=c)
        return if_then_else(not_equal(t, ignore_index), kept, 0.0)

    loss = compute(positions, body, name=_inner(reduction, name))
    if probabilities:
        return _reduce(loss, reduction, name)
    return _reduce(loss, reduction, name,
                   _picked_weight_total(target, weight, ignore_index, name))


def _log_clamped(v):
    """torch's BCE clamps its logs at -100."""
    return maximum(log(v), -100.0)


def _broadcast_weight(op: str, what: str, weight: Tensor | None, shape):
    if weight is None:
        return lambda i: 1.0
    try:
        out = broadcast_shapes(weight.shape, shape)
    except ValueError:
        out = None
    if out != tuple(shape):
        raise ValueError(f"{op}: {what} of shape {weight.shape} does not broadcast to the "
                         f"input's {tuple(shape)}")
    return lambda i: broadcast_read(weight, tuple(shape), i)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-w (y log x + (1 - y) log(1 - x))``, logs clamped at -100 as in torch; ``weight``
    (broadcast to the input) is not differentiated."""
    _check("binary_cross_entropy", reduction, size_average, reduce)
    shape = _same_shape("binary_cross_entropy", input=input, target=target)
    w = _broadcast_weight("binary_cross_entropy", "weight", weight, shape)

    def f(i):
        x, y = input[i], target[i]
        return -w(i) * (y * _log_clamped(x) + (1.0 - y) * _log_clamped(1.0 - x))

    return _elementwise("binary_cross_entropy", reduction, f, shape)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """``w ((1 - y) x + (1 + (p - 1) y) softplus(-x))`` with the stable
    ``softplus(-x) = max(-x, 0) + log1p(exp(-|x|))``; ``weight``/``pos_weight`` broadcast."""
    op = "binary_cross_entropy_with_logits"
    _check(op, reduction, size_average, reduce)
    shape = _same_shape(op, input=input, target=target)
    w = _broadcast_weight(op, "weight", weight, shape)
    pw = None if pos_weight is None else _broadcast_weight(op, "pos_weight", pos_weight, shape)

    def f(i):
        x, y = input[i], target[i]
        softplus = maximum(-x, 0.0) + log1p(exp(-tabs(x)))
        scale = 1.0 if pw is None else 1.0 + (pw(i) - 1.0) * y
        return w(i) * ((1.0 - y) * x + scale * softplus)

    return _elementwise(op, reduction, f, shape)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``y (log y - x)`` (``0`` where ``y = 0``), or ``e^y (y - x)`` with ``log_target``;
    ``batchmean`` divides the sum by the batch size."""
    _check("kl_div", reduction, size_average, reduce, (*_REDUCTIONS, "batchmean"))
    shape = _same_shape("kl_div", input=input, target=target)

    def f(i):
        x, y = input[i], target[i]
        if log_target:
            return exp(y) * (y - x)
        return if_then_else(y > 0.0, y * log(y), 0.0) - y * x

    return _elementwise("kl_div", reduction, f, shape)


# ---------------------------------------------------------------------------- embeddings


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos(x1, x2)`` where ``y = 1``, ``max(0, cos - margin)`` where ``y = -1``, with
    ``cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))`` (torch's)."""
    op = "cosine_embedding_loss"
    _check(op, reduction, size_average, reduce)
    shape = _same_shape(op, input1=input1, input2=input2)
    if input1.ndim not in (1, 2) or target.shape != shape[:-1]:
        raise ValueError(f"{op}: inputs must be (N, D) or (D,) with target (N,) or (), got "
                         f"{shape} and target {target.shape}")
    name = unique_name(op)
    k = [reduce_axis(shape[-1], name=f"k{j}") for j in range(3)]

    def body(*n):
        def dot(a, b, kk):
            return tsum(a[(*n, kk)] * b[(*n, kk)], axis=kk)

        cos = dot(input1, input2, k[0]) * rsqrt(
            (dot(input1, input1, k[1]) + 1e-12) * (dot(input2, input2, k[2]) + 1e-12))
        y = target[n]
        return if_then_else(equal(y, 1), 1.0 - cos,
                            if_then_else(equal(y, -1), maximum(cos - margin, 0.0), 0.0))

    return _reduce(compute(shape[:-1], body, name=_inner(reduction, name)), reduction, name)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -y (x1 - x2) + margin)``."""
    op = "margin_ranking_loss"
    _check(op, reduction, size_average, reduce)
    shape = _same_shape(op, input1=input1, input2=input2, target=target)
    return _elementwise(op, reduction, lambda i: maximum(
        -target[i] * (input1[i] - input2[i]) + margin, 0.0), shape)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d = pairwise_distance(., ., p, eps)``;
    ``swap`` uses ``min(d(a, n), d(p, n))`` for the negative distance."""
    op = "triplet_margin_loss"
    _check(op, reduction, size_average, reduce)
    shape = _same_shape(op, anchor=anchor, positive=positive, negative=negative)
    if len(shape) not in (1, 2):
        raise ValueError(f"{op}: inputs must be (N, D) or (D,), got {shape}")
    name = unique_name(op)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    d_swap = pairwise_distance(positive, negative, p, eps) if swap else None

    def body(*n):
        neg = d_neg[n] if d_swap is None else minimum(d_neg[n], d_swap[n])
        return maximum(margin + d_pos[n] - neg, 0.0)

    return _reduce(compute(d_pos.shape, body, name=_inner(reduction, name)), reduction, name)

