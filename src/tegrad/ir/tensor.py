"""Tensor nodes: placeholders (inputs) and computes (``T[i, j] = body(i, j)``).

Tensors are interned like expressions. A placeholder carries a unique id, so two
placeholders with the same shape are distinct inputs. Indexing a tensor gives a
``Read`` expression; arithmetic between tensors (with NumPy broadcasting) gives a new
``Compute``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import dtype as dt
from .expr import Expr, Interned, Var, as_expr, fresh_uid, read


class Tensor(metaclass=Interned):
    __slots__ = ()
    shape: tuple[int, ...]
    dtype: str
    name: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __iter__(self):
        # without this, Python would iterate by calling T[0], T[1], ... forever (every
        # integer is a valid symbolic read), e.g. topo_tensors(T) instead of ([T])
        raise TypeError(f"tensor {self.name} is not iterable: read it as {self.name}[i, ...]")

    def __getitem__(self, indices) -> Expr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise IndexError(
                f"{self.name} has {len(self.shape)} dimension(s) {self.shape}, "
                f"read with {len(indices)} index(es)"
            )
        exprs = []
        for axis, index in enumerate(indices):
            if isinstance(index, slice):
                raise TypeError(f"{self.name}: slices are not indices; write a compute")
            e = as_expr(index)
            if not dt.is_int(e.dtype):
                raise TypeError(
                    f"{self.name}: index {axis} is {e!r} of dtype {e.dtype}; "
                    "indices must be integer expressions (cast with tegrad.cast)"
                )
            exprs.append(e)
        return read(self, tuple(exprs))

    # elementwise arithmetic with broadcasting --------------------------------
    def _elementwise(self, op, other, reverse=False):
        from .broadcast import elementwise

        return elementwise(op, other, self) if reverse else elementwise(op, self, other)

    def __add__(self, o):
        return self._elementwise("add", o)

    def __radd__(self, o):
        return self._elementwise("add", o, True)

    def __sub__(self, o):
        return self._elementwise("sub", o)

    def __rsub__(self, o):
        return self._elementwise("sub", o, True)

    def __mul__(self, o):
        return self._elementwise("mul", o)

    def __rmul__(self, o):
        return self._elementwise("mul", o, True)

    def __truediv__(self, o):
        return self._elementwise("div", o)

    def __rtruediv__(self, o):
        return self._elementwise("div", o, True)

    def __pow__(self, o):
        return self._elementwise("pow", o)

    def __rpow__(self, o):
        return self._elementwise("pow", o, True)

    def __neg__(self):
        from .broadcast import map_unary

        return map_unary("neg", self)

    __hash__ = object.__hash__

    def __str__(self) -> str:
        from .printer import format_program

        return format_program([self])

    def __repr__(self) -> str:
        return f"<tensor {self.name} {self.shape} {self.dtype}>"


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
    shape = normalize_shape(shape)
    return Placeholder(shape, dt.check(dtype), name or unique_name("placeholder"), fresh_uid())


def compute(shape, fcompute, name: str | None = None) -> Compute:
    """``T[i0, i1, ...] = fcompute(i0, i1, ...)`` over ``shape``."""
    from .verify import verify_compute

    shape = normalize_shape(shape)
    name = name or unique_name("compute")
    axis_names = _axis_names(fcompute, len(shape))
    axes = tuple(Var.fresh(n, 0, s) for n, s in zip(axis_names, shape, strict=True))
    try:
        body = as_expr(fcompute(*axes))
    except TypeError:
        _check_arity(fcompute, shape, name)  # (the wrong arity: say so; else re-raise)
        raise
    tensor = make_compute(shape, axes, body, name)
    verify_compute(tensor)
    return tensor


def make_compute(shape, axes, body, name) -> Compute:
    """Build a compute without validation (for generated tensors that are valid by
    construction; the build step verifies them again)."""
    return Compute(tuple(shape), tuple(axes), body, name)


def _check_arity(fcompute, shape: tuple, name: str) -> None:
    """Raise, for a ``fcompute`` that cannot take one index argument per axis of ``shape``,
    an error naming the compute, its shape and the arity expected (not the bare TypeError
    of the call). Called when the call raised TypeError, so it costs nothing otherwise."""
    import inspect

    try:
        signature = inspect.signature(fcompute)
    except (TypeError, ValueError):  # (a builtin or a C callable: let the call decide)
        return
    try:
        signature.bind(*range(len(shape)))
    except TypeError as error:
        raise TypeError(
            f"tg.compute {name}: shape {shape} has {len(shape)} "
            f"{'axis' if len(shape) == 1 else 'axes'}, so fcompute is called with "
            f"{len(shape)} index argument(s), but {getattr(fcompute, '__name__', 'it')}"
            f"{signature} does not take them ({error})") from None


def _axis_names(fcompute, n: int) -> list[str]:
    code = getattr(fcompute, "__code__", None)
    if code is not None and code.co_argcount == n and not code.co_flags & 0x04:
        return list(code.co_varnames[:n])
    return [f"i{k}" for k in range(n)]
