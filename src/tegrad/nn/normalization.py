"""Normalization layers, as ``torch.nn.functional`` computes them (NCHW layouts).

Each one is a pair of statistics computes over a reduction domain, then one elementwise
compute:

    mean[s] = sum_r x[read(s, r)] / M          var[s] = sum_r (x[read(s, r)] - mean[s])^2 / M
    y[i]    = (x[i] - mean[stat(i)]) rsqrt(var[stat(i)] + eps) weight[ch(i)] + bias[ch(i)]

with a biased (two-pass) variance. ``read`` and ``stat`` are affine (with ``//`` for the
groups of ``group_norm``), so every backward comes out in gather form. Tensors are
immutable: ``batch_norm`` in training mode does not update ``running_mean``/``running_var``
(``batch_norm_running_stats`` returns the updated values as tensors).

Vector norms along one axis (``normalize``) and the distances built on them
(``pairwise_distance``, ``cosine_similarity``) close the module.
"""

from __future__ import annotations

import math

from ..frontend.math import abs as tabs
from ..frontend.math import all as tall
from ..frontend.math import maximum, power, rsqrt, sqrt
from ..frontend.reduce import max as tmax
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axis

__all__ = [
    "batch_norm",
    "batch_norm_running_stats",
    "cosine_similarity",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "local_response_norm",
    "normalize",
    "pairwise_distance",
    "rms_norm",
]

_FINFO_EPS = {"float32": 1.1920928955078125e-07, "float64": 2.220446049250313e-16}


def _moments(x: Tensor, stat_shape, domain, read, name: str) -> tuple[Tensor, Tensor]:
    """``mean`` and biased ``var`` over ``domain`` (reduction extents) for each index of
    ``stat_shape``; ``read(s, r)`` is the index of ``x`` for stat index ``s``, reduction
    index ``r``."""
    count = float(math.prod(domain))
    ks = [reduce_axis(n, name=f"r{d}") for d, n in enumerate(domain)]
    mean = compute(stat_shape, lambda *s: tsum(x[read(s, ks)], axis=ks) / count,
                   name=f"{name}.mean")
    ks2 = [reduce_axis(n, name=f"r{d}") for d, n in enumerate(domain)]

    def var(*s):
        centered = x[read(s, ks2)] - mean[s]
        return tsum(centered * centered, axis=ks2) / count

    return mean, compute(stat_shape, var, name=f"{name}.var")


def _check_vector(op: str, what: str, t: Tensor | None, shape) -> None:
    if t is not None and t.shape != tuple(shape):
        raise ValueError(f"{op}: {what} must have shape {tuple(shape)}, got {t.shape}")


def _normalized(x, mean, var, stat, eps, weight, bias, channel, name) -> Tensor:
    """``(x - mean) rsqrt(var + eps) * weight + bias``; ``stat(i)``/``channel(i)`` index the
    statistics and the affine parameters."""
    def body(*i):
        s = stat(i)
        y = (x[i] - mean[s]) * rsqrt(var[s] + eps)
        if weight is not None:
            y = y * weight[channel(i)]
        if bias is not None:
            y = y + bias[channel(i)]
        return y

    return compute(x.shape, body, name=name)


def _channels_first(op: str, input: Tensor, least: int = 2) -> int:
    if input.ndim < least:
        raise ValueError(f"{op}: input must be (N, C, ...) with at least {least} dims, "
                         f"got {input.shape}")
    return input.shape[1]


def _batch_read(s, r):
    """Index ``(n, c, *spatial)`` for channel ``s[0]``, reduction ``r = (n, *spatial)``."""
    return (r[0], s[0], *r[1:])


def _batch_domain(input: Tensor) -> tuple[int, ...]:
    return (input.shape[0], *input.shape[2:])


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """``(x - mean_c) / sqrt(var_c + eps) * w_c + b_c``: batch statistics (biased variance)
    when ``training``, else the running ones. Running stats are never updated in place."""
    channels = _channels_first("batch_norm", input)
    for what, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        _check_vector("batch_norm", what, t, (channels,))
    name = unique_name("batch_norm")
    if training:
        if math.prod(_batch_domain(input)) <= 1:
            raise ValueError(f"batch_norm: training needs more than 1 value per channel, "
                             f"got input {input.shape}")
        mean, var = _moments(input, (channels,), _batch_domain(input), _batch_read, name)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when "
                             "training=False")
        mean, var = running_mean, running_var
    return _normalized(input, mean, var, lambda i: (i[1],), eps, weight, bias,
                       lambda i: (i[1],), name)


