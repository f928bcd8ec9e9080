"""``tegrad report``: the coverage report of ``tg.nn`` (see ``tegrad.coverage``).

    tegrad report                          # every op; writes build/report/coverage.*
    tegrad report --ops conv2d,softmax     # a subset
    tegrad report --skip timing,gradcheck  # faster: correctness and structure only
    tegrad report --out DIR                # the files elsewhere (default build/report)
    tegrad report --readme README.md       # also replace the README's embedded summary

Progress goes to stderr: a live bar in a terminal, else a line per finished op
(``progress.py``). The tables go to stdout; the files (coverage.md, coverage.html,
coverage.png and coverage.json with every row) to ``--out``, a folder git ignores by
default, so a run leaves a checkout clean.

Exit status 0 when every case passed, 1 when one failed (it is shown, never hidden),
2 for a usage error (an unknown op, a missing PyTorch).
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

from .progress import group_ends, progress

DEFAULT_OUT = "build/report"

README_START = "<!-- coverage:start -->"
README_END = "<!-- coverage:end -->"


def _print_table(rows, plain: bool) -> None:
    from ..coverage.render import (
        HEADERS,
        SLOWEST_HEADERS,
        SUMMARY_HEADERS,
        cells,
        row_kind,
        slowest,
        slowest_cells,
        summary_rows,
    )

    worst = slowest(rows)
    tables = [("coverage per category", SUMMARY_HEADERS, [s.cells() for s in summary_rows(rows)]),
              (f"the {len(worst)} slowest cases", SLOWEST_HEADERS,
               [slowest_cells(r) for r in worst]),
              ("every case", HEADERS, [cells(r) for r in rows])]
    tables = [t for t in tables if t[2]]  # no slowest-cases table when nothing was timed
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            console = Console()
            if not console.is_terminal:  # a log or a pipe: wide enough for every column
                console = Console(width=200)
            for title, headers, body in reversed(tables):
                table = Table(title=title, title_justify="left")
                for h in headers:
                    table.add_column(h, overflow="fold")
                for row in body:
                    kind = row_kind(row)
                    table.add_row(*row, style={"fail": "red", "unsure": "yellow"}.get(kind))
                console.print(table)
            return
    for title, headers, body in reversed(tables):
        print(title)
        print("\t".join(headers))
        for row in body:
            print("\t".join(row))
        print()


def _embed(readme: Path, block: str) -> None:
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} block to replace")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{block}\n{README_END}{tail}")


def main(args) -> int:
    try:
        import torch  # noqa: F401  (the reference of every case)
    except ImportError:
        print("tegrad report: error: PyTorch is the reference; pip install 'tegrad[report]'",
              file=sys.stderr)
        return 2
    from ..coverage.render import context, inconclusive
    from ..coverage.run import STAGES, run_case, select

    try:
        cases = select(args.ops.split(",") if args.ops else None)
        skip = set(args.skip.split(",")) if args.skip else set()
        unknown = skip - set(STAGES)
        if unknown:
            raise ValueError(f"unknown stage(s) {', '.join(sorted(unknown))}; stages: "
                             f"{', '.join(STAGES)}")
    except ValueError as exc:
        print(f"tegrad report: error: {exc}", file=sys.stderr)
        return 2
    stages = [s for s in STAGES if s not in skip]
    op_ends = group_ends(cases, key=lambda c: c.op)
    rows = []
    start = time.perf_counter()
    with progress(len(cases), args.plain) as shown:
        for index, case in enumerate(cases):
            rows.append(run_case(case, stages, repeats=args.repeats))
            shown.case_done(rows[-1])
            if index in op_ends:
                shown.group_done(case.op, [r for r in rows if r.case.op == case.op])
    seconds = time.perf_counter() - start
    _print_table(rows, args.plain)

    about = context(rows, seconds, args.repeats)
    written = write_outputs(Path(args.out), rows, about, seconds, args.repeats)
    if args.readme:
        from ..coverage.render import readme_block
        _embed(Path(args.readme), readme_block(rows, about, Path(args.out) / "coverage.md"))
    failed = [r for r in rows if not r.passed]
    unsure = inconclusive(rows)
    print(f"{len(rows) - len(failed)}/{len(rows)} cases passed"
          + (f" ({len(unsure)} with an INCONCLUSIVE gradient check: "
             + ", ".join(r.case.name for r in unsure) + ")" if unsure else "")
          + ("; failing " + ", ".join(r.case.name for r in failed) if failed else ""))
    print(f"wrote {', '.join(str(p) for p in written)}"
          + ("" if any(p.suffix == ".png" for p in written)
             else " (no plot: pip install matplotlib)"))
    if args.readme:
        print(f"updated the coverage block of {args.readme}")
    return 1 if failed else 0


def write_outputs(out: Path, rows, about: str, seconds: float, repeats: int) -> list[Path]:
    """coverage.md, coverage.html, coverage.json and (with matplotlib) coverage.png in
    ``out``, created if missing; returns the paths written."""
    from ..coverage.plot import figure_png
    from ..coverage.record import json_document
    from ..coverage.render import html_document, markdown

    out.mkdir(parents=True, exist_ok=True)
    png = figure_png(rows)
    encoded = base64.b64encode(png).decode() if png else None
    files: dict[str, str | bytes | None] = {
        "coverage.md": markdown(rows, about, "coverage.png" if png else None),
        "coverage.html": html_document(rows, about, encoded),
        "coverage.png": png,
        "coverage.json": json_document(rows, about, seconds, repeats)}
    written = []
    for name, content in files.items():
        if content is None:
            continue
        path = out / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        written.append(path)
    return written


def add_parser(commands) -> None:
    report = commands.add_parser(
        "report", help="the coverage report of tg.nn: every op's backward checked and timed",
        description=__doc__.split("\n\n")[0])
    report.add_argument("--ops", metavar="A,B", help="only these ops (tg.nn names)")
    report.add_argument("--skip", metavar="STAGE,...",
                        help="skip stages: agreement, structure, gradcheck, timing")
    report.add_argument("--repeats", type=int, default=5, metavar="N",
                        help="timed runs per measurement (default 5; medians)")
    report.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help="where coverage.md, .html, .png and .json go (default "
                             f"{DEFAULT_OUT}, which git ignores)")
    report.add_argument("--readme", metavar="FILE",
                        help="replace the block between the coverage markers of FILE")
    report.add_argument("--plain", action="store_true",
                        help="plain text, no rich: progress as a line per finished op")

