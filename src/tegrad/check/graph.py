"""Rewrites of a tensor graph that the checker evaluates instead of the graph itself.

- ``promote_graph``: the same graph in float64 (placeholders replaced by float64 copies of
  the same name), the reference in which a float32 kernel is judged.
- ``batch_graph``: the graph evaluated for ``B`` values of one placeholder at once. Every
  tensor that depends on the placeholder gets a leading axis ``b``; reads of such
  tensors gain the index ``b``. One call then evaluates ``B`` perturbed forwards (a
  Jacobian in a few calls) or ``B`` one-hot heads through a backward.
- ``magnitude_graph``: ``M(f)``, the forward with every sum of terms replaced by the sum of
  their magnitudes, ``M(a ± b) = M(a) + M(b)``, ``M(a b) = M(a) M(b)``, ``M(a / b) =
  M(a) / |b|``, ``M(sum a) = sum M(a)``. For ``f`` affine in ``X``, ``M(f)`` at ``X = |t|``
  is ``|J| |t|`` plus the other terms' magnitudes: the scale on which rounding errors of
  ``<head, J t>`` live. Conditions and indices keep reading the original tensors.
- ``freeze_stop_gradients``: every ``stop_gradient(e)`` read from a placeholder fed
  with ``e``'s values at the point checked, so that differences hold it constant, as
  its derivative (0) says.
- ``degree``: 0, 1 or 2 for "independent of", "affine in", "nonlinear in" a placeholder.
- ``accumulation_length``: the longest chain of roundings (a sum of ``K`` terms counts
  ``K``), the ``L`` in the rounding bound ``|err| <= L eps sum|terms|``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import dtype as dt
from ..ir.expr import (
    MAX,
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    binary,
    unary,
)
from ..ir.tensor import Compute, Placeholder, ScanOutput, Tensor, make_compute, placeholder
from ..ir.traverse import children, free_vars, substitute, topo_tensors, transform, walk

F64 = "float64"


def map_graph(
    outputs: Sequence[Tensor],
    leaf: Callable[[Placeholder], Tensor],
    rebuild: Callable[[Compute, dict], Tensor],
    scans: bool = False,
) -> list[Tensor]:
    """New tensors for ``outputs``: ``leaf`` maps placeholders, ``rebuild(t, new)`` maps a
    compute given the new versions of everything it reads. With ``scans``, a scan whose
    inputs changed is rebuilt the same way (its states through ``leaf``, its body through
    ``rebuild``); otherwise that raises NotImplementedError."""
    new: dict[Tensor, Tensor] = {}
    for t in topo_tensors(outputs):
        if isinstance(t, ScanOutput):
            if t in new:
                continue
            if all(new[d] is d for d in t.dependencies()):
                new[t] = t
            elif scans:
                new.update(_rebuild_scan(t.op, new, leaf, rebuild))
            else:
                raise NotImplementedError(
                    f"scan {t.op.name}: the checker cannot batch a scan's inputs; it "
                    "evaluates scans one value at a time"
                )
        else:
            new[t] = leaf(t) if isinstance(t, Placeholder) else rebuild(t, new)
    return [new[o] for o in outputs]


def _rebuild_scan(op, new: dict, leaf, rebuild) -> dict:
    from ..ir.scan import scan

    inner = dict(new)
    states = [leaf(s) for s in op.states]
    inner.update(zip(op.states, states, strict=True))
    for c in op.body:
        inner[c] = rebuild(c, inner)
    outs = scan([new[i] for i in op.inits], [inner[u] for u in op.updates], states,
                name=op.name, checkpoint=op.checkpoint)
    return dict(zip(op.outputs, outs, strict=True))


def _reread(e: Expr, new: dict) -> Expr | None:
    if isinstance(e, Read) and new.get(e.tensor, e.tensor) is not e.tensor:
        t = new[e.tensor]
        return Read(t, e.indices, t.dtype)
    return None


# -- float64 reference -------------------------------------------------------------------


def _as_f64(e: Expr) -> Expr | None:
    if not dt.is_float(e.dtype) or e.dtype == F64:
        return None
    if isinstance(e, Const):
        return Const(e.value, F64)
    if isinstance(e, Cast):
        return Cast(e.a, F64)
    if isinstance(e, Unary):
        return Unary(e.op, e.a, F64)
    if isinstance(e, Binary):
        return Binary(e.op, e.a, e.b, F64)
    if isinstance(e, Select):
        return Select(e.cond, e.a, e.b, F64)
    if isinstance(e, Reduce):
        return Reduce(e.combiner, e.source, e.axes, e.where, F64)
    return None  # Read: retargeted by _reread; float Vars: custom reducer parameters


def promote_graph(outputs: Sequence[Tensor]) -> tuple[list[Tensor], dict[Placeholder, Placeholder]]:
    """``outputs`` computed in float64; returns them and the placeholder map old -> new."""
    leaves: dict[Placeholder, Placeholder] = {}

    def leaf(p: Placeholder) -> Tensor:
        q = placeholder(p.shape, F64, p.name) if p.dtype in dt.FLOATS and p.dtype != F64 else p
        leaves[p] = q
        return q

    def rebuild(t: Compute, new: dict) -> Tensor:
        def fn(e: Expr) -> Expr | None:
            moved = _reread(e, new)
            retyped = _as_f64(e if moved is None else moved)
            return moved if retyped is None else retyped

        body = transform(t.body, fn)
        return t if body is t.body else make_compute(t.shape, t.axes, body, t.name)

    return map_graph(outputs, leaf, rebuild, scans=True), leaves


# -- stop_gradient held constant ---------------------------------------------------------


def freeze_stop_gradients(
    outputs: Sequence[Tensor],
) -> tuple[list[Tensor], dict[Placeholder, Compute]]:
    """``outputs`` with each ``stop_gradient(e)`` replaced by a read of a placeholder
    over the variables ``e`` uses; returned with, per placeholder, the compute of ``e``
    that gives its values (evaluate it at the base point and feed the result)."""
    frozen: dict[Placeholder, Compute] = {}

    def leaf(p: Placeholder) -> Tensor:
        return p

    def rebuild(t: Compute, new: dict) -> Tensor:
        def fn(e: Expr) -> Expr | None:
            moved = _reread(e, new)
            if moved is not None:
                return moved
            if not (isinstance(e, Unary) and e.op == "stop_gradient"):
                return None
            order = sorted(free_vars(e.a), key=lambda v: v.uid)
            axes = tuple(Var.fresh(v.name, 0, v.extent) for v in order)
            shift = {v: a + v.lo if v.lo else a for v, a in zip(order, axes, strict=True)}
            value = make_compute(tuple(v.extent for v in order), axes,
                                 substitute(e.a, shift), f"{t.name}.held")
            held = placeholder(value.shape, value.dtype, f"{t.name}.held{len(frozen)}")
            frozen[held] = value
            return Read(held, tuple(v - v.lo if v.lo else v for v in order), e.dtype)

        body = transform(t.body, fn)
        return t if body is t.body else make_compute(t.shape, t.axes, body, t.name)

    if not any(isinstance(x, Unary) and x.op == "stop_gradient"
               for t in topo_tensors(outputs) if isinstance(t, Compute) for x in walk(t.body)):
        return list(outputs), {}
    return map_graph(outputs, leaf, rebuild, scans=True), frozen


# -- batching over one placeholder -------------------------------------------------------


def batch_graph(
    outputs: Sequence[Tensor], over: Placeholder, batch: int
) -> tuple[list[Tensor], Placeholder]:
    """``outputs`` for ``batch`` values of ``over`` at once: (batch,) + shape each (tensors
    that do not depend on ``over`` are broadcast by the caller)."""
    stacked = placeholder((batch, *over.shape), over.dtype, f"{over.name}.batch")
    batched: set[Tensor] = {stacked}

    def leaf(p: Placeholder) -> Tensor:
        return stacked if p is over else p

    def rebuild(t: Compute, new: dict) -> Tensor:
        if not any(new[u] in batched for u in _reads(t)):
            return t
        b = Var.fresh("b", 0, batch)

        def fn(e: Expr) -> Expr | None:
            if isinstance(e, Read) and new.get(e.tensor) in batched:
                u = new[e.tensor]
                return Read(u, (b, *e.indices), u.dtype)
            return None

        out = make_compute((batch, *t.shape), (b, *t.axes), transform(t.body, fn), t.name)
        batched.add(out)
        return out

    outs = map_graph(outputs, leaf, rebuild)
    return outs, stacked


def _reads(t: Compute) -> list[Tensor]:
    return [x.tensor for x in walk(t.body) if isinstance(x, Read)]


# -- magnitudes ----------------------------------------------------------------------------


def magnitude_graph(
    outputs: Sequence[Tensor],
) -> tuple[list[Tensor], dict[Placeholder, Placeholder]]:
    """``M(outputs)``; float placeholders get magnitude twins (returned map original ->
    twin) that the caller feeds with absolute values. Conditions read the originals."""
    twins: dict[Placeholder, Placeholder] = {}
    mag: dict[Tensor, Tensor] = {}
    for t in topo_tensors(outputs):
        if isinstance(t, Placeholder):
            if dt.is_float(t.dtype):
                twins[t] = mag[t] = placeholder(t.shape, t.dtype, f"|{t.name}|")
            continue
        if isinstance(t, Compute) and dt.is_float(t.dtype):
            mag[t] = make_compute(t.shape, t.axes, _magnitude(t.body, mag), f"|{t.name}|")
    return [mag.get(o, o) for o in outputs], twins


def _magnitude(e: Expr, mag: dict) -> Expr:
    """``M(e)`` for a float expression ``e`` (see the module header)."""
    if isinstance(e, Const):
        return Const(abs(e.value), e.dtype)
    if isinstance(e, Read):
        t = mag.get(e.tensor)
        return Read(t, e.indices, t.dtype) if t is not None else unary("abs", e)
    if isinstance(e, Unary) and e.op in ("neg", "abs"):
        return _magnitude(e.a, mag)
    if isinstance(e, Binary):
        if e.op in ("add", "sub"):
            return binary("add", _magnitude(e.a, mag), _magnitude(e.b, mag))
        if e.op == "mul":
            return binary("mul", _magnitude(e.a, mag), _magnitude(e.b, mag))
        if e.op == "div":
            return binary("div", _magnitude(e.a, mag), unary("abs", e.b))
        if e.op in ("max", "min"):
            return binary("max", _magnitude(e.a, mag), _magnitude(e.b, mag))
    if isinstance(e, Select):
        return Select(e.cond, _magnitude(e.a, mag), _magnitude(e.b, mag), e.dtype)
    if isinstance(e, Cast) and dt.is_float(e.a.dtype):
        return Cast(_magnitude(e.a, mag), e.dtype)
    if isinstance(e, Reduce) and e.combiner.kind in ("sum", "prod", "max", "min"):
        kind = e.combiner if e.combiner.kind in ("sum", "prod", "max") else MAX
        return Reduce(kind, _magnitude(e.source, mag), e.axes, e.where, e.dtype)
    return unary("abs", e)  # a nonlinear value: its own magnitude


# -- structure: degree and accumulation length ---------------------------------------------

INDEPENDENT, AFFINE, NONLINEAR = 0, 1, 2


def degree(output: Tensor, p: Placeholder) -> int:
    """0 if ``output`` does not depend on ``p``, 1 if it is affine in ``p`` (the other
    inputs fixed), 2 otherwise. Conditions and indices that depend on ``p`` make it 2."""
    of_tensor: dict[Tensor, int] = {}
    for t in topo_tensors([output]):
        if isinstance(t, Placeholder):
            of_tensor[t] = AFFINE if t is p else INDEPENDENT
        elif isinstance(t, ScanOutput):  # a recurrence: treated as nonlinear in its inputs
            deps = max((of_tensor[d] for d in t.dependencies()), default=INDEPENDENT)
            of_tensor[t] = NONLINEAR if deps else INDEPENDENT
        else:
            of_tensor[t] = _degree(t.body, of_tensor, {})
    return of_tensor[output]


def _degree(e: Expr, of_tensor: dict, memo: dict) -> int:
    hit = memo.get(id(e))
    if hit is not None:
        return hit
    d = _degree_node(e, of_tensor, memo)
    memo[id(e)] = d
    return d


def _degree_node(e: Expr, of_tensor: dict, memo: dict) -> int:
    def deg(x: Expr) -> int:
        return _degree(x, of_tensor, memo)

    if isinstance(e, Var | Const):
        return INDEPENDENT
    if isinstance(e, Read):
        if any(deg(i) for i in e.indices):
            return NONLINEAR
        return of_tensor[e.tensor]
    if isinstance(e, Unary):
        inner = deg(e.a)
        return inner if e.op == "neg" or inner == INDEPENDENT else NONLINEAR
    if isinstance(e, Cast):
        inner = deg(e.a)
        return inner if dt.is_float(e.a.dtype) and dt.is_float(e.dtype) else min(inner, 1) * 2
    if isinstance(e, Binary):
        a, b = deg(e.a), deg(e.b)
        if e.op in ("add", "sub"):
            return max(a, b)
        if e.op == "mul":
            return a + b if a + b <= AFFINE else NONLINEAR
        if e.op == "div":
            return a if b == INDEPENDENT else NONLINEAR
        return NONLINEAR if a or b else INDEPENDENT
    if isinstance(e, Select):
        if deg(e.cond):
            return NONLINEAR
        return max(deg(e.a), deg(e.b))
    if isinstance(e, Reduce):
        if e.where is not None and deg(e.where):
            return NONLINEAR
        inner = deg(e.source)
        if inner == INDEPENDENT:
            return INDEPENDENT
        return inner if e.combiner.kind == "sum" else NONLINEAR
    return NONLINEAR


def accumulation_length(outputs: Sequence[Tensor]) -> int:
    """The longest chain of roundings in ``outputs``: each arithmetic node adds one, a
    sum over ``K`` points adds ``K``."""
    of_tensor: dict[Tensor, int] = {}
    for t in topo_tensors(outputs):
        if isinstance(t, Placeholder):
            of_tensor[t] = 0
        elif isinstance(t, ScanOutput):  # every step adds its body's chain
            body = {c: 0 for c in t.op.states}
            per_step = max(_chain(c.body, {**of_tensor, **body}) for c in t.op.body)
            deps = max((of_tensor.get(d, 0) for d in t.dependencies()), default=0)
            of_tensor[t] = deps + per_step * (t.op.length - t.op.init_rows)
        else:
            of_tensor[t] = _chain(t.body, of_tensor)
    return max(1, *(of_tensor[o] for o in outputs))


def _chain(e: Expr, of_tensor: dict) -> int:
    memo: dict[int, int] = {}
    for x in walk(e):
        if isinstance(x, Read):
            own = of_tensor.get(x.tensor, 0)
        elif isinstance(x, Reduce):
            points = 1
            for a in x.axes:
                points *= a.extent
            own = points
        else:
            own = 1 if isinstance(x, Unary | Binary) and dt.is_float(x.dtype) else 0
        memo[id(x)] = own + max((memo[id(c)] for c in children(x)), default=0)
    return memo[id(e)]
