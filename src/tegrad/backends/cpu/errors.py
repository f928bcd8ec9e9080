"""Why the compiled target is unavailable, or failed (importable without the rest)."""

from ..target import TargetFailed, TargetUnavailable


class CompilerMissing(TargetUnavailable):
    """No C compiler: the compiled target is unavailable."""


class CompileError(TargetFailed):
    """The C compiler is present but failed on the generated kernels."""
