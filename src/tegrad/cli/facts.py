"""The facts both renderers of ``tegrad check`` print: a pair's run (time, evaluations,
seed), the one-line brief of a ``--quiet`` report, the totals of a run and the notes on
functions skipped. ``render.PlainRenderer`` and ``render_rich.RichRenderer`` lay them out
each its own way.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..check import FAIL, INCONCLUSIVE, PASS
from .discover import Discovery
from .runner import ERROR, Outcome


def run_facts(outcome: Outcome) -> str:
    """``Y, 0.042 s, 1029 forward + 201 backward evaluations, seed 0`` (or the pair time
    alone when there is no report)."""
    report = outcome.report
    if report is None:
        return f"{outcome.seconds:.3g} s"
    subject = f"{report.subject}, " if report.subject else ""
    return (f"{subject}{report.seconds:.3g} s, {report.forward_evals} forward + "
            f"{report.backward_evals} backward evaluations, seed {report.seed}")


def brief(outcome: Outcome) -> str:
    """What a one-line (``--quiet``) report says after the verdict and the name: the
    region per failing input, the note per inconclusive one, the exception of an error."""
    if outcome.report is None:
        return f"{outcome.error_line()} (while {outcome.stage})"
    parts = []
    for r in outcome.report.results.values():
        if r.verdict == FAIL:
            parts.append(f"{r.name}: {r.region}")
        elif r.verdict == INCONCLUSIVE:
            parts.append(f"{r.name}: " + ("; ".join(r.notes) or "inconclusive"))
    return "; ".join(parts) if parts else f"({run_facts(outcome)})"


def totals(outcomes: Sequence[Outcome]) -> str:
    """``3 pairs: 2 passed, 1 failed`` (only the nonzero counts after the total)."""
    counts = {v: sum(o.verdict == v for o in outcomes) for v in (PASS, INCONCLUSIVE, FAIL, ERROR)}
    words = {
        PASS: "passed",
        INCONCLUSIVE: "inconclusive (counted as passed)",
        FAIL: "failed",
        ERROR: "raised an exception",
    }
    parts = [f"{n} {words[v]}" for v, n in counts.items() if n]
    noun = "pair" if len(outcomes) == 1 else "pairs"
    return f"{len(outcomes)} {noun}: " + ", ".join(parts)


def skipped_notes(discovery: Discovery) -> list[str]:
    """One line per ``gradcheck_*`` function that is not a pair."""
    return [
        f"note: {name} takes required arguments ({', '.join(args)}); not a pair, skipped"
        for name, args in discovery.skipped.items()
    ]
