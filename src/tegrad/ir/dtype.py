"""Element types: the names tegrad accepts, and how they combine.

A dtype is a plain string (``"float32"``) so that it prints, hashes and compares
for free. ``promote`` follows NumPy's rules for the five supported types, except that
Python scalars never widen a tensor expression (``x * 2.0`` keeps ``x``'s float32).
"""

from __future__ import annotations

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
DTYPES = (*FLOATS, *INTS, "bool")
INDEX = "int32"

_RANK = {"bool": 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}


def check(dtype: object) -> str:
    """Normalise a user dtype (a string or a NumPy dtype) or raise TypeError naming it."""
    name = str(getattr(dtype, "name", dtype))
    if name not in DTYPES:
        raise TypeError(f"unsupported dtype {dtype!r}; tegrad supports {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def promote(a: str, b: str) -> str:
    """The dtype of ``a op b`` for two tensor-expression operands."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if is_float(a) and is_int(b):
        return a
    if is_float(b) and is_int(a):
        return b
    return a if _RANK[a] > _RANK[b] else b
