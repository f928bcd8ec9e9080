"""Common-compute elimination: one compute for each distinct value a gradient builds.

Reverse mode writes one adjoint per tensor, and some come out equal. An LSTM's two bias
gradients are the same sum of its gate gradients over the steps and the batch; the
gradient of its input projection and that of its recurrent product are the same per-step
gate gradients. Computed apart, each is a pass over a ``T x N x 4H`` tensor.

Two computes are equal when they have the same shape and dtype and the same body once
their output axes are renamed by position (``i_0, i_1, ...``, one shared variable per
position and range) and their bound variables alpha-normalised (``canonical.py``). Nodes
are interned, so that test is a dictionary lookup. ``CommonComputes`` wraps the simplifier
that reverse mode applies to every compute it makes and answers the first of equal computes
each time, so every reader of a later copy reads the first. A compute that reads another
whole (``C[i] = D[i]``, an adjoint with one contribution) is answered with ``D``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.expr import Read
from ..ir.tensor import Compute
from ..ir.traverse import substitute
from .canonical import canonical_axes, canonical_var


def structure_key(c: Compute) -> tuple:
    """Equal for computes of equal values (shape, dtype, body up to variable names)."""
    renamed = {a: canonical_var(f"i_{n}", 0, n, a) for n, a in enumerate(c.axes)}
    return c.shape, c.dtype, canonical_axes(substitute(c.body, renamed))


class CommonComputes:
    """``finish`` for reverse mode (``autodiff.reverse.Finish``): simplify, then answer the
    first compute equal to it. ``alone`` simplifies only: reverse mode makes each requested
    gradient with it, so that two inputs with equal gradients still get a tensor each (both
    read the shared one)."""

    def __init__(self, simplify: Callable[[Compute], Compute]):
        self.simplify = self.alone = simplify
        self.seen: dict[tuple, Compute] = {}

    def __call__(self, c: Compute) -> Compute:
        c = self.simplify(c)
        if not isinstance(c, Compute):
            return c
        copied = copy_of(c)
        if copied is not None:
            return copied
        return self.seen.setdefault(structure_key(c), c)


def copy_of(c: Compute) -> Compute | None:
    """``D`` when ``c[i] = D[i]`` for every ``i`` (same shape): a copy, read ``D`` instead."""
    b = c.body
    if (isinstance(b, Read) and isinstance(b.tensor, Compute) and b.indices == c.axes
            and tuple(b.tensor.shape) == tuple(c.shape)):
        return b.tensor
    return None
