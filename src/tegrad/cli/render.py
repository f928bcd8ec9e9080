"""Printing what ``tegrad check`` found, as plain text or, with rich installed, in colour.

A renderer receives the run as it happens: ``start`` (what was found), ``outcome`` (each
pair as soon as it is checked, so a slow pair does not hold back the others' output) and
``finish`` (the totals). ``PlainRenderer`` prints ``GradCheckReport.summary()`` under a
header per pair; ``render_rich.RichRenderer`` lays the same facts out in tables.
``make_renderer`` picks one, importing rich only then: ``import tegrad`` never does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Protocol, TextIO

from ..check import FAIL, INCONCLUSIVE, PASS
from .discover import Discovery, PairFunction
from .runner import ERROR, Outcome


class Renderer(Protocol):
    def start(self, path: str, discovery: Discovery, selected: Sequence[PairFunction]
              ) -> None: ...

    def outcome(self, outcome: Outcome) -> None: ...

    def finish(self, outcomes: Sequence[Outcome]) -> None: ...


def make_renderer(*, plain: bool, quiet: bool) -> Renderer:
    """Rich output unless ``plain`` is asked for or rich is not installed."""
    if not plain:
        try:
            from .render_rich import RichRenderer
        except ImportError:
            pass
        else:
            return RichRenderer(quiet=quiet)
    return PlainRenderer(quiet=quiet)


# -- facts shared by both renderers ---------------------------------------------------------


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


# -- plain text -----------------------------------------------------------------------------


class PlainRenderer:
    """Plain text: per pair a header line and ``report.summary()``; ``quiet``: one line
    per pair, ``VERDICT  name  brief``."""

    def __init__(self, *, quiet: bool = False, stream: TextIO | None = None):
        self.quiet = quiet
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout  # looked up late: pytest's capsys swaps it

    def _print(self, text: str = "") -> None:
        print(text, file=self.stream)

    def start(self, path: str, discovery: Discovery, selected: Sequence[PairFunction]
              ) -> None:
        if self.quiet:
            return
        noun = "pair" if len(selected) == 1 else "pairs"
        self._print(f"tegrad check {path}: {len(selected)} {noun}")
        for line in skipped_notes(discovery):
            self._print(line)

    def outcome(self, outcome: Outcome) -> None:
        name = outcome.pair.name
        if self.quiet:
            self._print(f"{outcome.verdict:<12} {name}  {brief(outcome)}")
            return
        self._print()
        self._print(f"=== {name}: {outcome.verdict} ===")
        if outcome.report is None:
            self._print(f"{name} raised an exception while {outcome.stage}:")
            self._print(outcome.error_text())
        else:
            self._print(outcome.report.summary())

    def finish(self, outcomes: Sequence[Outcome]) -> None:
        if self.quiet:
            return
        self._print()
        self._print(totals(outcomes))
