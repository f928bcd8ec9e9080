"""Running one pair: call its function, read the dict it returns, run the checker.

Whatever goes wrong inside a pair (its function raises, the dict is malformed, the
checker rejects what it was given) becomes an ``Outcome`` with ``error`` set, never an
exception out of ``run_pair``: one broken pair must not hide the verdicts of the others.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..check import FAIL, GradCheckReport
from ..check.spec import PairSpecError, run_spec
from .discover import PairFunction

ERROR = "ERROR"

@dataclass
class Outcome:
    """One pair's result: its report, or the exception that stopped it.

    ``stage`` says where the exception came from ("calling the pair function", or
    "checking": reading the pair's dict and running the checker); ``seconds`` is the
    wall time of the whole pair, building included (the report's own ``seconds`` is the
    check alone).
    """

    pair: PairFunction
    report: GradCheckReport | None = None
    error: BaseException | None = None
    stage: str = ""
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        """PASS, FAIL, INCONCLUSIVE (from the report), or ERROR."""
        if self.report is None:
            return ERROR
        return self.report.verdict

    @property
    def failed(self) -> bool:
        """True for FAIL and ERROR: what makes the command exit with 1."""
        return self.verdict in (FAIL, ERROR)

    def error_text(self) -> str:
        """The exception with its traceback, from the pair's own frames on (the runner's
        frame is left out); only the message for a malformed dict."""
        exc = self.error
        if exc is None:
            return ""
        if isinstance(exc, PairSpecError):
            return f"{type(exc).__name__}: {exc}"
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()

    def error_line(self) -> str:
        """``Type: first line of the message``."""
        exc = self.error
        if exc is None:
            return ""
        message = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__


def run_pair(pair: PairFunction, *, options: Mapping[str, Any]) -> Outcome:
    """Run ``pair``; ``options`` (seed, probes) go to the checker as keyword arguments."""
    start = time.perf_counter()
    outcome = Outcome(pair)
    try:
        outcome.stage = "calling the pair function"
        spec = pair.function()
        outcome.stage = "checking"
        outcome.report = run_spec(spec, **options, raise_on_failure=False)
        outcome.stage = ""
    except Exception as exc:
        outcome.error = exc
    outcome.seconds = time.perf_counter() - start
    return outcome
