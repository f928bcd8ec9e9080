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

from ..errors import NotDifferentiableError
from ..ir import dtype as dt
from ..ir.expr import Const, Expr, Read, Var, cast, const
from ..ir.tensor import Compute, ScanOutput, Tensor, make_compute
from ..ir.traverse import topo_tensors, walk
from .partials import tangent as tangent_of
from .reductions import reduce_tangent
from .scan_rules import scan_jvp


def jvp(output: Tensor, inputs, tangents) -> Tensor:
    """The directional derivative of ``output`` along ``tangents`` (one per input)."""
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

        body = tangent_of(t.body, leaf, reduce_tangent)
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
    return walk(e)
