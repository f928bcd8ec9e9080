"""Moved to ``lower/nest_facts.py`` (target-neutral); kept for ``grouping.py``'s import
until grouping moves into ``lower/`` (issue 28)."""

from ...lower.nest_facts import column_order, regions

__all__ = ["column_order", "regions"]
