"""``target="cpu"``: general kernels compiled to C (``program.py``), as a ``Target``."""

from __future__ import annotations

from ...options import Options
from .errors import CompilerMissing


class CpuTarget:
    name = "cpu"
    description = "the compiled cpu target"
    fused = True
    cached = True  # a warm process neither plans nor writes C again (cache/disk.py)

    def unavailable(self) -> CompilerMissing | None:
        from .compiler import compiler

        if compiler() is None:
            return CompilerMissing("target 'cpu' needs a C compiler (set CC or install gcc)")
        return None

    def prepare(self, plan, options: Options):
        from .program import blueprint

        return blueprint(plan, options=options)

    def program(self, prepared, inputs: list, options: Options):
        from .program import CpuProgram

        return CpuProgram(prepared, inputs, options)
