"""The C function of a general kernel: its loop nest, rendered.

Every decision (parallel axes, merged leading axes, column order, regions, residue
classes, row caches, reduction bounds, loops shared by sibling reductions, unrolling,
guards and clamped reads, streamed outputs) is made once, target-neutral, by
``lower/nest_build.kernel_nest``; ``backends/c/render.CDialect`` prints the tree as
OpenMP C. ``KernelSource`` is what ``program.blueprint`` calls; ``ScatterSource`` the same for a
scatter kernel (``lower/nest_scatter.scatter_nest``).

Names in the source (``i0``, ``r1``, ``t5``, ``a2``) are given in order of first use, so
the same structure, shapes and dtypes give the same text: the text is the cache key.
"""

from __future__ import annotations

from ...ir.tensor import Compute
from ...lower.nest import Gather, LoopNest
from ...lower.nest_build import kernel_nest
from ...lower.nest_scatter import scatter_nest
from ...lower.scatter import Scatter
from ...options import Options
from ..c.render import CDialect

DIALECT = CDialect()


class KernelSource:
    """The C function ``name`` computing ``t`` (its body: ``body_of``'s); ``also``,
    ``columns``, ``stream``: as ``kernel_nest``'s; ``options``: None for
    ``Options.from_environment()``."""

    def __init__(self, t: Compute, body_of: Compute, name: str, also: tuple = (),
                 columns: tuple = (), stream: frozenset = frozenset(),
                 options: Options | None = None):
        self.nest: LoopNest = kernel_nest(t, body_of, name, also, columns, stream, options)
        self.tensor = t
        self.name = name
        self.args: list = self.nest.args  # outputs first, then each tensor read
        self.outputs = self.nest.outputs
        self.gathers: list[Gather] = self.nest.gathers
        self.text = DIALECT.render(self.nest)


class ScatterSource:
    """The C function ``name`` making ``t`` by the scatter-add ``s`` (``KernelSource``'s
    attributes)."""

    def __init__(self, t: Compute, s: Scatter, name: str, options: Options | None = None):
        self.nest: LoopNest = scatter_nest(t, s, name, options)
        self.tensor = t
        self.name = name
        self.args: list = self.nest.args  # the output, then each tensor read
        self.outputs = self.nest.outputs
        self.gathers: list[Gather] = self.nest.gathers
        self.text = DIALECT.render(self.nest)
