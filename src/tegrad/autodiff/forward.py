"""Forward mode: tangents of a DAG of computes.

For ``T[i] = B(i)`` and tangents ``X_dot`` of the inputs, ``T_dot[i] = B_dot(i)`` where
``B_dot`` follows the partial table (``partials.py``) node by node:
  read X[f]:       X_dot[f]
  f(a, b):         p_a a_dot + p_b b_dot
  select(c, a, b): select(c, a_dot, b_dot)
  sum_k x(k):      sum_k x_dot(k)
  max_k/min_k:     sum_k x_dot(k) [x(k) = y] / #ties       (ties share equally)
  prod_k x(k):     sum_k x_dot(k) prod_{k' != k} x(k')
  custom:          sum_k x_dot(k) d(combine)/d(rhs)(fold_{k' != k} x(k'), x(k))
Tangents are ordinary computes, so they print, build and differentiate again.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import NotDifferentiableError
from ..ir import dtype as dt
from ..ir.expr import SUM, Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var, cast, const
from ..ir.scan import ScanOutput
from ..ir.tensor import Compute, Tensor, make_compute
from ..ir.traverse import children, substitute, topo_tensors
from .partials import partial
from .reductions import fresh_copy, reduce_partial


def tangent_of_expr(e: Expr, leaf: Callable[[Expr], Expr | None]) -> Expr:
    """The tangent of ``e`` given ``leaf(node)``: the tangent of a read (or variable),
    or None where it is zero. Returns a constant zero when nothing varies."""
    memo: dict[Expr, Expr | None] = {}

    def go(x: Expr) -> Expr | None:
        if x in memo:
            return memo[x]
        out = node(x)
        memo[x] = out
        return out

    def node(x: Expr) -> Expr | None:
        if isinstance(x, Read | Var):
            return leaf(x)
        if not dt.is_float(x.dtype) or isinstance(x, Const):
            return None
        if isinstance(x, Select):
            a, b = go(x.a), go(x.b)
            if a is None and b is None:
                return None
            z = const(0, x.dtype)
            return Select(x.cond, a if a is not None else z, b if b is not None else z, x.dtype)
        if isinstance(x, Reduce):
            return reduce_tangent(x, go)
        if isinstance(x, Unary | Binary | Cast):
            total = None
            for k, operand in enumerate(children(x)):
                d = go(operand)
                if d is None:
                    continue
                p = partial(x, k)
                if p is None:
                    continue
                term = (
                    cast(d, x.dtype) * p
                    if not (isinstance(p, Const) and p.value == 1)
                    else cast(d, x.dtype)
                )
                total = term if total is None else total + term
            return total
        raise NotImplementedError(f"no tangent rule for {type(x).__name__}")

    out = go(e)
    return const(0, e.dtype) if out is None else out


def reduce_tangent(r: Reduce, go) -> Expr | None:
    d = go(r.source)
    if d is None:
        return None
    if r.combiner.kind == "sum":
        return Reduce(SUM, d, r.axes, r.where, r.dtype)
    p = reduce_partial(r)
    if p is None:
        return None
    # p mentions r itself (a max's winner test), which binds r's axes: sum over copies
    ren = fresh_copy(r.axes)
    where = None if r.where is None else substitute(r.where, ren)
    return Reduce(SUM, substitute(d * p, ren), tuple(ren.values()), where, r.dtype)


def jvp(output: Tensor, inputs, tangents) -> Tensor:
    """The directional derivative of ``output`` along ``tangents`` (one per input)."""
    from .scan_rules import scan_jvp

    inputs, tangents = list(inputs), list(tangents)
    if len(inputs) != len(tangents):
        raise ValueError(f"jvp got {len(inputs)} inputs but {len(tangents)} tangents")
    tangent: dict[Tensor, Tensor] = {}
    for x, t in zip(inputs, tangents, strict=True):
        if not dt.is_float(x.dtype):
            raise NotDifferentiableError(f"jvp: {x.name} is an integer tensor ({x.dtype})")
        if tuple(t.shape) != tuple(x.shape):
            raise ValueError(f"jvp: tangent {t.name} has shape {t.shape}, {x.name} has {x.shape}")
        tangent[x] = t
    for t in topo_tensors([output]):
        if isinstance(t, ScanOutput) and t.index == 0 and not any(
                o in tangent for o in t.op.outputs):
            states = scan_jvp(t.op, tangent, jvp)
            if states is not None:
                tangent.update(zip(t.op.outputs, states, strict=True))
            continue
        if t in tangent or not isinstance(t, Compute):
            continue

        def leaf(x: Expr) -> Expr | None:
            if isinstance(x, Read) and x.tensor in tangent and dt.is_float(x.dtype):
                src = tangent[x.tensor]
                return cast(Read(src, x.indices, src.dtype), x.dtype)
            return None

        body = tangent_of_expr(t.body, leaf)
        if isinstance(body, Const) and not any(
            isinstance(x, Read) and x.tensor in tangent for x in _reads(t.body)
        ):
            continue
        tangent[t] = make_compute(t.shape, t.axes, body, f"{t.name}.jvp")
    if output in tangent:
        return tangent[output]
    axes = tuple(Var.fresh(f"i{k}", 0, s) for k, s in enumerate(output.shape))
    return make_compute(output.shape, axes, const(0, output.dtype), f"{output.name}.jvp")


def _reads(e: Expr):
    from ..ir.traverse import walk

    return walk(e)
