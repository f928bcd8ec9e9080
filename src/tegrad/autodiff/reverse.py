"""Reverse mode: adjoints of a DAG of computes, in scatter form.

For a compute ``T[i] = B(i)`` with adjoint ``T_bar[p, i]`` (``p`` the head's prefix), and
a read ``X[f(i, k)]`` inside ``B`` under reductions over ``k`` with conditions ``c(i, k)``
(reduction ``where`` clauses), the chain rule gives the scatter

    X_bar[p, j] += sum_{i, k : c(i, k) and f(i, k) = j}  T_bar[p, i] * dB/dX[f(i, k)](i, k)

which is written as an ordinary compute over ``(p, j)``: a sum over fresh copies of
``i`` and ``k`` whose ``where`` holds the equations ``f(i, k) = j``. It is correct for
any index map, and costs a Jacobian's worth of work until ``simplify`` solves the
equations for the reduce variables (scatter to gather). Adjoints of tensors read by
several computes, or read several times, are summed.

``dB/dX[...]`` comes from reverse accumulation over the body, one scope at a time: a
reduction's source is its own scope, whose free variables include the reduction axes;
``reductions.py`` gives each reduction's derivative with respect to its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import NotDifferentiableError
from ..ir import dtype as dt
from ..ir.expr import (
    SUM,
    UNARY_FLOAT,
    Binary,
    Cast,
    Const,
    Expr,
    Op,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    binary,
    cast,
    conjunction,
    const,
    split_conjunction,
)
from ..ir.scan import ScanOp
from ..ir.tensor import Compute, ScanOutput, Tensor, make_compute
from ..ir.traverse import (
    children,
    free_vars,
    substitute,
    tensors_read,
    topo_tensors,
    transform,
    walk,
)
from ..simplify.products import is_product, reuse_product
from .partials import partial
from .reductions import fresh_copy, reduce_partial, zero
from .scan_rules import scan_vjp


@dataclass(frozen=True)
class Term:
    """One read of a differentiated tensor, with the adjoint arriving at it."""

    read: Read
    adjoint: Expr
    axes: tuple[Var, ...]  # variables free in adjoint: compute axes, then reduce axes
    conds: tuple[Expr, ...]


def is_zero(e: Expr | None) -> bool:
    return e is None or (isinstance(e, Const) and e.value == 0)


def guard_of(a: Expr) -> Expr | None:
    """A condition outside which ``a`` is zero, from the ``if_then_else`` branches an
    adjoint came through: select(c, x, 0) -> c, sums -> the disjunction, products and
    negations -> their factors' conditions."""
    if isinstance(a, Select):
        if is_zero(a.b):
            inner = guard_of(a.a)
            return a.cond if inner is None else binary("and", a.cond, inner)
        if is_zero(a.a):
            inner = guard_of(a.b)
            outside = Unary("not", a.cond, "bool")
            return outside if inner is None else binary("and", outside, inner)
        return None
    if isinstance(a, Unary) and a.op == "neg" or isinstance(a, Cast):
        return guard_of(a.a)
    if isinstance(a, Binary) and a.op == "mul":
        left, right = guard_of(a.a), guard_of(a.b)
        if left is None or right is None:
            return left if right is None else right
        return binary("and", left, right)
    if isinstance(a, Binary) and a.op in ("add", "sub"):
        left, right = guard_of(a.a), guard_of(a.b)
        if left is None or right is None:
            return None
        return binary("or", left, right)
    return None


def mul(a: Expr, b: Expr) -> Expr:
    """``a * b`` for an adjoint ``a`` and a partial ``b``. Where ``a`` is zero outside a
    guard (it came through an if_then_else branch), the product is guarded too: the
    partial may read what only that guard keeps in bounds."""
    if isinstance(a, Const) and a.value == 1:
        return cast(b, binary("mul", a, b).dtype)
    if isinstance(b, Const) and b.value == 1:
        return cast(a, binary("mul", a, b).dtype)
    product = binary("mul", a, b)
    guard = guard_of(a) if not isinstance(b, Const) else None
    if guard is None:
        return product
    return Select(guard, product, zero(product.dtype), product.dtype)


