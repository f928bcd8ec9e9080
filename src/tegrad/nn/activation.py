"""Elementwise activations, as ``torch.nn.functional``: one compute each, ``y[i] = f(x[i])``.

Kinks follow tegrad's one rule (the average of the one-sided derivatives): clamps are
written with ``maximum``/``minimum``, and continuous piecewise functions (``elu``,
``prelu``...) with ``_piecewise``, which at the joint takes the mean of both branches
(same value there, averaged derivative). Jumps (``threshold``, ``hardshrink``) are
selects. ``inplace`` is accepted and ignored (tegrad never writes in place).
"""

from __future__ import annotations

import math

from ..frontend.math import abs as _abs
from ..frontend.math import erf, exp, expm1, if_then_else, log1p, maximum, minimum
from ..frontend.math import sigmoid as _sigmoid
from ..frontend.math import tanh as _tanh
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axis

__all__ = ["celu", "elu", "gelu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh",
           "leaky_relu", "logsigmoid", "mish", "prelu", "relu", "relu6", "rrelu", "selu",
           "sigmoid", "silu", "softplus", "softshrink", "softsign", "tanh", "tanhshrink",
           "threshold"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float(x: Tensor, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{op}: input must be a tegrad Tensor, got {type(x).__name__}")
    if not x.dtype.startswith("float"):
        raise ValueError(f"{op}: input must be a float tensor, got dtype {x.dtype}")
    return x


def _map(x: Tensor, op: str, f) -> Tensor:
    """``y[i] = f(x[i])`` for every index of ``x``."""
    _float(x, op)
    return compute(x.shape, lambda *i: f(x[i]), name=unique_name(op))


def _piecewise(v, pos, neg):
    """``pos`` where ``v > 0``, ``neg`` where ``v < 0``; at 0 (where both agree) their
    mean, so the derivative there is the average of the one-sided ones."""
    return if_then_else(v > 0, pos, if_then_else(v < 0, neg, 0.5 * (pos + neg)))


def _times(a: float, e):
    return e if a == 1.0 else a * e


def _softplus(z):
    """``log(1 + e^z)`` without overflow: ``max(z, 0) + log1p(e^-|z|)``."""
    return maximum(z, 0.0) + log1p(exp(-_abs(z)))


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)`` (derivative 1/2 at 0: tegrad's kink rule; torch takes 0)."""
    return _map(input, "relu", lambda v: maximum(v, 0.0))


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return _map(input, "relu6", lambda v: minimum(maximum(v, 0.0), 6.0))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` for ``x > 0``, ``negative_slope x`` otherwise (as ``max(x, s x)`` for ``s <= 1``,
    ``min(x, s x)`` for ``s > 1``)."""
    s = float(negative_slope)
    pick = maximum if s <= 1.0 else minimum
    return _map(input, "leaky_relu", lambda v: pick(v, s * v))


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Evaluation-mode ``rrelu``: ``leaky_relu`` with slope ``(lower + upper) / 2``.
    ``training=True`` (a random slope per element) is refused."""
    if training:
        raise ValueError("rrelu: training=True draws random slopes; tegrad supports only "
                         "training=False (slope (lower + upper) / 2)")
    return leaky_relu(input, (float(lower) + float(upper)) / 2.0)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` for ``x > 0``, ``alpha (e^x - 1)`` otherwise."""
    a = float(alpha)
    return _map(input, "elu", lambda v: _piecewise(v, v, _times(a, expm1(v))))


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with torch's constants ``alpha ~ 1.6733``, ``scale ~ 1.0507``."""
    return _map(input, "selu",
                lambda v: _SELU_SCALE * _piecewise(v, v, _SELU_ALPHA * expm1(v)))


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` for ``x > 0``, ``alpha (e^(x / alpha) - 1)`` otherwise."""
    a = float(alpha)
    if a == 0.0:
        raise ValueError("celu: alpha must be nonzero, got 0")
    return _map(input, "celu",
                lambda v: _piecewise(v, v, _times(a, expm1(v if a == 1.0 else v / a))))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x Phi(x) = x (1 + erf(x / sqrt 2)) / 2``; ``approximate="tanh"``:
    ``x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2``."""
    if approximate == "none":
        return _map(input, "gelu", lambda v: 0.5 * v * (1.0 + erf(v * math.sqrt(0.5))))
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return _map(input, "gelu",
                    lambda v: 0.5 * v * (1.0 + _tanh(c * (v + 0.044715 * v * v * v))))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x sigmoid(x)``."""
    return _map(input, "silu", lambda v: v * _sigmoid(v))


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x tanh(softplus(x))``."""
    return _map(input, "mish", lambda v: v * _tanh(_softplus(v)))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + e^(beta x)) / beta``; ``x`` where ``beta x > threshold`` (as torch)."""
    b, t = float(beta), float(threshold)
    return _map(input, "softplus",
                lambda v: if_then_else(v * b > t, v, _softplus(v * b) / b))


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return _map(input, "softsign", lambda v: v / (1.0 + _abs(v)))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """``min(max(x, min_val), max_val)``."""
    lo, hi = float(min_val), float(max_val)
    if hi < lo:
        raise ValueError(f"hardtanh: max_val must be >= min_val, got min_val={lo}, max_val={hi}")
    return _map(input, "hardtanh", lambda v: minimum(maximum(v, lo), hi))


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x + 3, 0), 6) / 6``."""
    return _map(input, "hardsigmoid", lambda v: minimum(maximum(v + 3.0, 0.0), 6.0) / 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x min(max(x + 3, 0), 6) / 6``."""
    return _map(input, "hardswish", lambda v: v * minimum(maximum(v + 3.0, 0.0), 6.0) / 6.0)


def sigmoid(input: Tensor) -> Tensor:
    """``1 / (1 + e^-x)``."""
    return _map(input, "sigmoid", _sigmoid)


def tanh(input: Tensor) -> Tensor:
    """``tanh(x)``."""
    return _map(input, "tanh", _tanh)


def logsigmoid(input: Tensor) -> Tensor:
    """``log sigmoid(x) = min(x, 0) - log1p(e^-|x|)``."""
    return _map(input, "logsigmoid", lambda v: minimum(v, 0.0) - log1p(exp(-_abs(v))))


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return _map(input, "tanhshrink", lambda v: v - _tanh(v))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - clamp(x, -lambd, lambd)``."""
    lam = float(lambd)
    if lam < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lam}")
    return _map(input, "softshrink", lambda v: v - minimum(maximum(v, -lam), lam))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, 0 elsewhere."""
    lam = float(lambd)
    return _map(input, "hardshrink", lambda v: if_then_else(_abs(v) > lam, v, 0.0))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, ``value`` elsewhere."""
    t, val = float(threshold), float(value)
    return _map(input, "threshold", lambda v: if_then_else(v > t, v, val))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` for ``x > 0``, ``w x`` otherwise; ``weight`` has 1 element or one per channel
    (axis 1; a tensor of fewer than 2 dims has one channel)."""
    x = _float(input, "prelu")
    if not isinstance(weight, Tensor) or weight.ndim > 1:
        raise ValueError("prelu: weight must be a 0-d or 1-d tensor, got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.size not in (1, channels):
        raise ValueError(f"prelu: weight must have 1 or {channels} (input channels) elements, "
                         f"got {weight.size}")

    def w(i):
        if weight.ndim == 0:
            return weight[()]
        return weight[0] if weight.size == 1 else weight[i[1]]

    return compute(x.shape, lambda *i: _piecewise(x[i], x[i], w(i) * x[i]),
                   name=unique_name("prelu"))


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a sigmoid(b)`` where ``a``, ``b`` are the first and second halves of ``dim``."""
    x = _float(input, "glu")
    if x.ndim == 0:
        raise ValueError("glu: input must have at least 1 dim, got a 0-d tensor")
    d = axis(dim, x.ndim)
    if x.shape[d] % 2:
        raise ValueError(f"glu: dim {dim} must have an even size, got {x.shape[d]}")
    half = x.shape[d] // 2
    shape = x.shape[:d] + (half,) + x.shape[d + 1:]

    def body(*i):
        b = i[:d] + (i[d] + half,) + i[d + 1:]
        return x[i] * _sigmoid(x[b])

    return compute(shape, body, name=unique_name("glu"))
