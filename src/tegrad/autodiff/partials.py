"""The one table of scalar partial derivatives, shared by forward and reverse mode.

For a node ``y = f(x_0, x_1)`` the rule for ``f`` gives ``p_k = dy/dx_k`` as an
expression of the node and its operands. Forward mode forms ``y_dot = sum_k p_k x_dot_k``;
reverse mode adds ``y_bar * p_k`` to ``x_bar_k``.

Kink convention (one rule everywhere): where a function is not differentiable, tegrad
takes the average of its one-sided derivatives. So ``max(a, b)`` at a tie gives 1/2 to
each operand, a ``max`` reduction with ``m`` tied maxima gives ``1/m`` to each, ``relu``
written as ``max(x, 0)`` has derivative 1/2 at 0, and ``abs`` has derivative
``sign(0) = 0`` at 0 (the average of -1 and 1). Piecewise-constant functions (floor,
ceil, round, sign, comparisons, casts to integers) have derivative 0, and so has
``stop_gradient`` (the identity, held constant: PyTorch's ``detach``, JAX's
``stop_gradient``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir import dtype as dt
from ..ir.expr import (
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    binary,
    cast,
    const,
    unary,
)
from ..ir.traverse import children

Rule = Callable[[Expr, int], Expr | None]
RULES: dict[str, Rule] = {}

# Ops with derivative zero everywhere they are defined (piecewise constant or boolean).
PIECEWISE_CONSTANT = (
    "floor",
    "ceil",
    "round",
    "sign",
    "not",
    "lt",
    "le",
    "eq",
    "ne",
    "and",
    "or",
    "floordiv",
    "floormod",
    "stop_gradient",  # the identity, declared constant: what it wraps is not differentiated
)


def rule(*ops: str):
    def register(fn: Rule) -> Rule:
        for op in ops:
            if op in RULES or op in PIECEWISE_CONSTANT:
                raise ValueError(f"duplicate derivative rule for {op!r}")
            RULES[op] = fn
        return fn

    return register


def c(value: float, like: Expr) -> Expr:
    return const(value, like.dtype)


def partial(e: Expr, k: int) -> Expr | None:
    """d e / d (operand k), or None when it is identically zero."""
    if isinstance(e, Unary | Binary):
        if e.op in PIECEWISE_CONSTANT:
            return None
        fn = RULES.get(e.op)
        if fn is None:
            raise NotImplementedError(f"no derivative rule for op {str(e.op)!r}")
        return fn(e, k)
    if isinstance(e, Cast):
        # d/da cast(a) = 1 between float types; 0 into or out of integers
        if dt.is_float(e.dtype) and dt.is_float(e.a.dtype):
            return c(1.0, e)
        return None
    raise NotImplementedError(f"no derivative rule for {type(e).__name__}")


def tangent(e: Expr, leaf: Callable[[Expr], Expr | None],
            reduction: Callable[[Reduce, Callable[[Expr], Expr | None]], Expr | None]
            ) -> Expr:
    """The tangent of ``e`` by the chain rule over this table: ``y_dot = sum_k p_k
    x_dot_k`` at every op and cast, ``select(c, a_dot, b_dot)`` at a select, and
    ``leaf(node)`` at a read or variable (its tangent, or None where it is zero). A
    reduction's tangent is ``reduction(node, go)``, ``go`` giving its source's: the rules of
    reductions build on this table (``reductions.reduce_tangent``) and are passed in.
    Returns a constant zero when nothing varies."""
    memo: dict[Expr, Expr | None] = {}

    def go(x: Expr) -> Expr | None:
        if x in memo:
            return memo[x]
        out = node(x)
        memo[x] = out
        return out

    def node(x: Expr) -> Expr | None:
        if isinstance(x, Read | Var):
            return leaf(x)
        if not dt.is_float(x.dtype) or isinstance(x, Const):
            return None
        if isinstance(x, Select):
            a, b = go(x.a), go(x.b)
            if a is None and b is None:
                return None
            z = const(0, x.dtype)
            return Select(x.cond, a if a is not None else z, b if b is not None else z, x.dtype)
        if isinstance(x, Reduce):
            return reduction(x, go)
        if isinstance(x, Unary | Binary | Cast):
            total = None
            for k, operand in enumerate(children(x)):
                d = go(operand)
                if d is None:
                    continue
                p = partial(x, k)
                if p is None:
                    continue
                term = (
                    cast(d, x.dtype) * p
                    if not (isinstance(p, Const) and p.value == 1)
                    else cast(d, x.dtype)
                )
                total = term if total is None else total + term
            return total
        raise NotImplementedError(f"no tangent rule for {type(x).__name__}")

    out = go(e)
    return const(0, e.dtype) if out is None else out


@rule("neg")
def d_neg(e, k):  # d/da -a = -1
    return c(-1.0, e)


@rule("exp")
def d_exp(e, k):  # d/da exp(a) = exp(a)
    return e


@rule("log")
def d_log(e, k):  # d/da log(a) = 1/a
    return c(1.0, e) / e.a


@rule("log1p")
def d_log1p(e, k):  # d/da log(1+a) = 1/(1+a)
    return c(1.0, e) / (e.a + c(1.0, e))


@rule("expm1")
def d_expm1(e, k):  # d/da (exp(a)-1) = exp(a)
    return unary("exp", e.a)


@rule("sqrt")
def d_sqrt(e, k):  # d/da sqrt(a) = 1/(2 sqrt(a))
    return c(0.5, e) / e


@rule("rsqrt")
def d_rsqrt(e, k):  # d/da a^(-1/2) = -1/2 a^(-3/2) = -1/2 rsqrt(a) / a
    return c(-0.5, e) * e / e.a


@rule("tanh")
def d_tanh(e, k):  # d/da tanh(a) = 1 - tanh(a)^2
    return c(1.0, e) - e * e


@rule("sigmoid")
def d_sigmoid(e, k):  # d/da s(a) = s(a) (1 - s(a))
    return e * (c(1.0, e) - e)


@rule("sin")
def d_sin(e, k):  # d/da sin(a) = cos(a)
    return unary("cos", e.a)


@rule("cos")
def d_cos(e, k):  # d/da cos(a) = -sin(a)
    return -unary("sin", e.a)


@rule("erf")
def d_erf(e, k):  # d/da erf(a) = 2/sqrt(pi) exp(-a^2)
    return c(2.0 / math.sqrt(math.pi), e) * unary("exp", -(e.a * e.a))


@rule("abs")
def d_abs(e, k):  # d/da |a| = sign(a); 0 at a = 0 (average of -1 and 1)
    return unary("sign", e.a)


@rule("add")
def d_add(e, k):  # d/da (a+b) = 1, d/db = 1
    return c(1.0, e)


@rule("sub")
def d_sub(e, k):  # d/da (a-b) = 1, d/db = -1
    return c(1.0 if k == 0 else -1.0, e)


@rule("mul")
def d_mul(e, k):  # d/da (a*b) = b, d/db = a
    return e.b if k == 0 else e.a


@rule("div")
def d_div(e, k):  # d/da (a/b) = 1/b, d/db = -a/b^2
    return c(1.0, e) / e.b if k == 0 else -(e.a / (e.b * e.b))


@rule("pow")
def d_pow(e, k):  # d/da a^b = b a^(b-1), d/db a^b = a^b log(a)
    if k == 0:
        if isinstance(e.b, Const):
            return _pow_const_derivative(e.a, e.b)
        return e.b * binary("pow", e.a, e.b - c(1.0, e))
    return e * unary("log", e.a)


def _pow_const_derivative(a: Expr, b: Const) -> Expr:
    n = b.value
    if n == 0:
        return c(0.0, a)
    if n == 1:
        return c(1.0, a)
    if n == 2:
        return c(2.0, a) * a
    return c(n, a) * binary("pow", a, c(n - 1, a))


@rule("max", "min")
def d_extreme(e, k):  # d/da max(a,b) = [a > b] + 1/2 [a = b]; min likewise with <
    mine, other = (e.a, e.b) if k == 0 else (e.b, e.a)
    wins = mine > other if e.op == "max" else mine < other
    tie = binary("eq", mine, other)
    return Select(wins, c(1.0, e), Select(tie, c(0.5, e), c(0.0, e), e.dtype), e.dtype)
