"""Op counting: the work a set of computes does, from their expressions alone.

``count_ops(outputs)`` walks every ``Compute`` the outputs depend on (placeholders are
free) and returns an ``OpCount``. It is the yardstick for "the generated backward costs
what the hand-written one costs": compare ``count_ops(generated)`` with
``count_ops(hand_written)`` field by field.

Domains. A sub-expression ``e`` inside compute ``T`` is evaluated once per point of its
*free* variables ``fv(e)`` (the executor hoists: the ``max_k X[i, k]`` of a one-compute
softmax ``T[i, j]`` spans ``(i, k)``, not ``(i, j, k)``), restricted by the guards on its
path whose variables it binds:

    points(e) = #{ p in prod_{v in fv(e)} [v.lo, v.lo + v.extent) :
                   g(p) for every guard g on the path with fv(g) ⊆ fv(e) }

Guards are the conjuncts of enclosing reduction ``where`` clauses and of enclosing
``if_then_else`` conditions (``not cond`` for the else branch): a compiled kernel only
evaluates the taken branch and the kept reduction points. A guard that also needs
variables ``e`` does not use (``i == j0`` over a product of ``(i, j, k)`` in a scatter)
does not shrink ``e``: the hoisted product is computed once and reused.

A reduction ``R = comb_{a in axes} src where W`` has the domain ``D = fv(R) ∪ axes``:

    reduction_points(R) = #{ p in D : W(p) and every applicable outer guard }
    flops(R)            = reduction_points(R) * cost(comb)        (1; custom: its ops)
    macs(R)             = reduction_points(R) restricted by the select guards above the
                          product, if comb is sum and src contains a product of two
                          non-constant factors (else 0)

Other counts:
  flops          one per point of every Unary/Binary node except pure index arithmetic
                 (integer/bool from variables and constants: addresses and masks) and
                 anything inside a read's indices (address computation, gathers too).
                 Comparisons on data (``x > 0`` of a relu select) count; casts are free.
  bytes_read     per compute and per tensor read: min(size, sum over its reads of
                 points(read)) * itemsize (an estimate of the distinct elements touched).
  bytes_written  per compute: size * itemsize. Every compute counts as materialized.

Counting points exactly. The guards are split into conjuncts and their variables into
connected components (variables linked by a shared conjunct); the count is the product
over components, times the extents of unguarded variables. A component is counted
  1. by enumeration (``grid_values``) when it has at most ``ENUMERATION_LIMIT`` points;
  2. else by eliminating an equality ``v == affine(others)`` with coefficient ±1 (scatter
     forms: ``i == j0``), which adds ``v.lo <= affine <= v.hi`` and recurses;
  3. else by sweeping one variable ``v`` whose conjuncts are affine ``<, <=, ==`` in it:
     enumerate the others, intersect v's bounds per point (``n(n+1)/2`` for a causal mask
     of any size);
  4. else by interval narrowing of each variable's range (an upper bound).
Conjuncts that read tensors are assumed true (an upper bound); they are rare in guards.

Worked example: conv2d, stride 1, padding p, written with a guard,

    Y[n,k,h,w] = sum_{c,r,s} X[n,c,h+r-p,w+s-p] * W[k,c,r,s]
                 where 0 <= h+r-p < H and 0 <= w+s-p < W

    D = {n,k,h,w,c,r,s}; components {h,r} and {w,s}; n, k, c unguarded:
    macs = N*K*C * #{(h,r): 0 <= h+r-p < H} * #{(w,s): 0 <= w+s-p < W}

For N=8, C=K=64, 56x56, 3x3, p=1: #{(h,r)} = 56*3 - 2 = 166, so
macs = 8*64*64*166*166 = 902,955,008, against 924,844,032 for N*K*Hout*Wout*C*R*S: the
padded points are not work. Each component is enumerated over 168 points only.

Known limits: a product whose two branches of a select are both products counts the
larger branch once per point; a nested reduction guarded by an outer ``where`` over
variables it does not bind is counted over its own domain. Padding written as a select
*factor* (``select(inside, X[..], 0) * W[..]``) is evaluated, so it counts: only a
``where`` or a select *above* the product removes padded points. A square
``(x - y) * (x - y)`` under a sum is a MAC by the definition above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.affine import build, linearize
from ..ir.bounds import grid_values, interval, is_pure_index
from ..ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, unary
from ..ir.tensor import Compute, Tensor
from ..ir.traverse import children, free_vars, substitute, topo_tensors, walk
from ..ir.verify import split_conjunction

ENUMERATION_LIMIT = 1 << 22


@dataclass(frozen=True)
class ComputeCost:
    """The counts of one compute. ``reads`` holds (tensor name, elements counted)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    macs: int
    flops: int
    reduction_points: int
    bytes_read: int
    bytes_written: int
    reads: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return (f"{self.name} {self.shape} {self.dtype}: {self.macs:,} MAC, {self.flops:,} FLOP, "
                f"{self.reduction_points:,} reduction points, read {self.bytes_read:,} B, "
                f"wrote {self.bytes_written:,} B")


