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
from ..ir.scan import ScanOp, lift, scan
from ..ir.tensor import Placeholder, Tensor, make_compute, placeholder
from .reductions import zero


def _clamped(index: Expr, size: int) -> Expr:
    iv = interval(index)
    if iv is not None and iv[0] >= 0 and iv[1] < size:
        return index
    return binary("min", binary("max", index, const(0)), const(size - 1))


def _time_index(a: int, step: Expr, b: int) -> Expr:
    return binary("add", binary("mul", const(a), step), const(b))


def _forward_reads(op: ScanOp, step_of):
    """``read_at`` for the forward values of the step graph at step ``step_of(r)``."""
    g = op.step()
    lag_of = {p: key for key, p in g.lagged.items()}
    slice_of = {p: key for key, p in g.sliced.items()}
    T = op.length

    update_of = {y: s for s, y in enumerate(g.outputs)}

    def read_at(p: Placeholder, r: Var, idx: tuple) -> Expr | None:
        tau = step_of(r)
        if p is g.time:
            return tau
        if p in update_of:  # a step's new row: stored in the history, at step tau >= k
            out = op.outputs[update_of[p]]
            return Read(out, (_clamped(tau, T), *idx), out.dtype)
        if p in lag_of:
            s, c = lag_of[p]
            out = op.outputs[s]
            row = _clamped(binary("sub", tau, const(c)), T)
            return Read(out, (row, *idx), out.dtype)
        if p in slice_of:
            u, a, b = slice_of[p]
            row = _clamped(_time_index(a, tau, b), u.shape[0])
            return Read(u, (row, *idx), u.dtype)
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
    n = len(op.states)
    mu = [placeholder(s.shape[1:], s.dtype, f"{s.name}.adj") for s in op.states]
    slices = {key: p for key, p in g.sliced.items()
              if key[0] in wanted and dt.is_float(p.dtype)}
    wholes = [u for u in g.full if u in wanted and dt.is_float(u.dtype)]
    targets = [*g.lagged.values(), *slices.values(), *wholes]
    vjp: dict[Tensor, Tensor | None] = {p: None for p in targets}
    if targets:
        for s in range(n):
            for p, grad in zip(targets, gradient(g.outputs[s], targets, mu[s]), strict=True):
                vjp[p] = _add(vjp[p], grad)

    # the adjoint scan, in reversed time r = T - 1 - t
    lam = [placeholder(s.shape, s.dtype, f"{s.name}.adj") for s in op.states]
    fwd_read_cache = {}
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
            if s_lag != s or vjp.get(p) is None:
                continue
            if c not in fwd_read_cache:
                fwd_read_cache[c] = _adjoint_lift(op, vjp, mu, lam, c, finish)
            lifted = fwd_read_cache[c][p]
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
        read_fwd, stepwise = _forward_reads(op, lambda r: r)
        mu_index = {m: s for s, m in enumerate(mu)}

        def read_at(p, r, idx):
            if p in mu_index:
                return lam_read(mu_index[p], r, idx)
            return read_fwd(p, r, idx)

        names = [*slices.values(), *wholes]
        lifted = lift([vjp[p] for p in names], stepwise | set(mu), read_at, T, "lift", finish)
        by_target = dict(zip(names, lifted, strict=True))
        for (u, a, b), p in slices.items():
            out[u] = _add(out.get(u), _sum_over_steps(by_target[p], u, k, T, (a, b)))
        for u in wholes:
            out[u] = _add(out.get(u), _sum_over_steps(by_target[u], u, k, T, None))
    for s, init in enumerate(op.inits):
        if init in wanted and dt.is_float(init.dtype):
            axes = tuple(Var.fresh(f"j{i}", 0, e) for i, e in enumerate(init.shape))
            body = lam_read(s, axes[0], axes[1:])
            out[init] = _add(out.get(init), make_compute(init.shape, axes, body,
                                                         f"{op.name}.grad.{init.name}"))
    return out


def _adjoint_lift(op: ScanOp, vjp, mu, lam, c: int, finish) -> dict[Tensor, Tensor]:
    """The VJPs of the lagged states, lifted into the adjoint scan for lag ``c``: at
    reversed row ``r`` they are the step graph's at step ``T - 1 - r + c``, with head
    ``lam[r - c]`` (the adjoint state's row ``c`` back)."""
    g = op.step()
    T = op.length
    read_fwd, stepwise = _forward_reads(
        op, lambda r: binary("add", binary("sub", const(T - 1), r), const(c)))
    mu_index = {m: s for s, m in enumerate(mu)}

    def read_at(p, r, idx):
        if p in mu_index:
            state = lam[mu_index[p]]
            return Read(state, (binary("sub", r, const(c)), *idx), state.dtype)
        return read_fwd(p, r, idx)

    wanted = [p for (s, lag), p in g.lagged.items() if lag == c and vjp.get(p) is not None]
    lifted = lift([vjp[p] for p in wanted], stepwise | set(mu), read_at, T, f"adj{c}", finish)
    return dict(zip(wanted, lifted, strict=True))


def _sum_over_steps(lifted: Tensor, u: Tensor, k: int, T: int, affine) -> Tensor:
    """``sum_(t in [k, T)) lifted[t, ...]`` into ``u``'s shape; with ``affine = (a, b)``
    the step ``t`` lands on row ``a t + b`` of ``u``."""
    axes = tuple(Var.fresh(f"j{i}", 0, e) for i, e in enumerate(u.shape))
    t = Var.fresh("t", k, T - k)
    if affine is None:
        value = Read(lifted, (t, *axes), lifted.dtype)
        where = None
    else:
        a, b = affine
        value = Read(lifted, (t, *axes[1:]), lifted.dtype)
        where = binary("eq", _time_index(a, t, b), axes[0])
    body = Reduce(SUM, value, (t,), where, u.dtype)
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
            du = tangent[u]
            row = _clamped(_time_index(a, r, b), u.shape[0])
            return Read(du, (row, *idx), du.dtype)
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

