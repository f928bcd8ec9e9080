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

from ..check import FAIL, GradCheckReport, check_gradient, check_vjp
from .discover import PairFunction

ERROR = "ERROR"

EXPRESSION_REQUIRED = ("output", "inputs")
EXPRESSION_OPTIONAL = ("grads", "head", "values")
CALLABLE_REQUIRED = ("forward", "backward", "args")


class PairSpecError(Exception):
    """The dict a pair function returned does not follow the convention."""


@dataclass
class Outcome:
    """One pair's result: its report, or the exception that stopped it.

    ``stage`` says where the exception came from ("calling the pair function", "reading
    the pair's dict", "checking"); ``seconds`` is the wall time of the whole pair,
    building included (the report's own ``seconds`` is the check alone).
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
        outcome.stage = "reading the pair's dict"
        check, args, kwargs = _check_call(spec)
        outcome.stage = "checking"
        outcome.report = check(*args, **kwargs, **options, raise_on_failure=False)
        outcome.stage = ""
    except Exception as exc:
        outcome.error = exc
    outcome.seconds = time.perf_counter() - start
    return outcome


def _check_call(spec: object) -> tuple[Any, tuple, dict]:
    """The checker to call on a pair's dict, with its arguments."""
    if not isinstance(spec, Mapping):
        raise PairSpecError(
            f"returned {type(spec).__name__}; a pair returns a dict with keys "
            f"{_keys(EXPRESSION_REQUIRED)} or {_keys(CALLABLE_REQUIRED)}"
        )
    keys = set(spec)
    expression = keys & set(EXPRESSION_REQUIRED + EXPRESSION_OPTIONAL)
    callable_form = keys & set(CALLABLE_REQUIRED)
    if expression and callable_form:
        raise PairSpecError(
            f"mixes the tensor-expression keys ({_keys(sorted(expression))}) with the "
            f"callable keys ({_keys(sorted(callable_form))}); use one form"
        )
    if callable_form:
        _require(keys, CALLABLE_REQUIRED, ())
        return check_vjp, (spec["forward"], spec["backward"], spec["args"]), {}
    _require(keys, EXPRESSION_REQUIRED, EXPRESSION_OPTIONAL)
    kwargs = {k: spec[k] for k in EXPRESSION_OPTIONAL if k in spec}
    return check_gradient, (spec["output"], spec["inputs"]), kwargs


def _require(keys: set, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    missing = [k for k in required if k not in keys]
    unknown = sorted(str(k) for k in keys - set(required + optional))
    problems = []
    if missing:
        problems.append(f"missing {_keys(missing)}")
    if unknown:
        allowed = _keys(required + optional)
        problems.append(f"unknown {_keys(unknown)} (this form takes {allowed})")
    if problems:
        raise PairSpecError("the returned dict has " + "; ".join(problems))


def _keys(names) -> str:
    return ", ".join(repr(n) for n in names)
