"""Public exception types."""

from __future__ import annotations

from .ir.verify import IRError


class NotDifferentiableError(ValueError):
    """A derivative that does not exist: with respect to an integer tensor, or through a
    construct that has no rule. The message names the tensor and the construct."""


class GradientCheckError(AssertionError):
    """A backward disagrees with its forward; ``.report`` holds the GradCheckReport."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class CacheWarning(UserWarning):
    """Something of the disk cache (``cache/``) could not be used and was worked around: a
    stored file that cannot be loaded is made again and replaced, a cache directory that
    cannot be written is replaced by a temporary one. The message names the file or
    directory and what was done; results are unaffected."""


__all__ = ["CacheWarning", "IRError", "NotDifferentiableError", "GradientCheckError"]
