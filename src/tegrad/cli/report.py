"""``tegrad report``: the coverage report of ``tg.nn`` (see ``tegrad.coverage``).

    tegrad report                          # every op; writes reports/coverage.{md,html,png}
    tegrad report --ops conv2d,softmax     # a subset
    tegrad report --skip timing,gradcheck  # faster: correctness and structure only
    tegrad report --readme README.md       # also replace the README's embedded summary

Exit status 0 when every case passed, 1 when one failed (it is shown, never hidden),
2 for a usage error (an unknown op, a missing PyTorch).
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

README_START = "<!-- coverage:start -->"
README_END = "<!-- coverage:end -->"


def _progress(total: int, plain: bool):
    """A context manager yielding ``advance(description)``: rich's bar, or plain lines."""
    from contextlib import contextmanager

    @contextmanager
    def bar():
        if not plain:
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )
            except ImportError:
                pass
            else:
                with Progress(TextColumn("{task.description:<32}"), BarColumn(),
                              MofNCompleteColumn(), TimeElapsedColumn(),
                              transient=False) as progress:
                    task = progress.add_task("", total=total)
                    yield lambda text: progress.update(task, advance=1, description=text)
                return
        done = [0]

        def advance(text: str) -> None:
            done[0] += 1
            print(f"[{done[0]}/{total}] {text}", file=sys.stderr, flush=True)
        yield advance
    return bar()


def _print_table(rows, plain: bool) -> None:
    from ..coverage.render import HEADERS, SUMMARY_HEADERS, cells, summary_rows

    tables = [("coverage per category", SUMMARY_HEADERS, [s.cells() for s in summary_rows(rows)]),
              ("every case", HEADERS, [cells(r) for r in rows])]
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
                    bad = any(c.startswith(("FAIL", "NO", "error")) for c in row)
                    table.add_row(*row, style="red" if bad else None)
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
    from ..coverage.plot import figure_png
    from ..coverage.render import context, html_document, markdown
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
    rows = []
    start = time.perf_counter()
    with _progress(len(cases), args.plain) as advance:
        for case in cases:
            row = run_case(case, stages, repeats=args.repeats)
            rows.append(row)
            advance(f"{case.name} {'ok' if row.passed else 'FAIL'}")
    seconds = time.perf_counter() - start
    _print_table(rows, args.plain)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    about = context(rows, seconds, args.repeats)
    png = figure_png(rows)
    if png is not None:
        (out / "coverage.png").write_bytes(png)
    (out / "coverage.md").write_text(markdown(rows, about, "coverage.png" if png else None))
    encoded = base64.b64encode(png).decode() if png else None
    (out / "coverage.html").write_text(html_document(rows, about, encoded))
    print(f"wrote {out / 'coverage.md'}, {out / 'coverage.html'}"
          + (f", {out / 'coverage.png'}" if png else " (no plot: pip install matplotlib)"))
    if args.readme:
        from ..coverage.render import readme_block
        _embed(Path(args.readme), readme_block(rows, about, out / "coverage.md"))
        print(f"updated the coverage block of {args.readme}")
    failed = [r for r in rows if not r.passed]
    print(f"{len(rows) - len(failed)}/{len(rows)} cases passed"
          + (": failing " + ", ".join(r.case.name for r in failed) if failed else ""))
    return 1 if failed else 0


def add_parser(commands) -> None:
    report = commands.add_parser(
        "report", help="the coverage report of tg.nn: every op's backward checked and timed",
        description=__doc__.split("\n\n")[0])
    report.add_argument("--ops", metavar="A,B", help="only these ops (tg.nn names)")
    report.add_argument("--skip", metavar="STAGE,...",
                        help="skip stages: agreement, structure, gradcheck, timing")
    report.add_argument("--repeats", type=int, default=5, metavar="N",
                        help="timed runs per measurement (default 5; medians)")
    report.add_argument("--out", default="reports", metavar="DIR",
                        help="where coverage.md, coverage.html and coverage.png go")
    report.add_argument("--readme", metavar="FILE",
                        help="replace the block between the coverage markers of FILE")
    report.add_argument("--plain", action="store_true", help="plain text, no rich")

