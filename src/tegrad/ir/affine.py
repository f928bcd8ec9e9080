"""Integer expressions as affine forms ``c0 + sum_k a_k * atom_k``.

An atom is a variable or any integer sub-expression that is not itself affine
(``h // 2``, ``min(i, 3)``, a read of an index tensor). Affine forms are the common
currency of bounds checking and of the simplifier's equation solving.
"""

from __future__ import annotations

from . import dtype as dt
from .expr import Binary, Cast, Const, Expr, Unary, Var, binary, const

Form = tuple[dict[Expr, int], int]


def linearize(e: Expr) -> Form:
    """``e`` as (coefficients by atom, constant). Never fails: non-affine parts are atoms."""
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return {}, int(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        ca, ka = linearize(e.a)
        cb, kb = linearize(e.b)
        sign = 1 if e.op == "add" else -1
        out = dict(ca)
        for atom, c in cb.items():
            out[atom] = out.get(atom, 0) + sign * c
        return {a: c for a, c in out.items() if c}, ka + sign * kb
    if isinstance(e, Binary) and e.op == "mul":
        ca, ka = linearize(e.a)
        cb, kb = linearize(e.b)
        if not ca:
            return ({a: ka * c for a, c in cb.items() if ka * c}, ka * kb)
        if not cb:
            return ({a: kb * c for a, c in ca.items() if kb * c}, ka * kb)
    if isinstance(e, Unary) and e.op == "neg":
        ca, ka = linearize(e.a)
        return {a: -c for a, c in ca.items()}, -ka
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.a.dtype):
        return linearize(e.a)
    return {e: 1}, 0


def inequality(cond: Expr) -> Form | None:
    """An integer comparison ``a < b`` or ``a <= b`` as the form ``f`` with ``f >= 0``
    (``b - a - 1`` or ``b - a``); None for any other condition."""
    if not (isinstance(cond, Binary) and cond.op in ("lt", "le") and dt.is_int(cond.a.dtype)):
        return None
    coeffs, k = linearize(binary("sub", cond.b, cond.a))
    return coeffs, k - (1 if cond.op == "lt" else 0)


def single_bound(cond: Expr) -> tuple[Var, int, int] | None:
    """``cond`` as ``m v + k >= 0`` over one variable ``v``: ``(v, m, k)``, or None."""
    form = inequality(cond)
    if form is None or len(form[0]) != 1:
        return None
    ((v, m),) = form[0].items()
    return (v, m, form[1]) if isinstance(v, Var) else None


def build(coeffs: dict[Expr, int], k: int, dtype: str = dt.INDEX) -> Expr:
    """The expression of an affine form, in a canonical order (variables by uid)."""
    terms = sorted(
        ((a, c) for a, c in coeffs.items() if c), key=lambda ac: (ac[1] < 0, _order(ac[0]))
    )
    out: Expr | None = None
    for atom, c in terms:
        if out is None:
            out = (
                atom
                if c == 1
                else (-atom if c == -1 else Binary("mul", const(c, dtype), atom, dtype))
            )
            continue
        mag = abs(c)
        term = atom if mag == 1 else Binary("mul", const(mag, dtype), atom, dtype)
        out = Binary("add" if c > 0 else "sub", out, term, dtype)
    if out is None:
        return const(k, dtype)
    if k:
        out = Binary("add" if k > 0 else "sub", out, const(abs(k), dtype), dtype)
    return out


def _order(atom: Expr) -> tuple:
    if isinstance(atom, Var):
        return (0, atom.uid)
    return (1, repr(atom))


def time_lag(index: Expr, t: Var) -> int | None:
    """``c`` when ``index`` is ``t - c``; None otherwise."""
    coeffs, const = linearize(index)
    if coeffs == {t: 1}:
        return -const
    return None


def time_affine(index: Expr, t: Var) -> tuple[int, int] | None:
    """``(a, b)`` when ``index`` is ``a t + b`` with ``a != 0``; None otherwise."""
    coeffs, const = linearize(index)
    if len(coeffs) == 1 and t in coeffs:
        return coeffs[t], const
    return None
