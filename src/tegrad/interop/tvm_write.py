"""``to_tvm``: tegrad tensors as TVM ``te.compute`` graphs.

Each placeholder becomes a ``te.placeholder`` (same name, shape, dtype), each compute a
``te.compute`` over the same axes, its body written node by node:

    Read T[i, ...]            T(i, ...)                    (gathers as well)
    Binary add ... min        Add, Sub, Mul, Div, FloorDiv, FloorMod, Max, Min, pow
    compare, or, not          LT, LE, EQ, NE, Or, Not (compared bools as int32: TVM's
                              llvm codegen emits an invalid fcmp for bool == bool)
    and                       And for conjuncts without reads; those with reads nested
                              in if_then_else (lazy, see below)
    Select(c, a, b)           tir.if_then_else(c, a, b)    (lazy: guards padding reads)
    Cast, Const               Cast, tir.const (inf and nan included)
    exp ... erf, floor, ceil  the tir intrinsic; round -> nearbyint (half to even, as
                              NumPy), expm1 -> the C library's expm1/expm1f (CPU
                              targets), sign -> a select, stop_gradient -> its argument
    Reduce                    te.sum, or te.comm_reducer with tegrad's identity (max:
                              -inf, prod: 1, custom: its combine and identity); argmax
                              and argmin as topi's 2-value reducer (first index, value)

Rewrites, all exact:

* a reduction that is not the whole body of its compute moves into a compute of its
  own (``tvm_hoist.py``): TVM allows reductions only at the top of a body;
* a reduction's ``where`` becomes ``if_then_else(where, source, identity)`` in its
  source: ``te.create_prim_func`` in TVM 0.27 drops the ``where`` of a ``te.sum``
  (the build then reduces over the whole domain), and tegrad's wheres often guard reads
  that would leave their tensor (convolution padding, strided gradients); a custom
  reducer with a ``where`` reduces (value, taken) pairs instead, so excluded values are
  never combined;
* a conjunction whose conjuncts read is evaluated lazily: TVM's And evaluates both
  sides (a read another conjunct guards would leave its tensor: a crash, not a wrong
  value), while tegrad's verifier lets each conjunct assume the others.

Scans are refused (``NotImplementedError``); write them with ``te.scan`` by hand.
Gather indices are not checked at run time in TVM (tegrad's NumPy backend checks them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..ir import dtype as dt
from ..ir.bounds import is_pure_index
from ..ir.expr import (
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    split_conjunction,
)
from ..ir.tensor import Compute, Placeholder, ScanOutput, Tensor
from ..ir.traverse import topo_tensors, walk
from .tvm_hoist import hoist_reductions
from .tvm_ops import load_tvm

_INTRINSIC = ("exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "erf",
              "floor", "ceil", "abs")
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "floordiv": "FloorDiv",
           "floormod": "FloorMod", "max": "Max", "min": "Min", "lt": "LT", "le": "LE",
           "eq": "EQ", "ne": "NE", "and": "And", "or": "Or"}


def write_graph(tensors, inputs: Sequence | None):
    m = load_tvm()
    single = isinstance(tensors, Tensor)
    items = [tensors] if single else list(tensors)
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"to_tvm takes tegrad tensors, got {type(t).__name__}")
    order = topo_tensors(items)
    for t in order:
        if isinstance(t, ScanOutput):
            raise NotImplementedError(
                f"to_tvm: {t.name} is the output of the scan {t.op.name}; scans are not "
                "written as TVM graphs (write it with te.scan, or unroll the recurrence)"
            )
    used = [t for t in order if isinstance(t, Placeholder)]
    params = _params(used, inputs)
    w = _Writer(m)
    for p in params:
        w.tvm_of[p] = m.te.placeholder(p.shape, p.dtype, name=p.name)
    for t in order:
        if isinstance(t, Compute):
            for part in hoist_reductions(t):
                w.tvm_of[t] = w.tvm_of[part] = w.compute(part)
    outs, taken = [], set()
    for t in items:
        out = w.tvm_of[t]
        if isinstance(t, Placeholder) or t in taken:  # a buffer is written once
            out = m.te.compute(t.shape, _copy(out), name=f"{t.name}.copy")
        taken.add(t)
        outs.append(out)
    return (outs[0] if single else outs), [w.tvm_of[p] for p in params]


def _copy(source):
    return lambda *i: source(*i)


def _params(used: list[Placeholder], inputs) -> list[Placeholder]:
    if inputs is None:
        return used
    inputs = list(inputs)
    for p in inputs:
        if not isinstance(p, Placeholder):
            raise TypeError(f"to_tvm: inputs must be placeholders, got {p!r}")
    missing = [p.name for p in used if p not in inputs]
    if missing:
        raise ValueError(f"to_tvm: inputs lack {', '.join(missing)}, read by the tensors")
    return inputs


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


class _Writer:
    def __init__(self, m):
        self.m = m
        self.tir = m.tir
        self.tvm_of: dict = {}
        self.reducers: dict = {}

    def compute(self, t: Compute):
        te = self.m.te

        def fcompute(*vs):
            env = dict(zip(t.axes, vs, strict=True))
            if isinstance(t.body, Reduce):
                return self.reduce(t.body, env)
            return _Emit(self, env)(t.body)

        out = te.compute(t.shape, fcompute, name=t.name,
                         varargs_names=[_ident(v.name) for v in t.axes])
        return out[0] if isinstance(out, (list, tuple)) else out  # argmax: (index, value)

    def const(self, value, dtype: str):
        if dtype == "bool":
            value = bool(value)
        return self.tir.const(value, dtype)

    # reductions ------------------------------------------------------------
    def reduce(self, r: Reduce, env: dict):
        te, tir = self.m.te, self.tir
        ivs = [te.reduce_axis((a.lo, a.lo + a.extent), name=_ident(a.name)) for a in r.axes]
        inner = {**env, **{a: iv.var for a, iv in zip(r.axes, ivs, strict=True)}}
        emit = _Emit(self, inner)
        source = emit(r.source)
        kind = r.combiner.kind
        if kind in ("argmax", "argmin"):
            return self.arg_reduce(r, emit, source, ivs)
        if r.where is None:
            return self.reducer(r.combiner, r.dtype)(source, axis=ivs)
        where = emit(r.where)
        identity = self.const(r.combiner.identity_value(r.dtype), r.dtype)
        source = tir.if_then_else(where, source, identity)
        if kind != "custom":
            return self.reducer(r.combiner, r.dtype)(source, axis=ivs)
        return list(self.flagged(r.combiner, r.dtype)((source, where), axis=ivs))

    def flagged(self, combiner, dtype: str):
        """A custom reducer over (value, taken) pairs: values the where excludes are
        never combined. Folding them in as the identity would be exact in theory, but a
        combiner can fail on identity pairs in floating point (a logsumexp combiner:
        -inf - -inf is nan), and tegrad's gradients of custom reductions mask exactly
        so (``where k != j``)."""
        key = (combiner, dtype, "flagged")
        if key in self.reducers:
            return self.reducers[key]
        tir = self.tir
        identity = combiner.identity_value(dtype)

        def combine(x, y):
            both = _Emit(self, {combiner.lhs: x[0], combiner.rhs: y[0]})(combiner.combine)
            value = tir.Select(tir.And(x[1], y[1]), both, tir.Select(x[1], x[0], y[0]))
            return value, tir.Or(x[1], y[1])

        def fidentity(t0, t1):
            return self.const(identity, t0), self.const(False, t1)

        out = self.m.te.comm_reducer(combine, fidentity, name=_ident(combiner.name))
        self.reducers[key] = out
        return out

    def reducer(self, combiner, dtype: str):
        key = (combiner, dtype)
        if key in self.reducers:
            return self.reducers[key]
        te, tir = self.m.te, self.tir
        identity = combiner.identity_value(dtype)
        kind = combiner.kind
        if kind == "sum":
            out = te.sum
        elif kind == "prod":
            out = te.comm_reducer(lambda x, y: tir.Mul(x, y), lambda t: tir.const(1, t),
                                  name="prod")
        elif kind in ("max", "min"):
            node = tir.Max if kind == "max" else tir.Min
            out = te.comm_reducer(lambda x, y: node(x, y),
                                  lambda t: self.const(identity, t), name=kind)
        else:  # custom

            def combine(x, y):
                return _Emit(self, {combiner.lhs: x, combiner.rhs: y})(combiner.combine)

            out = te.comm_reducer(combine, lambda t: self.const(identity, t),
                                  name=_ident(combiner.name))
        self.reducers[key] = out
        return out

    def arg_reduce(self, r: Reduce, emit, source, ivs):
        """topi's argmax: reduce (index, value) pairs; the better value wins, a tie goes
        to the smaller index. Index: the axis value (one axis) or the row-major position
        over the axes, as tegrad's NumPy backend."""
        tir = self.tir
        big = r.combiner.kind == "argmax"
        vdtype = r.source.dtype
        worst = _extreme(vdtype, low=big)
        if r.where is not None:
            source = tir.if_then_else(emit(r.where), source, self.const(worst, vdtype))
        if len(ivs) == 1:
            index = ivs[0].var
        else:
            index, stride = self.const(0, "int32"), 1
            for a, iv in reversed(list(zip(r.axes, ivs, strict=True))):
                term = tir.Mul(tir.Sub(iv.var, self.const(a.lo, "int32")),
                               self.const(stride, "int32"))
                index, stride = tir.Add(index, term), stride * a.extent
        key = (r.combiner, vdtype)
        if key not in self.reducers:
            better = tir.GT if big else tir.LT

            def combine(x, y):
                take = tir.Or(better(x[1], y[1]), tir.And(tir.EQ(x[1], y[1]), tir.LT(x[0], y[0])))
                return tir.Select(take, x[0], y[0]), tir.Select(take, x[1], y[1])

            def identity(t0, t1):
                return self.const(np.iinfo(np.int32).max, t0), self.const(worst, t1)

            self.reducers[key] = self.m.te.comm_reducer(combine, identity, name=r.combiner.kind)
        return list(self.reducers[key]((index, source), axis=ivs))


