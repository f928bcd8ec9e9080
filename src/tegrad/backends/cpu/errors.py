"""Why the compiled target is unavailable (imported by ``runtime.py`` without the rest)."""


class CompilerMissing(RuntimeError):
    """No C compiler: the compiled target is unavailable."""


class CompileError(RuntimeError):
    """The C compiler is present but failed on the generated kernels."""
