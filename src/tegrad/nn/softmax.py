"""Softmax and friends along one axis, each one stable compute (the max subtracted):

    softmax(x)_j     = e^(x_j - m) (1 / sum_k e^(x_k - m)),   m = max_k x_k
    log_softmax(x)_j = x_j - m - log sum_k e^(x_k - m)
    logsumexp(x)     = m + log sum_k e^(x_k - m)

The row max ``m`` and the row sum are computes of their own (one value per row), as
TVM's topi writes softmax. Every formula is invariant to the shift ``m`` (its derivative
is exactly zero), so ``m`` is held constant with ``stop_gradient``: the backward does not
differentiate the max. A slice that is all ``-inf`` shifts by 0 instead, so
``logsumexp`` gives ``-inf`` there, as torch does. ``dim`` is required: torch's implicit choice when
``dim=None`` is deprecated, so tegrad refuses it rather than guess.
"""

from __future__ import annotations

from ..frontend.math import cast, exp, if_then_else, log, stop_gradient
from ..frontend.reduce import max as tmax
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axes, axis

__all__ = ["log_softmax", "logsumexp", "softmax", "softmin"]


def _input(x: Tensor, op: str, dtype) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{op}: input must be a tegrad Tensor, got {type(x).__name__}")
    if dtype is not None:
        x = cast(x, str(dtype).removeprefix("torch."))
    if not x.dtype.startswith("float"):
        raise ValueError(f"{op}: input must be a float tensor, got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dim, got a 0-d tensor")
    return x


def _signed(v, negate: bool):
    return -v if negate else v


def _shift(row_max):
    """The stabilizing shift: the row max held constant (0 where the row is all -inf)."""
    finite = if_then_else(row_max > float("-inf"), row_max, 0.0)
    return stop_gradient(finite)


def _along(x: Tensor, dim, op: str, dtype, kind: str, negate: bool = False) -> Tensor:
    if dim is None:
        raise ValueError(f"{op}: dim is required (torch's implicit dim=None is deprecated), "
                         "got None")
    x = _input(x, op, dtype)
    d = axis(dim, x.ndim)
    name = unique_name(op)
    # the row max and the row sum are computes of their own: nested in the element's
    # expression, the NumPy backend's chunk planner multiplies the nested extents and cuts
    # the grid into tiny chunks (a one-compute 1024x1024 softmax took 40 s)
    rows = x.shape[:d] + x.shape[d + 1:]
    k, k2 = reduce_axis(x.shape[d], name="k"), reduce_axis(x.shape[d], name="k2")

    def at(r, j):  # (-)x at row r (axis d dropped), position j along d
        return _signed(x[r[:d] + (j,) + r[d:]], negate)

    m = compute(rows, lambda *r: _shift(tmax(at(r, k), axis=k)), name=f"{name}.max")
    total = compute(rows, lambda *r: tsum(exp(at(r, k2) - m[r]), axis=k2), name=f"{name}.sum")

    def body(*i):
        r = i[:d] + i[d + 1:]
        shifted = at(r, i[d]) - m[r]
        if kind == "softmax":  # times the reciprocal, as torch: one division per row
            return exp(shifted) * (1.0 / total[r])
        return shifted - log(total[r])

    return compute(x.shape, body, name=name)


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    """``e^(x_j - m) / sum_k e^(x_k - m)`` along ``dim`` (required; ``dtype`` casts the
    input first, as a string like ``"float64"`` or a torch dtype)."""
    return _along(input, dim, "softmax", dtype, "softmax")


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype=None) -> Tensor:
    """``x_j - m - log sum_k e^(x_k - m)`` along ``dim`` (required)."""
    return _along(input, dim, "log_softmax", dtype, "log_softmax")


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    """``softmax(-x)`` along ``dim`` (required)."""
    return _along(input, dim, "softmin", dtype, "softmax", negate=True)


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """``torch.logsumexp``: ``m + log sum e^(x - m)`` over ``dim`` (an int or a tuple).
    A slice that is all ``-inf`` gives ``-inf``, as torch."""
    x = _input(input, "logsumexp", None)
    dims = axes(dim, x.ndim)
    if not dims:
        raise ValueError(f"logsumexp: dim must name at least one axis, got {dim!r}")
    name = unique_name("logsumexp")
    red = [reduce_axis(x.shape[a], name=f"k{a}") for a in dims]
    red2 = [reduce_axis(x.shape[a], name=f"j{a}") for a in dims]
    kept = [a for a in range(x.ndim) if a not in dims]
    shape = tuple(1 if a in dims else x.shape[a] for a in range(x.ndim)) if keepdim \
        else tuple(x.shape[a] for a in kept)

    def at(o, rs):  # x at output index o, the reduced axes at rs
        index, r, out = [], iter(rs), iter(o if not keepdim else [o[a] for a in kept])
        for a in range(x.ndim):
            index.append(next(r) if a in dims else next(out))
        return x[tuple(index)]

    m = compute(shape, lambda *o: _shift(tmax(at(o, red), axis=red)), name=f"{name}.max")

    def body(*o):
        return m[o] + log(tsum(exp(at(o, red2) - m[o]), axis=red2))

    return compute(shape, body, name=name)
