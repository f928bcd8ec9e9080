"""Elementwise arithmetic between whole tensors, with NumPy broadcasting.

``A + B`` for tensors of shapes (3, 1, 5) and (4, 1) is the compute
``C[i, j, k] = A[i, 0, k] + B[j, 0]`` of shape (3, 4, 5): a size-1 dimension is read
at index 0, and missing leading dimensions are not read at all. This module gives
``Tensor`` (``expr.py``, below it) these operators, at its end: ``A + B``, ``2 * A``,
``A / B``, ``A ** 2``, ``-A``, each one verified compute.
"""

from __future__ import annotations

from .compute import compute
from .expr import Tensor, as_expr, binary, unary
from .tensor import unique_name


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


def _operator(op: str, name: str, reverse: bool = False):
    """The method ``Tensor.<name>``: ``self <op> other`` (``other <op> self`` when
    ``reverse``)."""
    def method(self: Tensor, other) -> Tensor:
        return elementwise(op, other, self) if reverse else elementwise(op, self, other)
    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    return method


def _neg(self: Tensor) -> Tensor:
    return map_unary("neg", self)


_neg.__name__, _neg.__qualname__ = "__neg__", "Tensor.__neg__"
for _op, _name in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv"),
                   ("pow", "pow")):
    setattr(Tensor, f"__{_name}__", _operator(_op, f"__{_name}__"))
    setattr(Tensor, f"__r{_name}__", _operator(_op, f"__r{_name}__", reverse=True))
Tensor.__neg__ = _neg
del _op, _name
