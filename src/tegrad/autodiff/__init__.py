"""Automatic differentiation of tensor expressions: reverse and forward mode."""

from ..errors import NotDifferentiableError
from .forward import jvp
from .reverse import gradient

__all__ = ["NotDifferentiableError", "gradient", "jvp"]
