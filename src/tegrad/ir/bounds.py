"""What values an integer expression can take: intervals, then exact enumeration.

``interval(e, ranges)`` is a sound over-approximation (inclusive bounds, ``None`` for
unknown, e.g. a value read from an index tensor). ``grid_values`` evaluates integer and
boolean expressions over every point of the variables' ranges with NumPy, which the
bounds check uses when intervals are too coarse and the domain is small.
"""

from __future__ import annotations

import numpy as np

from .expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, node_memo
from .numpy_ops import BINARY
from .traverse import walk

Interval = tuple[int, int] | None
ENUMERATION_LIMIT = 1 << 21


def var_range(v: Var, ranges: dict[Var, tuple[int, int]] | None = None) -> Interval:
    if ranges and v in ranges:
        return ranges[v]
    if v.extent is None:
        return None
    return (v.lo, v.lo + v.extent - 1)


def interval(e: Expr, ranges: dict[Var, tuple[int, int]] | None = None) -> Interval:
    if isinstance(e, Const):
        v = int(e.value)
        return (v, v)
    if isinstance(e, Var):
        return var_range(e, ranges)
    if isinstance(e, Cast):
        return interval(e.a, ranges)
    if isinstance(e, Unary) and e.op == "neg":
        a = interval(e.a, ranges)
        return None if a is None else (-a[1], -a[0])
    if isinstance(e, Select):
        a, b = interval(e.a, ranges), interval(e.b, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if isinstance(e, Binary):
        return _binary(e, ranges)
    return None


def _binary(e: Binary, ranges) -> Interval:
    a, b = interval(e.a, ranges), interval(e.b, ranges)
    if e.op in ("lt", "le", "eq", "ne", "and", "or"):
        return (0, 1)
    if a is None or b is None:
        if e.op == "floormod" and b is not None and b[0] > 0:
            return (0, b[1] - 1)
        return None
    if e.op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if e.op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if e.op == "mul":
        corners = [x * y for x in a for y in b]
        return (min(corners), max(corners))
    if e.op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if e.op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if e.op == "floordiv" and b[0] == b[1] and b[0] > 0:
        return (a[0] // b[0], a[1] // b[0])
    if e.op == "floormod" and b[0] == b[1] and b[0] > 0:
        k = b[0]
        if a[0] // k == a[1] // k:
            return (a[0] % k, a[1] % k)
        return (0, k - 1)
    return None


def form_interval(coeffs: dict, k: int) -> Interval:
    """Interval of the affine form ``k + sum c * atom`` (see ``ir/affine.py``)."""
    lo = hi = k
    for atom, c in coeffs.items():
        iv = interval(atom)
        if iv is None:
            return None
        a, b = c * iv[0], c * iv[1]
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def is_pure_index(e: Expr) -> bool:
    """True when ``e`` depends only on variables (no reads, no reductions, no floats).
    Memoised on the node: executors ask it on every run."""
    memo = node_memo(e)
    found = memo.get("pure_index")
    if found is None:
        found = memo["pure_index"] = all(not isinstance(x, (Read, Reduce)) for x in walk(e))
    return found


def grid_env(variables: list[Var]) -> dict[Var, np.ndarray]:
    """Each variable's values as an array along its own axis of the grid (broadcastable)."""
    n = len(variables)
    env = {}
    for k, v in enumerate(variables):
        shape = [1] * n
        shape[k] = v.extent
        env[v] = np.arange(v.lo, v.lo + v.extent, dtype=np.int64).reshape(shape)
    return env


def grid_values(e: Expr, variables: list[Var]) -> np.ndarray:
    """``e`` at every point of ``variables``' ranges (one array axis per variable)."""
    return np.broadcast_to(_eval(e, grid_env(variables), {}), [v.extent for v in variables])


def _eval(e: Expr, env: dict, memo: dict) -> np.ndarray:
    hit = memo.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Var):
        out = env[e]
    elif isinstance(e, Const):
        out = np.asarray(e.value)
    elif isinstance(e, Cast):
        out = _eval(e.a, env, memo)
    elif isinstance(e, Unary) and e.op == "neg":
        out = -_eval(e.a, env, memo)
    elif isinstance(e, Unary) and e.op == "not":
        out = np.logical_not(_eval(e.a, env, memo))
    elif isinstance(e, Select):
        out = np.where(_eval(e.cond, env, memo), _eval(e.a, env, memo), _eval(e.b, env, memo))
    elif isinstance(e, Binary) and e.op in BINARY:
        a, b = _eval(e.a, env, memo), _eval(e.b, env, memo)
        if e.op in ("floordiv", "floormod"):
            b = np.where(b == 0, 1, b)
        out = BINARY[e.op](a, b)
    else:
        raise ValueError(f"not a pure index expression: {e!r}")
    memo[e] = out
    return out
