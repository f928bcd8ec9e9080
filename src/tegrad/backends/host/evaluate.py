"""The executable semantics of a compute: vectorized NumPy over index grids.

A compute ``T[i0..in] = body`` is evaluated with every index variable an ``arange``
broadcast along its own array axis. A reduction appends one array axis per reduce
variable, evaluates its source over the extended grid, and folds those trailing axes.
A sub-expression only spans the axes of the variables it uses, so a reduction that
depends on fewer variables than its context (the ``max`` inside a softmax) is computed
once per value of those variables, never once per output element. Structurally equal
sub-expressions are the same object (interning) and are evaluated once.

Reads clip their indices into range: the verifier proved that every index that can
leave its tensor is masked by a guard on its path, so a clipped value is never used.
Indices read from integer tensors are checked here, under the guards of their path.

Large grids are evaluated in chunks of the leading output axes so that no intermediate
exceeds ``EVALUATION_GRID_POINTS`` elements.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.affine import linearize
from ...ir.bounds import is_pure_index
from ...ir.expr import (
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    node_memo,
    split_conjunction,
)
from ...ir.numpy_ops import BINARY, UNARY
from ...ir.tensor import Compute
from ...ir.traverse import free_vars, walk

EVALUATION_GRID_POINTS = 1 << 23


REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def evaluate_compute(t: Compute, arrays: dict) -> np.ndarray:
    """Evaluate ``t`` given the arrays of every tensor it reads (keyed by tensor)."""
    out = np.empty(t.shape, dtype=t.dtype)
    if out.size == 0:
        return out
    for region in _chunks(t):
        env = {}
        n = len(t.axes)
        for k, (v, (lo, hi)) in enumerate(zip(t.axes, region, strict=True)):
            shape = [1] * n
            shape[k] = hi - lo
            env[v] = (np.arange(lo, hi).reshape(shape), k)
        ev = Evaluator(arrays, env, n, t.name)
        value = ev.go(t.body, n, ())
        out[tuple(slice(lo, hi) for lo, hi in region)] = value
    return out


def _chunks(t: Compute) -> list[list[tuple[int, int]]]:
    memo = node_memo(t.body)
    key = ("chunks", t.shape)
    if key not in memo:
        memo[key] = _plan_chunks(t)
    return memo[key]


def _plan_chunks(t: Compute) -> list[list[tuple[int, int]]]:
    inner = _reduction_width(t)
    full = [(0, s) for s in t.shape]
    if not t.shape:
        return [full]
    total = math.prod(t.shape) * inner
    if total <= EVALUATION_GRID_POINTS:
        return [full]
    regions: list[list[tuple[int, int]]] = [[]]
    per_point = inner
    for axis, size in enumerate(t.shape):
        rest = math.prod(t.shape[axis + 1 :]) * per_point
        if rest * size <= EVALUATION_GRID_POINTS:
            return [r + full[axis:] for r in regions]
        step = max(1, EVALUATION_GRID_POINTS // max(rest, 1))
        regions = [r + [(lo, min(lo + step, size))] for r in regions for lo in range(0, size, step)]
        if step > 1 or axis == len(t.shape) - 1:
            return [r + full[axis + 1 :] for r in regions]
    return regions


def _reduction_width(t: Compute) -> int:
    """The most reduction points any one output point spans in an intermediate array.

    A reduction's source is evaluated over the variables it uses, so its array has the
    extents of the reduce axes free in it (its own and enclosing ones it reads). A
    reduction nested in another but independent of the outer axes (a softmax's row max
    inside the row sum) is hoisted, so the extents do not multiply.
    """
    outputs = set(t.axes)
    best = 1
    for x in walk(t.body):
        if isinstance(x, Reduce):
            width = math.prod(v.extent for v in free_vars(x.source) if v not in outputs)
            best = max(best, width)
    return best


class Evaluator:
    """Evaluates expressions; every result has exactly ``depth`` array axes."""

    def __init__(self, arrays: dict, env: dict, depth: int, owner: str):
        self.arrays = arrays
        self.env = env  # Var -> (array, position)
        self.owner = owner
        self.memo: dict = {}

    def at_depth(self, value: np.ndarray, depth: int) -> np.ndarray:
        value = np.asarray(value)
        if value.ndim < depth:
            value = value.reshape(value.shape + (1,) * (depth - value.ndim))
        return value

    def go(self, e: Expr, depth: int, conds: tuple) -> np.ndarray:
        memo = node_memo(e)
        order = memo.get("free_sorted")
        if order is None:
            order = memo["free_sorted"] = tuple(sorted(free_vars(e), key=lambda v: v.uid))
        key = (e, depth, tuple(self.env[v][1] for v in order))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        out = self.at_depth(self.node(e, depth, conds), depth)
        self.memo[key] = out
        return out

    def node(self, e: Expr, depth: int, conds: tuple) -> np.ndarray:
        if isinstance(e, Var):
            return self.env[e][0]
        if isinstance(e, Const):
            return np.asarray(e.value, dtype=e.dtype)
        if isinstance(e, Read):
            return self.read(e, depth, conds)
        if isinstance(e, Unary):
            with np.errstate(all="ignore"):
                return UNARY[e.op](self.go(e.a, depth, conds)).astype(e.dtype, copy=False)
        if isinstance(e, Cast):
            with np.errstate(all="ignore"):
                return self.go(e.a, depth, conds).astype(e.dtype)
        if isinstance(e, Binary):
            # the right side of ``and`` counts only where the left holds, of ``or`` where it
            # does not: its gathers are checked there (a max's gradient tests ``0 <= t[k]
            # && ... && X[t[k]] == m``, its forward's guard before the tie's read)
            right = (conds + tuple(split_conjunction(e.a)) if e.op == "and" else
                     conds + (Unary("not", e.a, "bool"),) if e.op == "or" else conds)
            a, b = self.go(e.a, depth, conds), self.go(e.b, depth, right)
            with np.errstate(all="ignore"):
                return BINARY[e.op](a, b).astype(e.dtype, copy=False)
        if isinstance(e, Select):
            region = self.select_region(e, depth, conds)
            if region is not None:
                return region
            c = self.go(e.cond, depth, conds)
            a = self.go(e.a, depth, conds + tuple(split_conjunction(e.cond)))
            b = self.go(e.b, depth, conds + (Unary("not", e.cond, "bool"),))
            return np.where(c, a, b)
        if isinstance(e, Reduce):
            return self.reduce(e, depth, conds)
        raise TypeError(f"cannot evaluate {type(e).__name__}")

    def read(self, e: Read, depth: int, conds: tuple) -> np.ndarray:
        array = self.arrays[e.tensor]
        if not e.indices:
            return array
        view = self.sliced_read(e, array, depth)
        if view is not None:
            return view
        idx = []
        for axis, index in enumerate(e.indices):
            dim = array.shape[axis]
            values = self.go(index, depth, conds)
            if not is_pure_index(index):
                self.check_gather(e, axis, values, dim, depth, conds)
            idx.append(np.clip(values, 0, max(dim - 1, 0)))
        return array[tuple(idx)]

    def select_region(self, e: Select, depth: int, conds: tuple) -> np.ndarray | None:
        """``select(c, a, 0)`` where ``c`` holds on one contiguous range of a single
        variable: ``a`` evaluated on that range only (a fresh evaluator with the variable
        narrowed) and placed in zeros, instead of ``a`` everywhere and a mask."""
        if not (isinstance(e.b, Const) and e.b.value == 0):
            return None
        fv = free_vars(e.cond)
        if len(fv) != 1 or not is_pure_index(e.cond):
            return None
        (v,) = fv
        bound = self.env.get(v)
        if bound is None:
            return None
        values, position = bound
        holds = np.broadcast_to(self.go(e.cond, depth, conds).reshape(-1), (values.size,))
        where = np.flatnonzero(holds)
        if len(where) == 0:
            return np.zeros((1,) * depth, e.dtype)
        lo, hi = int(where[0]), int(where[-1]) + 1
        if hi - lo != len(where) or hi - lo == holds.size:
            return None  # not one range, or the whole range: the plain path is as good
        env = dict(self.env)
        env[v] = (values.reshape(-1)[lo:hi].reshape(
            [hi - lo if k == position else 1 for k in range(values.ndim)]), position)
        inner = Evaluator(self.arrays, env, depth, self.owner)
        part = inner.go(e.a, depth, conds + tuple(split_conjunction(e.cond)))
        shape = list(np.broadcast_shapes(part.shape, (1,) * depth))
        shape[position] = holds.size
        out = np.zeros(shape, np.result_type(part.dtype, e.dtype))
        index = [slice(None)] * depth
        index[position] = slice(lo, hi)
        out[tuple(index)] = part
        return out.astype(e.dtype, copy=False)

    def sliced_read(self, e: Read, array: np.ndarray, depth: int) -> np.ndarray | None:
        """A read whose indices are distinct variables plus constants, in bounds: a view
        of ``array`` (basic slicing) with its axes moved to the variables' positions, in
        place of a gather."""
        plan = node_memo(e).get("slices")
        if plan is None:
            plan = []
            for index in e.indices:
                coeffs, const = linearize(index)
                if len(coeffs) != 1:
                    plan = False
                    break
                (v, c), = coeffs.items()
                if c != 1 or not isinstance(v, Var):
                    plan = False
                    break
                plan.append((v, const))
            if plan and len({v for v, _ in plan}) != len(plan):
                plan = False
            node_memo(e)["slices"] = plan
        if plan is False:
            return None
        slices, positions = [], []
        for (v, const), dim in zip(plan, array.shape, strict=True):
            bound = self.env.get(v)
            if bound is None:
                return None
            values, position = bound
            lo, size = int(values.flat[0]) + const, values.size
            if lo < 0 or lo + size > dim:
                return None
            slices.append(slice(lo, lo + size))
            positions.append(position)
        view = array[tuple(slices)]
        kept = sorted(positions)
        if positions != kept:  # plain Python on these few axes: NumPy calls cost more here
            view = view.transpose(sorted(range(len(positions)), key=positions.__getitem__))
        if len(kept) == depth:
            return view
        missing = [a for a in range(depth) if a not in kept]
        return np.expand_dims(view, missing)

    def holds(self, conds: tuple, depth: int) -> np.ndarray:
        """Where every one of ``conds`` holds, each read under the ones before it (a
        condition that reads through ids is in bounds only under the bounds before it)."""
        out = np.ones((1,) * depth, dtype=bool)
        for k, c in enumerate(conds):
            out = out & self.go(c, depth, conds[:k])
        return out

    def check_gather(self, e: Read, axis: int, values, dim: int, depth: int, conds: tuple):
        bad = (values < 0) | (values >= dim)
        if not bad.any():
            return
        bad = bad & self.holds(conds, depth)
        if bad.any():
            where = tuple(np.argwhere(bad)[0])
            value = np.broadcast_to(values, bad.shape)[where]
            raise IndexError(
                f"{self.owner}: gather {e.tensor.name}[...] index {axis} got value {int(value)}, "
                f"outside [0, {dim}) (from {e.indices[axis]!r})"
            )

    def reduce(self, e: Reduce, depth: int, conds: tuple) -> np.ndarray:
        inner = depth + len(e.axes)
        saved = {a: self.env.get(a) for a in e.axes}
        for k, a in enumerate(e.axes):
            shape = [1] * inner
            shape[depth + k] = a.extent
            self.env[a] = (np.arange(a.lo, a.lo + a.extent).reshape(shape), depth + k)
        try:
            inner_conds = conds + (tuple(split_conjunction(e.where)) if e.where is not None else ())
            src = self.go(e.source, inner, inner_conds)
            mask = None if e.where is None else self.go(e.where, inner, conds)
            full = np.broadcast_shapes(
                src.shape,
                (1,) * depth + tuple(a.extent for a in e.axes),
                () if mask is None else mask.shape,
            )
            src = np.broadcast_to(src, full)
            mask = None if mask is None else np.broadcast_to(mask, full)
            return self.fold(e, src, mask, depth)
        finally:
            for a, old in saved.items():
                if old is None:
                    self.env.pop(a, None)
                else:
                    self.env[a] = old

    def fold(self, e: Reduce, src: np.ndarray, mask, depth: int) -> np.ndarray:
        kind = e.combiner.kind
        red_axes = tuple(range(depth, src.ndim))
        if kind in ("argmax", "argmin"):
            flat = src.reshape(src.shape[:depth] + (-1,))
            if mask is not None:
                fill = -np.inf if kind == "argmax" else np.inf
                flat = np.where(mask.reshape(flat.shape), flat, fill)
            pos = (np.argmax if kind == "argmax" else np.argmin)(flat, axis=-1)
            if len(e.axes) == 1:
                pos = pos + e.axes[0].lo
            return pos.astype(e.dtype)
        identity = np.asarray(e.combiner.identity_value(e.dtype), dtype=e.dtype)
        if mask is not None:
            src = np.where(mask, src, identity)
        if kind == "custom":
            return self.fold_custom(e, src, identity, depth)
        if src.size == 0:
            return np.full(src.shape[:depth], identity, dtype=e.dtype)
        return REDUCE[kind](src, axis=red_axes).astype(e.dtype, copy=False)

    def fold_custom(self, e: Reduce, src: np.ndarray, identity, depth: int) -> np.ndarray:
        comb = e.combiner
        flat = src.reshape(src.shape[:depth] + (-1,))
        if flat.shape[-1] == 0:
            return np.full(src.shape[:depth], identity, dtype=e.dtype)
        while flat.shape[-1] > 1:
            if flat.shape[-1] % 2:
                pad = np.broadcast_to(identity, flat.shape[:-1] + (1,))
                flat = np.concatenate([flat, pad], axis=-1)
            sub = Evaluator(
                self.arrays,
                {comb.lhs: (flat[..., 0::2], 0), comb.rhs: (flat[..., 1::2], 0)},
                0,
                self.owner,
            )
            flat = np.asarray(sub.node(comb.combine, 0, ()), dtype=e.dtype)
            flat = np.broadcast_to(flat, flat.shape)
        return flat[..., 0]
