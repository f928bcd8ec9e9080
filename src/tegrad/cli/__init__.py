"""``tegrad check FILE.py``: run the gradient checker on the pairs a file defines;
``tegrad report``: the coverage report of ``tg.nn`` (``report.py``); ``tegrad cache``: where
the disk cache is, how big, and clearing it (``cache_command.py``).

    tegrad check examples/gradcheck_pairs.py             # rich output (plain without rich)
    tegrad check examples/gradcheck_pairs.py -k generated --quiet
    python -m tegrad check FILE.py --plain --seed 1

Options: ``--seed N`` and ``--probes N`` go to the checker; ``-k SUBSTRING`` keeps the
pairs whose name contains it; ``--plain`` prints ``GradCheckReport.summary()`` per pair;
``--quiet`` prints one line per pair. Modules: ``options`` (the parser), ``discover``
(loading FILE.py, finding pairs), ``runner`` (one pair: call, read its dict, check),
``render`` (plain text, and the choice of renderer), ``render_rich`` (tables and colour;
rich is imported only when it is used, never by ``import tegrad``), ``progress`` (the
report's live bar in a terminal, a line per finished op elsewhere).

The convention and exit statuses (``discover.CONVENTION``, also ``--help``) follow.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import cache_command, report
from .discover import CONVENTION, Discovery, UsageError, find_pairs, loaded, select
from .options import build_parser
from .render import make_renderer
from .runner import Outcome, run_pair

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
__doc__ = f"{__doc__}\n{CONVENTION}"  # one text for the docstring and --help


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tegrad`` command with ``argv`` (``sys.argv[1:]`` when None); return the
    exit status (0 all passed, 1 a pair failed or raised, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help and --version (0), bad options (2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    if args.command == "report":
        return report.main(args)
    if args.command == "cache":
        return cache_command.main(args)
    if args.command != "check":
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    options = {k: v for k, v in (("seed", args.seed), ("probes", args.probes)) if v is not None}
    renderer = make_renderer(plain=args.plain, quiet=args.quiet)
    outcomes: list[Outcome] = []
    try:
        with loaded(args.file) as module:
            discovery = find_pairs(module)
            selected = select(discovery.pairs, args.keywords)
            if not selected:
                raise UsageError(_nothing_found(args.file, discovery, args.keywords))
            renderer.start(args.file, discovery, selected)
            for pair in selected:
                outcome = run_pair(pair, options=options)
                renderer.outcome(outcome)
                outcomes.append(outcome)
    except UsageError as exc:
        print(f"tegrad check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    renderer.finish(outcomes)
    return EXIT_FAILED if any(o.failed for o in outcomes) else EXIT_OK


def _nothing_found(path: str, discovery: Discovery, keywords: Sequence[str] | None) -> str:
    if discovery.pairs:
        names = ", ".join(p.name for p in discovery.pairs)
        return f"{path}: no pair name contains {' or '.join(map(repr, keywords or []))} ({names})"
    skipped = ""
    if discovery.skipped:
        skipped = " (" + ", ".join(discovery.skipped) + " take required arguments)"
    return (f"{path}: no pairs found: no top-level function named gradcheck_* that takes "
            f"no required arguments{skipped}")


__all__ = ["CONVENTION", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]
