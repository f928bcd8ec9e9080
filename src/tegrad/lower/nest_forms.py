"""The values of a loop-nest tree (``nest.py``): operands, integer forms, scalar forms.

An operand is a name (``Ref``: a local, an accumulator, a loop variable) or a literal
(``Lit``). The right side of a ``Let`` is one scalar form over operands: ``Apply`` (a
``tegrad.ir`` scalar op or a cast), ``Load`` (an element of a kernel argument, each
dimension an ``IndexTerm``), ``Choose`` (``cond ? a : b``), ``BufferLoad`` (a row
cache). Loop bounds are ints or integer forms over named variables (a reduction bound
from a ``where``, ``k >= ceil(-R / c)``, is ``IMax(lo, CeilDiv(Negated(R), c))`` with
``R`` an ``Affine``); stores are at a ``RowIndex`` or ``ResidueIndex``. All frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

# operands ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ref:
    """A named value: a local, an accumulator, a loop variable."""

    name: str


@dataclass(frozen=True, slots=True)
class Lit:
    """A constant of ``dtype``."""

    value: object
    dtype: str


Operand = Ref | Lit


# integer forms (loop bounds, indices) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Affine:
    """``sum c * v + k`` over named integer variables."""

    terms: tuple  # ((coefficient, name), ...)
    k: int


@dataclass(frozen=True, slots=True)
class Scaled:
    """``m * x``."""

    m: int
    x: object


@dataclass(frozen=True, slots=True)
class Negated:
    x: object


@dataclass(frozen=True, slots=True)
class Next:
    """``x + 1``: the end of a half-open range whose last point is ``x``."""

    x: object


@dataclass(frozen=True, slots=True)
class CeilDiv:
    """``ceil(x / d)``, ``d > 0``."""

    x: object
    d: int


@dataclass(frozen=True, slots=True)
class FloorDiv:
    """``floor(x / d)``, ``d > 0``."""

    x: object
    d: int


@dataclass(frozen=True, slots=True)
class IMax:
    a: object
    b: object


@dataclass(frozen=True, slots=True)
class IMin:
    a: object
    b: object


# a bound is an int or one of the forms above


@dataclass(frozen=True, slots=True)
class Count:
    """``max(0, hi - lo)``: the points of the half-open range ``[lo, hi)`` of two bounds
    (the right side of a ``Let``, an ``int64``)."""

    lo: object
    hi: object


@dataclass(frozen=True, slots=True)
class RowIndex:
    """``sum name * stride``: a point of a row-major array (empty: element 0)."""

    terms: tuple  # ((name, stride), ...)


@dataclass(frozen=True, slots=True)
class ResidueIndex:
    """``sum (sum c * name + k) * stride``: a residue class's point (``v = n q + a``)."""

    dims: tuple  # (((coefficient, name), ...), k, stride) per output dimension


@dataclass(frozen=True, slots=True)
class IndexTerm:
    """One dimension of a read: ``value * stride``, ``value`` clamped into ``[0, clamp]``
    when ``clamp`` is not None (a branch-free select's discarded read)."""

    value: Operand
    stride: int
    clamp: int | None = None


# scalar forms (the right side of a Let) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Apply:
    """``op`` (``tegrad.ir`` scalar op, or ``cast``) of ``args``: result ``dtype``, operands
    ``operand``. ``truncating``: an integer ``//``/``%`` of a value never negative by a
    positive constant, where truncating division is the floor (and vectorizes)."""

    op: str
    args: tuple
    dtype: str
    operand: str
    truncating: bool = False


@dataclass(frozen=True, slots=True)
class Choose:
    """``cond ? a : b``, both sides evaluated."""

    cond: Operand
    a: Operand
    b: Operand


@dataclass(frozen=True, slots=True)
class Load:
    """Element ``sum terms`` of kernel argument ``arg``."""

    arg: int
    index: tuple  # IndexTerm per dimension


@dataclass(frozen=True, slots=True)
class BufferLoad:
    """Element ``index`` of a row cache."""

    buffer: str
    index: Operand
