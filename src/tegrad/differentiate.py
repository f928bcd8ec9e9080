"""Public differentiation entry points: autodiff in scatter form, then simplification."""

from __future__ import annotations

from .autodiff import reverse
from .autodiff.forward import jvp as _jvp
from .cache.disk import remembered
from .ir.compute import compute
from .ir.scan import refuse_lag_reads
from .ir.tensor import Tensor
from .simplify import simplify_compute
from .simplify.cse import CommonComputes


def gradient(output: Tensor, inputs, head: Tensor | None = None) -> list[Tensor]:
    """Reverse mode with TVM's semantics.

    ``head`` has shape ``prefix + output.shape``; each result has shape
    ``prefix + input.shape``. ``head=None`` is the identity, so the results are full
    Jacobians (``output.shape + input.shape``). Results are ordinary tensors in gather
    form wherever the index equations could be solved; equal computes are made once
    (``simplify/cse.py``). A new process asking for the gradient of an equal graph
    loads it from the disk cache (``cache/disk.py``).
    """
    wrt = [inputs] if isinstance(inputs, Tensor) else inputs
    refuse_lag_reads([output])
    return remembered("gradient", (output, wrt, head),
                      lambda: reverse.gradient(output, wrt, head,
                                               finish=CommonComputes(simplify_compute)))


def jvp(output: Tensor, inputs, tangents) -> Tensor:
    """Forward mode: the derivative of ``output`` along ``tangents``."""
    refuse_lag_reads([output])
    return simplify_compute(_jvp(output, inputs, tangents))


def inner_product(outputs: list[Tensor], heads: list[Tensor]) -> Tensor:
    """``sum_k <H_k, y_k>`` as one 0-d compute: the loss whose gradient is the VJP of
    several outputs at once (``gradient(inner_product(ys, Hs), xs)``)."""
    from .frontend.reduce import reduce_axis
    from .frontend.reduce import sum as tsum

    def term(y, h):
        if not y.shape:
            return y[()] * h[()]
        axes = [reduce_axis(n, name=f"r{d}") for d, n in enumerate(y.shape)]
        return tsum(y[tuple(axes)] * h[tuple(axes)], axis=axes)

    def body():
        total = term(outputs[0], heads[0])
        for y, h in zip(outputs[1:], heads[1:], strict=True):
            total = total + term(y, h)
        return total

    return compute((), body, name="inner")
