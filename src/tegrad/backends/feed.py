"""What a call's arrays must be: each checked against its placeholder (shape, dtype),
the checks a program's ``run`` relies on. Shared by ``tg.build``'s callables, ``build_vjp``
and the graph functions of the bridges; the cuda target adds its own ``coerce`` for torch
tensors (``cuda/program.py``)."""

from __future__ import annotations

import numpy as np

from ..ir.tensor import Placeholder


def input_specs(ins: list) -> list:
    return [(p, np.dtype(p.dtype), p.shape) for p in ins]


def passes(a, dtype: np.dtype, shape: tuple) -> bool:
    """Whether ``a`` is an array of the placeholder's shape and (interned) dtype, which a
    call takes as it is: ``coerce_input``'s checks cost about 9 us an input, as much as a
    small kernel."""
    return type(a) is np.ndarray and a.dtype is dtype and a.shape == shape


def exact(expected: list, arrays: tuple) -> bool:
    """Whether every one of ``arrays`` ``passes``, one per placeholder."""
    return len(arrays) == len(expected) and all(
        passes(a, dtype, shape) for (_, dtype, shape), a in zip(expected, arrays, strict=True))


def checked_feed(expected: list, arrays: tuple, coerce=None) -> dict:
    """The feed of a call: each array checked against its placeholder (by ``coerce``,
    default ``coerce_input``)."""
    coerce = coerce or coerce_input
    if len(arrays) != len(expected):
        raise TypeError(f"expected {len(expected)} arrays "
                        f"({', '.join(p.name for p, _, _ in expected)}), got {len(arrays)}")
    feed = {}
    for (p, dtype, shape), a in zip(expected, arrays, strict=True):
        feed[p] = a if passes(a, dtype, shape) else coerce(p, a)
    return feed


def coerce_input(p: Placeholder, a) -> np.ndarray:
    arr = np.asarray(a)
    if arr.shape != p.shape:
        raise ValueError(f"placeholder {p.name}: expected shape {p.shape}, received {arr.shape}")
    if arr.dtype.name != p.dtype:
        same_kind = np.can_cast(arr.dtype, p.dtype, casting="same_kind")
        if not same_kind or (arr.dtype.kind != np.dtype(p.dtype).kind):
            raise TypeError(
                f"placeholder {p.name}: expected dtype {p.dtype}, received {arr.dtype.name}"
            )
        arr = arr.astype(p.dtype)
    return arr
