"""Printing what ``tegrad check`` found, as plain text or, with rich installed, in colour.

A renderer receives the run as it happens: ``start`` (what was found), ``outcome`` (each
pair as soon as it is checked, so a slow pair does not hold back the others' output) and
``finish`` (the totals). ``PlainRenderer`` prints ``GradCheckReport.summary()`` under a
header per pair; ``render_rich.RichRenderer`` lays the same facts out in tables.
``make_renderer`` picks one, importing rich only then: ``import tegrad`` never does. The
facts both print (a pair's run, the brief, the totals) are in ``facts.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Protocol, TextIO

from .discover import Discovery, PairFunction
from .facts import brief, skipped_notes, totals
from .runner import Outcome


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
