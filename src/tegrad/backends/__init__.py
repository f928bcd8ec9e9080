"""Backends: turn a lowered plan into a callable. ``numpy`` is the reference."""

from __future__ import annotations

from .runtime import build, evaluate

__all__ = ["build", "evaluate"]
