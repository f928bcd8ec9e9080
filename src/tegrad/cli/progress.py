"""Progress of ``tegrad report`` on stderr: a live bar in a terminal, lines elsewhere.

In a terminal (stderr is a TTY, rich installed, no ``--plain``) rich draws one bar that
advances per case. Anywhere else (a log file, a pipe, CI) a live bar would only appear
once, at the end, so each finished op prints one line instead, flushed at once:

    [37/478] conv2d: 8 cases, 8 passed, 0 failed (2m14s elapsed)
    [59/478] batch_norm: 3 cases, 3 passed (1 inconclusive), 0 failed (3m02s elapsed)
    [61/478] relu: 2 cases, 1 passed, 1 failed: relu[at 0] (3m05s elapsed)

An op's line comes when its last case (in table order) finishes: the table lists a few
ops in several places, and each op still gets one line. ``[37/478]`` counts cases.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..check import INCONCLUSIVE

if TYPE_CHECKING:  # the report's rows; imported late, so ``import tegrad.cli`` stays light
    from ..coverage.run import Row

T = TypeVar("T")


def group_ends(items: Sequence[T], key: Callable[[T], Hashable]) -> dict[int, Hashable]:
    """``{index of a group's last item: the group's key}``, one entry per key.

    ``group_ends(["add", "mul", "add"], str) == {1: "mul", 2: "add"}``: once item ``i``
    has run, the group ``group_ends(...)[i]`` (if any) is complete."""
    last = {key(item): index for index, item in enumerate(items)}
    return {index: k for k, index in last.items()}


def elapsed(seconds: float) -> str:
    """``9s``, ``2m14s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def group_line(done: int, total: int, name: str, rows: Sequence[Row], seconds: float) -> str:
    """One finished group: cases, passed (and how many of those inconclusive), failed."""
    passed = [r for r in rows if r.passed]
    failed = [r for r in rows if not r.passed]
    inconclusive = sum(r.gradcheck == INCONCLUSIVE for r in passed)
    cases = f"{len(rows)} case{'s' if len(rows) != 1 else ''}"
    passing = f"{len(passed)} passed" + (f" ({inconclusive} inconclusive)" if inconclusive
                                         else "")
    failing = f"{len(failed)} failed" + (
        ": " + ", ".join(r.case.name for r in failed) if failed else "")
    return f"[{done}/{total}] {name}: {cases}, {passing}, {failing} ({elapsed(seconds)} elapsed)"


class RunProgress(Protocol):
    def case_done(self, row: Row) -> None: ...

    def group_done(self, name: str, rows: Sequence[Row]) -> None: ...


class LineProgress:
    """A line per finished group on ``stream`` (stderr, looked up when printing)."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.done = 0
        self.start = time.perf_counter()
        self._stream = stream

    def case_done(self, row: Row) -> None:
        self.done += 1

    def group_done(self, name: str, rows: Sequence[Row]) -> None:
        line = group_line(self.done, self.total, name, rows, time.perf_counter() - self.start)
        print(line, file=self._stream or sys.stderr, flush=True)


class _BarProgress:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def case_done(self, row: Row) -> None:
        self.bar.update(self.task, advance=1,
                        description=f"{row.case.name} {'ok' if row.passed else 'FAIL'}")

    def group_done(self, name: str, rows: Sequence[Row]) -> None:
        pass


def live_bar_possible(plain: bool) -> bool:
    """A live bar needs a terminal on stderr, rich, and no ``--plain``."""
    if plain or not sys.stderr.isatty():
        return False
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def progress(total: int, plain: bool = False) -> Iterator[RunProgress]:
    """The progress shown while ``total`` cases run (see the module docstring)."""
    if not live_bar_possible(plain):
        yield LineProgress(total)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<32}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True)) as bar:
        yield _BarProgress(bar, bar.add_task("", total=total))
