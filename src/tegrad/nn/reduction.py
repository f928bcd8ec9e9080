"""Reductions over chosen dims, with torch's ``dim`` / ``keepdim`` conventions:
``sum``, ``mean``, ``prod``, ``max``, ``min``, ``amax``, ``amin``, ``var``, ``std``,
``norm``, ``argmax``, ``argmin``, ``count_nonzero``.

One reduction over every reduced dim at once (``tg.sum(x[i, k0, k1], [k0, k1])``); the
kept dims index the output, and ``keepdim=True`` keeps a size-1 axis read as nothing.
``dim=None`` (and ``dim=()``, as in ``torch.amax``) reduces every dim. Ties of max/min
share the gradient evenly (tegrad's rule; torch gives it to one element). The names
shadow Python builtins only inside ``tg.nn``.
"""

from __future__ import annotations

import math

from ..frontend.math import abs as tabs
from ..frontend.math import cast, maximum, minimum, not_equal, power, sqrt
from ..frontend.reduce import argmax as reduce_argmax
from ..frontend.reduce import argmin as reduce_argmin
from ..frontend.reduce import max as reduce_max
from ..frontend.reduce import min as reduce_min
from ..frontend.reduce import prod as reduce_prod
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as reduce_sum
from ..ir import dtype as dt
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axes, axis

__all__ = ["amax", "amin", "argmax", "argmin", "count_nonzero", "max", "mean", "min",
           "norm", "prod", "std", "sum", "var"]

_REDUCERS = {"sum": reduce_sum, "prod": reduce_prod, "max": reduce_max, "min": reduce_min,
             "argmax": reduce_argmax, "argmin": reduce_argmin}


def _dims(dim, ndim: int) -> tuple[int, ...]:
    """Reduced axes: ``None`` or ``()`` -> all; an int or a sequence -> sorted axes."""
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return tuple(range(ndim))
    if isinstance(dim, bool) or not isinstance(dim, (int, tuple, list)):
        raise ValueError(f"dim must be an int, a tuple of ints or None, got {dim!r}")
    return axes(dim, ndim)


def _single_dim(dim, ndim: int, what: str) -> int | None:
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ValueError(f"{what}: dim must be an int or None, got {dim!r}"
                         + (" (use amax/amin for several dims)" if what in ("max", "min")
                            else ""))
    return axis(dim, ndim)


def _reduce(x: Tensor, dims: tuple[int, ...], keepdim: bool, fold, name: str) -> Tensor:
    """``out[kept] = fold(lambda: x[kept, k...], [k...])``; ``fold(read, ks)`` builds the
    expression (``ks`` empty for a 0-d input: then ``read()`` is the one element)."""
    ks = {d: reduce_axis(x.shape[d], name=f"k{d}") for d in dims}
    shape = tuple(1 if d in ks else x.shape[d] for d in range(x.ndim) if keepdim or d not in ks)

    def body(*idx):
        out = iter(idx)
        index = []
        for d in range(x.ndim):
            if d in ks:
                if keepdim:
                    next(out)
                index.append(ks[d])
            else:
                index.append(next(out))
        return fold(lambda: x[tuple(index)], list(ks.values()))

    return compute(shape, body, name=unique_name(name))


def _simple(kind: str):
    def fold(read, ks):
        return _REDUCERS[kind](read(), axis=ks) if ks else read()
    return fold


def _count(x: Tensor, dims) -> int:
    return math.prod(x.shape[d] for d in dims)


def _as_dtype(x: Tensor, dtype, integer_to: str | None) -> Tensor:
    """Cast to ``dtype`` (a string, NumPy or torch dtype); integers and bools widen to
    ``integer_to`` when no dtype is given (torch's sum/prod give int64)."""
    if dtype is not None:
        name = dt.check(str(getattr(dtype, "name", dtype)).removeprefix("torch."))
    elif integer_to is not None and not dt.is_float(x.dtype):
        name = integer_to
    else:
        return x
    return x if name == x.dtype else cast(x, name)