@dataclass(frozen=True)
class OpCount:
    """Totals over computes, with the per-compute breakdown in ``per_compute``."""

    macs: int = 0
    flops: int = 0
    reduction_points: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    per_compute: tuple[ComputeCost, ...] = ()

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def __add__(self, other: OpCount) -> OpCount:
        if not isinstance(other, OpCount):
            return NotImplemented
        return OpCount(self.macs + other.macs, self.flops + other.flops,
                       self.reduction_points + other.reduction_points,
                       self.bytes_read + other.bytes_read,
                       self.bytes_written + other.bytes_written,
                       self.per_compute + other.per_compute)

    def __radd__(self, other: object) -> OpCount:
        if other == 0:  # sum([...]) starts from 0
            return self
        return NotImplemented

    def __str__(self) -> str:
        head = (f"OpCount: {self.macs:,} MAC, {self.flops:,} FLOP, "
                f"{self.reduction_points:,} reduction points, read {self.bytes_read:,} B, "
                f"wrote {self.bytes_written:,} B")
        return "\n".join([head, *(f"  {c}" for c in self.per_compute)])


def count_ops(outputs: Tensor | Sequence[Tensor], given: Iterable[Tensor] = ()) -> OpCount:
    """The work of every compute ``outputs`` depend on (see the module docstring).

    Tensors in ``given`` (and what only they depend on) count as already computed, like
    placeholders: ``count_ops(grads, given=[forward])`` is the backward's own work.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    done = set(topo_tensors(list(given)))
    points = PointCounter()
    total = OpCount()
    for t in topo_tensors(outs):
        if isinstance(t, Compute) and t not in done:
            total = total + OpCount(*_count_compute(t, points))
    return total


def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


# ---------------------------------------------------------------------------
# points of a guarded domain


class PointCounter:
    """``counter(variables, conjuncts)``: points of the variables' box where all hold."""

    def __init__(self) -> None:
        self.memo: dict[tuple[frozenset, frozenset], int] = {}

    def __call__(self, variables: Iterable[Var], conds: Iterable[Expr] = ()) -> int:
        key = (frozenset(variables), frozenset(conds))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._count(*key)
        return hit

    def _count(self, variables: frozenset[Var], conds: frozenset[Expr]) -> int:
        parent = {v: v for v in variables}

        def find(v: Var) -> Var:
            while parent[v] is not v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        usable = []
        for c in conds:
            fv = free_vars(c)
            if not fv <= variables or not is_pure_index(c):
                continue  # reads tensors (or is out of scope): assumed true
            if not fv:
                if not _evaluate(c, []).all():
                    return 0
                continue
            first, *rest = fv
            for v in rest:
                parent[find(v)] = find(first)
            usable.append(c)
        groups: dict[Var, tuple[list[Var], list[Expr]]] = {}
        for v in sorted(variables, key=lambda v: v.uid):
            groups.setdefault(find(v), ([], []))[0].append(v)
        for c in usable:
            groups[find(next(iter(free_vars(c))))][1].append(c)
        total = 1
        for vs, cs in groups.values():
            total *= self._component(vs, cs) if cs else _box(vs)
            if total == 0:
                return 0
        return total

    def _component(self, vs: list[Var], cs: list[Expr]) -> int:
        if _box(vs) <= ENUMERATION_LIMIT:
            mask = np.ones([v.extent for v in vs], dtype=bool)
            for c in cs:
                mask &= _evaluate(c, vs)
            return int(np.count_nonzero(mask))
        for c in cs:
            solved = _solve_unit_equality(c, vs)
            if solved is not None:
                v, value = solved
                rest = [substitute(d, {v: value}) for d in cs if d is not c]
                lo = Binary("le", Const(v.lo, value.dtype), value, "bool")
                hi = Binary("le", value, Const(v.hi, value.dtype), "bool")
                return self(set(vs) - {v}, [*rest, lo, hi])
        swept = _sweep(vs, cs)
        return swept if swept is not None else _interval_box(vs, cs)


def _box(vs: Iterable[Var]) -> int:
    return math.prod(v.extent or 1 for v in vs)


def _evaluate(c: Expr, vs: list[Var]) -> np.ndarray:
    try:
        return np.asarray(grid_values(c, vs), dtype=bool)
    except ValueError:  # an op grid_values does not know: assume true
        return np.ones([v.extent for v in vs], dtype=bool)


