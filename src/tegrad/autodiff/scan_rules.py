"""Derivatives through a scan: the adjoint is a scan backwards in time, the tangent a scan
forwards; both are ordinary ``tg.scan``s of tensor expressions.

Notation: states ``S_s = op.outputs[s]`` of shape ``(T,) + D_s``, ``k`` init rows, and the
step graph ``Y_s = F_s(P, t)`` (``ir/scan.py``) over per-step placeholders ``P``: lagged
states ``P_(s,c) = S_s[t - c]``, input slices ``P_(U,a,b) = U[a t + b]``, whole tensors
``E``. Row ``t >= k`` of ``S_s`` is ``Y_s`` at step ``t``.

Reverse mode, heads ``H_s``: the adjoint ``lam_s[t]`` of row ``t`` is

    lam_s[t] = H_s[t] + sum_(s', c) [k <= t + c < T] (dF_s'/dP_(s,c))^T lam_s'[t + c]

evaluated at step ``t + c``: each term is the step graph's VJP with head
``lam_s'[t + c]``, computed once by ``tg.gradient`` on the step graph. Run in reversed time
``r = T - 1 - t`` it reads only earlier rows (``r - c``), so it is a scan ``A`` with
``A_s[0] = H_s[T - 1]`` and ``lam_s[t] = A_s[T - 1 - t]``. Then

    U_bar[j]    = sum_(t in [k, T) : a t + b = j) (dF/dP_(U,a,b))^T lam[t]    (input slices)
    E_bar       = sum_(t in [k, T)) (dF/dE)^T lam[t]                          (whole tensors)
    init_bar[j] = lam[j]                                                     (j < k)

Forward mode, tangents ``dU``: the tangent states solve the scan
``dS_s[t] = dF_s(P, t; dP)`` for ``t >= k`` (``tg.jvp`` of the step graph, with
``dP_(s,c) = dS_s[t - c]``), ``dS_s[t] = d init_s[t]`` before.

Where a lifted time index can leave its tensor at steps whose terms are discarded anyway,
it is clamped, so every read stays in bounds.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.bounds import interval
from ..ir.expr import SUM, Expr, Read, Reduce, Var, binary, conjunction, const, select
from ..ir.scan import STEP_VALUES, ScanOp, lift, scan
from ..ir.tensor import Compute, Placeholder, Tensor, make_compute, placeholder
from ..ir.traverse import substitute, tensors_read
from .reductions import zero


def _row_read(tensor: Tensor, row: Expr, idx: tuple) -> Expr:
    """``tensor[row, idx]``, or 0 where ``row`` can leave the tensor (only at steps whose
    terms are discarded): a guarded read keeps the index affine for the lowering."""
    read = Read(tensor, (row, *idx), tensor.dtype)
    iv = interval(row)
    if iv is not None and iv[0] >= 0 and iv[1] < tensor.shape[0]:
        return read
    inside = conjunction([binary("le", const(0), row),
                          binary("lt", row, const(tensor.shape[0]))])
    return select(inside, read, zero(tensor.dtype))


def _time_index(a: int, step: Expr, b: int) -> Expr:
    return binary("add", binary("mul", const(a), step), const(b))


def _forward_reads(op: ScanOp, step_of):
    """``read_at`` for the forward values of the step graph at step ``step_of(r)``."""
    g = op.step()
    lag_of = {p: key for key, p in g.lagged.items()}
    slice_of = {p: key for key, p in g.sliced.items()}

    update_of = {y: s for s, y in enumerate(g.outputs)}

    def read_at(p: Placeholder, r: Var, idx: tuple) -> Expr | None:
        tau = step_of(r)
        if p is g.time:
            return tau
        if p in update_of:  # a step's new row: stored in the history, at step tau >= k
            return _row_read(op.outputs[update_of[p]], tau, idx)
        if p in lag_of:
            s, c = lag_of[p]
            return _row_read(op.outputs[s], binary("sub", tau, const(c)), idx)
        if p in slice_of:
            u, a, b = slice_of[p]
            return _row_read(u, _time_index(a, tau, b), idx)
        return None

    return read_at, {g.time, *lag_of, *slice_of, *update_of}


def _add(a: Tensor | None, b: Tensor) -> Tensor:
    return b if a is None else a + b


def scan_vjp(op: ScanOp, heads: list[Tensor | None], wanted: set[Tensor], gradient,
             finish) -> dict[Tensor, Tensor]:
    """Adjoint contributions (full-shaped tensors) to the inits and external tensors in
    ``wanted``, given the heads of the scan's outputs (None: zero)."""
    g = op.step()
    T, k = op.length, op.init_rows
    mu = [placeholder(s.shape[1:], s.dtype, f"{s.name}.adj") for s in op.states]
    slices = {key: p for key, p in g.sliced.items()
              if key[0] in wanted and dt.is_float(p.dtype)}
    wholes = [u for u in g.full if u in wanted and dt.is_float(u.dtype)]
    targets = [*g.lagged.values(), *slices.values(), *wholes]
    # the step graph's VJP for all states at once: the gradient of the 0-d step
    # "loss" sum_s <mu_s, Y_s>, so the states' shared intermediates are differentiated once
    step_loss = _weighted_sum(g.outputs, mu, f"{op.name}.step_loss")
    grads = gradient(step_loss, targets, None) if targets else []
    vjp: dict[Tensor, Tensor] = dict(zip(targets, grads, strict=True))
    shared = _forward_recompute(op, list(vjp.values()), mu, finish)

    # the adjoint scan, in reversed time r = T - 1 - t
    lam = [placeholder(s.shape, s.dtype, f"{s.name}.adj") for s in op.states]
    fwd_read_cache = {}
    during: dict = {}  # lag c -> step compute x -> x lifted into the adjoint scan
    inits, updates = [], []
    for s, state in enumerate(op.states):
        d_axes = tuple(Var.fresh(f"d{i}", 0, e) for i, e in enumerate(state.shape[1:]))
        r0 = Var.fresh("r", 0, 1)
        head = heads[s]
        first = (Read(head, (const(T - 1), *d_axes), head.dtype) if head is not None
                 else zero(state.dtype))
        inits.append(make_compute((1, *state.shape[1:]), (r0, *d_axes), first,
                                  f"{op.name}.adj.init.{state.name}"))
        r = Var.fresh("r", 0, T)
        terms = []
        if head is not None:
            terms.append(Read(head, (binary("sub", const(T - 1), r), *d_axes), head.dtype))
        for (s_lag, c), p in g.lagged.items():
            if s_lag != s:
                continue
            if c not in fwd_read_cache:
                fwd_read_cache[c] = _adjoint_lift(op, vjp, mu, lam, c, finish, shared,
                                                  during.setdefault(c, {}))
            lifted = fwd_read_cache[c][p]
            if lifted.shape != (T, *p.shape):  # not lifted: it reads no head, so it is 0
                continue
            guard = conjunction([binary("le", const(c), r),
                                 binary("le", r, const(T - 1 - k + c))])
            value = Read(lifted, (r, *d_axes), lifted.dtype)
            terms.append(select(guard, value, zero(state.dtype)))
        body = terms[0] if terms else zero(state.dtype)
        for extra in terms[1:]:
            body = binary("add", body, extra)
        updates.append(make_compute(state.shape, (r, *d_axes), body,
                                    f"{op.name}.adj.update.{state.name}"))
    adjoint = scan(inits, updates, lam, name=f"{op.name}.adj")

    def lam_read(s: int, t_expr: Expr, idx: tuple) -> Expr:
        a = adjoint[s]
        return Read(a, (binary("sub", const(T - 1), t_expr), *idx), a.dtype)

    out: dict[Tensor, Tensor] = {}
    if slices or wholes:
        # lifted over the steps that exist, t = r + k (no row before 0 is read)
        def step_of(r):
            return binary("add", r, const(k))

        read_fwd, stepwise = _forward_reads(op, step_of)
        mu_index = {m: s for s, m in enumerate(mu)}

        def read_at(p, r, idx):
            if p in mu_index:
                return lam_read(mu_index[p], step_of(r), idx)
            if p in shared:
                return _shared_read(shared[p], r, idx)
            return read_fwd(p, r, idx)

        names = [*slices.values(), *wholes]
        after: dict = {}
        lifted = lift([vjp[p] for p in names], stepwise | set(mu) | set(shared), read_at,
                      T - k, "lift", finish, after)
        _kept_by_adjoint(adjoint[0].op, after, during, T, k)
        by_target = dict(zip(names, lifted, strict=True))
        for (u, a, b), p in slices.items():
            total = _sum_over_steps(by_target[p], u, k, T, (a, b), by_target[p] is not vjp[p])
            out[u] = _add(out.get(u), finish(total))
        for u in wholes:
            total = _sum_over_steps(by_target[u], u, k, T, None, by_target[u] is not vjp[u])
            out[u] = _add(out.get(u), finish(total))
    for s, init in enumerate(op.inits):
        if init in wanted and dt.is_float(init.dtype):
            axes = tuple(Var.fresh(f"j{i}", 0, e) for i, e in enumerate(init.shape))
            body = lam_read(s, axes[0], axes[1:])
            out[init] = _add(out.get(init), make_compute(init.shape, axes, body,
                                                         f"{op.name}.grad.{init.name}"))
    return out