def _read_kind(e: Expr) -> int:
    """0: reads nothing; 1: reads at index expressions only; 2: gathers."""
    reads = [x for x in walk(e) if isinstance(x, Read)]
    if not reads:
        return 0
    return 1 if all(is_pure_index(i) for r in reads for i in r.indices) else 2


def _extreme(dtype: str, low: bool):
    if dt.is_float(dtype):
        return -np.inf if low else np.inf
    info = np.iinfo(dtype)
    return int(info.min if low else info.max)


class _Emit:
    """Writes expressions under one binding of the variables (memoized: shared nodes are
    written once)."""

    def __init__(self, writer: _Writer, env: dict):
        self.w = writer
        self.tir = writer.tir
        self.env = env
        self.memo: dict = {}

    def __call__(self, e: Expr):
        hit = self.memo.get(e)
        if hit is None:
            hit = self.memo[e] = self.node(e)
        return hit

    def node(self, e: Expr):  # noqa: C901 - one dispatch on node kinds
        tir = self.tir
        if isinstance(e, Const):
            return self.w.const(e.value, e.dtype)
        if isinstance(e, Var):
            found = self.env.get(e)
            if found is None:
                raise ValueError(f"to_tvm: variable {e.name} is not bound here")
            return found
        if isinstance(e, Read):
            return self.w.tvm_of[e.tensor](*(self(i) for i in e.indices))
        if isinstance(e, Binary) and e.op == "and":
            return self.conjunction(e)
        if isinstance(e, Binary):
            a, b = self.operands(e.a, e.b, compare=e.op in ("lt", "le", "eq", "ne"))
            if e.op == "pow":
                return tir.power(a, b)
            return getattr(tir, _BINARY[e.op])(a, b)
        if isinstance(e, Select):
            return tir.if_then_else(self(e.cond), *self.operands(e.a, e.b))
        if isinstance(e, Cast):
            return tir.Cast(e.dtype, self(e.a))
        if isinstance(e, Unary):
            return self.unary(e.op, self(e.a), e.dtype)
        if isinstance(e, Reduce):  # hoisting leaves none below the top of a body
            raise AssertionError(f"to_tvm: a reduction below the top of a body: {e!r}")
        raise NotImplementedError(f"to_tvm: {type(e).__name__} nodes are not supported")

    def conjunction(self, e: Binary):
        """``c1 && c2 ...`` evaluated lazily where it reads: TVM's And evaluates both
        sides, and a conjunct may guard a read in another (``X[t - 1] > 0 && t >= 1``,
        as the verifier allows). Conjuncts without reads come first, eagerly; those with
        reads follow, each under ``if_then_else`` of the ones before: reads at index
        expressions first, then gathers (``0 <= I[i] && A[I[i]] > 0`` in either order)."""
        tir = self.tir
        kinds = [(_read_kind(p), k, p) for k, p in enumerate(split_conjunction(e))]
        plain = [p for kind, _, p in sorted(kinds, key=lambda x: x[:2]) if kind == 0]
        risky = [p for kind, _, p in sorted(kinds, key=lambda x: x[:2]) if kind > 0]
        lazy = None
        for p in reversed(risky):
            lazy = self(p) if lazy is None else tir.if_then_else(
                self(p), lazy, self.w.const(False, "bool"))
        eager = None
        for p in plain:
            eager = self(p) if eager is None else tir.And(eager, self(p))
        if lazy is None:
            return eager
        if eager is None:
            return lazy
        return tir.if_then_else(eager, lazy, self.w.const(False, "bool"))

    def operands(self, a: Expr, b: Expr, compare: bool = False):
        """Both written in one dtype: TVM requires it, and the simplifier may leave
        ``int64 == int32`` (a gather index compared with an axis). Compared bools are
        written as int32."""
        x, y = self(a), self(b)
        if compare and a.dtype == b.dtype == "bool":  # LLVM codegen: fcmp on i1, invalid
            return self.tir.Cast("int32", x), self.tir.Cast("int32", y)
        if a.dtype == b.dtype:
            return x, y
        common = dt.promote(a.dtype, b.dtype)
        if a.dtype != common:
            x = self.tir.Cast(common, x)
        if b.dtype != common:
            y = self.tir.Cast(common, y)
        return x, y

    def unary(self, op: str, x, dtype: str):
        tir, w = self.tir, self.w
        if op in _INTRINSIC:
            return getattr(tir, op)(x)
        if op == "round":
            return tir.nearbyint(x)
        if op == "neg":
            return tir.Mul(x, w.const(-1, dtype))
        if op == "not":
            return tir.Not(x)
        if op == "stop_gradient":
            return x
        if op == "sign":
            zero, one = w.const(0, dtype), w.const(1, dtype)
            return tir.Select(tir.LT(zero, x), one,
                              tir.Select(tir.LT(x, zero), w.const(-1, dtype), zero))
        if op == "expm1":
            return tir.call_pure_extern(dtype, "expm1f" if dtype == "float32" else "expm1", x)
        raise NotImplementedError(f"to_tvm: the unary op {op} has no TVM form")