def _le_forms(c: Expr) -> list[tuple[dict[Expr, int], int]] | None:
    """``c`` as affine forms ``f <= 0`` (all must hold), or None if it is not one."""
    if not isinstance(c, Binary) or c.op not in ("lt", "le", "eq"):
        return None
    ca, ka = linearize(c.a)
    cb, kb = linearize(c.b)
    coeffs = dict(ca)
    for atom, k in cb.items():
        coeffs[atom] = coeffs.get(atom, 0) - k
    coeffs = {a: k for a, k in coeffs.items() if k}
    k = ka - kb
    if c.op == "le":
        return [(coeffs, k)]
    if c.op == "lt":
        return [(coeffs, k + 1)]
    return [(coeffs, k), ({a: -x for a, x in coeffs.items()}, -k)]


def _direct(coeffs: dict[Expr, int], v: Var) -> bool:
    """``v`` occurs in the form only as its own atom (not inside ``v // 2``)."""
    return v in coeffs and all(a is v or v not in free_vars(a) for a in coeffs)


def _solve_unit_equality(c: Expr, vs: list[Var]) -> tuple[Var, Expr] | None:
    if not (isinstance(c, Binary) and c.op == "eq"):
        return None
    coeffs, k = _le_forms(c)[0]
    for v in sorted(vs, key=lambda v: -(v.extent or 0)):
        if _direct(coeffs, v) and abs(coeffs[v]) == 1:
            s = coeffs[v]
            rest = {a: -s * x for a, x in coeffs.items() if a is not v}
            return v, build(rest, -s * k, v.dtype)
    return None