def _kept_by_adjoint(adjoint: ScanOp, after: dict, during: dict, T: int, k: int) -> None:
    """Record the values over the forward steps ``V`` (``after``: step compute ``x`` ->
    ``V``, lifted after the adjoint scan for the input gradients) that the adjoint scan
    computes too (``during[c]``: ``x`` -> ``L``, lifted into it for lag ``c``), so that a
    plan can have the adjoint keep them (``lower/saved_steps.py``): an LSTM's
    pre-activation gradient is then made once, not again after the scan.

    ``V[r]`` is ``x`` at forward step ``t = r + k``; ``L[r']`` is ``x`` at forward step
    ``T - 1 - r' + c``, so ``V[r] = L[T - 1 - k + c - r]``: adjoint step ``r'`` writes row
    ``T - 1 - k + c - r'`` of ``V``. The adjoint runs steps ``[1, T)``, which cover every
    row when ``1 <= c <= k``."""
    steps = adjoint.step().computes
    for x, values in after.items():
        for c, lifted in during.items():
            y = steps.get(lifted.get(x))
            if y is not None and 1 <= c <= k and values.shape == (T - k, *y.shape):
                STEP_VALUES[values] = (adjoint, y, T - 1 - k + c)
                break


def _adjoint_lift(op: ScanOp, vjp, mu, lam, c: int, finish, shared, every: dict
                  ) -> dict[Tensor, Tensor]:
    """The VJPs of the lagged states, lifted into the adjoint scan for lag ``c``: at
    reversed row ``r`` they are the step graph's at step ``T - 1 - r + c``, with head
    ``lam[r - c]`` (the adjoint state's row ``c`` back). The forward values they recompute
    are read from ``shared`` (``_forward_recompute``) at row ``T - 1 - r + c - k``.
    ``every`` receives each step compute's lifted compute (``_kept_by_adjoint``)."""
    g = op.step()
    T, k = op.length, op.init_rows

    def step_of(r):
        return binary("add", binary("sub", const(T - 1), r), const(c))

    read_fwd, stepwise = _forward_reads(op, step_of)
    mu_index = {m: s for s, m in enumerate(mu)}

    def read_at(p, r, idx):
        if p in mu_index:
            state = lam[mu_index[p]]
            return Read(state, (binary("sub", r, const(c)), *idx), state.dtype)
        if p in shared:
            return _shared_read(shared[p], binary("sub", step_of(r), const(k)), idx)
        return read_fwd(p, r, idx)

    wanted = [p for (s, lag), p in g.lagged.items() if lag == c]
    lifted = lift([vjp[p] for p in wanted], stepwise | set(mu) | set(shared), read_at, T,
                  f"adj{c}", finish, every)
    return dict(zip(wanted, lifted, strict=True))


