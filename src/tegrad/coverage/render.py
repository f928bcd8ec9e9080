"""The report's cells, and the Markdown and HTML documents made of them.

One function turns a ``Row`` into strings (``cells``); the rich table, the Markdown and
the HTML all print those, so the three never disagree. ``summary_rows`` gives one line
per category: ops, cases, cases passing, the gradient checker's verdicts counted apart
(PASS, INCONCLUSIVE, FAIL), backward in gather form, median speed ratios, and beside
them the tail the medians hide: the cases timed, those over ``SLOW`` (1.5x) and
``VERY_SLOW`` (3x) torch's time and the slowest one. ``slowest`` lists the ``WORST``
slowest cases of all. A case's speed (``speed``) is its forward+backward time over
torch's, or its forward's where nothing is differentiable.

An INCONCLUSIVE verdict does not fail a case (it still has to agree with PyTorch), but
it is never folded into the passes unsaid: it has its own column, the context line
counts it, and the documents carry ``INCONCLUSIVE_NOTE``, which says what it means.
"""

from __future__ import annotations

import html
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..check import FAIL, INCONCLUSIVE, PASS
from .cases import CATEGORIES
from .run import Row

INCONCLUSIVE_NOTE = (
    "INCONCLUSIVE (gradcheck): tg.check_gradient compared the generated gradient with "
    "float64 finite differences and found no element wrong, but the tolerance it derives "
    "(the differences' own error estimate plus float64 rounding) came to more than 1% of "
    "the typical gradient element, so it cannot vouch for the gradient more finely than "
    "that; this happens where the gradient is a near-cancelling sum of much larger "
    "Jacobian entries (normalizations) or is vanishingly small (softmax of large logits), "
    "and it is also the verdict when the forward is not finite at the test values. Such a "
    "case is not counted as failed: to pass, it still agrees with PyTorch in float64 "
    "(the vs torch f64 column).")

HEADERS = ("op", "case", "category", "vs torch f64", "gather form", "bwd/fwd flops",
           "gradcheck", "fwd / torch", "fwd+bwd / torch", "timed on", "status")

SLOW = 1.5  # tegrad / torch above this: a slow case
VERY_SLOW = 3.0
WORST = 20  # cases in the slowest-cases table


def speed(row: Row) -> float | None:
    """tegrad / torch time of a timed case: forward+backward, else the forward."""
    t = row.timing
    if t is None:
        return None
    return t.forward_ratio if t.both_ratio is None else t.both_ratio


def timed_on(row: Row) -> str:
    """Where the timing's inputs came from, and whether its results matched torch's."""
    t = row.timing
    if t is None:
        return "error" if "timing" in row.errors else "—"
    if t.check_error is None or t.checked:
        return t.inputs
    return f"{t.inputs}; f32 result differs {t.check_error:.0e}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _gather(row: Row) -> str:
    s = row.structure
    if s is None:
        return "error" if "structure" in row.errors else "—"
    if not s.grads:
        return "—"
    if s.gather_form:
        return "yes"
    return "scatter (by design)" if row.case.gather_form is None else "NO"


def cells(row: Row) -> tuple[str, ...]:
    a, s, t = row.agreement, row.structure, row.timing
    agreement = ("error" if "agreement" in row.errors else "—") if a is None else (
        f"{a.worst:.0e}" if a.ok else f"FAIL {a.worst:.1e}")
    cost = "—" if s is None or not s.grads else f"{s.cost_ratio:.1f}"
    gradcheck = row.gradcheck or ("error" if "gradcheck" in row.errors else "—")
    status = "ok" if row.passed else "FAIL: " + "; ".join(row.failures)
    return (row.case.op, row.case.label, row.case.category, agreement, _gather(row), cost,
            gradcheck, _ratio(t and t.forward_ratio), _ratio(t and t.both_ratio), timed_on(row),
            status)


