"""Cases: tensor arithmetic of the core (``A + B``, ``A ** B``, ``-A``...) with NumPy
broadcasting, against the same expression on torch tensors."""

from __future__ import annotations

from ..cases import away_from_zero, case, join, normal, uniform

BIG = (1024, 1024)


def _same(op: str, label: str, fn, inputs, bench=None, **options) -> None:
    """``fn`` works on tegrad and torch tensors alike: it is both sides of the case."""
    case(op, label, inputs, category="arithmetic", fn=fn, ref=fn, bench=bench, **options)


def _add(a, b):
    return a + b


def _sub(a, b):
    return a - b


def _mul(a, b):
    return a * b


def _div(a, b):
    return a / b


def _pow(a, b):
    return a ** b


for op, fn in (("add", _add), ("sub", _sub), ("mul", _mul)):
    _same(op, "", fn, normal((3, 4), (3, 4)), bench=normal(BIG, BIG))
    _same(op, "broadcast (3,1,4) (5,1)", fn, normal((3, 1, 4), (5, 1)))
_same("add", "broadcast (4,) (3,1)", _add, normal((4,), (3, 1)))
_same("div", "", _div, join(normal((3, 4)), away_from_zero((3, 4))),
      bench=join(normal(BIG), away_from_zero(BIG)))
_same("div", "broadcast (3,1,4) (5,1)", _div, join(normal((3, 1, 4)), away_from_zero((5, 1))))
_same("pow", "", _pow, join(uniform((3, 4)), normal((3, 4))),
      bench=join(uniform(BIG), normal(BIG)))
_same("pow", "broadcast (3,1,4) (5,1)", _pow, join(uniform((3, 1, 4)), normal((5, 1))))
_same("mul", "scalar A * 2.0", lambda a: a * 2.0, normal((3, 4)))
_same("add", "scalar 1.5 + A", lambda a: 1.5 + a, normal((3, 4)))
_same("sub", "scalar 2.0 - A", lambda a: 2.0 - a, normal((3, 4)))
_same("div", "scalar 2.0 / A", lambda a: 2.0 / a, away_from_zero((3, 4)))
_same("pow", "scalar A ** 2.5", lambda a: a ** 2.5, uniform((3, 4)))
_same("pow", "scalar 2.0 ** A", lambda a: 2.0 ** a, normal((3, 4)))
_same("neg", "", lambda a: -a, normal((3, 4)), bench=normal(BIG))
_same("neg", "of a sum", lambda a, b: -(a + b), normal((2, 3), (3,)))