def _forward_recompute(op: ScanOp, grads: list, mu: list, finish) -> dict[Tensor, Tensor]:
    """The step computes of the VJP graph that depend on the step's forward values but not
    on its head ``mu`` (an LSTM's gate pre-activations), lifted once over the forward steps
    ``t = k + r``: the adjoint scan (in reversed time) and the parameter gradients (in
    forward time) read these rows instead of each recomputing them over all steps."""
    from ..ir.traverse import topo_tensors

    read_fwd, stepwise = _forward_reads(op, lambda r: binary("add", r, const(op.init_rows)))
    heads = set(mu)
    forward, on_head = set(), set()
    for x in topo_tensors(grads):
        reads = tensors_read(x.body) if isinstance(x, Compute) else []
        if any(u in heads or u in on_head for u in reads):
            on_head.add(x)
        elif (isinstance(x, Compute) and x not in stepwise  # (a new row: in the history)
              and any(u in stepwise or u in forward for u in reads)):
            forward.add(x)
    if not forward:
        return {}
    # only what a head-dependent compute reads directly: the rest is inside those
    wanted = [x for x in topo_tensors(grads) if x in forward
              and any(x in tensors_read(y.body) for y in on_head)]
    every: dict = {}
    lifted = lift(wanted, stepwise, read_fwd, op.length - op.init_rows, "fwd", finish, every)
    for x, values in every.items():  # the forward run computes them too: see saved_steps
        STEP_VALUES[values] = (op, x, None)
    return dict(zip(wanted, lifted, strict=True))


def _shared_read(x: Tensor, row: Expr, idx: tuple) -> Expr:
    """``x[row, idx]`` for a forward value ``x`` of ``_forward_recompute``; when ``x`` only
    re-indexes another of them at the same row (an LSTM gate: its columns of the
    pre-activations), the read goes to that one, so no copy of the columns is made."""
    body = x.body if isinstance(x, Compute) else None
    if (isinstance(body, Read) and isinstance(body.tensor, Compute)
            and body.indices[0] is x.axes[0] and body.tensor.shape[0] == x.shape[0]):
        moved = dict(zip(x.axes, (row, *idx), strict=True))
        indices = tuple(substitute(i, moved) for i in body.indices[1:])
        return _row_read(body.tensor, row, indices)
    return _row_read(x, row, idx)


