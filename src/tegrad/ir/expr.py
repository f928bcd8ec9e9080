"""Scalar expression nodes: immutable and interned.

Every node is a frozen, slotted dataclass whose constructor goes through an intern
table, so two structurally equal nodes are the same object. Equality and hashing are
therefore identity (``a is b``), which makes memo tables keyed by nodes cheap.
``==`` keeps that meaning; build an equality test with ``tegrad.equal``.

Nodes:
  Var(name, uid, dtype, lo, extent)   an index or reduction variable on [lo, lo+extent)
  Const(value, dtype)
  Read(tensor, indices)               tensor[i0, i1, ...]
  Unary(op, a, dtype)                 exp, log, neg, not, ...   (op: an ``Op``)
  Binary(op, a, b, dtype)             add, mul, floordiv, max, lt, and, ...
  Select(cond, a, b, dtype)           if_then_else
  Cast(a, dtype)
  Reduce(combiner, source, axes, where, dtype)

and ``Tensor``, the base of the tensor nodes (``tensor.py``) that a ``Read`` reads.
Printing (``repr``) and the arithmetic of whole tensors build on this module, so the
modules that define them give them to the nodes: ``printer.py`` and ``broadcast.py``
(``ir/__init__.py`` imports both with the package).
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from . import dtype as dt

# Weak values: a node lives as long as something uses it, then leaves the table.
_INTERN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_UIDS = itertools.count(1)


def fresh_uid() -> int:
    return next(_UIDS)


class Interned(type):
    """Metaclass: constructing a node with the same fields returns the same object."""

    def __call__(cls, *args):
        key = (cls, *(_key_of(a) for a in args))
        node = _INTERN.get(key)
        if node is None:
            node = super().__call__(*args)
            _INTERN[key] = node
        return node


def _key_of(value: object) -> object:
    # Child nodes by identity: the table must not keep them alive (a node keeps its own
    # children alive through its fields, and dies, leaving the table, before they do).
    if isinstance(type(value), Interned):
        return ("node", id(value))
    if isinstance(value, tuple):
        return tuple(_key_of(v) for v in value)
    # floats by bit pattern: 0.0 and -0.0 differ, nan equals nan
    if isinstance(value, float):
        return ("f", value.hex() if not math.isnan(value) else "nan")
    if isinstance(value, bool):
        return ("b", value)
    if callable(value):
        return ("fn", id(value))
    return value


class Op(StrEnum):
    """Every scalar op of a ``Unary`` or ``Binary`` node (their ``op``). A str enum, one
    whose ``str`` and f-string are the name (``class Op(str, Enum)`` would format as
    ``Op.ADD``): ``Op.ADD == "add"`` and hashes like it, so the passes that test
    ``e.op == "add"`` and the tables keyed by name (``numpy_ops``, the partials, the C
    renderer) take it as the name. ``tests/test_op_tables.py`` checks that every op is in
    every table. A node given a name as a str holds its ``Op``."""

    # unary, float-valued (an integer operand is cast to float32)
    EXP = "exp"
    LOG = "log"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    # unary, of the operand's dtype
    NEG = "neg"
    ABS = "abs"
    SIGN = "sign"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    STOP_GRADIENT = "stop_gradient"
    # unary, of a condition
    NOT = "not"
    # binary arithmetic
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"
    FLOORMOD = "floormod"
    POW = "pow"
    MAX = "max"
    MIN = "min"
    # comparisons (bool-valued)
    LT = "lt"
    LE = "le"
    EQ = "eq"
    NE = "ne"
    # logic (of conditions)
    AND = "and"
    OR = "or"


class Expr(metaclass=Interned):
    """Base of scalar expressions. Python operators build new nodes."""

    __slots__ = ()
    dtype: str
    memo: dict | None

    # arithmetic -------------------------------------------------------------
    def __add__(self, other):
        return binary(Op.ADD, self, other)

    def __radd__(self, other):
        return binary(Op.ADD, other, self)

    def __sub__(self, other):
        return binary(Op.SUB, self, other)

    def __rsub__(self, other):
        return binary(Op.SUB, other, self)

    def __mul__(self, other):
        return binary(Op.MUL, self, other)

    def __rmul__(self, other):
        return binary(Op.MUL, other, self)

    def __truediv__(self, other):
        return binary(Op.DIV, self, other)

    def __rtruediv__(self, other):
        return binary(Op.DIV, other, self)

    def __floordiv__(self, other):
        return binary(Op.FLOORDIV, self, other)

    def __rfloordiv__(self, other):
        return binary(Op.FLOORDIV, other, self)

    def __mod__(self, other):
        return binary(Op.FLOORMOD, self, other)

    def __rmod__(self, other):
        return binary(Op.FLOORMOD, other, self)

    def __pow__(self, other):
        return binary(Op.POW, self, other)

    def __rpow__(self, other):
        return binary(Op.POW, other, self)

    def __neg__(self):
        return unary(Op.NEG, self)

    def __lt__(self, other):
        return binary(Op.LT, self, other)

    def __le__(self, other):
        return binary(Op.LE, self, other)

    def __gt__(self, other):
        return binary(Op.LT, other, self)

    def __ge__(self, other):
        return binary(Op.LE, other, self)

    def __bool__(self):
        raise TypeError(
            "a tensor expression has no truth value; use tegrad.if_then_else, "
            "tegrad.all/any, and tegrad.equal instead of Python's if/and/or/=="
        )

    __hash__ = object.__hash__

    # __repr__: index notation, given by printer.py (it prints every node class below)


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Var(Expr):
    """An index variable ranging over [lo, lo + extent); also the formal parameters of
    custom reducers (then float-typed, with no range)."""

    name: str
    uid: int
    dtype: str = dt.INDEX
    lo: int = 0
    extent: int | None = None
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo

    @staticmethod
    def fresh(name: str, lo: int = 0, extent: int | None = None, dtype: str = dt.INDEX) -> Var:
        return Var(name, fresh_uid(), dtype, lo, extent)

    @property
    def hi(self) -> int:
        """Largest value (inclusive)."""
        return self.lo + self.extent - 1

    # TVM compatibility: an IterVar has .var and .dom
    @property
    def var(self) -> Var:
        return self

    @property
    def dom(self) -> tuple[int, int]:
        return (self.lo, self.lo + self.extent)


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Const(Expr):
    value: Any
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Read(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Unary(Expr):
    op: Op
    a: Expr
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo

    def __post_init__(self):
        if type(self.op) is not Op:  # (given by name: its Op; Op() costs 7x the test)
            object.__setattr__(self, "op", Op(self.op))


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Binary(Expr):
    op: Op
    a: Expr
    b: Expr
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo

    def __post_init__(self):
        if type(self.op) is not Op:  # (given by name: its Op; Op() costs 7x the test)
            object.__setattr__(self, "op", Op(self.op))


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Cast(Expr):
    a: Expr
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Combiner(metaclass=Interned):
    """How a reduction combines values.

    Built-in kinds: sum, prod, max, min, argmax, argmin. A custom reducer
    (``tegrad.comm_reducer``) has kind "custom": ``combine`` is an expression of the
    two parameter variables ``lhs`` and ``rhs``, and ``identity(dtype)`` gives the
    identity element.
    """

    kind: str
    name: str
    lhs: Var | None = None
    rhs: Var | None = None
    combine: Expr | None = None
    identity: Any = None

    BUILTIN: ClassVar[tuple[str, ...]] = ("sum", "prod", "max", "min", "argmax", "argmin")

    def identity_value(self, dtype: str) -> object:
        if self.kind == "custom":
            value = self.identity(dtype)
            return value.value if isinstance(value, Const) else value
        if self.kind == "sum":
            return 0
        if self.kind == "prod":
            return 1
        big = math.inf if dt.is_float(dtype) else _int_limit(dtype)
        return -big if self.kind == "max" else big

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class FixedIdentity:
    """A custom combiner's ``identity``: the same expression whatever the dtype asked (the
    combiner is made per dtype). A class, not a lambda, so that a program holding the
    combiner can be stored (``serialize.py``)."""

    value: Expr

    def __call__(self, dtype: str) -> Expr:
        return self.value


def _int_limit(dtype: str) -> int:
    return (1 << 31) - 1 if dtype == "int32" else (1 << 63) - 1


@dataclass(frozen=True, slots=True, eq=False, repr=False, weakref_slot=True)
class Reduce(Expr):
    """``combiner`` over ``source`` for every point of ``axes`` where ``where`` holds.

    ``where`` is None or a bool expression; the reduction of an empty set is the
    combiner's identity. argmax/argmin give the first extreme position, as a flat index
    over ``axes`` in row-major order (one axis: the axis value minus its start).
    """

    combiner: Combiner
    source: Expr
    axes: tuple[Var, ...]
    where: Expr | None
    dtype: str
    memo: dict | None = field(default=None, repr=False)  # derived facts, see node_memo


class Tensor(metaclass=Interned):
    """Base of tensor nodes (``tensor.py``: Placeholder, Compute, ScanOutput), interned
    like expressions. Indexing a tensor gives a ``Read``."""

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

    __hash__ = object.__hash__

    # __str__ (the program in index notation): printer.py; arithmetic (+ - * / ** and
    # unary -, NumPy broadcasting, each a verified compute): broadcast.py

    def __repr__(self) -> str:
        return f"<tensor {self.name} {self.shape} {self.dtype}>"


SUM = Combiner("sum", "sum")
PROD = Combiner("prod", "prod")
MAX = Combiner("max", "max")
MIN = Combiner("min", "min")
ARGMAX = Combiner("argmax", "argmax")
ARGMIN = Combiner("argmin", "argmin")

# ---------------------------------------------------------------------------
# constructors with dtype rules and light constant folding

UNARY_FLOAT = (Op.EXP, Op.LOG, Op.LOG1P, Op.EXPM1, Op.SQRT, Op.RSQRT, Op.TANH, Op.SIGMOID,
               Op.SIN, Op.COS, Op.ERF)
UNARY_SAME = (Op.NEG, Op.ABS, Op.SIGN, Op.FLOOR, Op.CEIL, Op.ROUND, Op.STOP_GRADIENT)
UNARY_OPS = (*UNARY_FLOAT, *UNARY_SAME, Op.NOT)
ARITH_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.FLOORMOD, Op.POW, Op.MAX, Op.MIN)
COMPARE_OPS = (Op.LT, Op.LE, Op.EQ, Op.NE)
LOGIC_OPS = (Op.AND, Op.OR)
BINARY_OPS = (*ARITH_OPS, *COMPARE_OPS, *LOGIC_OPS)


def const(value: object, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = dt.INDEX
        else:
            dtype = "float32"
    dtype = dt.check(dtype)
    if dtype == "bool":
        value = bool(value)
    elif dt.is_int(dtype):
        if isinstance(value, float) and not float(value).is_integer():
            raise TypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
        value = int(value)
    else:
        value = float(value)
    return Const(value, dtype)


def as_expr(value: object, like: Expr | None = None) -> Expr:
    """Lift a Python scalar next to an expression ``like`` (taking its dtype where sane)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "shape") and hasattr(value, "ndim") and getattr(value, "ndim", 1) == 0:
        value = value.item()  # NumPy scalars
    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        if like is not None and like.dtype != "bool":
            return const(value, like.dtype)
        return const(value, dt.INDEX)
    if isinstance(value, float):
        if like is not None and dt.is_float(like.dtype):
            return const(value, like.dtype)
        return const(value, "float32")
    if isinstance(value, Tensor):
        raise TypeError(
            f"tensor {value.name} used as a scalar expression: index it, e.g. {value.name}[i, j]"
        )
    raise TypeError(f"cannot use {type(value).__name__} {value!r} in a tensor expression")


