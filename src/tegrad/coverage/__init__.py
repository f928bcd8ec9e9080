"""The coverage report: every ``tg.nn`` op, its generated backward checked and timed.

``cases`` defines a table entry; ``table/`` holds the table, one module per family of
ops (the tests in ``tests/test_nn.py`` run the same cases); ``agreement`` compares with
PyTorch in float64; ``structure`` asserts gather form and counts the backward's work;
``timing`` times a case against PyTorch eager, on its benchmark inputs or on its test
inputs scaled up (``scaling``); ``run`` runs every stage of a case; ``render`` (tables,
Markdown, HTML), ``plot`` (the figure) and ``record`` (``coverage.json``) make the
report's documents.
"""

from . import table  # noqa: F401  (fills CASES)
from .cases import CASES, CATEGORIES, Case, case

__all__ = ["CASES", "CATEGORIES", "Case", "case"]