def _weighted_sum(outputs, heads, name: str) -> Tensor:
    """``sum_s sum_d heads_s[d] outputs_s[d]`` as one 0-d compute."""
    total = None
    for y, m in zip(outputs, heads, strict=True):
        axes = tuple(Var.fresh(f"d{i}", 0, e) for i, e in enumerate(y.shape))
        term = binary("mul", Read(m, axes, m.dtype), Read(y, axes, y.dtype))
        term = Reduce(SUM, term, axes, None, y.dtype) if axes else term
        total = term if total is None else binary("add", total, term)
    return make_compute((), (), total, name)


def _sum_over_steps(lifted: Tensor, u: Tensor, k: int, T: int, affine, per_step: bool
                    ) -> Tensor:
    """``sum_(t in [k, T)) V_t`` into ``u``'s shape, ``lifted[r]`` holding ``V`` at step
    ``t = r + k``; with ``affine = (a, b)`` step ``t`` lands on row ``a t + b`` of ``u``.
    The lifted body is inlined, so a per-step product summed over time is one sum (one
    contraction)."""
    axes = tuple(Var.fresh(f"j{i}", 0, e) for i, e in enumerate(u.shape))
    r = Var.fresh("t", 0, T - k)
    rest = axes if affine is None else axes[1:]
    if per_step and isinstance(lifted, Compute):
        value = substitute(lifted.body, dict(zip(lifted.axes, (r, *rest), strict=True)))
    elif per_step:
        value = Read(lifted, (r, *rest), lifted.dtype)
    else:  # the same at every step
        value = Read(lifted, rest, lifted.dtype)
    where = None
    if affine is not None:
        a, b = affine
        where = binary("eq", _time_index(a, binary("add", r, const(k)), b), axes[0])
    body = Reduce(SUM, value, (r,), where, u.dtype)
    return make_compute(u.shape, axes, body, f"{u.name}.scan_grad")


def scan_jvp(op: ScanOp, tangent: dict[Tensor, Tensor], jvp, finish=lambda c: c
             ) -> list[Tensor] | None:
    """The tangent states (a scan), or None when no input of the scan has a tangent."""
    g = op.step()
    T = op.length
    has = [t for t in [*op.inits, *op.external] if t in tangent]
    if not has:
        return None
    dstate = [placeholder(s.shape, s.dtype, f"{s.name}.tangent") for s in op.states]
    inputs, tangents, lag_t, slice_t = [], [], {}, {}
    for (s, c), p in g.lagged.items():
        tp = placeholder(p.shape, p.dtype, f"{p.name}.tangent")
        inputs.append(p)
        tangents.append(tp)
        lag_t[tp] = (s, c)
    for (u, a, b), p in g.sliced.items():
        if u in tangent and dt.is_float(p.dtype):
            tp = placeholder(p.shape, p.dtype, f"{p.name}.tangent")
            inputs.append(p)
            tangents.append(tp)
            slice_t[tp] = (u, a, b)
    for u in g.full:
        if u in tangent and dt.is_float(u.dtype):
            inputs.append(u)
            tangents.append(tangent[u])
    read_fwd, stepwise = _forward_reads(op, lambda r: r)

    def read_at(p, r, idx):
        if p in lag_t:
            s, c = lag_t[p]
            return Read(dstate[s], (binary("sub", r, const(c)), *idx), dstate[s].dtype)
        if p in slice_t:
            u, a, b = slice_t[p]
            return _row_read(tangent[u], _time_index(a, r, b), idx)
        return read_fwd(p, r, idx)

    steps = [jvp(y, inputs, tangents) for y in g.outputs]
    updates = lift(steps, stepwise | set(lag_t) | set(slice_t), read_at, T, "jvp", finish)
    updates = [u if u.shape == s.shape else _broadcast_over_time(u, s)
               for u, s in zip(updates, op.states, strict=True)]
    inits = []
    for init in op.inits:
        if init in tangent:
            inits.append(tangent[init])
        else:
            axes = tuple(Var.fresh(f"i{i}", 0, e) for i, e in enumerate(init.shape))
            inits.append(make_compute(init.shape, axes, zero(init.dtype),
                                      f"{init.name}.tangent"))
    return scan(inits, updates, dstate, name=f"{op.name}.jvp")


def _broadcast_over_time(step_value: Tensor, state: Placeholder) -> Tensor:
    """A step tangent that does not depend on the step (e.g. zero), over every row."""
    axes = tuple(Var.fresh(f"i{i}", 0, e) for i, e in enumerate(state.shape))
    body = Read(step_value, axes[1:], step_value.dtype)
    return make_compute(state.shape, axes, body, f"{step_value.name}.rows")

