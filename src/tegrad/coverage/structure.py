"""The shape of a generated backward: gather form, and its work against the forward's.

Gather form (DESIGN.md): no reduction of the backward keeps an index equation (an
unsolved scatter ``sum_{i : f(i) = j}``), and no backward tensor is larger than the
largest forward tensor (no Jacobian). Work: ``count_ops(grads, given=forward)``, the
backward's own flops, over the forward's; a hand-written backward of a contraction does
2x, of an elementwise op 1-3x.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.expr import Reduce, split_conjunction
from ..ir.tensor import Compute, Tensor
from ..ir.traverse import topo_tensors, walk
from ..lower.cost import count_ops
from .agreement import trace
from .cases import Case


def equations(t: Compute) -> list:
    """The integer index equations left in ``t``'s reductions (each one a scatter)."""
    found = []
    for node in walk(t.body):
        if isinstance(node, Reduce) and node.where is not None:
            for c in split_conjunction(node.where):
                if getattr(c, "op", None) == "eq" and c.a.dtype.startswith("int"):
                    found.append(c)
    return found


def backward_computes(outputs: list[Tensor], grads: list[Tensor]) -> list[Compute]:
    forward = set(topo_tensors(outputs))
    return [t for t in topo_tensors(grads) if isinstance(t, Compute) and t not in forward]


@dataclass
class Structure:
    grads: list[Tensor]
    scatters: list[str] = field(default_factory=list)  # backward tensors that scatter
    oversized: list[str] = field(default_factory=list)  # larger than any forward tensor
    forward_flops: int = 0
    backward_flops: int = 0

    @property
    def gather_form(self) -> bool:
        return not self.scatters and not self.oversized

    @property
    def cost_ratio(self) -> float:
        return self.backward_flops / max(self.forward_flops, 1)

    def describe(self) -> str:
        if self.gather_form:
            return "gather form"
        parts = []
        if self.scatters:
            parts.append("scatters in " + ", ".join(self.scatters))
        if self.oversized:
            parts.append("Jacobian-sized " + ", ".join(self.oversized))
        return "; ".join(parts)


def structure(case: Case, seed: int = 0) -> Structure:
    graph = trace(case, case.inputs(np.random.default_rng(seed)))
    found = Structure(graph.grads)
    if not graph.grads:
        return found
    largest = max([t.size for t in topo_tensors(graph.outputs)]
                  + [h.size for h in graph.heads])
    for t in backward_computes(graph.outputs, graph.grads):
        if equations(t):
            found.scatters.append(t.name)
        if t.size > largest:
            found.oversized.append(f"{t.name} {t.shape}")
    found.forward_flops = count_ops(graph.outputs).flops
    found.backward_flops = count_ops(graph.grads, given=graph.outputs).flops
    return found
