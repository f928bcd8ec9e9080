"""The rich renderer: the facts of ``GradCheckReport.summary()`` as coloured tables.

Per pair: a header (name, verdict in green / red / yellow, subject, time, evaluations,
seed), a table with one row per input (verdict, margin, max error, detectable error),
and, for each input that is not a plain PASS, its checks; for a FAIL the region, the
signature, the backward's condition, the worst elements and the ASCII mask in a panel.
Kinks met and notes close each input. Importing this module imports rich: only
``render.make_renderer`` does, when rich output is wanted.

All text goes through ``Text`` objects, never markup strings, so brackets in the
reports (``[d-, d+]``, coordinates) print as they are. Width and colour follow rich's
rules (``COLUMNS``, ``NO_COLOR``, whether stdout is a terminal).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..check import FAIL, INCONCLUSIVE, PASS, InputResult
from .discover import Discovery, PairFunction
from .facts import brief, run_facts, skipped_notes, totals
from .runner import ERROR, Outcome

STYLES = {PASS: "bold green", FAIL: "bold red", INCONCLUSIVE: "bold yellow", ERROR: "bold red"}
KINKS_SHOWN = 4


def verdict_text(verdict: str) -> Text:
    """The verdict in its colour: green PASS, red FAIL and ERROR, yellow INCONCLUSIVE."""
    return Text(verdict, style=STYLES[verdict])


class RichRenderer:
    """Rich output on ``console`` (a fresh one on stdout by default)."""

    def __init__(self, *, quiet: bool = False, console: Console | None = None):
        self.quiet = quiet
        self.console = console or Console(highlight=False)

    def start(self, path: str, discovery: Discovery, selected: Sequence[PairFunction]
              ) -> None:
        if self.quiet:
            return
        noun = "pair" if len(selected) == 1 else "pairs"
        self.console.print(Text.assemble(("tegrad check ", "bold"), path,
                                         f": {len(selected)} {noun}"))
        for line in skipped_notes(discovery):
            self.console.print(Text(line, style="yellow"))

    def outcome(self, outcome: Outcome) -> None:
        if self.quiet:
            pad = " " * (13 - len(outcome.verdict))
            line = Text.assemble(verdict_text(outcome.verdict), pad,
                                 (outcome.pair.name, "bold"), "  ", brief(outcome))
            self.console.print(line, soft_wrap=True)  # one line, however long
            return
        self.console.print()
        self.console.print(self._header(outcome))
        if outcome.report is None:
            kind = type(outcome.error).__name__
            title = Text(f"{kind} while {outcome.stage}", style="bold red")
            self.console.print(Panel(Text(outcome.error_text()), title=title,
                                     title_align="left", border_style="red"))
            return
        self.console.print(self._inputs_table(outcome))
        for r in outcome.report.results.values():
            for part in self._details(r):
                self.console.print(part)

    def finish(self, outcomes: Sequence[Outcome]) -> None:
        if self.quiet:
            return
        failed = any(o.failed for o in outcomes)
        unsure = any(o.verdict == INCONCLUSIVE for o in outcomes)
        style = "bold red" if failed else ("bold yellow" if unsure else "bold green")
        self.console.print()
        self.console.print(Text(totals(outcomes), style=style))

    # -- pieces -----------------------------------------------------------------------------

    def _header(self, outcome: Outcome) -> Text:
        header = Text.assemble((outcome.pair.name, "bold cyan"), "  ",
                               verdict_text(outcome.verdict), "  ")
        header.append(run_facts(outcome), style="dim")
        if outcome.pair.summary:
            header.append("\n")
            header.append(outcome.pair.summary, style="italic dim")
        return header

    def _inputs_table(self, outcome: Outcome) -> Table:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("input", style="bold")
        table.add_column("shape")
        table.add_column("dtype")
        table.add_column("forward")
        table.add_column("verdict")
        table.add_column("margin", justify="right")
        table.add_column("max error", justify="right")
        table.add_column("detects errors >=")
        assert outcome.report is not None
        for r in outcome.report.results.values():
            table.add_row(
                r.name, str(r.shape), r.dtype, "linear" if r.linear else "nonlinear",
                verdict_text(r.verdict), f"{r.margin:.3g}", f"{r.max_error:.3g}",
                f"{r.detectable:.2g} per {r.detectable_unit}",
            )
        return table

    def _details(self, r: InputResult) -> list:
        parts: list = []
        if r.verdict != PASS:
            parts.append(self._checks_table(r))
        if r.verdict == FAIL:
            parts.append(self._failure(r))
            if r.worst:
                parts.append(self._worst_table(r))
            if r.ascii:
                parts.append(Panel(
                    Text(r.ascii), expand=False, border_style="red",
                    title=Text(f"{r.name}: wrong elements, last two axes"),
                    subtitle=Text("'#' wrong  'k' kink  '.' right"),
                ))
        if r.kinks:
            parts.append(self._kinks(r))
        for note in r.notes:
            parts.append(Text(f"{r.name}: note: {note}", style="yellow"))
        return parts

    def _checks_table(self, r: InputResult) -> Table:
        table = Table(title=Text(f"{r.name}: checks", style="bold"), title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("check")
        table.add_column("verdict")
        table.add_column("margin", justify="right")
        table.add_column("detail", overflow="fold")
        for c in r.checks:
            table.add_row(c.name, verdict_text(c.verdict), f"{c.margin:.3g}", c.detail)
        return table

    def _failure(self, r: InputResult) -> Group:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")
        grid.add_row("wrong elements", Text(r.region, style="red"))
        if r.signature:
            grid.add_row("signature", r.signature)
        if r.condition:
            grid.add_row("in the backward", r.condition)
        return Group(Text(f"{r.name}: FAIL", style="bold red"), grid)

    def _worst_table(self, r: InputResult) -> Table:
        table = Table(title=Text(f"{r.name}: worst elements", style="bold"),
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False)
        table.add_column("index")
        table.add_column("expected", justify="right")
        table.add_column("received", justify="right")
        table.add_column("allowed error", justify="right")
        table.add_column("error / allowed", justify="right")
        for coords, expected, received, allowed in r.worst:
            ratio = abs(received - expected) / allowed if allowed else float("inf")
            table.add_row(str(coords), f"{expected:.8g}", f"{received:.8g}",
                          f"{allowed:.2g}", f"{ratio:.3g}")
        return table

    def _kinks(self, r: InputResult) -> Text:
        shown = ", ".join(f"{k.coords} [{k.lo:.4g}, {k.hi:.4g}] got {k.received:.4g}"
                          for k in r.kinks[:KINKS_SHOWN])
        more = f" and {len(r.kinks) - KINKS_SHOWN} more" if len(r.kinks) > KINKS_SHOWN else ""
        return Text.assemble(
            (f"{r.name}: {len(r.kinks)} kink{'s' if len(r.kinks) > 1 else ''} met", "bold"),
            f" (any value in [d-, d+] accepted): {shown}{more}",
        )