@dataclass
class CategorySummary:
    category: str
    ops: int
    cases: int
    passing: int
    verdicts: dict[str, int]  # gradcheck PASS / INCONCLUSIVE / FAIL -> cases
    gather: int  # cases with a backward in gather form
    median_forward: float | None
    median_both: float | None
    timed: int = 0
    slow: int = 0  # speed over SLOW
    very_slow: int = 0  # speed over VERY_SLOW
    slowest: tuple[str, float] | None = None  # (case, speed)

    def cells(self) -> tuple[str, ...]:
        worst = "—" if self.slowest is None else f"{self.slowest[0]} {_ratio(self.slowest[1])}"
        return (self.category, str(self.ops), str(self.cases), f"{self.passing}/{self.cases}",
                *(str(self.verdicts[v]) for v in VERDICTS),
                str(self.gather), _ratio(self.median_forward), _ratio(self.median_both),
                str(self.timed), str(self.slow), str(self.very_slow), worst)


VERDICTS = (PASS, INCONCLUSIVE, FAIL)
SUMMARY_HEADERS = ("category", "ops", "cases", "passing",
                   *(f"gradcheck {v}" for v in VERDICTS), "gather form",
                   "median fwd / torch", "median fwd+bwd / torch", "timed",
                   f"over {SLOW:g}x", f"over {VERY_SLOW:g}x", "slowest")
SLOWEST_HEADERS = ("case", "category", "timed on", "fwd / torch", "fwd+bwd / torch")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rows: Sequence[Row], category: str) -> CategorySummary:
    timed = [r.timing for r in rows if r.timing is not None]
    speeds = [(speed(r), r.case.name) for r in rows if r.timing is not None]
    return CategorySummary(
        category, len({r.case.op for r in rows}), len(rows), sum(r.passed for r in rows),
        {v: sum(r.gradcheck == v for r in rows) for v in VERDICTS},
        sum(1 for r in rows if r.structure is not None and r.structure.grads
            and r.structure.gather_form),
        _median([t.forward_ratio for t in timed]),
        _median([t.both_ratio for t in timed if t.both_ratio is not None]),
        len(speeds), sum(v > SLOW for v, _ in speeds), sum(v > VERY_SLOW for v, _ in speeds),
        max(((name, v) for v, name in speeds), key=lambda found: found[1], default=None))


def slowest(rows: Sequence[Row], count: int = WORST) -> list[Row]:
    """The ``count`` timed cases with the largest ``speed``, slowest first."""
    return sorted((r for r in rows if r.timing is not None), key=lambda r: -speed(r))[:count]


def slowest_cells(row: Row) -> tuple[str, ...]:
    t = row.timing
    return (row.case.name, row.case.category, timed_on(row), _ratio(t.forward_ratio),
            _ratio(t.both_ratio))


def summary_rows(rows: Sequence[Row]) -> list[CategorySummary]:
    found = [summarize([r for r in rows if r.case.category == c], c)
             for c in CATEGORIES if any(r.case.category == c for r in rows)]
    found.append(summarize(rows, "all"))
    return found


def context(rows: Sequence[Row], seconds: float, repeats: int) -> str:
    """Where and how the report was made: machine, threads, repeats, run time."""
    threads = next((r.timing.threads for r in rows if r.timing), None)
    where = (f"{platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}")
    from ..backends.runtime import default_target

    target = {"cpu": "compiled cpu target", "numpy": "NumPy backend"}.get(default_target(),
                                                                          default_target())
    sources = [r.timing.inputs for r in rows if r.timing]
    scaled = sum(s.startswith("test x") for s in sources)
    timing = (f"; timings are medians of {repeats} alternating runs, float32, torch eager "
              f"with {threads} threads, tegrad on its {target}, {len(sources)} cases timed "
              f"({sources.count('bench')} on benchmark inputs, {scaled} on test inputs scaled "
              f"up, {sources.count('test')} on test inputs)" if threads else "")
    return (f"{len({r.case.op for r in rows})} ops, {len(rows)} cases, {passing(rows)}; "
            f"{where}{timing}; made in {seconds:.0f} s by `tegrad report`.")


