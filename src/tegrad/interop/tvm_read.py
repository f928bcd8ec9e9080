"""``from_tvm``: a TVM ``te`` graph as tegrad tensors.

Each TVM tensor becomes a tegrad tensor of the same name, shape and dtype:

    te.placeholder(shape, dtype, name)        -> tg.placeholder(shape, dtype, name)
    te.compute(shape, f, name)                -> a Compute over fresh axes, body read
                                                 node by node (one per output of a
                                                 multi-output compute: ``name.v0``...)
    te.sum / te.max / te.min (axis, where)    -> Reduce(sum / max / min, where)
    te.comm_reducer(f, identity)              -> the built-in combiner when ``f`` is
                                                 x+y, x*y, max or min with its usual
                                                 identity; else a custom combiner of f
    2-value comm_reducer (topi.argmax/argmin) -> argmax / argmin (value_index 0) or
                                                 max / min (value_index 1), recognized
                                                 by evaluating the combiner on probes
    tensor reads, gathers A[I[i], j]          -> Read
    Select, if_then_else, likely(c)           -> Select (likely is dropped)
    Add ... FloorDiv, FloorMod, Min, Max      -> Binary
    Div, Mod (truncating on integers), trunc,
    exp2, log10, tan, sinh, isnan, ...        -> exact compositions (``tvm_ops.py``)
    exp, log, ..., round, extern expm1(f)     -> the tegrad op

A construct outside this list (extern and scan ops, symbolic shapes, bitwise ops,
reductions with ``init=``) raises ``NotImplementedError`` naming the construct and the
tensor it is in. Every compute is verified as ``tg.compute`` would (bounds of reads).

Semantics kept: a reduction ``where`` is honoured (note that ``te.create_prim_func`` in
TVM 0.27 drops it: the TVM build of such a graph reduces over the whole domain, tegrad's
over the masked one). ``te.max``'s identity is the dtype's lowest finite value, tegrad's
is ``-inf``: they differ only on an empty domain.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import (
    ARGMAX,
    ARGMIN,
    MAX,
    MIN,
    PROD,
    SUM,
    Combiner,
    Const,
    Expr,
    FixedIdentity,
    Reduce,
    Var,
    binary,
    cast,
    const,
    select,
    unary,
)
from ..ir.tensor import Tensor, make_compute, placeholder
from ..ir.verify import verify_compute
from .tvm_ops import RENAMED_UNARY, SAME_UNARY, composite, division, fold, load_tvm

_CMP = {"LT": ("lt", False), "LE": ("le", False), "GT": ("lt", True), "GE": ("le", True),
        "EQ": ("eq", False), "NE": ("ne", False)}
_ARITH = {"Add": "add", "Sub": "sub", "Mul": "mul", "Min": "min", "Max": "max",
          "And": "and", "Or": "or"}


def handle(obj) -> int:
    """The identity of a TVM object (Python wrappers of one node differ)."""
    return obj.__chandle__()


def dtype_of(e) -> str:
    d = getattr(e, "dtype", None)
    if d is None:
        d = e.ty.dtype
    return str(d)


def read_graph(tensors):
    m = load_tvm()
    single = not isinstance(tensors, (list, tuple))
    items = [tensors] if single else list(tensors)
    for t in items:
        if not isinstance(t, m.te.Tensor):
            raise TypeError(f"from_tvm takes TVM te.Tensors, got {type(t).__name__}")
    reader = _Reader(m)
    for t in _topological(items):
        reader.convert(t)
    outs = [reader.tensors[t] for t in items]
    return (outs[0] if single else outs), dict(reader.feeds)


def _topological(items) -> list:
    """Every TVM tensor the items depend on, inputs first (iterative: deep graphs)."""
    order, seen = [], set()
    stack = [(t, False) for t in reversed(items)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if t in seen:
            continue
        seen.add(t)
        stack.append((t, True))
        stack.extend((d, False) for d in reversed(list(t.op.input_tensors)) if d not in seen)
    return order


class _Reader:
    def __init__(self, m):
        self.m = m
        self.tensors: dict = {}  # TVM tensor -> tegrad tensor
        self.feeds: dict = {}  # TVM placeholder -> tegrad placeholder
        self.combiners: dict = {}
        self.memo: dict = {}
        self.owner = ""

    # tensors ---------------------------------------------------------------
    def convert(self, t) -> Tensor:
        op = t.op
        kind = type(op).__name__
        name = op.name if op.num_outputs == 1 else t.name
        self.owner = name
        shape = self.shape(t)
        dtype = self.dtype(dtype_of(t), f"tensor {name}")
        if kind == "PlaceholderOp":
            out = placeholder(shape, dtype, name)
            self.feeds[t] = out
        elif kind == "ComputeOp":
            out = self.compute(op, t.value_index, shape, dtype, name)
        else:
            raise NotImplementedError(
                f"from_tvm: {name} is produced by {kind}; only te.placeholder and "
                "te.compute tensors can be read (write scans with tg.scan; an extern has "
                "no expression to read)"
            )
        self.tensors[t] = out
        return out

    def shape(self, t) -> tuple[int, ...]:
        out = []
        for s in t.shape:
            if type(s).__name__ != "IntImm":
                raise NotImplementedError(
                    f"from_tvm: {t.op.name} has a symbolic shape {tuple(t.shape)}; "
                    "tegrad needs constant shapes"
                )
            out.append(int(s.value))
        return tuple(out)

    def dtype(self, dtype: str, what: str) -> str:
        try:
            return dt.check(dtype)
        except TypeError:
            raise TypeError(
                f"from_tvm: {what} has dtype {dtype}; tegrad supports "
                f"{', '.join(dt.DTYPES)}"
            ) from None

    def compute(self, op, index: int, shape, dtype: str, name: str) -> Tensor:
        env, axes = {}, []
        for iv in op.axis:
            if int(iv.dom.min) != 0:
                raise NotImplementedError(f"from_tvm: {name} has an axis not starting at 0")
            v = Var.fresh(str(iv.var.name), 0, int(iv.dom.extent))
            env[handle(iv.var)] = v
            axes.append(v)
        body = self.expr(op.body[index], env)
        if body.dtype != dtype:
            body = cast(body, dtype)
        tensor = make_compute(shape, tuple(axes), body, name)
        verify_compute(tensor)
        return tensor

    # expressions -----------------------------------------------------------
    def expr(self, e, env: dict) -> Expr:
        key = (id(env), handle(e))
        hit = self.memo.get(key)
        if hit is None:
            hit = self._expr(e, env)
            self.memo[key] = (hit, env)  # keeps env alive, so id(env) stays unique
            return hit
        return hit[0]

    def _expr(self, e, env: dict) -> Expr:  # noqa: C901 - one dispatch on node kinds
        kind = type(e).__name__
        if kind == "IntImm":
            return const(int(e.value), self.dtype(dtype_of(e), f"a constant in {self.owner}"))
        if kind == "FloatImm":
            return const(float(e.value), self.dtype(dtype_of(e), f"a constant in {self.owner}"))
        if kind == "Var":
            found = env.get(handle(e))
            if found is None:
                raise NotImplementedError(
                    f"from_tvm: {self.owner} uses the free variable {e.name} (a te.var "
                    "parameter?); only compute axes and reduce axes are supported"
                )
            return found
        if kind in _ARITH:
            return binary(_ARITH[kind], self.expr(e.a, env), self.expr(e.b, env))
        if kind in _CMP:
            op, swap = _CMP[kind]
            a, b = self.expr(e.a, env), self.expr(e.b, env)
            return binary(op, b, a) if swap else binary(op, a, b)
        if kind in ("Div", "Mod", "FloorDiv", "FloorMod"):
            return division(kind, self.expr(e.a, env), self.expr(e.b, env))
        if kind == "Not":
            return unary("not", self.expr(e.a, env))
        if kind == "Select":
            return select(self.expr(e.condition, env), self.expr(e.true_value, env),
                          self.expr(e.false_value, env))
        if kind == "Cast":
            return cast(self.expr(e.value, env), self.dtype(dtype_of(e), f"a cast in {self.owner}"))
        if kind == "Let":
            inner = {**env, handle(e.var): self.expr(e.value, env)}
            return self.expr(e.body, inner)
        if kind == "ProducerLoad":  # TVM before 0.27
            return self.load(e.producer, list(e.indices), env)
        if kind == "Call":
            return self.call(e, env)
        if kind == "Reduce":
            return self.reduce(e, env)
        raise NotImplementedError(
            f"from_tvm: {kind} in {self.owner} is not supported: {_show(e)}"
        )

    def load(self, tensor, indices, env) -> Expr:
        source = self.tensors.get(tensor)
        if source is None:
            raise NotImplementedError(f"from_tvm: {self.owner} reads {tensor.name}, not a tensor")
        return source[tuple(self.expr(i, env) for i in indices)]

    def call(self, e, env) -> Expr:
        op = getattr(e.op, "name", None)
        if op is None:
            raise NotImplementedError(f"from_tvm: a call of {e.op} in {self.owner}")
        name = str(op).rsplit(".", 1)[-1]
        args = list(e.args)
        if name == "tensor_load":
            return self.load(args[0], args[1:], env)
        if name in ("call_pure_extern", "call_extern"):
            name = str(args[0].value)
            args = args[1:]
            if name.endswith("f") and name[:-1] in SAME_UNARY:
                name = name[:-1]  # expm1f -> expm1
            if name not in SAME_UNARY:
                raise NotImplementedError(f"from_tvm: extern call {name} in {self.owner}")
        if name == "if_then_else":
            c, a, b = (self.expr(x, env) for x in args)
            return select(c, a, b)
        xs = [self.expr(x, env) for x in args]
        if name == "likely":
            return xs[0]
        if name in SAME_UNARY:
            return unary(name, xs[0])
        if name in RENAMED_UNARY:
            return unary(RENAMED_UNARY[name], xs[0])
        if name in ("pow", "power"):
            return binary("pow", xs[0], xs[1])
        composed = composite(name, xs)
        if composed is None:
            raise NotImplementedError(
                f"from_tvm: the intrinsic {op} in {self.owner} is not supported"
            )
        return composed

    # reductions ------------------------------------------------------------
    def reduce(self, r, env) -> Expr:
        if len(r.init):
            raise NotImplementedError(f"from_tvm: {self.owner} is a reduction with init=")
        inner, axes = dict(env), []
        for iv in r.axis:
            v = Var.fresh(str(iv.var.name), int(iv.dom.min), int(iv.dom.extent))
            inner[handle(iv.var)] = v
            axes.append(v)
        axes = tuple(axes)
        where = self.expr(r.condition, inner)
        if isinstance(where, Const):
            if not where.value:
                raise NotImplementedError(f"from_tvm: {self.owner} reduces with where=False")
            where = None
        sources = [self.expr(s, inner) for s in r.source]
        dtype = dtype_of(r)
        if len(sources) == 1:
            combiner = self.combiner(r.combiner, sources[0].dtype)
            return Reduce(combiner, sources[0], axes, where, sources[0].dtype)
        kind = self.arg_kind(r.combiner, [s.dtype for s in sources])
        if kind is None or len(sources) != 2 or len(axes) != 1 or sources[0] is not axes[0]:
            raise NotImplementedError(
                f"from_tvm: {self.owner} uses a {len(sources)}-value comm_reducer; only the "
                "argmax/argmin form (index over one reduce axis, value) is supported"
            )
        if r.value_index == 0:
            pos = Reduce(ARGMAX if kind == "argmax" else ARGMIN, sources[1], axes, where,
                         "int32")
            return cast(pos, dtype)
        return Reduce(MAX if kind == "argmax" else MIN, sources[1], axes, where, dtype)

    def combiner(self, c, dtype: str) -> Combiner:
        key = (handle(c), dtype)
        if key in self.combiners:
            return self.combiners[key][0]
        x, y, res = c.lhs[0], c.rhs[0], c.result[0]
        ident = self.expr(c.identity_element[0], {})
        found = _builtin(type(res).__name__, res, x, y, ident, dtype)
        if found is None:
            lhs, rhs = Var.fresh(str(x.name), dtype=dtype), Var.fresh(str(y.name), dtype=dtype)
            env = {handle(x): lhs, handle(y): rhs}
            body = cast(self.expr(res, env), dtype)
            ident = cast(ident, dtype)
            found = Combiner("custom", "comm_reducer", lhs, rhs, body, FixedIdentity(ident))
        self.combiners[key] = (found, c)
        return found

    def arg_kind(self, c, dtypes) -> str | None:
        """"argmax" or "argmin" when the 2-value combiner behaves as one on probes:
        the larger (smaller) value wins, a tie goes to the smaller index."""
        if len(c.lhs) != 2 or not dt.is_int(dtypes[0]):
            return None
        probes = [((0, 1.0), (1, 2.0)), ((0, 2.0), (1, 1.0)), ((0, 1.0), (1, 1.0)),
                  ((1, 1.0), (0, 1.0)), ((3, -2.0), (1, 5.0)), ((2, 5.0), (7, -1.0))]
        got = []
        for lhs, rhs in probes:
            env = {handle(v): const(x, d) for v, x, d in
                   zip([*c.lhs, *c.rhs], [*lhs, *rhs], dtypes * 2, strict=True)}
            try:
                got.append(tuple(fold(self.expr(e, env)) for e in c.result))
            except (NotImplementedError, KeyError, TypeError):
                return None
        for kind, better in (("argmax", max), ("argmin", min)):
            want = []
            for (i0, v0), (i1, v1) in probes:
                v = better(v0, v1)
                i = min(i for i, w in ((i0, v0), (i1, v1)) if w == v)
                want.append((i, v))
            if got == want:
                return kind
        return None


def _builtin(kind, res, x, y, ident: Expr, dtype: str) -> Combiner | None:
    if kind not in ("Add", "Mul", "Max", "Min") or not isinstance(ident, Const):
        return None
    if not {handle(res.a), handle(res.b)} == {handle(x), handle(y)}:
        return None
    v = ident.value
    if dt.is_float(dtype):
        lowest = float(np.finfo(dtype).min)
    else:
        lowest = int(np.iinfo(dtype).min)
    if kind == "Add" and v == 0:
        return SUM
    if kind == "Mul" and v == 1:
        return PROD
    if kind == "Max" and v <= lowest:
        return MAX
    if kind == "Min" and v >= -lowest - (0 if dt.is_float(dtype) else 1):
        return MIN
    return None


def _show(e) -> str:
    """A TVM expression in one line, without the metadata notes of its script."""
    text = str(e).split("\n")[0]
    return text if len(text) <= 160 else text[:157] + "..."
