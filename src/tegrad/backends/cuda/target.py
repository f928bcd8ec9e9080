"""``target="cuda"``: a plan's kernels generated as Triton kernels (``program.py``), as a
``Target``. ``target=None`` takes it where a GPU is present (not in the interpreter, which
is for proving the target on a CPU); a machine without one passes over it silently."""

from __future__ import annotations

from ...options import Options
from . import device


class CudaTarget:
    name = "cuda"
    description = "the cuda target"
    fused = False  # fused here (program.fused): no loop-nest grouping, no views
    cached = False
    quiet_when_unavailable = True  # most machines have no GPU: no warning for passing it over

    def unavailable(self):
        return device.unavailable()

    def unavailable_by_default(self):
        """Why ``target=None`` does not take it: only the interpreter, no GPU driver (asked
        before torch is imported: a ``tg.build`` on a machine without a GPU does not pay
        for loading torch), or unavailable."""
        from ..target import TargetUnavailable

        if device.interpreting():
            return TargetUnavailable("target 'cuda' runs in Triton's interpreter here")
        if not device.may_have_gpu():
            return TargetUnavailable("target 'cuda' needs an NVIDIA GPU (no driver device "
                                     f"node: {', '.join(device.DRIVER_NODES)})")
        return device.unavailable()

    def prepare(self, plan, options: Options):
        from .program import blueprint, fused

        return blueprint(fused(plan, options), options=options)

    def program(self, prepared, inputs: list, options: Options):
        from .program import CudaProgram

        return CudaProgram(prepared, inputs, options)