def sum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A001, A002
    """``torch.sum``: ``sum_{k in dim} x[..., k, ...]``."""
    x = _as_dtype(input, dtype, "int64")
    return _reduce(x, _dims(dim, x.ndim), keepdim, _simple("sum"), "sum")


def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """``torch.mean``: ``sum_{k in dim} x / N`` (float inputs, or a float ``dtype``)."""
    x = _as_dtype(input, dtype, None)
    if not dt.is_float(x.dtype):
        raise ValueError(f"mean: input must be floating point (or pass a float dtype), "
                         f"got {x.dtype}")
    dims = _dims(dim, x.ndim)
    scale = 1.0 / _count(x, dims) if _count(x, dims) else math.nan

    def fold(read, ks):
        return (reduce_sum(read(), axis=ks) if ks else read()) * scale

    return _reduce(x, dims, keepdim, fold, "mean")


def prod(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """``torch.prod``: ``prod_{k} x[..., k, ...]`` over one ``dim`` (or all)."""
    x = _as_dtype(input, dtype, "int64")
    d = _single_dim(dim, x.ndim, "prod")
    return _reduce(x, _dims(d, x.ndim), keepdim if d is not None else False,
                   _simple("prod"), "prod")


def _extreme(kind: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    if isinstance(dim, Tensor):  # torch.max(input, other): elementwise
        return (maximum if kind == "max" else minimum)(x, dim)
    d = _single_dim(dim, x.ndim, kind)
    return _reduce(x, _dims(d, x.ndim), keepdim if d is not None else False,
                   _simple(kind), kind)


def max(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """``torch.max``: ``max_k x`` over one ``dim`` (or all); values only, the indices of
    torch's ``(values, indices)`` come from ``argmax``. A tensor ``dim`` is ``other``
    (elementwise maximum)."""
    return _extreme("max", input, dim, keepdim)


def min(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """``torch.min``: ``min_k x`` over one ``dim`` (or all); values only (indices:
    ``argmin``). A tensor ``dim`` is ``other`` (elementwise minimum)."""
    return _extreme("min", input, dim, keepdim)


def amax(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:  # noqa: A002
    """``torch.amax``: ``max`` over several dims (``dim=()``: all)."""
    return _reduce(input, _dims(dim, input.ndim), keepdim, _simple("max"), "amax")


def amin(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:  # noqa: A002
    """``torch.amin``: ``min`` over several dims (``dim=()``: all)."""
    return _reduce(input, _dims(dim, input.ndim), keepdim, _simple("min"), "amin")


def _correction(dim, unbiased, correction) -> tuple[object, float]:
    """torch's overloads: ``var(x, unbiased)``, ``var(x, dim, unbiased, keepdim)``,
    ``var(x, dim, *, correction, keepdim)``."""
    if isinstance(dim, bool):  # var(x, True): the old (input, unbiased) overload
        if unbiased is not None:
            raise ValueError("var/std: unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ValueError("var/std: pass unbiased= or correction=, not both")
    if correction is None:
        correction = 1 if unbiased is None else int(bool(unbiased))
    return dim, float(correction)


def _variance(x: Tensor, dim, unbiased, keepdim: bool, correction, root: bool, what: str
              ) -> Tensor:
    if not dt.is_float(x.dtype):
        raise ValueError(f"{what}: input must be floating point, got {x.dtype}")
    dim, c = _correction(dim, unbiased, correction)
    dims = _dims(dim, x.ndim)
    n = _count(x, dims)
    name = unique_name(what)
    centre = _reduce(x, dims, True, lambda read, ks: (reduce_sum(read(), axis=ks)
                                                       if ks else read()) * (1.0 / n),
                     f"{name}.mean")
    # x - mean over the reduced dims (mean broadcast back), squared, summed, / (N - c)
    factor = 1.0 / (n - c) if n - c > 0 else math.inf

    def deviation(*idx):
        return x[idx] - centre[tuple(0 if d in dims else i for d, i in enumerate(idx))]

    dev = compute(x.shape, deviation, name=f"{name}.dev")

    def fold(read, ks):
        v = read()
        total = reduce_sum(v * v, axis=ks) if ks else v * v
        return sqrt(total * factor) if root else total * factor

    return _reduce(dev, dims, keepdim, fold, name)


def var(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *,  # noqa: A002
        correction=None) -> Tensor:
    """``torch.var``: ``sum_k (x - mean)^2 / max(N - correction, 0)``, ``correction=1``
    by default (``unbiased=False`` means 0); two passes (mean first), for stability."""
    return _variance(input, dim, unbiased, keepdim, correction, False, "var")


def std(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *,  # noqa: A002
        correction=None) -> Tensor:
    """``torch.std``: ``sqrt(var(x, dim, correction))``."""
    return _variance(input, dim, unbiased, keepdim, correction, True, "std")


def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, out=None,  # noqa: A002
         dtype=None) -> Tensor:
    """``torch.norm`` (vector norms over ``dim``): ``"fro"``/2 ``sqrt(sum x^2)``, 1
    ``sum |x|``, ``inf``/``-inf`` ``max``/``min |x|``, 0 the count of nonzeros, other p
    ``(sum |x|^p)^(1/p)``. ``"nuc"`` (a matrix norm) and ``out=`` are refused."""
    if out is not None:
        raise ValueError("norm: out= is not supported (tegrad returns a new tensor)")
    x = _as_dtype(input, dtype, None)
    if not dt.is_float(x.dtype):
        raise ValueError(f"norm: input must be floating point, got {x.dtype}")
    if isinstance(dim, int) and not isinstance(dim, bool):
        dim = (dim,)
    dims = _dims(dim, x.ndim)
    if isinstance(p, str):
        if p != "fro":
            raise ValueError(f"norm: p={p!r} is not supported (vector norms and 'fro' only)")
        if dim is not None and len(dims) > 2:
            raise ValueError(f"norm: 'fro' takes at most 2 dims, got dim={dim!r}")
        p = 2.0
    if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p):
        raise ValueError(f"norm: p must be a number or 'fro', got {p!r}")
    p = float(p)

    def fold(read, ks):
        def red(kind, e):
            return _REDUCERS[kind](e, axis=ks) if ks else e

        v = read()
        if p == 2.0:
            return sqrt(red("sum", v * v))
        if p == 1.0:
            return red("sum", tabs(v))
        if p == math.inf:
            return red("max", tabs(v))
        if p == -math.inf:
            return red("min", tabs(v))
        if p == 0.0:
            return red("sum", cast(not_equal(v, 0.0), x.dtype))
        return power(red("sum", power(tabs(v), p)), 1.0 / p)

    return _reduce(x, dims, keepdim, fold, "norm")


def _arg(kind: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    d = _single_dim(dim, x.ndim, kind)
    dims = _dims(d, x.ndim)

    def fold(read, ks):  # a flat row-major index over ks (all dims when dim=None)
        return cast(_REDUCERS[kind](read(), axis=ks), "int64") if ks else cast(0, "int64")

    return _reduce(x, dims, keepdim, fold, kind)


def argmax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """``torch.argmax``: the first index of the maximum along ``dim`` (flat row-major
    over all dims when ``dim=None``), int64; ties give the first index, as torch."""
    return _arg("argmax", input, dim, keepdim)


def argmin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """``torch.argmin``: the first index of the minimum (see ``argmax``), int64."""
    return _arg("argmin", input, dim, keepdim)


def count_nonzero(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """``torch.count_nonzero``: ``sum_k [x != 0]`` over ``dim`` (all when None), int64."""
    def fold(read, ks):
        hit = cast(not_equal(read(), 0), "int64")
        return reduce_sum(hit, axis=ks) if ks else hit

    return _reduce(input, _dims(dim, input.ndim), False, fold, "count_nonzero")
