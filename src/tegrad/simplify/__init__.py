"""Simplification: algebra, conditions, and scatter-to-gather."""

from .pipeline import simplify, simplify_compute

__all__ = ["simplify", "simplify_compute"]
