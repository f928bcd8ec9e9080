"""Scatter to gather: solve the index equations of a sum for its reduce variables.

Autodiff writes the adjoint of a read ``X[f(i, k)]`` as

    X_bar[j] = sum_{i, k : c(i, k) and f(i, k) = j} v(i, k)

which is correct and costs |i| |k| per output element. This module rewrites such sums,
one equation at a time, into sums over as few variables as possible (gather form).

Method, for the sum's equations ``E: sum_d a_d d + r(j) = 0`` (``d`` reduce variables,
``r`` free of them):
 1. Unit coefficient (|a_d| = 1): substitute ``d = -(E - a_d d) / a_d`` everywhere and keep
    ``d.lo <= solution <= d.hi`` as a condition. Among several, eliminate the variable
    with the largest range, so small window variables remain (conv stride 1 gives
    ``dX[y] = sum_r dY[y + P - r] W[r]``).
 2. Mixed radix: coefficients ``a_0 < a_1 < ...`` with ``a_{m+1}`` a multiple of ``a_m``
    and ``a_{m+1} >= a_m * extent_m`` (reshape, pixel shuffle, stride >= window) have at
    most one solution ``d_m = (R mod a_{m+1}) // a_m``, ``d_top = R // a_top``, with
    ``R = -r`` (and ``R mod a_0 = 0``).
 3. Common factor g of all coefficients: require ``r mod g = 0`` and divide by g.
 4. ``E // S`` or ``E % S`` over reduce variables: new variables ``q`` and ``rho`` with
    ``E = S q + rho``, ``0 <= rho < S``; the equations become affine in them.
 5. Range tightening: a remaining variable bounded on both sides by conditions whose
    bounds differ by a constant ``D`` (``L(j) <= a d <= U(j)``) is re-parametrised as
    ``d = U(j) // a - t`` with ``t`` in ``[0, D // a + 1)``. Worked example, conv with
    stride 2, window 3, padding 1, after step 1 removed the window variable r:
        dX[y] = sum_{h : 0 <= y + 1 - 2h <= 2} dY[h] W[y + 1 - 2h]
    becomes  sum_{t in [0, 2)} dY[(y+1)//2 - t] W[(y+1)%2 + 2t]  (guarded), two terms
    per element instead of H_out. Values at a range's ends that a condition ``d != c``
    excludes shrink it first: a stack's last input's gradient
    ``sum_{i in [0, 3) : i != 0, i != 1} dY[.., i, ..]`` is the one term ``dY[.., 2, ..]``.
Guards ``select(c, v, 0)`` that multiply the summand move into the condition, factors
and conditions that do not depend on the remaining variables move out of the sum, and a
sum over a product with a sum inside is split when that lets a factor move out.

Limits: equations whose reduce-variable coefficients are coprime without a unit or a
radix structure (``2h + 3r = y``) and equations through clamps (``min``/``max``),
reflections or data-dependent reads stay as equations; ``lower/`` runs them as
deterministic scatter-adds. Nothing here changes a value (the fuzz tests check it).
"""

from __future__ import annotations

import math

from ..ir.affine import build, linearize
from ..ir.bounds import interval
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
from ..ir.traverse import free_vars, substitute
from .algebra import FALSE, is_const
from .factor import flatten_product, product, separate_sums

MAX_STEPS = 64


