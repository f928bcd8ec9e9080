"""Backends: turn a lowered plan into a callable. ``numpy`` is the reference."""

from __future__ import annotations

from .runtime import build, evaluate
from .vjp import Saved, build_vjp

__all__ = ["Saved", "build", "build_vjp", "evaluate"]