def batch_norm_running_stats(input, running_mean, running_var, momentum=0.1):
    """The running stats ``batch_norm(training=True)`` leaves in torch:
    ``(1 - m) running + m batch``, with the unbiased batch variance. Returns two tensors."""
    channels = _channels_first("batch_norm_running_stats", input)
    for what, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is None:
            raise ValueError(f"batch_norm_running_stats: {what} is required")
        _check_vector("batch_norm_running_stats", what, t, (channels,))
    if momentum is None:
        raise ValueError("batch_norm_running_stats: momentum=None (a cumulative average) "
                         "needs num_batches_tracked; pass a float momentum")
    count = math.prod(_batch_domain(input))
    if count <= 1:
        raise ValueError(f"batch_norm_running_stats: needs more than 1 value per channel, "
                         f"got input {input.shape}")
    name = unique_name("batch_norm_running_stats")
    mean, var = _moments(input, (channels,), _batch_domain(input), _batch_read, name)
    m, unbias = float(momentum), count / (count - 1)
    new_mean = compute((channels,), lambda c: (1 - m) * running_mean[c] + m * mean[c],
                       name=f"{name}.running_mean")
    new_var = compute((channels,), lambda c: (1 - m) * running_var[c] + m * unbias * var[c],
                      name=f"{name}.running_var")
    return new_mean, new_var


def _trailing(op: str, input: Tensor, normalized_shape) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) \
        else tuple(normalized_shape)
    if not shape or len(shape) > input.ndim or input.shape[input.ndim - len(shape):] != shape:
        raise ValueError(f"{op}: normalized_shape {shape} must be the trailing dims of the "
                         f"input {input.shape}")
    return shape


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * w + b`` over the trailing ``normalized_shape`` dims
    (biased variance)."""
    shape = _trailing("layer_norm", input, normalized_shape)
    _check_vector("layer_norm", "weight", weight, shape)
    _check_vector("layer_norm", "bias", bias, shape)
    lead = input.ndim - len(shape)
    name = unique_name("layer_norm")
    mean, var = _moments(input, input.shape[:lead], shape, lambda s, r: (*s, *r), name)
    return _normalized(input, mean, var, lambda i: i[:lead], eps, weight, bias,
                       lambda i: i[lead:], name)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """``(x - mean_g) / sqrt(var_g + eps) * w_c + b_c``, statistics per sample and group of
    ``C / num_groups`` consecutive channels (biased variance)."""
    channels = _channels_first("group_norm", input)
    if not isinstance(num_groups, int) or num_groups <= 0 or channels % num_groups:
        raise ValueError(f"group_norm: num_groups must divide the {channels} channels, "
                         f"got {num_groups!r}")
    _check_vector("group_norm", "weight", weight, (channels,))
    _check_vector("group_norm", "bias", bias, (channels,))
    per = channels // num_groups
    name = unique_name("group_norm")
    mean, var = _moments(input, (input.shape[0], num_groups), (per, *input.shape[2:]),
                         lambda s, r: (s[0], s[1] * per + r[0], *r[1:]), name)
    return _normalized(input, mean, var, lambda i: (i[0], i[1] // per), eps, weight, bias,
                       lambda i: (i[1],), name)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """``(x - mean_nc) / sqrt(var_nc + eps) * w_c + b_c`` over the spatial dims; with
    ``use_input_stats=False`` the running stats replace them. Running stats are not updated."""
    channels = _channels_first("instance_norm", input, least=3)
    for what, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        _check_vector("instance_norm", what, t, (channels,))
    name = unique_name("instance_norm")
    if use_input_stats:
        mean, var = _moments(input, input.shape[:2], input.shape[2:],
                             lambda s, r: (*s, *r), name)
        stat = lambda i: i[:2]  # noqa: E731
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: running_mean and running_var are required when "
                             "use_input_stats=False")
        mean, var, stat = running_mean, running_var, lambda i: (i[1],)
    return _normalized(input, mean, var, stat, eps, weight, bias, lambda i: (i[1],), name)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * w`` over the trailing ``normalized_shape`` dims;
    ``eps=None`` is the machine epsilon of the input's dtype."""
    shape = _trailing("rms_norm", input, normalized_shape)
    _check_vector("rms_norm", "weight", weight, shape)
    eps = _FINFO_EPS.get(input.dtype, _FINFO_EPS["float32"]) if eps is None else eps
    lead = input.ndim - len(shape)
    name = unique_name("rms_norm")
    ks = [reduce_axis(n, name=f"r{d}") for d, n in enumerate(shape)]
    count = float(math.prod(shape))
    scale = compute(input.shape[:lead], lambda *s: rsqrt(
        tsum(input[(*s, *ks)] * input[(*s, *ks)], axis=ks) / count + eps), name=f"{name}.rrms")

    def body(*i):
        y = input[i] * scale[i[:lead]]
        return y if weight is None else y * weight[i[lead:]]

    return compute(input.shape, body, name=name)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x_c / (k + alpha / size * sum_{c'} x_{c'}^2)^beta`` over the ``size`` channels
    ``c - size // 2 .. c + (size - 1) // 2`` (zeros beyond the edges)."""
    channels = _channels_first("local_response_norm", input, least=3)
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"local_response_norm: size must be a positive int, got {size!r}")
    name = unique_name("local_response_norm")
    j = reduce_axis(size, name="j")

    def div(n, c, *rest):
        near = c - size // 2 + j
        v = input[(n, near, *rest)]
        window = tsum(v * v, axis=j, where=tall(near >= 0, near < channels))
        return power(k + alpha / size * window, float(beta))

    scale = compute(input.shape, div, name=f"{name}.div")
    return compute(input.shape, lambda *i: input[i] / scale[i], name=name)


