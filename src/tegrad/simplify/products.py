"""Reuse of computed quotients: a product that holds a tensor's body as a sub-product
reads the tensor instead.

A product or quotient of float factors is a monomial ``c * (f_1 ... f_n) / (g_1 ... g_m)``
(``flatten``: ``*``, ``/``, negation and constants; anything else is a factor). A tensor
``T[i] = F(i)`` whose body is such a monomial, ``F = (a_1 ... a_p) / (b_1 ... b_q)``, is
contained in a product when index expressions ``e`` make every ``a_k(e)`` one of the
``f`` and every ``b_l(e)`` one of the ``g``, each used once (first-order unification over
the interned trees, as ``reuse.py`` matches reductions); the product is then

    c * T[e] * (the other f) / (the other g).

In real arithmetic the two are equal wherever the product is defined; in floating point
they differ by reassociation (a few ulps). Where the forward ``T`` is computed anyway,
the backward reads it instead of evaluating its factors again.

Typical win: a softmax ``Y = exp(X - m) / s`` (``m`` and ``s`` tensors of their own).
Its gradient is, per row,

    dX = dY exp(X - m) / s  -  (sum_k dY_k exp(X_k - m) / s^2) exp(X - m)

and each ``exp(X - m) / s`` is ``Y``, so the backward reads ``Y`` and evaluates no
exponential, as a hand-written one does: ``dX = dY Y - (sum_k dY_k Y_k) Y``. Two more places
are searched. A sum factor is searched together with the denominators that do not depend on
its variables (``(sum_k dY_k e_k) / s = sum_k dY_k (e_k / s)``). A factor that reads a
tensor whose body is itself a monomial (the row coefficient above, a tensor of the
gradient) is opened into its factors; a factor of it that holds a reduction (the row's
``sum_k dY_k Y_k``) stays a tensor of its own (``_part``), so that it is not evaluated
again wherever the product sits inside another sum. A body with a reduction inline is
not matched (``_matchable``).
"""

from __future__ import annotations

import weakref

from ..ir import dtype as dt
from ..ir.expr import Binary, Const, Expr, Read, Reduce, Unary, binary, const, node_memo, unary
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import (
    free_vars,
    substitute,
    tensors_read,
    transform,
    walk,
)
from .reuse import read_bound, unify

MAX_FACTORS = 12  # a longer product is not searched


def flatten(e: Expr) -> tuple[float, list[Expr], list[Expr]]:
    """``(c, numerator factors, denominator factors)`` with ``e = c * prod(num) / prod(den)``."""
    if isinstance(e, Const) and dt.is_float(e.dtype):
        return float(e.value), [], []
    if isinstance(e, Unary) and e.op == "neg":
        c, num, den = flatten(e.a)
        return -c, num, den
    if isinstance(e, Binary) and e.op in ("mul", "div") and e.a.dtype == e.b.dtype == e.dtype:
        ca, na, da = flatten(e.a)
        cb, nb, db = flatten(e.b)
        if e.op == "mul":
            return ca * cb, na + nb, da + db
        if cb == 0:
            return 1.0, [e], []
        return ca / cb, na + db, da + nb
    return 1.0, [e], []


def is_product(e: Expr) -> bool:
    return (dt.is_float(e.dtype) and isinstance(e, Binary) and e.op in ("mul", "div")
            and e.a.dtype == e.b.dtype == e.dtype)


def _unsigned(e: Expr) -> Expr:
    while isinstance(e, Unary) and e.op == "neg":
        e = e.a
    return e


def rebuild(c: float, num: list[Expr], den: list[Expr], dtype: str) -> Expr:
    out = None
    for f in num:
        out = f if out is None else binary("mul", out, f)
    if out is None:
        out = const(1.0, dtype)
    for g in den:
        out = binary("div", out, g)
    if c == -1.0:
        return unary("neg", out)
    return out if c == 1.0 else binary("mul", const(c, dtype), out)


def contained(t: Compute, num: list[Expr], den: list[Expr]):
    """``(T[e], used)`` when ``t``'s monomial body is inside, else None; ``used`` holds
    ``("n", k)`` / ``("d", k)`` for the factors it takes."""
    if not _matchable(t) or len(num) + len(den) > MAX_FACTORS:
        return None
    _, tn, td = flatten(t.body)
    axes = frozenset(t.axes)
    found = _assign([(p, True) for p in tn] + [(p, False) for p in td], num, den, axes,
                    {}, set())
    if found is None:
        return None
    binding, used = found
    read = read_bound(t, binding)
    return None if read is None else (read, used)


def _matchable(t: Compute) -> bool:
    """A monomial of at least two factors and coefficient 1, without a reduction inline
    (a softmax in one compute): the gradient holds such reductions hoisted or reused
    under other names, so only some of its products would match, and one sum would be
    split into two that are both made."""
    memo = node_memo(t.body)
    hit = memo.get("matchable")
    if hit is None:
        c, num, den = flatten(t.body)
        hit = memo["matchable"] = (is_product(t.body) and c == 1.0 and len(num) + len(den) >= 2
                                   and not _has_reduce(t.body))
    return hit


