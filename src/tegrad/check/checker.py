"""The gradient checker's two entry points: ``check_gradient`` (tensor expressions) and
``check_vjp`` (callables), each a pair (``subject.py``) checked input by input
(``verdict.py``, which holds the checks and their tolerances) into one report.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import GradientCheckError
from .report import GradCheckReport
from .subject import CallablePair, ExpressionPair
from .verdict import check_input


def check_gradient(output, inputs, grads=None, head=None, *, values=None, seed: int = 0,
                   probes: int = 4, elementwise="auto", raise_on_failure: bool = True
                   ) -> GradCheckReport:
    """Check ``grads`` (one tensor per input, computing its gradient given the placeholder
    ``head`` of ``output.shape``; None: the generated ones) against ``output``.

    ``values`` maps placeholders (or their names) to arrays; float ones not given are
    drawn from a standard normal (seeded). ``elementwise``: "auto" (small inputs or any
    failure), True or False. Raises ``GradientCheckError`` on a failure unless
    ``raise_on_failure=False``; returns the report otherwise.
    """
    if isinstance(inputs, (list, tuple)):
        inputs = list(inputs)
    else:
        inputs = [inputs]
        grads = None if grads is None else [grads]
    pair = ExpressionPair(output, inputs, grads, head, values, seed)
    return run_checks(pair, seed=seed, probes=probes, elementwise=elementwise,
                      raise_on_failure=raise_on_failure, subject=output.name)


def check_vjp(forward, backward, args, *, seed: int = 0, probes: int = 4,
              elementwise="auto", raise_on_failure: bool = True) -> GradCheckReport:
    """Check ``backward(head, *args) -> tuple`` against ``forward(*args) -> array``. The
    float arguments are checked, named "arg0", "arg1"... by position; the forward is
    called with float64 copies of them as the reference."""
    pair = CallablePair(forward, backward, args)
    name = getattr(forward, "__name__", "forward")
    return run_checks(pair, seed=seed, probes=probes, elementwise=elementwise,
                      raise_on_failure=raise_on_failure, subject=name)


def run_checks(pair, *, seed, probes, elementwise, raise_on_failure, subject
               ) -> GradCheckReport:
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    head = rng.standard_normal(pair.out_shape).astype(pair.out_dtype).astype(np.float64)
    got = pair.backward(head[None].astype(pair.out_dtype))
    results = {
        name: check_input(pair, name, head, got[name][0], rng, probes=probes,
                          elementwise=elementwise)
        for name in pair.names
    }
    report = GradCheckReport(results, seed, pair.forward_evals, pair.backward_evals,
                             time.perf_counter() - start, subject)
    if raise_on_failure and not report.passed:
        raise GradientCheckError(report.summary(), report)
    return report
