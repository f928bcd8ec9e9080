"""Recurrences: ``tg.scan`` with TVM's semantics, and its per-step form.

A scan with states ``s`` (placeholders of shape ``(T,) + D_s``), inits ``I_s`` (the first
``k`` rows) and updates ``U_s`` (computes over ``(T,) + D_s``) defines

    S_s[t] = I_s[t]                                     for t < k
    S_s[t] = U_s[t] with every state read s'[t - c] -> S_s'[t - c]   for k <= t < T.

The *body* is every compute that depends on a state placeholder (the updates and the
computes of the same step they read, such as an LSTM's gates). Its computes have the
time axis first; they read states only at earlier rows (``t - c``, ``c >= 1``) and each
other only at the same row ``t``. What else the body reads is *external*: tensors of the
enclosing graph.

``step_graph(op)`` rewrites the body for one step: the time axis is dropped, a state read
``s[t - c, ...]`` becomes a read of a placeholder ``s@-c`` of shape ``D_s``, an external
read whose first index is affine in ``t`` (``X[a t + b, ...]``) becomes a read of a
placeholder ``X@(a, b)``, any other use of ``t`` reads a 0-d integer placeholder, and
full external tensors stay as they are. The executor runs that graph once per step
(vectorized within the step); the differentiation rules (``autodiff/scan_rules.py``)
differentiate it and lift the result back over time with ``lift``.

Checkpointing (``checkpoint=k``) changes how a history is stored, never what it means:
a state history that is read only row by row by other scans (the adjoint scan of the
backward) keeps, instead of its ``T`` rows, the init rows and at every ``k``-th step the
rows the recurrence needs to restart there (``t - 1 ... t - maxlag``); a row asked for
later is recomputed with its segment of ``k`` steps. Memory ``O(T / k * maxlag + k)``
rows instead of ``O(T)``, for one more run of the forward steps. Which histories qualify
is decided per plan (``lower/checkpoint.py``); the executor is ``backends/host/scan_run.py``.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import dtype as dt
from .affine import time_affine, time_lag
from .expr import Expr, Read, Var, fresh_uid
from .tensor import (
    Compute,
    Placeholder,
    ScanOutput,
    Tensor,
    make_compute,
    placeholder,
    unique_name,
)
from .traverse import substitute, tensors_read, topo_tensors, transform, walk
from .verify import LAG_READS, IRError

# (ScanOutput, LAG_READS, time_lag and time_affine are also imported from here)

# State placeholder -> the name of the scan it belongs to (reading it elsewhere is an error).
STATE_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# A compute over the steps -> (scan op, step compute, flip): row ``r`` is that step
# compute's value at step ``init_rows + r`` of the op's run (flip None: a backward's
# recomputation of the forward), or at step ``flip - r`` (an adjoint scan, which runs in
# reversed time: the input gradients' recomputation of its values), see
# ``autodiff/scan_rules.py``; a plan may have the scan keep those values instead
# (``lower/saved_steps.py``).
STEP_VALUES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def refuse_lag_reads(outputs, given=()) -> None:
    """Raise the recorded error for a compute the outputs read outside a scan that reads a
    placeholder's earlier row (``X[i - 1]`` at ``i = 0``, out of bounds). ``tg.compute``
    cannot refuse it (a scan's update is written that way, before ``tg.scan`` is called),
    so everything else that takes a graph (``tg.build``, ``tg.gradient``, ``tg.jvp``) does."""
    for t in topo_tensors(list(outputs), stop=given):
        if t in LAG_READS and t not in given:
            raise IRError(LAG_READS[t][2])


@dataclass(eq=False)
class ScanOp:
    inits: tuple[Tensor, ...]
    updates: tuple[Compute, ...]
    states: tuple[Placeholder, ...]
    name: str
    length: int  # T
    init_rows: int  # k
    body: tuple[Compute, ...]  # topological order, updates included
    external: tuple[Tensor, ...]  # tensors of the enclosing graph the body reads
    outputs: list = field(default_factory=list)  # the ScanOutput tensors, one per state
    _step: object = None
    checkpoint: int | None = None  # k: checkpoint every k steps (None: keep the history)

    def step(self) -> StepGraph:
        if self._step is None:
            self._step = step_graph(self)
        return self._step


def scan(init, update, state_placeholder, inputs=None, name: str | None = None, *,
         checkpoint: int | None = None):
    """``tg.scan``: see the module header. Lists give several states (the result is then
    a list); ``inputs`` is accepted for TVM compatibility (the body's reads are found).

    ``checkpoint=k`` (an int >= 1) trades time for memory in programs that differentiate
    the scan: a state history read only by the backward's adjoint scan is stored as
    checkpoints every ``k`` steps and recomputed one segment at a time when the backward
    reads it (about one more forward run; ``k`` near ``sqrt(T)`` stores the least). The
    values are the same; a history read by anything else (a loss, a plan output) is kept
    whole. ``None`` (the default) keeps every history."""
    single = not isinstance(state_placeholder, (list, tuple))
    inits = [init] if single else list(init)
    updates = [update] if single else list(update)
    states = [state_placeholder] if single else list(state_placeholder)
    if not (len(inits) == len(updates) == len(states)) or not states:
        raise ValueError(
            f"scan needs as many inits as updates as state placeholders; got {len(inits)}, "
            f"{len(updates)} and {len(states)}"
        )
    name = name or unique_name("scan")
    checkpoint = _checked_checkpoint(checkpoint, name)
    for s in states:
        if not isinstance(s, Placeholder):
            raise TypeError(f"scan: state {getattr(s, 'name', s)!r} must be a tg.placeholder")
        if not s.shape:
            raise ValueError(f"scan: state {s.name} needs a time axis first (shape (T, ...))")
    length = states[0].shape[0]
    rows = {i.shape[0] if i.shape else None for i in inits}
    for i, u, s in zip(inits, updates, states, strict=True):
        if not isinstance(u, Compute):
            raise TypeError(f"scan: update {u.name} must be a compute")
        if s.shape[0] != length:
            raise ValueError(f"scan: states disagree on the length: {s.name} {s.shape}")
        if tuple(u.shape) != tuple(s.shape):
            raise ValueError(f"scan: update {u.name} has shape {u.shape}; state {s.name} "
                             f"has {s.shape}")
        if not i.shape or tuple(i.shape[1:]) != tuple(s.shape[1:]):
            raise ValueError(f"scan: init {i.name} has shape {i.shape}; it must be (k,) + "
                             f"{s.shape[1:]} for state {s.name}")
        if u.dtype != s.dtype or i.dtype != s.dtype:
            raise TypeError(f"scan: state {s.name} is {s.dtype} but init {i.name} is "
                            f"{i.dtype} and update {u.name} is {u.dtype}")
    if len(rows) != 1:
        raise ValueError(f"scan: every init must give the same number of rows; got {rows}")
    k = rows.pop()
    if not 1 <= k < length:
        raise ValueError(f"scan: the inits give {k} rows of {length}; need 1 <= k < T")
    body, external = _split_body(updates, states)
    for c in body:
        _check_body_compute(c, body, states, length, k)
    op = ScanOp(tuple(inits), tuple(updates), tuple(states), name, length, k,
                tuple(body), tuple(external), checkpoint=checkpoint)
    outs = [ScanOutput(op, n, s.shape, s.dtype, f"{name}" if single else f"{name}.{s.name}",
                       fresh_uid()) for n, s in enumerate(states)]
    op.outputs.extend(outs)
    for s in states:
        STATE_OF[s] = name
    return outs[0] if single else outs


def _checked_checkpoint(checkpoint, name: str) -> int | None:
    if checkpoint is None:
        return None
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, numbers.Integral):
        raise TypeError(f"scan {name}: checkpoint must be an int >= 1 (store every k-th "
                        f"state) or None; got {checkpoint!r} of type "
                        f"{type(checkpoint).__name__}")
    if checkpoint < 1:
        raise ValueError(f"scan {name}: checkpoint={checkpoint} is not a segment length; "
                         "give an int >= 1 (every k-th state is stored) or None to keep the "
                         "whole history")
    return int(checkpoint)


def _split_body(updates, states) -> tuple[list[Compute], list[Tensor]]:
    order = topo_tensors(updates)
    inside: set[Tensor] = set(states)
    body = []
    for t in order:
        if isinstance(t, Compute) and (t in updates or any(
                r in inside for r in tensors_read(t.body))):
            inside.add(t)
            body.append(t)
    for u in updates:
        if u not in inside:
            inside.add(u)
            body.append(u)
    external: dict[Tensor, None] = {}
    for t in body:
        for r in tensors_read(t.body):
            if r not in inside:
                external[r] = None
    return body, list(external)


def _check_body_compute(c: Compute, body, states, length: int, k: int) -> None:
    if not c.shape or c.shape[0] != length:
        raise ValueError(
            f"scan: {c.name} is computed inside the scan (it reads a state) but its first "
            f"axis is not the time axis of length {length}: shape {c.shape}"
        )
    t = c.axes[0]
    for x in walk(c.body):
        if not isinstance(x, Read):
            continue
        if x.tensor in states:
            lag = time_lag(x.indices[0], t)
            if lag is None or lag < 1:
                raise ValueError(
                    f"scan: {c.name} reads state {x.tensor.name} at row "
                    f"{x.indices[0]!r}; an update may read only earlier rows (t - 1, t - 2, "
                    "...) of a state"
                )
            pending = LAG_READS.get(c)
            if pending is not None and pending[0] is x.tensor and pending[1] > k:
                raise ValueError(
                    f"scan: {c.name} reads {x.tensor.name}[t - {pending[1]}] unguarded, but "
                    f"the inits give only {k} row(s): at t = {k} that read is before row 0. "
                    f"Give {pending[1]} init rows or guard the read with tg.if_then_else"
                )
        elif x.tensor in body and time_lag(x.indices[0], t) != 0:
            raise ValueError(
                f"scan: {c.name} reads {x.tensor.name} (computed inside the scan) at row "
                f"{x.indices[0]!r}; computes of the same step are read at row t"
            )


# -- the per-step graph --------------------------------------------------------------------


@dataclass
class StepGraph:
    """One step of a scan as an ordinary graph.

    ``outputs[s]``: state ``s``'s new row (shape ``D_s``). ``lagged[(s, c)]``: the
    placeholder holding ``S_s[t - c]``. ``sliced[(U, a, b)]``: the placeholder holding
    ``U[a t + b]``. ``time``: the 0-d int32 placeholder holding ``t``. ``full``: external
    tensors read whole. ``computes[c]``: the step version of body compute ``c``.
    """

    outputs: list[Tensor]
    lagged: dict[tuple[int, int], Placeholder]
    sliced: dict[tuple[Tensor, int, int], Placeholder]
    time: Placeholder
    full: list[Tensor]
    computes: dict[Compute, Tensor]

    def placeholders(self) -> list[Placeholder]:
        return [*self.lagged.values(), *self.sliced.values(), self.time]


def step_graph(op: ScanOp) -> StepGraph:
    state_index = {s: n for n, s in enumerate(op.states)}
    time = placeholder((), dt.INDEX, f"{op.name}.t")
    lagged: dict[tuple[int, int], Placeholder] = {}
    sliced: dict[tuple[Tensor, int, int], Placeholder] = {}
    full: dict[Tensor, None] = {}
    steps: dict[Compute, Tensor] = {}
    for c in op.body:
        t = c.axes[0]

        def fn(x: Expr, t=t) -> Expr | None:
            if not isinstance(x, Read):
                return None
            u, first, rest = x.tensor, x.indices[0] if x.indices else None, x.indices[1:]
            if u in state_index:
                n = state_index[u]
                lag = time_lag(first, t)
                key = (n, lag)
                if key not in lagged:
                    lagged[key] = placeholder(u.shape[1:], u.dtype, f"{u.name}@-{lag}")
                p = lagged[key]
                return Read(p, rest, p.dtype)
            if u in steps:
                s = steps[u]
                return Read(s, rest, s.dtype)
            ab = time_affine(first, t) if first is not None else None
            if ab is not None:
                key = (u, *ab)
                if key not in sliced:
                    a, b = ab
                    sliced[key] = placeholder(u.shape[1:], u.dtype, f"{u.name}@({a}t{b:+d})")
                p = sliced[key]
                return Read(p, rest, p.dtype)
            full[u] = None
            return None

        body = transform(c.body, fn)
        body = substitute(body, {t: Read(time, (), time.dtype)})
        steps[c] = make_compute(c.shape[1:], c.axes[1:], body, f"{c.name}.step")
    return StepGraph([steps[u] for u in op.updates], lagged, sliced, time, list(full), steps)


def lift(
    tensors: Sequence[Tensor],
    stepwise: set[Placeholder],
    read_at: Callable[[Placeholder, Var, tuple[Expr, ...]], Expr],
    length: int,
    name: str,
    finish: Callable[[Compute], Compute] = lambda c: c,
    every: dict | None = None,
) -> list[Tensor]:
    """Per-step tensors back over time. Every compute that depends on a tensor of
    ``stepwise`` (placeholders, or step computes whose values over time are known) becomes
    a compute over ``(length,) + shape`` whose new first axis ``r`` is the step;
    ``read_at(p, r, indices)`` is what the read ``p[indices]`` is at step ``r``. Tensors
    that do not depend on ``stepwise`` are the same at every step and stay as they are.
    ``finish`` is applied to each new compute (the simplifier). ``every``, when given,
    receives each lifted compute, those ``tensors`` need included (step compute ->
    compute over the steps)."""
    lifted: dict[Tensor, Tensor] = {}
    for x in topo_tensors(tensors):
        if not isinstance(x, Compute) or x in stepwise:
            continue
        reads = tensors_read(x.body)
        if not any(u in stepwise or u in lifted for u in reads):
            continue
        r = Var.fresh("r", 0, length)

        def fn(e: Expr, r=r) -> Expr | None:
            if not isinstance(e, Read):
                return None
            if e.tensor in lifted:
                u = lifted[e.tensor]
                return Read(u, (r, *e.indices), u.dtype)
            if e.tensor in stepwise:
                return read_at(e.tensor, r, e.indices)
            return None

        body = transform(x.body, fn)
        lifted[x] = finish(make_compute((length, *x.shape), (r, *x.axes), body,
                                        f"{x.name}.{name}"))
    if every is not None:
        every.update(lifted)
    return [lifted.get(x, x) for x in tensors]