def unary(op: str, a: object) -> Expr:
    if op not in UNARY_OPS:
        raise NotImplementedError(f"unknown unary op {op!r}")
    a = as_expr(a)
    if op == "not":
        return Unary(op, _as_bool(a, "logical_not"), "bool")
    if op in UNARY_FLOAT:
        out = a.dtype if dt.is_float(a.dtype) else "float32"
        return Unary(op, cast(a, out), out)
    if a.dtype == "bool":
        raise TypeError(f"{op} of a bool expression {a!r}")
    if op in ("floor", "ceil", "round") and dt.is_int(a.dtype):
        return a
    return Unary(op, a, a.dtype)


def _as_bool(a: Expr, what: str) -> Expr:
    if a.dtype != "bool":
        raise TypeError(f"{what} needs a condition (bool expression), got {a!r} of {a.dtype}")
    return a


def binary(op: str, a: object, b: object) -> Expr:
    if op not in BINARY_OPS:
        raise NotImplementedError(f"unknown binary op {op!r}")
    if not isinstance(a, Expr):
        a = as_expr(a, b if isinstance(b, Expr) else None)
    b = as_expr(b, a)
    if op in LOGIC_OPS:
        return Binary(op, _as_bool(a, op), _as_bool(b, op), "bool")
    if op in COMPARE_OPS:
        common = dt.promote(a.dtype, b.dtype)
        return Binary(op, cast(a, common), cast(b, common), "bool")
    if a.dtype == "bool" or b.dtype == "bool":
        raise TypeError(f"arithmetic {op} on a bool expression: {a!r}, {b!r}; cast it first")
    out = dt.promote(a.dtype, b.dtype)
    if op == "div" and dt.is_int(out):
        out = "float32"
    if op in ("floordiv", "floormod") and dt.is_float(out):
        raise TypeError(f"{op} needs integer operands, got {a.dtype} and {b.dtype}")
    return Binary(op, cast(a, out), cast(b, out), out)


