"""Public differentiation entry points: autodiff in scatter form, then simplification."""

from __future__ import annotations

from .autodiff import reverse
from .autodiff.forward import jvp as _jvp
from .ir.tensor import Tensor
from .simplify import simplify_compute


def gradient(output: Tensor, inputs, head: Tensor | None = None) -> list[Tensor]:
    """Reverse mode with TVM's semantics.

    ``head`` has shape ``prefix + output.shape``; each result has shape
    ``prefix + input.shape``. ``head=None`` is the identity, so the results are full
    Jacobians (``output.shape + input.shape``). Results are ordinary tensors in gather
    form wherever the index equations could be solved.
    """
    single = isinstance(inputs, Tensor)
    grads = reverse.gradient(output, [inputs] if single else inputs, head, finish=simplify_compute)
    return grads


def jvp(output: Tensor, inputs, tangents) -> Tensor:
    """Forward mode: the derivative of ``output`` along ``tangents``."""
    return simplify_compute(_jvp(output, inputs, tangents))