# ---------------------------------------------------------------------------- norms and distances


def _pair(op: str, x1: Tensor, x2: Tensor) -> tuple[int, ...]:
    try:
        return broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ValueError(f"{op}: x1 {x1.shape} and x2 {x2.shape} do not broadcast") from None


def _norm_along(op, diff, shape, dim, p, name, keepdim=False) -> Tensor:
    """``||diff(i)||_p`` along axis ``dim`` of ``shape`` (``diff`` gives the element)."""
    if p != math.inf and not p > 0:
        raise ValueError(f"{op}: p must be > 0 or inf, got {p}")
    k = reduce_axis(shape[dim], name="k")
    if keepdim:
        out = tuple(1 if a == dim else n for a, n in enumerate(shape))
    else:
        out = tuple(n for a, n in enumerate(shape) if a != dim)

    def body(*i):
        full = (*i[:dim], k, *i[dim + 1:]) if keepdim else (*i[:dim], k, *i[dim:])
        d = diff(full)
        if p == math.inf:
            return tmax(tabs(d), axis=k)
        if p == 2:
            return sqrt(tsum(d * d, axis=k))
        if p == 1:
            return tsum(tabs(d), axis=k)
        return power(tsum(power(tabs(d), float(p)), axis=k), 1.0 / p)

    return compute(out, body, name=name)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``x / max(||x||_p, eps)`` along ``dim``. ``out=`` is refused (tensors are
    immutable)."""
    if out is not None:
        raise ValueError("normalize: out= is not supported; use the returned tensor")
    if input.ndim == 0:
        raise ValueError("normalize: input must have at least one dimension")
    dim = axis(dim, input.ndim, "normalize: dim")
    name = unique_name("normalize")
    norm = _norm_along("normalize", lambda i: input[i], input.shape, dim, p, f"{name}.norm",
                       keepdim=True)

    def body(*i):
        return input[i] / maximum(norm[(*i[:dim], 0, *i[dim + 1:])], eps)

    return compute(input.shape, body, name=name)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last axis (inputs broadcast)."""
    shape = _pair("pairwise_distance", x1, x2)
    if not shape:
        raise ValueError("pairwise_distance: inputs must have at least one dimension")
    return _norm_along("pairwise_distance",
                       lambda i: broadcast_read(x1, shape, i) - broadcast_read(x2, shape, i)
                       + eps, shape, len(shape) - 1, p, unique_name("pairwise_distance"),
                       keepdim)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 x2) / (max(||x1||, eps) max(||x2||, eps))`` along ``dim`` (inputs
    broadcast)."""
    shape = _pair("cosine_similarity", x1, x2)
    dim = axis(dim, len(shape), "cosine_similarity: dim")
    name = unique_name("cosine_similarity")
    n1 = _norm_along("cosine_similarity", lambda i: broadcast_read(x1, shape, i), shape, dim,
                     2, f"{name}.norm1")
    n2 = _norm_along("cosine_similarity", lambda i: broadcast_read(x2, shape, i), shape, dim,
                     2, f"{name}.norm2")
    k = reduce_axis(shape[dim], name="k")

    def body(*i):
        full = (*i[:dim], k, *i[dim:])
        dot = tsum(broadcast_read(x1, shape, full) * broadcast_read(x2, shape, full), axis=k)
        return dot / (maximum(n1[i], eps) * maximum(n2[i], eps))

    return compute(n1.shape, body, name=name)