def add(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else binary("add", a, b)


class Differentiable:
    """Which nodes carry derivatives: float-valued and reading a tensor in ``targets``."""

    def __init__(self, targets: set[Tensor]):
        self.targets = targets
        self.memo: dict[Expr, bool] = {}

    def __call__(self, e: Expr) -> bool:
        hit = self.memo.get(e)
        if hit is None:
            if not dt.is_float(e.dtype):
                hit = False
            elif isinstance(e, Read):
                hit = e.tensor in self.targets
            else:
                hit = any(self(x) for x in children(e))
            self.memo[e] = hit
        return hit


def scope_order(root: Expr) -> list[Expr]:
    """Nodes of one scope (stopping at reads and reductions), parents before children."""
    order: list[Expr] = []
    seen: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        x, done = stack.pop()
        if done:
            order.append(x)
            continue
        if x in seen:
            continue
        seen.add(x)
        stack.append((x, True))
        if not isinstance(x, (Read, Reduce)):
            stack.extend((ch, False) for ch in children(x))
    order.reverse()
    return order


def backprop_body(body: Expr, axes: tuple[Var, ...], differentiable: Differentiable) -> list[Term]:
    """Adjoints reaching every read of a target tensor, starting from adjoint 1."""
    terms: list[Term] = []

    def run_scope(root: Expr, seed: Expr, scope: tuple[Var, ...], conds: tuple[Expr, ...]):
        adj: dict[Expr, Expr] = {root: seed}
        for node in scope_order(root):
            a = adj.pop(node, None)
            if a is None:
                continue
            if isinstance(node, Read):
                terms.append(Term(node, a, scope, conds))
            elif isinstance(node, Reduce):
                p = reduce_partial(node, conds)
                if p is None:
                    continue
                inner = conds + (
                    tuple(split_conjunction(node.where)) if node.where is not None else ()
                )
                run_scope(node.source, mul(a, p), scope + node.axes, inner)
            elif isinstance(node, Select):
                z = zero(node.dtype)
                if differentiable(node.a):
                    adj[node.a] = add(adj.get(node.a), Select(node.cond, a, z, node.dtype))
                if differentiable(node.b):
                    adj[node.b] = add(adj.get(node.b), Select(node.cond, z, a, node.dtype))
            elif isinstance(node, Unary | Binary | Cast):
                for k, operand in enumerate(children(node)):
                    if not differentiable(operand):
                        continue
                    p = partial(node, k)
                    if is_zero(p):
                        continue
                    contribution = cast(mul(a, p), operand.dtype)
                    adj[operand] = add(adj.get(operand), contribution)

    if differentiable(body):
        run_scope(body, const(1, body.dtype), axes, ())
    return terms


def reuse_forward(t: Compute, terms: list[Term]) -> list[Term]:
    """Read the forward result ``t[i]`` wherever an adjoint needs the whole body again
    (a max's winner test, a quotient's derivative), or holds it as a sub-product
    (``simplify/products.py``: a softmax's ``exp(x - m) / s``), instead of recomputing it."""
    own = Read(t, t.axes, t.dtype)

    def swap(x: Expr):
        if x is t.body:
            return own
        return reuse_product(t, x) if is_product(x) else None

    return [Term(term.read, transform(term.adjoint, swap), term.axes, term.conds) for term in terms]


def hoist_reductions(t: Compute, terms: list[Term]) -> list[Term]:
    """Materialise reductions of the adjoints that depend only on ``t``'s own axes.

    Such a reduction (a max's tie count, a softmax's normaliser) has one value per
    element of ``t``. Left inline, the scatter-to-gather substitution would rewrite it in
    the gradient's coordinates and recompute it for every gradient element that reads
    it; as its own compute ``t.aux<n>`` over just the axes it uses, it is computed once.
    """
    axes = set(t.axes)
    made: dict[Expr, Expr] = {}

    def hoist(x: Expr):
        if not isinstance(x, Reduce) or not free_vars(x) <= axes:
            return None
        if x not in made:
            used = tuple(a for a in t.axes if a in free_vars(x))
            aux = make_compute(tuple(a.extent for a in used), used, x, f"{t.name}.aux{len(made)}")
            made[x] = Read(aux, used, x.dtype)
        return made[x]

    return [
        Term(term.read, transform(term.adjoint, hoist), term.axes, term.conds) for term in terms
    ]


class ScaledHeads:
    """The adjoint of ``t`` times a factor of its own point, once per point (``scaled``).

    A read of a window, ``X[s i + k]`` under ``sum_k``, has an adjoint ``F(i) R(i, k)``
    whose factor ``F`` depends on the output point alone: an average pool's ``1 / D(i)``
    (its window count), an Lp pool's ``(k / D(i) sum_r x^p)^(1/p - 1) / D(i)``. In the
    gather form ``X_bar[j] = sum_t T_bar[o(j, t)] F(o(j, t)) R(..)`` the output point
    ``o`` moves with the tap ``t``, so ``F`` is evaluated once per tap of every gradient
    point (and no loop invariant hoists it). Where ``F`` costs a division, a power, a
    transcendental function or a reduction, ``G[p, i] = T_bar[p, i] F(i)`` is a compute
    over ``t``'s points and the scatter reads ``G[p, i] R(i, k)`` instead: ``F`` is
    evaluated once per output point, as a hand-written pool backward scales its output
    gradient before spreading it. A factor is kept whole under ``select`` (its
    condition may guard its reads), so only the products and quotients at the top of
    the adjoint are split."""

    def __init__(self, t: Compute, t_bar: Tensor, finish: Finish):
        self.t, self.t_bar, self.finish = t, t_bar, finish
        self.own = frozenset(t.axes)
        self.made: dict[tuple, Compute] = {}  # the factors of a scale -> its scaled head

    def split(self, term: Term) -> tuple[Tensor, Expr]:
        """The head the term reads (``t_bar`` or a scaled one) and the rest of its adjoint."""
        own = self.own
        if not _reads_window(term.read, own):
            return self.t_bar, term.adjoint
        factors: list[tuple[Expr, bool]] = []  # (factor, divides)
        _flatten(term.adjoint, False, factors)
        mine = tuple((f, d) for f, d in factors if free_vars(f) and free_vars(f) <= own)
        dtype = term.adjoint.dtype
        if not mine or not _costly(_product(list(mine), dtype)):
            return self.t_bar, term.adjoint
        rest = _product([f for f in factors if f not in mine], dtype)
        if mine not in self.made:
            t_bar = self.t_bar
            prefix = tuple(Var.fresh(f"p{k}", 0, s)
                           for k, s in enumerate(t_bar.shape[:t_bar.ndim - self.t.ndim]))
            head = Read(t_bar, prefix + self.t.axes, t_bar.dtype)
            self.made[mine] = self.finish(make_compute(
                t_bar.shape, prefix + self.t.axes, _product(list(mine), dtype, head),
                f"{t_bar.name}.scaled{len(self.made)}"))
        return self.made[mine], const(1, dtype) if rest is None else rest


def _reads_window(read: Read, own: frozenset) -> bool:
    """Whether some index of ``read`` moves with both an output axis and a reduced one
    (``X[s i + k]``): each point of ``X`` then takes several output points' adjoints."""
    return any(free_vars(e) & own and free_vars(e) - own for e in read.indices)


def _flatten(e: Expr, divides: bool, out: list) -> None:
    if isinstance(e, Binary) and e.op == Op.MUL and dt.is_float(e.dtype):
        _flatten(e.a, divides, out)
        _flatten(e.b, divides, out)
    elif isinstance(e, Binary) and e.op == Op.DIV and dt.is_float(e.dtype):
        _flatten(e.a, divides, out)
        _flatten(e.b, not divides, out)
    else:
        out.append((e, divides))


def _product(factors: list[tuple[Expr, bool]], dtype: str, start: Expr | None = None
             ) -> Expr | None:
    """``start prod(numerators) / prod(divisors)``; None for no factors and no start."""
    top = [f for f, d in factors if not d]
    if start is None and not factors:
        return None
    value = start if start is not None else top.pop(0) if top else const(1, dtype)
    for f in top:
        value = binary("mul", value, f)
    for f, d in factors:
        if d:
            value = binary("div", value, f)
    return cast(value, dtype)


def _costly(e: Expr) -> bool:
    """Whether ``e`` takes a float division or power, a transcendental function or a
    reduction (what a scaled head saves evaluating once per tap)."""
    return any(isinstance(x, Reduce) or (isinstance(x, Unary) and x.op in UNARY_FLOAT)
               or (isinstance(x, Binary) and x.op in (Op.DIV, Op.POW) and dt.is_float(x.dtype))
               for x in walk(e))


def scatter_terms(
    t: Compute,
    heads: ScaledHeads,
    x: Tensor,
    terms: list[Term],
    prefix: tuple[Var, ...],
    j: tuple[Var, ...],
) -> Expr | None:
    """Sum over the reads of ``x`` in ``t`` of their scatter-form contributions to x_bar."""
    total = None
    for term in terms:
        if term.read.tensor is not x:
            continue
        t_bar, adjoint = heads.split(term)
        ren = fresh_copy(term.axes)
        head = Read(t_bar, tuple(prefix) + tuple(ren[a] for a in t.axes), t_bar.dtype)
        value = cast(mul(head, substitute(adjoint, ren)), x.dtype)
        eqs = [
            binary("eq", substitute(idx, ren), jm)
            for idx, jm in zip(term.read.indices, j, strict=True)
        ]
        where = conjunction([substitute(c, ren) for c in term.conds] + eqs)
        if ren:
            expr = Reduce(SUM, value, tuple(ren.values()), where, x.dtype)
        else:
            expr = value if where is None else Select(where, value, zero(x.dtype), x.dtype)
        total = add(total, expr)
    return total


class Finish(Protocol):
    """What reverse mode applies to each compute it makes (``differentiate.py`` passes
    ``simplify.cse.CommonComputes``: simplify, then share equal computes).

    ``finish(c)``: an adjoint on the way (and a scan's per-step pieces); it may answer a
    compute made before that equals ``c``. ``finish.alone(c)``: the gradient of a requested
    input, which stays a compute of its own (two inputs with equal gradients still get one
    each, both reading the shared adjoint)."""

    def __call__(self, c: Compute) -> Compute: ...

    def alone(self, c: Compute) -> Compute: ...


class Unchanged:
    """The default ``Finish``: every compute as it is made (the scatter form)."""

    def __call__(self, c: Compute) -> Compute:
        return c

    def alone(self, c: Compute) -> Compute:
        return c


UNCHANGED = Unchanged()


def gradient(
    output: Tensor,
    inputs,
    head: Tensor | None = None,
    finish: Finish = UNCHANGED,
    independent: bool = False,
) -> list[Tensor]:
    """Reverse-mode derivatives of ``output`` (see ``tegrad.gradient``). With
    ``independent``, inputs are leaves: partial derivatives, with no path through an
    input to another (the step graphs of scans need this: their whole-tensor inputs may
    depend on each other outside the step). ``finish`` is applied to every compute made
    (see ``Finish``; by default none is changed)."""
    inputs = list(inputs)
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError(f"gradient inputs must be tensors, got {x!r}")
        if not dt.is_float(x.dtype):
            raise NotDifferentiableError(
                f"cannot differentiate {output.name} with respect to {x.name}: it is an "
                f"integer tensor ({x.dtype}); indices and gathers have no derivative"
            )
    if not dt.is_float(output.dtype):
        raise NotDifferentiableError(
            f"{output.name} has dtype {output.dtype}: only floating-point outputs have gradients"
        )
    if head is None:
        head = identity_head(output)
    if (
        tuple(head.shape[len(head.shape) - output.ndim :]) != output.shape
        or head.ndim < output.ndim
    ):
        raise ValueError(
            f"head {head.name} has shape {head.shape}; it must be prefix + {output.name}'s "
            f"shape {output.shape}"
        )
    prefix_shape = head.shape[: head.ndim - output.ndim]
    order = topo_tensors([output])
    on_path = _on_path(order, set(inputs))
    differentiable = Differentiable(on_path)
    adjoint: dict[Tensor, Tensor] = {output: head}
    pending: dict[Tensor, list[Expr]] = {}
    axes_of: dict[Tensor, tuple[tuple[Var, ...], tuple[Var, ...]]] = {}

    def axes_for(x: Tensor):
        if x not in axes_of:
            p = tuple(Var.fresh(f"p{k}", 0, s) for k, s in enumerate(prefix_shape))
            jv = tuple(Var.fresh(f"j{k}", 0, s) for k, s in enumerate(x.shape))
            axes_of[x] = (p, jv)
        return axes_of[x]

    scans_done: dict[ScanOp, int] = {}
    requested = set(inputs)
    leaves = requested if independent else set()
    for t in reversed(order):
        if isinstance(t, ScanOutput):
            if t in leaves:
                _collect(t, pending.pop(t, None), adjoint, axes_for, finish)
            elif t in on_path:
                _scan_step(t, pending.pop(t, None), prefix_shape, adjoint, pending, scans_done,
                           on_path, axes_for, finish)
            continue
        if t is not output:
            parts = pending.pop(t, None)
            if parts is None or t not in on_path:
                continue
            p, jv = axes_for(t)
            body = _summed(parts)
            # an input's gradient is a compute of its own, even if equal to another's
            make = finish.alone if t in requested else finish
            adjoint[t] = make(make_compute(prefix_shape + t.shape, p + jv, body,
                                           f"{output.name}.grad.{t.name}"))
        if not isinstance(t, Compute) or t in leaves:
            continue
        terms = hoist_reductions(t, reuse_forward(t, backprop_body(t.body, t.axes, differentiable)))
        heads = ScaledHeads(t, adjoint[t], finish)
        for x in tensors_read(t.body):
            if x not in on_path:
                continue
            p, jv = axes_for(x)
            contribution = scatter_terms(t, heads, x, terms, p, jv)
            if contribution is not None:
                pending.setdefault(x, []).append(contribution)

    results = []
    for x in inputs:
        if x is output:
            results.append(head)
        elif x in adjoint:
            results.append(adjoint[x])
        else:
            shape = prefix_shape + x.shape
            results.append(
                make_compute(
                    shape,
                    tuple(Var.fresh(f"i{k}", 0, s) for k, s in enumerate(shape)),
                    zero(x.dtype),
                    f"{output.name}.grad.{x.name}",
                )
            )
    return results


def _on_path(order: list[Tensor], inputs: set[Tensor]) -> set[Tensor]:
    """Float tensors that depend on some input (inputs included)."""
    reach: set[Tensor] = set()
    for t in order:
        if t in inputs:
            reach.add(t)
        elif isinstance(t, Compute) and dt.is_float(t.dtype):
            if any(x in reach for x in tensors_read(t.body)):
                reach.add(t)
        elif isinstance(t, ScanOutput) and dt.is_float(t.dtype):
            if any(x in reach for x in t.dependencies()):
                reach.add(t)
    return reach


def _collect(t, parts, adjoint, axes_for, finish: Finish) -> None:
    """The adjoint of a scan output: the sum of the contributions that reached it."""
    if parts:
        _, jv = axes_for(t)
        adjoint[t] = finish(make_compute(t.shape, jv, _summed(parts), f"{t.name}.adj_in"))


def _summed(parts: list[Expr]) -> Expr:
    """The contributions that reached one tensor's adjoint, added."""
    body = parts[0]
    for extra in parts[1:]:
        body = binary("add", body, extra)
    return body


def _scan_step(t, parts, prefix_shape, adjoint, pending, scans_done, on_path, axes_for,
               finish: Finish) -> None:
    """Collect the adjoint of one scan output; after the last of its scan's outputs, run
    the scan's rule (``scan_rules.scan_vjp``) and pass its contributions on."""
    if prefix_shape:
        raise NotImplementedError(
            f"gradient through scan {t.op.name} with a head prefix {prefix_shape} (or "
            "head=None, the full Jacobian) is not supported; give a head of the output's shape"
        )
    _collect(t, parts, adjoint, axes_for, finish)
    op = t.op
    scans_done[op] = scans_done.get(op, 0) + 1
    if scans_done[op] < len(op.outputs):
        return
    heads = [adjoint.get(o) for o in op.outputs]
    wanted = {x for x in [*op.inits, *op.external] if x in on_path}
    if not wanted:  # nothing upstream is differentiated (the outputs are the inputs)
        return

    def step_gradient(y, xs, head):
        return gradient(y, xs, head, finish, independent=True)

    for x, contribution in scan_vjp(op, heads, wanted, step_gradient, finish).items():
        contribution = finish(contribution)
        _, jv = axes_for(x)
        pending.setdefault(x, []).append(Read(contribution, jv, contribution.dtype))


def identity_head(output: Tensor) -> Compute:
    """I[p, i] = [p == i]: the head whose VJP is the full Jacobian."""
    n = output.ndim
    p = tuple(Var.fresh(f"p{k}", 0, s) for k, s in enumerate(output.shape))
    i = tuple(Var.fresh(f"i{k}", 0, s) for k, s in enumerate(output.shape))
    one, z = const(1, output.dtype), zero(output.dtype)
    body = (
        one
        if n == 0
        else Select(
            conjunction(binary("eq", a, b) for a, b in zip(p, i, strict=True)), one, z, output.dtype
        )
    )
    return make_compute(output.shape * 2, p + i, body, f"{output.name}.identity")
