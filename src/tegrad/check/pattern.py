"""The dependency pattern, exactly, from the index maps: no differences, no tolerance.

For a compute ``T[i] = body(i)`` and a tensor ``U`` read in a value position of the body as
``U[f(i, k)]`` under conditions ``c(i, k)`` (the ``where`` of the enclosing reductions over
``k``, the ``if_then_else`` branches taken), ``T`` depends on ``U`` through the pairs

    R(T, U) = { (i, f(i, k)) : c(i, k) }.

Through a graph the relations compose: ``R(T, X) = U_U R(T, U) o R(U, X)``. Reads under
piecewise-constant functions (floor, sign, comparisons) and in conditions carry no
derivative and are left out; a condition that depends on float data cannot be decided
from the indices and is taken as true (the pattern is then structural, a superset).
Integer tensors used as indices (gathers) are evaluated on the values fed. A relation
that took such a condition as true is marked inexact: pairs it has that the other side
lacks are not evidence of a bug.

The forward's ``R(Y, X)`` is compared with the backward's ``R(dX, head)`` transposed: a
pair only in the forward is a missing dependency (the gradient of ``X[j]`` never reads
``head[i]`` although ``Y[i]`` depends on ``X[j]``), a pair only in the backward a
spurious one.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir.bounds import grid_env
from ..ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, unary
from ..ir.numpy_ops import BINARY
from ..ir.tensor import Compute, Placeholder, ScanOutput, Tensor
from ..ir.traverse import free_vars, topo_tensors, walk

PATTERN_LIMIT = 1 << 22  # grid points enumerated for one read
NO_DERIVATIVE = ("floor", "ceil", "round", "sign", "not", "stop_gradient")


class PatternUnavailable(Exception):
    """The pattern cannot be enumerated (too large, or an index the enumerator cannot
    evaluate); the message says why."""


Relation = tuple[np.ndarray, np.ndarray]  # (rows, cols) of flat indices, unique pairs


def dependency(output: Tensor, source: Placeholder, int_values) -> tuple[Relation, bool]:
    """``R(output, source)`` and whether it is exact (False when a condition on float
    data was taken as true); ``int_values(t)`` gives the array of an integer tensor."""
    rel: dict[Tensor, Relation] = {source: _identity(source.size)}
    exact = True
    for t in topo_tensors([output]):
        if isinstance(t, ScanOutput):
            raise PatternUnavailable(f"{t.name} is a scan (its pattern is not enumerated)")
        if t is source or not isinstance(t, Compute) or not dt.is_float(t.dtype):
            continue
        parts = []
        for read, conds, bound in _value_reads(t.body):
            inner = rel.get(read.tensor)
            if inner is None or len(inner[0]) == 0:
                continue
            exact = exact and all(_decidable(c) for c in conds)
            parts.append(_compose(_read_pairs(t, read, conds, bound, int_values), inner,
                                  read.tensor.size, source.size))
        rel[t] = _union(parts, source.size)
    return rel.get(output, (np.zeros(0, np.int64), np.zeros(0, np.int64))), exact


def _identity(n: int) -> Relation:
    a = np.arange(n, dtype=np.int64)
    return a, a.copy()


def _value_reads(body: Expr):
    """(read, conditions, bound axes) for every read of a float tensor in a value
    position of ``body``."""
    out = []

    def visit(e: Expr, conds: tuple, bound: tuple) -> None:
        if isinstance(e, Read):
            if dt.is_float(e.dtype):
                out.append((e, conds, bound))
        elif isinstance(e, Unary):
            if e.op not in NO_DERIVATIVE:
                visit(e.a, conds, bound)
        elif isinstance(e, Cast):
            if dt.is_float(e.a.dtype):
                visit(e.a, conds, bound)
        elif isinstance(e, Binary):
            if e.op in ("mul", "div"):  # a product is zero where a factor is
                visit(e.a, (*conds, *_nonzero(e.b)) if e.op == "mul" else conds, bound)
                visit(e.b, (*conds, *_nonzero(e.a)), bound)
            elif dt.is_float(e.dtype):
                visit(e.a, conds, bound)
                visit(e.b, conds, bound)
        elif isinstance(e, Select):
            visit(e.a, (*conds, e.cond), bound)
            visit(e.b, (*conds, unary("not", e.cond)), bound)
        elif isinstance(e, Reduce):
            if e.combiner.kind not in ("argmax", "argmin"):
                inner = conds if e.where is None else (*conds, e.where)
                visit(e.source, inner, (*bound, *e.axes))

    visit(body, (), ())
    return out


def _nonzero(e: Expr) -> tuple:
    """Conditions outside which ``e`` is structurally zero (a guarded read such as
    padding, ``if_then_else(c, x, 0)``, is zero where ``c`` fails)."""
    if isinstance(e, Const):
        return () if e.value else (Const(False, "bool"),)
    if isinstance(e, Cast):
        return _nonzero(e.a)
    if isinstance(e, Select):
        if isinstance(e.b, Const) and not e.b.value:
            return (e.cond, *_nonzero(e.a))
        if isinstance(e.a, Const) and not e.a.value:
            return (unary("not", e.cond), *_nonzero(e.b))
        return ()
    if isinstance(e, Binary) and e.op == "mul":
        return (*_nonzero(e.a), *_nonzero(e.b))
    if isinstance(e, Binary) and e.op == "div":
        return _nonzero(e.a)
    return ()


def _read_pairs(t: Compute, read: Read, conds, bound, int_values) -> Relation:
    used = set().union(*(free_vars(i) for i in read.indices))
    decidable = [c for c in conds if _decidable(c)]
    for c in decidable:
        used |= free_vars(c)
    variables = list(t.axes) + [v for v in bound if v in used]
    points = int(np.prod([v.extent for v in variables], dtype=np.int64))
    if points > PATTERN_LIMIT:
        raise PatternUnavailable(
            f"{t.name} reads {read.tensor.name} over {points} index points "
            f"(more than {PATTERN_LIMIT})"
        )
    env = grid_env(variables)
    shape = [v.extent for v in variables]
    holds = np.ones(shape, bool)
    for c in decidable:
        holds &= np.broadcast_to(_eval(c, env, int_values), shape)
    flat_in = np.zeros(shape, np.int64)
    for axis, index in enumerate(read.indices):
        size = read.tensor.shape[axis]
        value = np.broadcast_to(_eval(index, env, int_values), shape)
        holds &= (value >= 0) & (value < size)
        flat_in = flat_in * size + np.clip(value, 0, size - 1)
    flat_out = np.zeros(shape, np.int64)
    for axis, v in enumerate(t.axes):
        flat_out = flat_out * t.shape[axis] + env[v]
    flat_out = np.broadcast_to(flat_out, shape)
    return flat_out[holds], flat_in[holds]


def _decidable(c: Expr) -> bool:
    """Conditions on indices and integer data; float data makes a condition undecidable."""
    for x in walk(c):
        if isinstance(x, Reduce):
            return False
        if isinstance(x, Read) and not dt.is_int(x.dtype):
            return False
    return True


def _eval(e: Expr, env: dict, int_values) -> np.ndarray:
    if isinstance(e, Var):
        if e not in env:
            raise PatternUnavailable(f"index variable {e.name} is not enumerable here")
        return env[e]
    if isinstance(e, Const):
        return np.asarray(e.value)
    if isinstance(e, Cast):
        return _eval(e.a, env, int_values)
    if isinstance(e, Unary) and e.op in ("neg", "not", "abs"):
        a = _eval(e.a, env, int_values)
        return {"neg": np.negative, "not": np.logical_not, "abs": np.abs}[e.op](a)
    if isinstance(e, Select):
        return np.where(_eval(e.cond, env, int_values), _eval(e.a, env, int_values),
                        _eval(e.b, env, int_values))
    if isinstance(e, Binary) and e.op in BINARY:
        a, b = _eval(e.a, env, int_values), _eval(e.b, env, int_values)
        if e.op in ("floordiv", "floormod"):
            b = np.where(b == 0, 1, b)
        return BINARY[e.op](a, b)
    if isinstance(e, Read) and dt.is_int(e.dtype):
        data = int_values(e.tensor)
        idx = tuple(np.clip(_eval(i, env, int_values), 0, s - 1)
                    for i, s in zip(e.indices, e.tensor.shape, strict=True))
        return data[idx]
    raise PatternUnavailable(f"cannot enumerate the index expression {e!r}")


def _compose(outer: Relation, inner: Relation, middle: int, cols: int) -> Relation:
    """``{(a, c) : (a, b) in outer, (b, c) in inner}``."""
    order = np.argsort(inner[0], kind="stable")
    b_sorted, c_sorted = inner[0][order], inner[1][order]
    starts = np.searchsorted(b_sorted, np.arange(middle + 1))
    counts = starts[outer[1] + 1] - starts[outer[1]]
    rows = np.repeat(outer[0], counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    picked = c_sorted[np.repeat(starts[outer[1]], counts) + offsets]
    return _union([(rows, picked)], cols)


def _union(parts: list[Relation], cols: int) -> Relation:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = np.unique(np.concatenate([r * cols + c for r, c in parts]))
    return keys // cols, keys % cols


def compare(forward: Relation, backward: Relation, n_out: int, n_in: int):
    """(missing, spurious): boolean masks over input elements, and the pair counts.
    ``forward`` pairs are (output, input); ``backward`` pairs are (gradient element =
    input, head element = output). A side that is a superset (not exact) can show
    pairs that are not really there: the caller discounts them."""
    f = np.unique(forward[0] * n_in + forward[1])
    b = np.unique(backward[1] * n_in + backward[0])
    missing = np.setdiff1d(f, b, assume_unique=True)
    spurious = np.setdiff1d(b, f, assume_unique=True)
    miss_mask = np.zeros(n_in, bool)
    miss_mask[missing % n_in] = True
    spur_mask = np.zeros(n_in, bool)
    spur_mask[spurious % n_in] = True
    return miss_mask, spur_mask, len(missing), len(spurious), len(f)
