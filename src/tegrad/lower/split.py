"""A forward+backward plan cut in two: the forward, and a backward that reads what the
forward kept (its residuals), as a framework's autograd runs them.

One program for ``[y, *grads]`` computes every value once. A backward run later, apart
from its forward (``tg.build_vjp``), either recomputes the forward (a program of
``grads`` alone: an LSTM's gradient runs its forward scan again) or reads values the
forward kept. The joint plan says which: with kernels ``K`` in order, the forward is

    F = the kernels y depends on: k in F if k makes y, or a tensor a kernel of F reads,

closed under "read by", so ``F`` in plan order, then the rest ``B``, is again an order in
which every tensor is made before it is read. The residuals are the tensors ``F`` makes
that ``B`` reads (a scan's histories and the step values it keeps, an LSTM's
``h W_hh^T``), or that are gradients themselves. The forward plan returns ``y`` and
them; the backward plan takes them as inputs (with the program's inputs that ``B``
reads, and the head) and makes the gradients.

A value that the joint plan recomputes in the backward (a gate's activation, from the
kept pre-activation) stays recomputed there: the cut moves no work between the halves,
so forward-then-backward does what the joint program does, less what fusion merged
across the cut.
"""

from __future__ import annotations

from ..ir.tensor import Placeholder, Tensor
from .kernels import Plan, reads_and_makes


def split_plan(p: Plan, forward: list[Tensor], backward: list[Tensor]):
    """``(forward plan, backward plan, residuals, inputs the backward reads)`` of the joint
    plan ``p`` of ``forward + backward`` outputs."""
    facts = [reads_and_makes(k) for k in p.kernels]
    needed, in_forward = set(forward), []
    for reads, makes in reversed(facts):
        mine = any(t in needed for t in makes)
        in_forward.append(mine)
        if mine:
            needed.update(reads)
    in_forward.reverse()
    made_first = {t for (_, makes), first in zip(facts, in_forward, strict=True) if first
                  for t in makes}
    wanted: dict = {}  # what the backward takes from outside it, in first-read order
    for (reads, _), first in zip(facts, in_forward, strict=True):
        if not first:
            wanted.update(dict.fromkeys(reads))
    wanted.update(dict.fromkeys(backward))
    residuals = [t for t in wanted if t in made_first and t not in forward]
    taken = [t for t in wanted if t in made_first and t in forward]  # y read by the backward
    inputs = [t for t in wanted if isinstance(t, Placeholder)]
    first = [k for k, f in zip(p.kernels, in_forward, strict=True) if f]
    second = [k for k, f in zip(p.kernels, in_forward, strict=True) if not f]
    return (Plan(first, [*forward, *residuals], p.notes), Plan(second, list(backward), p.notes),
            [*taken, *residuals], inputs)