def _has_reduce(e: Expr) -> bool:
    memo = node_memo(e)
    hit = memo.get("has_reduce")
    if hit is None:
        hit = memo["has_reduce"] = any(isinstance(x, Reduce) for x in walk(e))
    return hit


def _unused(factors: list[Expr], tag: str, used: set) -> list[Expr]:
    return [f for k, f in enumerate(factors) if (tag, k) not in used]


def _replaced(t: Compute, c: float, num: list[Expr], den: list[Expr], dtype: str):
    """The product with ``t`` read for its body: found among the factors, or inside a sum
    factor together with denominators that do not depend on the sum's variables
    (``(sum_j dY_j e_j) / s = sum_j dY_j (e_j / s)``); None when neither."""
    hit = contained(t, num, den)
    if hit is not None:
        read, used = hit
        return rebuild(c, [read, *_unused(num, "n", used)], _unused(den, "d", used), dtype)
    for k, r in enumerate(num):
        if not (isinstance(r, Reduce) and r.combiner.kind == "sum" and r.dtype == dtype):
            continue
        bound = set(r.axes)
        outer = [m for m, g in enumerate(den) if not free_vars(g) & bound]
        sc, sn, sd = flatten(r.source)
        hit = contained(t, sn, sd + [den[m] for m in outer])
        if hit is None:
            continue
        read, used = hit
        moved = {outer[m - len(sd)] for tag, m in used if tag == "d" and m >= len(sd)}
        inner_den = [g for m, g in enumerate(sd) if ("d", m) not in used]
        source = rebuild(sc, [read, *_unused(sn, "n", used)], inner_den, dtype)
        inside = Reduce(r.combiner, source, r.axes, r.where, r.dtype)
        return rebuild(c, [*num[:k], inside, *num[k + 1:]],
                       [g for m, g in enumerate(den) if m not in moved], dtype)
    return None


def _assign(patterns, num, den, axes, binding, used):
    """Backtracking: each pattern factor to an unused target factor on its side."""
    if not patterns:
        return binding, used
    (p, top), rest = patterns[0], patterns[1:]
    side, tag = (num, "n") if top else (den, "d")
    for k, f in enumerate(side):
        if (tag, k) in used:
            continue
        trial = dict(binding)
        if unify(p, f, axes, trial, {}):
            done = _assign(rest, num, den, axes, trial, used | {(tag, k)})
            if done is not None:
                return done
    return None


def reuse_product(t: Compute, e: Expr) -> Expr | None:
    """``e`` (a product) with ``t``'s body read from ``t``, or None."""
    return _replaced(t, *flatten(e), e.dtype)


def reuse_products(e: Expr) -> Expr:
    """Every product in ``e`` that holds the body of a monomial tensor ``e`` reads reads
    that tensor (factors reading a monomial tensor are opened first)."""
    candidates = [t for t in tensors_read(e) if isinstance(t, Compute) and _matchable(t)]
    if not candidates:
        return e

    def rule(x: Expr):
        if not is_product(x):
            return None
        c, num, den = flatten(x)
        c, num, den = _opened(c, num, den)
        for t in candidates:
            out = _replaced(t, c, num, den, x.dtype)
            if out is not None:
                return out
        return None

    return transform(e, rule)


def _opened(c: float, num: list[Expr], den: list[Expr]):
    """Numerator factors that read a monomial tensor, replaced by that tensor's factors.
    A factor with a reduction in it stays a tensor of its own (``_part``): inlined, it
    would be evaluated again wherever the product sits inside another sum."""
    out_num, out_den = [], list(den)
    for f in num:
        if isinstance(f, Read) and isinstance(f.tensor, Compute) and is_product(
                _unsigned(f.tensor.body)):
            t = f.tensor
            cf, nf, df = flatten(t.body)
            at = dict(zip(t.axes, f.indices, strict=True))
            c *= cf
            out_num += [_part(t, x, at) for x in nf]
            out_den += [_part(t, x, at) for x in df]
        else:
            out_num.append(f)
    return c, out_num, out_den


_PARTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _part(t: Compute, factor: Expr, at: dict) -> Expr:
    """``factor`` of ``t``'s body at ``t``'s indices ``at``: substituted in, or, when it
    holds a reduction, read from a compute of its own over the axes it uses (made once
    per tensor and factor)."""
    if not _has_reduce(factor):
        return substitute(factor, at)
    parts = _PARTS.setdefault(t, {})
    used = tuple(a for a in t.axes if a in free_vars(factor))
    if factor not in parts:
        parts[factor] = make_compute(tuple(a.extent for a in used), used, factor,
                                     f"{t.name}.part{len(parts)}")
    return Read(parts[factor], tuple(at[a] for a in used), factor.dtype)
