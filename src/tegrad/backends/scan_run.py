"""Running a scan kernel: the time loop over a step program, on any backend."""

from __future__ import annotations

import numpy as np


def run_scan(kernel, arrays: dict, make_program) -> dict:
    """The states' histories: init rows, then the step program once per step, its
    per-step placeholders fed with views of the histories and of the inputs (zeros for a
    row outside the tensor: such reads are guarded in the body). ``make_program(plan,
    inputs)`` is the backend's program class, which runs the step plan."""
    op, step = kernel.op, kernel.step
    program = make_program(kernel.plan, step.placeholders())
    states = []
    for init, s in zip(op.inits, op.states, strict=True):
        history = np.empty(s.shape, s.dtype)
        history[: op.init_rows] = arrays[init]
        states.append(history)
    feed = {t: arrays[t] for t in step.full}
    outside = {}
    for t in range(op.init_rows, op.length):
        for (n, lag), p in step.lagged.items():
            feed[p] = states[n][t - lag] if t - lag >= 0 else _zeros(outside, p)
        for (u, a, b), p in step.sliced.items():
            row = a * t + b
            feed[p] = arrays[u][row] if 0 <= row < u.shape[0] else _zeros(outside, p)
        feed[step.time] = np.asarray(t, step.time.dtype)
        for history, value in zip(states, program.run(feed), strict=True):
            history[t] = value
    return dict(zip(op.outputs, states, strict=True))


def _zeros(cache: dict, p) -> np.ndarray:
    if p not in cache:
        cache[p] = np.zeros(p.shape, p.dtype)
    return cache[p]
