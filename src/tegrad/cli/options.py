"""The command line: ``tegrad check FILE.py [--seed N] [--probes N] [-k SUBSTRING]
[--plain] [--quiet]``; its ``--help`` carries the convention of ``discover.CONVENTION``."""

from __future__ import annotations

import argparse
import inspect

from .. import __version__
from ..check import check_gradient
from . import cache_command, report
from .discover import CONVENTION

DESCRIPTION = """\
Check the forward/backward pairs that FILE.py defines: each gradcheck_* function
returns tensor expressions (checked with tg.check_gradient) or NumPy callables
(checked with tg.check_vjp). Output is coloured with rich when it is installed
(pip install 'tegrad[cli]'), plain text otherwise or with --plain."""


def _checker_default(option: str) -> object:
    return inspect.signature(check_gradient).parameters[option].default


def count(text: str) -> int:
    """A non-negative integer option."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tegrad", description="tegrad: backward operators from tensor expressions.")
    parser.add_argument("--version", action="version", version=f"tegrad {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check", help="check the gradients of the pairs in FILE.py",
        description=DESCRIPTION, epilog=CONVENTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", metavar="FILE.py", help="the file defining gradcheck_* pairs")
    check.add_argument(
        "--seed", type=int, default=None, metavar="N",
        help=f"seed of the checker's random values and probes "
             f"(default {_checker_default('seed')})")
    check.add_argument(
        "--probes", type=count, default=None, metavar="N",
        help=f"Gaussian probes of the screening check (default {_checker_default('probes')})")
    check.add_argument(
        "-k", dest="keywords", action="append", metavar="SUBSTRING",
        help="only the pairs whose name contains SUBSTRING (repeat: any of several)")
    check.add_argument("--plain", action="store_true",
                       help="plain text output (the report summaries), without rich")
    check.add_argument("--quiet", "-q", action="store_true",
                       help="one line per pair: verdict, name, and where it failed")
    report.add_parser(commands)
    cache_command.add_parser(commands)
    return parser
