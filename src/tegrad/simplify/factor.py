"""Products inside sums: flattening, rebuilding, and splitting sums by variable groups.

``flatten_product`` reads a summand as numerator factors, denominator factors and the
conditions of ``select(c, v, 0)`` guards (which move into the sum's ``where``).
``separate_sums`` uses the identity

    sum_{a, b : c(a)} f(a) g(b) = (sum_{a : c(a)} f(a)) (sum_b g(b))

to give each group of variables that share a factor or a condition its own sum; a
variable no factor uses scales the result by its extent.
"""

from __future__ import annotations

from ..ir.expr import (
    SUM,
    Binary,
    Const,
    Expr,
    Reduce,
    Select,
    Unary,
    Var,
    binary,
    conjunction,
    const,
    split_conjunction,
)
from ..ir.traverse import free_vars
from .algebra import cancel_common, is_const


def flatten_product(e: Expr, num: list, den: list, conds: list) -> None:
    if isinstance(e, Binary) and e.op == "mul":
        flatten_product(e.a, num, den, conds)
        flatten_product(e.b, num, den, conds)
    elif isinstance(e, Binary) and e.op == "div":
        flatten_product(e.a, num, den, conds)
        flatten_product(e.b, den, num, [])
    elif isinstance(e, Unary) and e.op == "neg":
        num.append(const(-1, e.dtype))
        flatten_product(e.a, num, den, conds)
    elif isinstance(e, Select) and is_const(e.b, 0):
        conds.extend(split_conjunction(e.cond))
        flatten_product(e.a, num, den, conds)
    elif isinstance(e, Select) and is_const(e.a, 0):
        conds.append(Unary("not", e.cond, "bool"))
        flatten_product(e.b, num, den, conds)
    else:
        num.append(e)


def product(num: list, den: list, dtype: str) -> Expr:
    num, den = list(num), list(den)
    cancel_common(num, den)
    out: Expr | None = None
    scale = 1.0
    for f in num:
        if isinstance(f, Const):
            scale *= f.value
            continue
        out = f if out is None else binary("mul", out, f)
    for f in den:
        base = out if out is not None else const(1, dtype)
        out = binary("div", base, f)
    if out is None:
        return const(scale, dtype)
    if scale == -1:
        return Unary("neg", out, dtype)
    if scale != 1:
        out = binary("mul", const(scale, dtype), out)
    return out


def separate_sums(
    axes: list[Var], num: list, den: list, conds: list, dtype: str, outer_num: list
) -> list[Expr]:
    """``sum_{a, b} f(a) g(b) = (sum_a f(a)) (sum_b g(b))``: one sum per group of
    variables that share a factor or a condition; unused variables scale by their
    extent (appended to ``outer_num``)."""
    parts = [(x, free_vars(x) & set(axes)) for x in num + den + conds]
    groups: list[set] = []
    for _, used in parts:
        if not used:
            continue
        merged = [g for g in groups if g & used]
        for g in merged:
            groups.remove(g)
        groups.append(set(used).union(*merged))
    scale = 1
    for v in axes:
        if not any(v in g for g in groups):
            scale *= v.extent
    if scale != 1:
        outer_num.append(const(scale, dtype))
    if not groups:
        return [product(num, den, dtype)]
    sums = []
    for g in groups:
        kept = tuple(v for v in axes if v in g)
        body = product(
            [f for f in num if free_vars(f) & g], [f for f in den if free_vars(f) & g], dtype
        )
        where = conjunction([c for c in conds if free_vars(c) & g])
        sums.append(Reduce(SUM, body, kept, where, dtype))
    return sums