def _bound(coeff: int, rest):
    """From ``coeff * v + rest <= 0``: ("hi", floor) or ("lo", ceil) bound on v."""
    if coeff > 0:
        return "hi", (-rest) // coeff
    return "lo", -((-rest) // -coeff)


def _sweep(vs: list[Var], cs: list[Expr]) -> int | None:
    """Enumerate all but one variable; the last one's bounds are an interval per point."""
    forms = {c: _le_forms(c) for c in cs}
    for v in sorted(vs, key=lambda v: -(v.extent or 0)):
        others = [u for u in vs if u is not v]
        if _box(others) > ENUMERATION_LIMIT:
            continue
        mine = [c for c in cs if v in free_vars(c)]
        if not all(forms[c] is not None and all(_direct(f[0], v) for f in forms[c])
                   for c in mine):
            continue
        shape = [u.extent for u in others]
        lo = np.full(shape, v.lo, dtype=np.int64)
        hi = np.full(shape, v.hi, dtype=np.int64)
        mask = np.ones(shape, dtype=bool)
        for c in cs:
            if c not in mine:
                mask &= _evaluate(c, others)
                continue
            for coeffs, k in forms[c]:
                rest = build({a: x for a, x in coeffs.items() if a is not v}, k, v.dtype)
                side, value = _bound(coeffs[v], np.asarray(grid_values(rest, others), np.int64))
                if side == "hi":
                    hi = np.minimum(hi, value)
                else:
                    lo = np.maximum(lo, value)
        return int(np.sum(np.where(mask, np.maximum(hi - lo + 1, 0), 0)))
    return None


def _interval_box(vs: list[Var], cs: list[Expr]) -> int:
    """Upper bound: each variable's range narrowed by its affine conjuncts."""
    ranges = {v: (v.lo, v.hi) for v in vs}
    for _ in range(2):
        for c in cs:
            for coeffs, k in _le_forms(c) or []:
                for v in [a for a in coeffs if isinstance(a, Var) and a in ranges]:
                    if not _direct(coeffs, v):
                        continue
                    rest = build({a: x for a, x in coeffs.items() if a is not v}, k, v.dtype)
                    span = interval(rest, ranges)
                    if span is None:
                        continue
                    side, value = _bound(coeffs[v], span[0])  # the loosest bound
                    lo, hi = ranges[v]
                    ranges[v] = (lo, min(hi, value)) if side == "hi" else (max(lo, value), hi)
    return math.prod(max(hi - lo + 1, 0) for lo, hi in ranges.values())


# ---------------------------------------------------------------------------
# one compute


def _count_compute(t: Compute, points: PointCounter) -> tuple:
    data: dict[Expr, bool] = {}
    for x in walk(t.body):
        data[x] = isinstance(x, (Read, Reduce)) or any(data[c] for c in children(x))

    def costs(x: Expr) -> bool:
        """Unary/Binary that does arithmetic (not pure index/mask arithmetic)."""
        if not isinstance(x, (Unary, Binary)):
            return False
        return data[x] or x.dtype not in ("int32", "int64", "bool")

    counted: set = set()

    def guarded(x: Expr, ctx: frozenset, extra: Iterable[Var] = ()) -> int | None:
        """Points of ``x`` under its applicable guards; None if already counted so."""
        dom = free_vars(x) | frozenset(extra)
        key = (x, frozenset(g for g in ctx if free_vars(g) <= dom))
        if key in counted:
            return None
        counted.add(key)
        return points(dom, key[1])

    flops = macs = red = 0
    reads: dict[Tensor, int] = {}
    seen: set = set()
    stack: list[tuple[Expr, frozenset, bool]] = [(t.body, frozenset(), False)]
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        x, ctx, in_index = item
        if isinstance(x, Read):
            reads[x.tensor] = reads.get(x.tensor, 0) + (guarded(x, ctx) or 0)
            stack.extend((i, ctx, True) for i in x.indices)
        elif isinstance(x, Select):
            stack.append((x.cond, ctx, in_index))
            stack.append((x.a, ctx | frozenset(split_conjunction(x.cond)), in_index))
            stack.append((x.b, ctx | {unary("not", x.cond)}, in_index))
        elif isinstance(x, Reduce):
            where = frozenset(split_conjunction(x.where)) if x.where is not None else frozenset()
            n = guarded(x, ctx | where, x.axes)
            if n is not None:
                red += n
                flops += n * _combine_cost(x)
                if x.combiner.kind == "sum":
                    macs += _mac_points(x, ctx | where, points, data)
            stack.append((x.source, ctx | where, False))
            if x.where is not None:
                stack.append((x.where, ctx, False))
        else:
            if not in_index and costs(x):
                flops += guarded(x, ctx) or 0
            stack.extend((c, ctx, in_index) for c in children(x))
    read_list = tuple((r.name, min(r.size, n)) for r, n in reads.items())
    bytes_read = sum(min(r.size, n) * _itemsize(r.dtype) for r, n in reads.items())
    return (macs, flops, red, bytes_read, t.size * _itemsize(t.dtype),
            (ComputeCost(t.name, t.shape, t.dtype, macs, flops, red, bytes_read,
                         t.size * _itemsize(t.dtype), read_list),))


def _combine_cost(r: Reduce) -> int:
    if r.combiner.kind != "custom":
        return 1
    return max(1, sum(isinstance(x, (Unary, Binary)) for x in walk(r.combiner.combine)))


def _mac_points(r: Reduce, ctx: frozenset, points: PointCounter, data: dict) -> int:
    """Reduction points where a product of two non-constant factors is evaluated."""
    dom = free_vars(r) | frozenset(r.axes)
    base = [g for g in ctx if free_vars(g) <= dom]
    best = 0
    seen: set = set()
    stack: list[tuple[Expr, frozenset]] = [(r.source, frozenset())]
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        x, guards = item
        if isinstance(x, (Reduce, Read, Const, Var)):
            continue  # nested reductions count their own MACs; indices are addresses
        if (isinstance(x, Binary) and x.op == "mul" and data[x]
                and not isinstance(_uncast(x.a), Const) and not isinstance(_uncast(x.b), Const)):
            best = max(best, points(dom, [*base, *(g for g in guards if free_vars(g) <= dom)]))
        if isinstance(x, Select):
            stack.append((x.a, guards | frozenset(split_conjunction(x.cond))))
            stack.append((x.b, guards | {unary("not", x.cond)}))
        else:
            stack.extend((c, guards) for c in children(x))
    return best


def _uncast(x: Expr) -> Expr:
    while isinstance(x, Cast):
        x = x.a
    return x


def reduction_width(e: Expr) -> int:
    """The most reduction points one output point visits. A reduction nested in another
    and reading its axes runs once per outer point, so the widths multiply (a sum over time
    of per-step sums over the batch); one that does not is hoisted out of the outer loop."""
    memo: dict = {}

    def width(e: Expr) -> int:
        hit = memo.get(e)
        if hit is None:
            if isinstance(e, Reduce):
                inner = _nearest_reductions(e.source)
                nested = [width(r) for r in inner if free_vars(r) & set(e.axes)]
                own = math.prod(a.extent for a in e.axes) * max(nested, default=1)
                hit = max([own, *map(width, inner)])
            else:
                hit = max((width(r) for r in _nearest_reductions(e)), default=1)
            memo[e] = hit
        return hit

    return width(e)


def _nearest_reductions(e: Expr) -> list[Reduce]:
    """The reductions under ``e`` (``e`` itself excluded) with no reduction between."""
    found, stack, seen = [], list(children(e)), set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, Reduce):
            found.append(x)
        else:
            stack.extend(children(x))
    return found
