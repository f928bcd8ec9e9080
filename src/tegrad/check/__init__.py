"""The gradient checker: ``check_gradient`` (tensor expressions) and ``check_vjp``
(callables). See verdict.py for the checks and their tolerances."""

from __future__ import annotations

from .checker import check_gradient, check_vjp
from .report import FAIL, INCONCLUSIVE, PASS, GradCheckReport, InputResult
from .shrink import ShrinkResult, shrink

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "GradCheckReport",
    "InputResult",
    "ShrinkResult",
    "check_gradient",
    "check_vjp",
    "shrink",
]