class SumProblem:
    """A sum being solved: ``sum_{axes : conds} prod(num) / prod(den)``."""

    def __init__(self, r: Reduce, simplify_expr):
        self.dtype = r.dtype
        self.axes: list[Var] = list(r.axes)
        self.conds: list[Expr] = split_conjunction(r.where) if r.where is not None else []
        self.source = r.source
        self.simplify_expr = simplify_expr

    # -- bookkeeping -------------------------------------------------------------------
    def substitute(self, mapping: dict) -> None:
        self.source = self.simplify_expr(substitute(self.source, mapping))
        self.conds = [self.simplify_expr(substitute(c, mapping)) for c in self.conds]

    def add_range(self, v: Var, value: Expr) -> None:
        self.conds.append(self.simplify_expr(binary("le", const(v.lo, value.dtype), value)))
        self.conds.append(self.simplify_expr(binary("le", value, const(v.hi, value.dtype))))

    def eliminate(self, v: Var, value: Expr) -> None:
        self.axes.remove(v)
        self.add_range(v, value)
        self.substitute({v: value})

    def clean_conds(self) -> bool:
        """Split, fold and deduplicate conditions; False when one is always false."""
        out: list[Expr] = []
        for c in self.conds:
            for part in split_conjunction(self.simplify_expr(c)):
                if is_const(part, True) or part in out:
                    continue
                if part is FALSE or is_const(part, False):
                    return False
                out.append(part)
        self.conds = out
        return True

    # -- step 4: quotient and remainder variables ---------------------------------------
    def introduce_divmod(self, atom: Binary) -> bool:
        e, s = atom.a, int(atom.b.value)
        iv = interval(e)
        if iv is None or s <= 0:
            return False
        q = Var.fresh("q", iv[0] // s, iv[1] // s - iv[0] // s + 1)
        rho = Var.fresh("rho", 0, s)
        self.axes += [q, rho]
        quotient = Binary("floordiv", e, atom.b, e.dtype)
        remainder = Binary("floormod", e, atom.b, e.dtype)
        from ..ir.traverse import transform

        def swap(x: Expr):
            if x is quotient:
                return q
            if x is remainder:
                return rho
            return None

        self.source = transform(self.source, swap)
        self.conds = [transform(c, swap) for c in self.conds]
        self.conds.append(binary("eq", e, binary("add", binary("mul", const(s, e.dtype), q), rho)))
        self.clean_conds()
        return True

    # -- the equation loop ---------------------------------------------------------------
    def solve_equations(self) -> bool:
        """Eliminate variables through equations; False when the sum is empty."""
        for _ in range(MAX_STEPS):
            if not self.clean_conds():
                return False
            if not self.step():
                return True
        return True

    def step(self) -> bool:
        """One elimination. Equations through ``//``/``%`` are opened first, then the
        equations with the fewest reduce variables are solved first."""
        axes = set(self.axes)
        candidates = []
        for c in self.conds:
            if not (isinstance(c, Binary) and c.op == "eq" and c.a.dtype.startswith("int")):
                continue
            coeffs, k = linearize(binary("sub", c.a, c.b))
            red = {a: v for a, v in coeffs.items() if a in axes}
            blockers = [a for a in coeffs if a not in axes and free_vars(a) & axes]
            candidates.append((c, coeffs, k, red, blockers))
        for *_, blockers in candidates:
            for b in blockers:
                if (
                    isinstance(b, Binary)
                    and b.op in ("floordiv", "floormod")
                    and isinstance(b.b, Const)
                    and _affine_in_vars(b.a)
                    and self.introduce_divmod(b)
                ):
                    return True
        solvable = [x for x in candidates if x[3] and not x[4]]
        for c, coeffs, k, red, _ in sorted(solvable, key=lambda x: len(x[3])):
            rest = {a: v for a, v in coeffs.items() if a not in axes}
            idx = self.conds.index(c)
            del self.conds[idx]
            if (
                self.solve_radix(red, rest, k)
                or self.solve_unit(red, rest, k)
                or self.solve_gcd(red, rest, k)
            ):
                return True
            self.conds.insert(idx, c)
        return False

    def solve_unit(self, red: dict, rest: dict, k: int) -> bool:
        units = [v for v, a in red.items() if abs(a) == 1]
        if not units:
            return False
        v = max(units, key=lambda x: (x.extent, -x.uid))
        a = red[v]
        # a*v + others + rest + k = 0  =>  v = -(others + rest + k) / a
        others = {x: -c * a for x, c in red.items() if x is not v}
        outer = {x: -c * a for x, c in rest.items()}
        value = build({**others, **outer}, -k * a)
        self.eliminate(v, value)
        return True

    def solve_radix(self, red: dict, rest: dict, k: int) -> bool:
        if len(red) < 2 and all(abs(a) == 1 for a in red.values()):
            return False
        signs = {a > 0 for a in red.values()}
        if len(signs) != 1:
            return False
        sign = 1 if signs.pop() else -1
        chain = sorted(red, key=lambda v: abs(red[v]))
        coef = [abs(red[v]) for v in chain]
        for m in range(len(chain) - 1):
            if coef[m + 1] % coef[m] or coef[m + 1] < coef[m] * chain[m].extent:
                return False
        # sum coef_m (d_m - lo_m) = R  with  R = -sign*(rest + k) - sum coef_m lo_m
        shift = sum(c * v.lo for c, v in zip(coef, chain, strict=True))
        big_r = self.simplify_expr(
            build({x: -sign * c for x, c in rest.items()}, -sign * k - shift)
        )
        solutions = {}
        for m, v in enumerate(chain):
            if m + 1 < len(chain):
                part = binary("floormod", big_r, const(coef[m + 1], big_r.dtype))
            else:
                part = big_r
            sol = binary("floordiv", part, const(coef[m], big_r.dtype)) if coef[m] > 1 else part
            solutions[v] = self.simplify_expr(binary("add", sol, const(v.lo, big_r.dtype)))
        if coef[0] > 1:
            self.conds.append(
                binary(
                    "eq",
                    binary("floormod", big_r, const(coef[0], big_r.dtype)),
                    const(0, big_r.dtype),
                )
            )
        for v in chain:
            self.axes.remove(v)
            self.add_range(v, solutions[v])
        self.substitute(solutions)
        return True

    def solve_gcd(self, red: dict, rest: dict, k: int) -> bool:
        g = 0
        for a in red.values():
            g = math.gcd(g, abs(a))
        if g <= 1:
            return False
        outer = build(rest, k)
        self.conds.append(
            binary("eq", binary("floormod", outer, const(g, outer.dtype)), const(0, outer.dtype))
        )
        reduced = build({x: a // g for x, a in red.items()}, 0)
        self.conds.append(binary("eq", reduced, binary("floordiv", -outer, const(g, outer.dtype))))
        return True

    # -- step 5: range tightening --------------------------------------------------------
    def tighten(self) -> None:
        for v in list(self.axes):
            if v.extent == 1:
                self.axes.remove(v)
                self.substitute({v: const(v.lo, v.dtype)})
                continue
            lo, hi = _open_ends(v, self.conds)
            lows, highs = [(const(lo), 1)], [(const(hi), 1)]
            for c in self.conds:
                bound = _linear_bound(c, v, set(self.axes))
                if bound is None:
                    continue
                kind, a, expr = bound
                (lows if kind == "lo" else highs).append((expr, a))
            best = None
            for hi_expr, ah in highs:
                for lo_expr, al in lows:
                    if ah != al:
                        continue
                    d = _constant_difference(hi_expr, lo_expr)
                    if d is None or d < 0:
                        continue
                    count = d // ah + 1
                    if best is None or count < best[0]:
                        best = (count, hi_expr, lo_expr, ah)
            if best is None or best[0] >= v.extent:
                continue
            count, hi_expr, lo_expr, a = best
            if isinstance(hi_expr, Const) and isinstance(lo_expr, Const):
                lo = -((-lo_expr.value) // a)
                hi = hi_expr.value // a
                if lo == hi:  # one term
                    self.axes.remove(v)
                    self.substitute({v: const(lo, v.dtype)})
                    continue
                nv = Var.fresh(v.name, lo, max(hi - lo + 1, 0))
                self.axes[self.axes.index(v)] = nv
                self.substitute({v: nv})
                continue
            t = Var.fresh("t" if not v.name.startswith("t") else v.name + "'", 0, count)
            top = hi_expr if a == 1 else binary("floordiv", hi_expr, const(a, hi_expr.dtype))
            value = self.simplify_expr(binary("sub", top, t))
            self.axes[self.axes.index(v)] = t
            self.add_range(v, value)
            self.substitute({v: value})
        self.clean_conds()


def _open_ends(v: Var, conds: list[Expr]) -> tuple[int, int]:
    """``v``'s range less the values at its ends that a condition ``v != c`` (or
    ``!(v == c)``) excludes; one value at least stays."""
    excluded = set()
    for c in conds:
        if isinstance(c, Unary) and c.op == "not" and isinstance(c.a, Binary) and c.a.op == "eq":
            pair = (c.a.a, c.a.b)
        elif isinstance(c, Binary) and c.op == "ne":
            pair = (c.a, c.b)
        else:
            continue
        for x, y in (pair, pair[::-1]):
            if x is v and isinstance(y, Const):
                excluded.add(int(y.value))
    lo, hi = v.lo, v.hi
    while lo < hi and lo in excluded:
        lo += 1
    while hi > lo and hi in excluded:
        hi -= 1
    return lo, hi


def _affine_in_vars(e: Expr) -> bool:
    coeffs, _ = linearize(e)
    return all(isinstance(a, Var) for a in coeffs)


def _linear_bound(c: Expr, v: Var, axes: set):
    """A condition ``L <= a*v`` or ``a*v <= U`` (a > 0, L/U free of reduce variables)."""
    if not (isinstance(c, Binary) and c.op in ("lt", "le") and c.a.dtype.startswith("int")):
        return None
    coeffs, k = linearize(binary("sub", c.b, c.a))  # coeffs . atoms + k >= (1 if lt else 0)
    a = coeffs.get(v, 0)
    if a == 0:
        return None
    for atom in coeffs:
        if atom is not v and free_vars(atom) & axes:
            return None
    if c.op == "lt":
        k -= 1
    rest = {x: w for x, w in coeffs.items() if x is not v}
    # a*v + rest + k >= 0
    if a > 0:
        return "lo", a, build({x: -w for x, w in rest.items()}, -k)  # a v >= -(rest + k)
    return "hi", -a, build(rest, k)  # -a v <= rest + k


def _constant_difference(x: Expr, y: Expr) -> int | None:
    cx, kx = linearize(x)
    cy, ky = linearize(y)
    if cx != cy:
        return None
    return kx - ky


def solve_sum(r: Reduce, simplify_expr) -> Expr:
    """Gather form of a sum reduction (see the module docstring)."""
    p = SumProblem(r, simplify_expr)
    num: list[Expr] = []
    den: list[Expr] = []
    lifted: list[Expr] = []
    flatten_product(p.source, num, den, lifted)
    p.source = product(num, den, r.dtype)
    p.conds += lifted
    if not p.solve_equations():
        return const(0, r.dtype)
    p.tighten()
    return assemble(p, r)


def assemble(p: SumProblem, r: Reduce) -> Expr:
    """Move what does not depend on the remaining variables out of the sum."""
    axes = set(p.axes)
    num: list[Expr] = []
    den: list[Expr] = []
    conds: list[Expr] = []
    flatten_product(p.source, num, den, conds)
    conds = p.conds + conds
    inner_conds = [c for c in conds if free_vars(c) & axes]
    outer_conds = [c for c in conds if not free_vars(c) & axes]
    inner_num = [f for f in num if free_vars(f) & axes]
    outer_num = [f for f in num if not free_vars(f) & axes]
    inner_den = [f for f in den if free_vars(f) & axes]
    outer_den = [f for f in den if not free_vars(f) & axes]
    # a sum inside the product: split the sum (linearity) when that lets an operand's
    # extra variables leave it, e.g. sum_j w(j) (u(j) + v(b)) = sum_j w u + v(b) sum_j w,
    # which is O(n) instead of O(n) per b
    others_free = set()
    for g in inner_num + inner_den + inner_conds:
        if not (isinstance(g, Binary) and g.op in ("add", "sub")):
            others_free |= free_vars(g) - axes
    for f in inner_num:
        if (
            isinstance(f, Binary)
            and f.op in ("add", "sub")
            and any(not free_vars(x) & axes and free_vars(x) - others_free for x in (f.a, f.b))
        ):
            others = [g for g in inner_num if g is not f]
            parts = []
            for term in (f.a, f.b):
                src = product(others + [term], inner_den, r.dtype)
                parts.append(
                    solve_sum(
                        Reduce(SUM, src, tuple(p.axes), conjunction(inner_conds), r.dtype),
                        p.simplify_expr,
                    )
                )
            inner = [binary(f.op, parts[0], parts[1])]
            break
    else:
        inner = separate_sums(p.axes, inner_num, inner_den, inner_conds, r.dtype, outer_num)
    out = product(outer_num + inner, outer_den, r.dtype)
    if outer_conds:
        out = Select(conjunction(outer_conds), out, const(0, r.dtype), r.dtype)
    return out


__all__ = ["solve_sum"]
