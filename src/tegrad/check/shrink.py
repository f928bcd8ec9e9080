"""Shrinking a failing check to its smallest sizes.

``shrink(build, sizes)``: ``build(**sizes)`` makes the pair to check, as a dict (see
spec.py: ``check_gradient``'s or ``check_vjp``'s arguments by name). While the check
fails, each size in turn is tried smaller (the smallest allowed first, then halving, then
one less) and kept smaller when the check still fails. A size at which ``build`` raises
(shapes that do not fit together) counts as not failing. The result holds the smallest
failing sizes and their report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .report import FAIL, GradCheckReport
from .spec import run_spec


@dataclass
class ShrinkResult:
    sizes: dict[str, int]  # the smallest failing sizes found (the originals if none failed)
    report: GradCheckReport | None  # the check at those sizes
    failed: bool  # whether the original sizes failed at all
    tried: list[tuple[dict[str, int], str]] = field(default_factory=list)  # (sizes, verdict)

    def summary(self) -> str:
        if not self.failed:
            return f"no failure at {self.sizes}: nothing to shrink"
        args = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return (f"smallest failing case: {args} ({len(self.tried)} checks tried)\n"
                + self.report.summary())


def shrink(build: Callable[..., dict], sizes: dict[str, int], *,
           minimum: dict[str, int] | None = None, **opts) -> ShrinkResult:
    """Smallest sizes (each at least ``minimum.get(name, 1)``) at which ``build``'s check
    still fails; ``opts`` go to the check."""
    floor = minimum or {}
    result = ShrinkResult(dict(sizes), None, False)

    def fails(candidate: dict[str, int]) -> GradCheckReport | None:
        try:
            report = run_spec(build(**candidate), raise_on_failure=False, **opts)
        except (ValueError, TypeError, IndexError) as why:  # sizes that do not fit
            result.tried.append((dict(candidate), f"build failed: {why}"))
            return None
        result.tried.append((dict(candidate), report.verdict))
        return report if report.verdict == FAIL else None

    report = fails(result.sizes)
    if report is None:
        return result
    result.failed, result.report = True, report
    changed = True
    while changed:
        changed = False
        for name in list(result.sizes):
            current = result.sizes[name]
            lowest = floor.get(name, 1)
            for smaller in sorted({lowest, max(lowest, current // 2), current - 1}):
                if not lowest <= smaller < current:
                    continue
                candidate = {**result.sizes, name: smaller}
                found = fails(candidate)
                if found is not None:
                    result.sizes, result.report, changed = candidate, found, True
                    break
    return result
