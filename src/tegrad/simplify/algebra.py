"""Local rewrites, applied bottom-up to every node (``fold``).

Integer index arithmetic is kept in a canonical affine form ``c0 + sum a_k atom_k``
(``ir/affine.py``), on which:
    (S*A + B) // S  =  A + m,  (S*A + B) % S = B - m*S
                                        when B (the coefficients reduced mod S)
                                        provably lies in [m*S, m*S + S)
    (e // a) // b   =  e // (a*b)        for positive constants
    E - S*(E // S)  =  E % S             (recognised inside any affine form)
Comparisons between integer expressions fold to true/false when interval arithmetic
over the variables' ranges decides them. Float algebra keeps IEEE semantics except for
the usual autodiff simplifications ``x*0 = 0``, ``x*1 = x``, ``x+0 = x`` (a NaN or inf
multiplied by a structural zero is dropped, as in every AD system); ``x**2 = x*x``,
both correctly rounded (a power of 3's gradient is then a product, not a ``pow`` call).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import dtype as dt
from ..ir.affine import build, linearize
from ..ir.bounds import form_interval, interval
from ..ir.expr import Binary, Cast, Const, Expr, Reduce, Select, Unary, const
from ..ir.numpy_ops import BINARY, UNARY

TRUE = const(True)
FALSE = const(False)


def is_const(e: Expr, value=None) -> bool:
    return isinstance(e, Const) and (value is None or e.value == value)


def fold(e: Expr) -> Expr | None:
    """One rewrite of ``e`` (whose children are already folded), or None."""
    if isinstance(e, Binary):
        if dt.is_int(e.dtype):
            return fold_int(e)
        return fold_binary(e)
    if isinstance(e, Unary):
        return fold_unary(e)
    if isinstance(e, Select):
        return fold_select(e)
    if isinstance(e, Cast) and isinstance(e.a, Const):
        return const(e.a.value, e.dtype) if e.dtype != "bool" else const(bool(e.a.value))
    if isinstance(e, Reduce):
        return fold_reduce(e)
    return None


def _const_binary(e: Binary) -> Expr | None:
    if not (isinstance(e.a, Const) and isinstance(e.b, Const)):
        return None
    if e.op in ("floordiv", "floormod", "div") and e.b.value == 0:
        return None
    with np.errstate(all="ignore"):
        a = np.asarray(e.a.value, dtype=e.a.dtype)
        b = np.asarray(e.b.value, dtype=e.b.dtype)
        v = BINARY[e.op](a, b)
    value = v.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return const(value, e.dtype)


def fold_binary(e: Binary) -> Expr | None:
    c = _const_binary(e)
    if c is not None:
        return c
    a, b, op = e.a, e.b, e.op
    if op in ("lt", "le", "eq", "ne"):
        if dt.is_int(a.dtype):
            return decide_comparison(e)
        return None
    if op == "and":
        if is_const(a, False) or is_const(b, False):
            return FALSE
        if is_const(a, True):
            return b
        if is_const(b, True) or a is b:
            return a
        return None
    if op == "or":
        if is_const(a, True) or is_const(b, True):
            return TRUE
        if is_const(a, False):
            return b
        if is_const(b, False) or a is b:
            return a
        return None
    if op in ("mul", "div"):
        cancelled = cancel_factors(e)
        if cancelled is not None:
            return cancelled
    if op in ("add", "sub"):
        cancelled = cancel_terms(e)
        if cancelled is not None:
            return cancelled
    if op == "add":
        if is_const(a, 0):
            return b
        if is_const(b, 0):
            return a
    elif op == "sub":
        if is_const(b, 0):
            return a
        if is_const(a, 0):
            return Unary("neg", b, e.dtype)
    elif op == "mul":
        if is_const(a, 0) or is_const(b, 0):
            return const(0, e.dtype)
        if is_const(a, 1):
            return b
        if is_const(b, 1):
            return a
        if is_const(a, -1):
            return Unary("neg", b, e.dtype)
        if is_const(b, -1):
            return Unary("neg", a, e.dtype)
    elif op == "div":
        if is_const(a, 0):
            return const(0, e.dtype)
        if is_const(b, 1):
            return a
    elif op == "pow":
        if is_const(b, 1):
            return a
        if is_const(b, 0):
            return const(1, e.dtype)
        if is_const(b, 2) and dt.is_float(e.dtype) and a.dtype == e.dtype:
            return Binary("mul", a, a, e.dtype)  # (NumPy's power squares for 2 too)
    return None


def signed_terms(e: Expr, sign: int, out: list) -> None:
    if isinstance(e, Binary) and e.op in ("add", "sub") and dt.is_float(e.dtype):
        signed_terms(e.a, sign, out)
        signed_terms(e.b, sign if e.op == "add" else -sign, out)
    elif isinstance(e, Unary) and e.op == "neg":
        signed_terms(e.a, -sign, out)
    else:
        out.append((sign, e))


def cancel_terms(e: Binary) -> Expr | None:
    """``a + b - a = b`` and ``a + a = 2 a``: collect equal terms of a float sum."""
    terms: list = []
    signed_terms(e, 1, terms)
    if len(terms) < 2:
        return None
    weight: dict[Expr, int] = {}
    for sign, t in terms:
        weight[t] = weight.get(t, 0) + sign
    if len(weight) == len(terms):
        return None
    out: Expr | None = None
    for t, w in weight.items():
        if w == 0:
            continue
        term = t if abs(w) == 1 else Binary("mul", const(abs(w), e.dtype), t, e.dtype)
        if out is None:
            out = term if w > 0 else Unary("neg", term, e.dtype)
        else:
            out = Binary("add" if w > 0 else "sub", out, term, e.dtype)
    return out if out is not None else const(0, e.dtype)


def factors(e: Expr, num: list, den: list) -> None:
    if isinstance(e, Binary) and e.op == "mul" and dt.is_float(e.dtype):
        factors(e.a, num, den)
        factors(e.b, num, den)
    elif isinstance(e, Binary) and e.op == "div" and dt.is_float(e.dtype):
        factors(e.a, num, den)
        factors(e.b, den, num)
    else:
        num.append(e)


def cancel_common(num: list, den: list) -> bool:
    """Remove factors present in both lists (``x y / x = y``); True if any was."""
    hit = False
    for f in list(den):
        if f in num and not isinstance(f, Const):
            num.remove(f)
            den.remove(f)
            hit = True
    return hit


def cancel_factors(e: Binary) -> Expr | None:
    num: list = []
    den: list = []
    factors(e, num, den)
    if not den or not cancel_common(num, den):
        return None
    out = num[0] if num else const(1, e.dtype)
    for f in num[1:]:
        out = Binary("mul", out, f, e.dtype)
    for f in den:
        out = Binary("div", out, f, e.dtype)
    return out


def fold_unary(e: Unary) -> Expr | None:
    a = e.a
    if e.op == "neg":
        if isinstance(a, Const):
            return const(-a.value, e.dtype)
        if isinstance(a, Unary) and a.op == "neg":
            return a.a
        if dt.is_int(e.dtype):
            return fold_int_form(e)
    if e.op == "not":
        if isinstance(a, Const):
            return const(not a.value)
        if isinstance(a, Unary) and a.op == "not":
            return a.a
        if isinstance(a, Binary) and a.op in ("lt", "le") and dt.is_int(a.a.dtype):
            # !(x < y) == y <= x ; !(x <= y) == y < x
            return Binary("le" if a.op == "lt" else "lt", a.b, a.a, "bool")
    if isinstance(a, Const) and e.op in ("exp", "log", "sqrt", "abs", "sign", "tanh"):
        with np.errstate(all="ignore"):
            v = UNARY[e.op](np.asarray(a.value, dtype=a.dtype)).item()
        if isinstance(v, float) and math.isfinite(v):
            return const(v, e.dtype)
    return None


def fold_select(e: Select) -> Expr | None:
    if is_const(e.cond, True):
        return e.a
    if is_const(e.cond, False):
        return e.b
    if e.a is e.b:
        return e.a
    if isinstance(e.cond, Unary) and e.cond.op == "not":
        return Select(e.cond.a, e.b, e.a, e.dtype)
    # select(c, -a, 0) = -select(c, a, 0), so opposite terms meet in a sum
    if isinstance(e.a, Unary) and e.a.op == "neg" and is_const(e.b, 0):
        return Unary("neg", Select(e.cond, e.a.a, e.b, e.dtype), e.dtype)
    return None


def fold_reduce(r: Reduce) -> Expr | None:
    if r.where is not None and is_const(r.where, True):
        return Reduce(r.combiner, r.source, r.axes, None, r.dtype)
    if r.combiner.kind == "sum" and is_const(r.source, 0):
        return const(0, r.dtype)
    if (
        r.where is not None
        and is_const(r.where, False)
        and r.combiner.kind in ("sum", "prod", "max", "min")
    ):
        return const(r.combiner.identity_value(r.dtype), r.dtype)
    return None


# -- integers -------------------------------------------------------------------------


def decide_comparison(e: Binary) -> Expr | None:
    """Fold an integer comparison that interval arithmetic decides; else canonicalise."""
    coeffs, k = linearize(Binary("sub", e.b, e.a, e.a.dtype))  # b - a
    iv = form_interval(coeffs, k)
    if iv is not None:
        lo, hi = iv
        if e.op == "lt":
            if lo > 0:
                return TRUE
            if hi <= 0:
                return FALSE
        elif e.op == "le":
            if lo >= 0:
                return TRUE
            if hi < 0:
                return FALSE
        elif e.op == "eq":
            if lo == hi == 0:
                return TRUE
            if lo > 0 or hi < 0:
                return FALSE
        elif e.op == "ne":
            if lo == hi == 0:
                return FALSE
            if lo > 0 or hi < 0:
                return TRUE
    return None


def fold_int(e: Binary) -> Expr | None:
    c = _const_binary(e)
    if c is not None:
        return c
    if e.op in ("add", "sub", "mul"):
        return fold_int_form(e)
    if e.op in ("floordiv", "floormod") and isinstance(e.b, Const) and e.b.value > 0:
        return fold_divmod(e.op, e.a, int(e.b.value), e.dtype)
    if e.op in ("max", "min"):
        ia, ib = interval(e.a), interval(e.b)
        if ia is not None and ib is not None:
            a_wins = ia[0] >= ib[1] if e.op == "max" else ia[1] <= ib[0]
            b_wins = ib[0] >= ia[1] if e.op == "max" else ib[1] <= ia[0]
            if a_wins:
                return e.a
            if b_wins:
                return e.b
    return None


def fold_int_form(e: Expr) -> Expr | None:
    coeffs, k = recognise_mod(*linearize(e))
    out = build(coeffs, k, e.dtype)
    return None if out is e else out


def recognise_mod(coeffs: dict, k: int) -> tuple[dict, int]:
    """Rewrite ``q*E - q*S*(E // S)`` inside a form as ``q*(E % S)``."""
    for atom, m in list(coeffs.items()):
        if not (isinstance(atom, Binary) and atom.op == "floordiv" and isinstance(atom.b, Const)):
            continue
        s = int(atom.b.value)
        if s <= 0 or m % s:
            continue
        q = -m // s
        inner, c_inner = linearize(atom.a)
        if not inner or any(coeffs.get(a, 0) != q * c for a, c in inner.items()):
            continue
        out = {a: c for a, c in coeffs.items() if a not in inner and a is not atom}
        mod = _mod_atom(atom.a, s)
        out[mod] = out.get(mod, 0) + q
        # q*E = q*(E % S) + q*S*(E // S), and E's constant c_inner lives inside E % S
        return recognise_mod(out, k - q * c_inner)
    for atom, m in list(coeffs.items()):
        # q*(E % S) + q*S*(E // S) = q*E
        if not (isinstance(atom, Binary) and atom.op == "floormod" and isinstance(atom.b, Const)):
            continue
        s = int(atom.b.value)
        div = Binary("floordiv", atom.a, atom.b, atom.dtype)
        if s <= 0 or coeffs.get(div, 0) != m * s:
            continue
        inner, c_inner = linearize(atom.a)
        out = {a: c for a, c in coeffs.items() if a is not atom and a is not div}
        for a, c in inner.items():
            out[a] = out.get(a, 0) + m * c
        return recognise_mod({a: c for a, c in out.items() if c}, k + m * c_inner)
    return coeffs, k


def _mod_atom(e: Expr, s: int) -> Expr:
    return Binary("floormod", e, const(s, e.dtype), e.dtype)


def fold_divmod(op: str, a: Expr, s: int, dtype: str) -> Expr | None:
    if s == 1:
        return a if op == "floordiv" else const(0, dtype)
    if (
        op == "floordiv"
        and isinstance(a, Binary)
        and a.op == "floordiv"
        and isinstance(a.b, Const)
        and a.b.value > 0
    ):
        return Binary("floordiv", a.a, const(int(a.b.value) * s, dtype), dtype)
    coeffs, k = linearize(a)
    high: dict = {}
    low: dict = {}
    for atom, c in coeffs.items():
        q, r = divmod(c, s)
        if q:
            high[atom] = q
        if r:
            low[atom] = r
    kq, kr = divmod(k, s)
    low_expr_iv = form_interval(low, kr)
    if low_expr_iv is not None and low_expr_iv[0] // s == low_expr_iv[1] // s:
        m = low_expr_iv[0] // s
        if op == "floordiv":
            return build(high, kq + m, dtype)
        return build(low, kr - m * s, dtype)
    return None  # only rewrite when the low part is resolved: keeps E // S whole otherwise
