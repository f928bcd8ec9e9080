"""Running the coverage report: every stage for every case, failures kept, never hidden.

Stages per case, each recorded separately so one failing stage does not hide the others:

    agreement   forward and gradients against PyTorch in float64 (``agreement.agree``)
    structure   gather form and the backward's work over the forward's (``structure``)
    gradcheck   ``tg.check_gradient`` on the generated gradients (float64 test inputs)
    timing      forward and forward+backward against PyTorch eager (``timing``), on the
                case's benchmark inputs, else on its test inputs scaled up (``scaling``)

A case passes when every stage that ran passed: agreement within tolerance, gather form
where the table asserts it, a gradcheck verdict other than FAIL. An exception in a stage
is that stage's failure, with its message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..check import FAIL, check_gradient
from ..differentiate import inner_product
from .agreement import Agreement, agree, trace
from .cases import CASES, Case
from .structure import Structure, structure
from .timing import Timing, time_case

STAGES = ("agreement", "structure", "gradcheck", "timing")


@dataclass
class Row:
    case: Case
    agreement: Agreement | None = None
    structure: Structure | None = None
    gradcheck: str | None = None  # PASS / FAIL / INCONCLUSIVE, None when not run
    timing: Timing | None = None
    errors: dict[str, str] = field(default_factory=dict)  # stage -> first line of the error
    seconds: float = 0.0

    @property
    def failures(self) -> list[str]:
        found = [f"{stage}: {message}" for stage, message in self.errors.items()]
        if self.agreement is not None and not self.agreement.ok:
            found.append(f"agreement: {self.agreement.describe()}")
        s = self.structure
        if s is not None and self.case.gather_form and s.grads and not s.gather_form:
            found.append(f"structure: {s.describe()}")
        if self.gradcheck == FAIL:
            found.append("gradcheck: FAIL")
        return found

    @property
    def passed(self) -> bool:
        return not self.failures


def gradcheck(case: Case, seed: int = 0) -> str | None:
    """The checker's verdict on the generated gradients, or None with nothing to check."""
    rng = np.random.default_rng(seed)
    arrays = case.inputs(rng)
    graph = trace(case, arrays, with_gradients=False)
    diff = [graph.inputs[k] for k in case.differentiable(arrays)]
    floats = [y for y in graph.outputs if y.dtype.startswith("float")]
    if not diff or not floats:
        return None
    values = dict(zip(graph.inputs, arrays, strict=True))
    if len(floats) == 1:
        output = floats[0]
    else:
        output = inner_product(floats, graph.heads)
        values.update({h: rng.standard_normal(h.shape) for h in graph.heads})
    report = check_gradient(output, diff, values=values, seed=seed, raise_on_failure=False)
    return report.verdict


def _error_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text[:300]


def run_case(case: Case, stages: Iterable[str] = STAGES, repeats: int = 5) -> Row:
    row = Row(case)
    start = time.perf_counter()
    work: dict[str, Callable[[], None]] = {
        "agreement": lambda: setattr(row, "agreement", agree(case)),
        "structure": lambda: setattr(row, "structure", structure(case)),
        "gradcheck": lambda: setattr(row, "gradcheck", gradcheck(case)),
        "timing": lambda: setattr(row, "timing", time_case(case, repeats)),
    }
    for stage in stages:
        try:
            work[stage]()
        except Exception as exc:  # a failing stage is a result, reported with its message
            row.errors[stage] = _error_line(exc)
    row.seconds = time.perf_counter() - start
    return row


def select(ops: Iterable[str] | None) -> list[Case]:
    """The cases of the named ops (all when ``ops`` is None); unknown names raise."""
    if ops is None:
        return list(CASES)
    wanted = [o.strip() for o in ops if o.strip()]
    known = {c.op for c in CASES}
    unknown = [o for o in wanted if o not in known]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in CASES if c.op in wanted]
