"""Tensor nodes: placeholders (inputs), computes (``T[i, j] = body(i, j)``) and the
outputs of scans (a state's whole history).

Tensors are interned like expressions (their base ``Tensor`` is in ``expr.py``, beside
the ``Read`` that reads them). A placeholder carries a unique id, so two placeholders
with the same shape are distinct inputs. Indexing a tensor gives a ``Read`` expression;
arithmetic between tensors (with NumPy broadcasting, ``broadcast.py``) gives a new
``Compute``. ``make_compute`` builds a compute as it is; ``tg.compute`` (``compute.py``)
also names its axes and verifies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import dtype as dt
from .expr import Expr, Tensor, Var, fresh_uid


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Placeholder(Tensor):
    shape: tuple[int, ...]
    dtype: str
    name: str
    uid: int


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Compute(Tensor):
    shape: tuple[int, ...]
    axes: tuple[Var, ...]
    body: Expr
    name: str

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def op(self):
        """TVM compatibility: ``tensor.op.axis`` and ``tensor.op.body``."""
        return _OpView(self)


class _OpView:
    def __init__(self, tensor: Compute):
        self.axis = list(tensor.axes)
        self.body = [tensor.body]
        self.name = tensor.name


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class ScanOutput(Tensor):
    """State ``index`` of a scan: its whole history, shape ``(T,) + D`` (``tg.scan``,
    ``scan.py``, makes them)."""

    op: Any  # the ScanOp (scan.py) that runs the recurrence
    index: int
    shape: tuple[int, ...]
    dtype: str
    name: str
    uid: int

    def dependencies(self) -> list[Tensor]:
        return [*self.op.inits, *self.op.external]


_NAMES: dict[str, int] = {}


def unique_name(base: str) -> str:
    """``base`` the first time, then ``base_1``, ``base_2``... for readable printing."""
    n = _NAMES.get(base, 0)
    _NAMES[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def normalize_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    out = []
    for s in shape:
        if hasattr(s, "value") and not isinstance(s, Expr):  # TVM IntImm
            s = s.value
        if isinstance(s, Expr) or int(s) != s or int(s) < 0:
            raise ValueError(f"shape {tuple(shape)!r} must hold non-negative Python ints")
        out.append(int(s))
    return tuple(out)


def placeholder(shape, dtype: str = "float32", name: str | None = None) -> Placeholder:
    """An input tensor of ``shape`` (a tuple, or ``()`` for 0-d) and ``dtype``."""
    shape = normalize_shape(shape)
    return Placeholder(shape, dt.check(dtype), name or unique_name("placeholder"), fresh_uid())


def make_compute(shape, axes, body, name) -> Compute:
    """Build a compute without validation (for generated tensors that are valid by
    construction; the build step verifies them again)."""
    return Compute(tuple(shape), tuple(axes), body, name)
