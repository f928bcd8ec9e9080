"""Normalizing ``torch.nn.functional``-style arguments: an int or a tuple per spatial axis,
``reduction=`` modes, negative ``dim``."""

from __future__ import annotations

from collections.abc import Sequence


def ntuple(value, n: int, what: str) -> tuple[int, ...]:
    """``3 -> (3, 3)``; a sequence must have ``n`` entries."""
    if isinstance(value, int):
        return (value,) * n
    values = tuple(value)
    if len(values) != n or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{what} must be an int or {n} ints, got {value!r}")
    return values


def axis(dim: int, ndim: int, what: str = "dim") -> int:
    """A ``dim`` in ``[-ndim, ndim)`` as a non-negative axis."""
    if not -ndim <= dim < max(ndim, 1):
        raise ValueError(f"{what}={dim} is out of range for a tensor of {ndim} dims")
    return dim % max(ndim, 1)


def axes(dims: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """``None`` -> every axis; an int or a sequence -> sorted non-negative axes."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    found = sorted({axis(d, ndim) for d in dims})
    if len(found) != len(tuple(dims)):
        raise ValueError(f"dims {dims!r} name an axis twice")
    return tuple(found)
