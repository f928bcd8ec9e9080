"""Elementwise arithmetic between whole tensors, with NumPy broadcasting.

``A + B`` for tensors of shapes (3, 1, 5) and (4, 1) is the compute
``C[i, j, k] = A[i, 0, k] + B[j, 0]`` of shape (3, 4, 5): a size-1 dimension is read
at index 0, and missing leading dimensions are not read at all.
"""

from __future__ import annotations

from .expr import as_expr, binary, unary
from .tensor import Tensor, compute, unique_name


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_read(t: Tensor, out_shape: tuple[int, ...], idx: tuple):
    """Read ``t`` at output index ``idx`` under broadcasting to ``out_shape``."""
    offset = len(out_shape) - t.ndim
    return t[
        tuple(
            0 if t.shape[a] == 1 and out_shape[a + offset] != 1 else idx[a + offset]
            for a in range(t.ndim)
        )
    ]


def elementwise(op: str, a: object, b: object) -> Tensor:
    tensors = [x for x in (a, b) if isinstance(x, Tensor)]
    shape = broadcast_shapes(*(t.shape for t in tensors))

    def operand(x, idx):
        return broadcast_read(x, shape, idx) if isinstance(x, Tensor) else x

    def body(*idx):
        lhs, rhs = operand(a, idx), operand(b, idx)
        if not hasattr(lhs, "dtype"):
            lhs = as_expr(lhs, rhs)
        return binary(op, lhs, rhs)

    return compute(shape, body, name=unique_name(f"T_{op}"))


def map_unary(op: str, x: Tensor) -> Tensor:
    return compute(x.shape, lambda *idx: unary(op, x[idx]), name=unique_name(f"T_{op}"))