def cast(a: object, dtype: str) -> Expr:
    a = as_expr(a)
    dtype = dt.check(dtype)
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        return const(a.value if dtype != "bool" else bool(a.value), dtype)
    return Cast(a, dtype)


def select(cond: object, a: object, b: object) -> Expr:
    if isinstance(cond, bool):
        raise TypeError(
            "if_then_else got a Python bool as its condition; "
            "write the test with tegrad.equal/not_equal or <, <=, >, >="
        )
    cond = _as_bool(as_expr(cond), "if_then_else")
    if not isinstance(a, Expr):
        a = as_expr(a, b if isinstance(b, Expr) else None)
    b = as_expr(b, a)
    out = dt.promote(a.dtype, b.dtype)
    return Select(cond, cast(a, out), cast(b, out), out)


def node_memo(e: Expr) -> dict:
    """A per-node dictionary for facts derived from it (free variables, simplified form,
    ...). Kept on the node, so it goes when the node goes."""
    m = e.memo
    if m is None:
        m = {}
        object.__setattr__(e, "memo", m)
    return m


def conjunction(conds) -> Expr | None:
    """``c0 && c1 && ...``, or None for no condition."""
    out = None
    for c in conds:
        out = c if out is None else binary("and", out, c)
    return out


def split_conjunction(c: Expr) -> list[Expr]:
    """The conjuncts of ``c``: ``a && (b && c)`` gives ``[a, b, c]``."""
    if isinstance(c, Binary) and c.op == "and":
        return split_conjunction(c.a) + split_conjunction(c.b)
    return [c]


def read(tensor: Any, indices: tuple) -> Read:
    return Read(tensor, tuple(as_expr(i) for i in indices), tensor.dtype)
