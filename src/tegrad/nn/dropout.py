"""Dropout with the mask given, so the op is a deterministic function:

    dropout(x, mask, p)[i] = x[i] mask[i] / (1 - p)      (training)
                           = x[i]                        (evaluation)

Departure from ``torch.nn.functional.dropout(input, p, training, inplace)``: the mask
(float or bool, of ``input``'s shape or broadcastable to it, e.g. ``(N, C, 1, 1)`` for
``dropout2d``) is the second argument. Draw it yourself, e.g.
``rng.random(shape) >= p``; the gradient is then ``head * mask / (1 - p)``.
"""

from __future__ import annotations

from ..frontend.math import cast, if_then_else
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name

__all__ = ["dropout"]


def dropout(input: Tensor, mask: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """``x mask / (1 - p)`` when ``training``, else ``x`` (zeros where ``p = 1``).
    The mask is an argument (torch draws it): the op is deterministic."""
    x = input
    if not isinstance(x, Tensor) or not x.dtype.startswith("float"):
        raise ValueError("dropout: input must be a float tegrad Tensor, got "
                         f"{getattr(x, 'dtype', type(x).__name__)}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not isinstance(mask, Tensor) or not (mask.dtype == "bool"
                                            or mask.dtype.startswith("float")):
        raise ValueError("dropout: mask must be a bool or float tegrad Tensor, got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)}")
    try:
        shape = broadcast_shapes(x.shape, mask.shape)
    except ValueError:
        shape = None
    if shape != x.shape:
        raise ValueError(f"dropout: mask of shape {mask.shape} does not broadcast to the "
                         f"input's shape {x.shape}")
    name = unique_name("dropout")
    if not training:
        return compute(x.shape, lambda *i: x[i], name=name)
    if p == 1.0:
        return compute(x.shape, lambda *i: 0.0 * x[i], name=name)
    scale = 1.0 / (1.0 - p)

    def body(*i):
        keep = broadcast_read(mask, shape, i)
        if mask.dtype == "bool":
            return if_then_else(keep, x[i] * scale, 0.0)
        return x[i] * cast(keep, x.dtype) * scale

    return compute(x.shape, body, name=name)