def inconclusive(rows: Sequence[Row]) -> list[Row]:
    """The passing cases whose gradient check was INCONCLUSIVE."""
    return [r for r in rows if r.passed and r.gradcheck == INCONCLUSIVE]


def passing(rows: Sequence[Row]) -> str:
    """``478 passing``, or ``478 passing (5 with an INCONCLUSIVE gradient check)``."""
    unsure = len(inconclusive(rows))
    return f"{sum(r.passed for r in rows)} passing" + (
        f" ({unsure} with an INCONCLUSIVE gradient check)" if unsure else "")


def _markdown_table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return lines


def markdown(rows: Sequence[Row], context: str, plot_file: str | None = None) -> str:
    lines = ["# tegrad coverage report", "", context, ""]
    lines += _markdown_table(SUMMARY_HEADERS, [s.cells() for s in summary_rows(rows)])
    lines += ["", INCONCLUSIVE_NOTE]
    worst = slowest(rows)
    if worst:
        lines += ["", f"## The {len(worst)} slowest cases", ""]
        lines += _markdown_table(SLOWEST_HEADERS, [slowest_cells(r) for r in worst])
    if plot_file:
        lines += ["", f"![speed and coverage]({plot_file})"]
    lines += ["", "## Every case", ""]
    lines += _markdown_table(HEADERS, [cells(r) for r in rows])
    return "\n".join(lines) + "\n"


def _html_table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    out = [f"<table><thead><tr>{head}</tr></thead><tbody>"]
    for row in body:
        cls = {"fail": ' class="fail"', "unsure": ' class="inconclusive"'}.get(row_kind(row), "")
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def row_kind(row_cells: Sequence[str]) -> str | None:
    """How a printed row is highlighted: ``fail`` (a cell says FAIL, NO or error),
    ``unsure`` (an INCONCLUSIVE verdict, the case otherwise passing), or None."""
    if any(c.startswith(("FAIL", "NO", "error")) for c in row_cells):
        return "fail"
    if INCONCLUSIVE in row_cells:
        return "unsure"
    return None


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:110em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.2em .5em;
font-size:90%;text-align:left}tr.fail td{background:#fdd}tr.inconclusive td{background:#fff3cd}
th{background:#eee}"""


def html_document(rows: Sequence[Row], context: str, plot_png_base64: str | None) -> str:
    plot = (f'<img alt="speed and coverage" src="data:image/png;base64,{plot_png_base64}">'
            if plot_png_base64 else "<p>(no plot: matplotlib is not installed)</p>")
    return "\n".join([
        "<!DOCTYPE html>", '<html><head><meta charset="utf-8">',
        f"<title>tegrad coverage report</title><style>{STYLE}</style></head><body>",
        "<h1>tegrad coverage report</h1>", f"<p>{html.escape(context)}</p>",
        _html_table(SUMMARY_HEADERS, [s.cells() for s in summary_rows(rows)]),
        f"<p>{html.escape(INCONCLUSIVE_NOTE)}</p>",
        f"<h2>The {len(slowest(rows))} slowest cases</h2>",
        _html_table(SLOWEST_HEADERS, [slowest_cells(r) for r in slowest(rows)]), plot,
        "<h2>Every case</h2>", _html_table(HEADERS, [cells(r) for r in rows]),
        "</body></html>"])


def readme_block(rows: Sequence[Row], context_line: str, full_report) -> str:
    """The README's embedded summary: the per-category table and a pointer to the rest."""
    lines = [context_line, ""]
    lines += _markdown_table(SUMMARY_HEADERS, [s.cells() for s in summary_rows(rows)])
    failing = [r.case.name for r in rows if not r.passed]
    unsure = [r.case.name for r in inconclusive(rows)]
    lines += ["", "Failing: " + (", ".join(failing) if failing else "none") + "."]
    if unsure:
        lines += [f"Gradient check INCONCLUSIVE (not failed; see the report): "
                  f"{', '.join(unsure)}."]
    lines += [f"Every case, with the plot: `tegrad report` writes `{full_report}`."]
    return "\n".join(lines)
