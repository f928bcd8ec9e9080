"""Reductions as C loops.

A reduction placed in a block opens one loop per axis there, with its accumulator
declared before. A conjunct of the ``where`` that is affine in one reduce axis with
coefficient ``c`` (``c k + R >= 0`` or ``== 0``, ``R`` over variables bound outside that
loop) becomes a bound of its loop (``k >= ceil(-R / c)`` for ``c > 0``,
``k <= floor(R / -c)`` for ``c < 0``): the guards of a gather-form convolution or pooling
backward cost nothing per element. The other conjuncts test each point: branch-free
(``acc += cond ? src : 0``) when the source is safe to evaluate anyway, else in an ``if``
block at the loop of the last axis they use.

Sibling reductions (the same ranges, no ``where``, placed in the same block, independent
of each other) share one loop: a layer-norm backward reads each row once for its three
sums. Float sums and products carry ``omp simd reduction`` clauses, so gcc vectorizes
them without ``-ffast-math``.
"""

from __future__ import annotations

import math

from ...ir import dtype as dt
from ...ir.affine import linearize
from ...ir.expr import Binary, Cast, Const, Expr, Reduce, Select, Unary, Var
from ...ir.traverse import free_vars, substitute, walk
from ...ir.verify import split_conjunction
from . import c_ops
from .blocks import Block
from .c_ops import LOCAL_CTYPE
from .kernel_facts import eager, reads_in_bounds

FUSABLE = ("sum", "prod", "max", "min")  # reductions that may share a loop
UNROLL = 16  # reductions of at most this many points with constant bounds are unrolled
SIMD_OPS = {"sum": "+", "prod": "*", "max": "max", "min": "min"}  # omp simd reduction ops


def _nan_flagged(e: Reduce) -> bool:
    return e.combiner.kind in ("max", "min") and dt.is_float(e.dtype)


class ReductionEmitter:
    """The reduction half of ``codegen.KernelSource`` (which provides ``stack``,
    ``value``, ``place``, ``bind``, ``fresh``, ``memo`` and ``reductions``)."""

    def reduce(self, e: Reduce) -> str:
        kind = e.combiner.kind
        here = self.stack[-1]
        ctype = LOCAL_CTYPE[e.dtype]
        acc = self.fresh("acc")
        shadowed = {a: self.vars.get(a) for a in e.axes}  # a nested reduction may reuse an axis
        names = {a: self.bind(a, "r") for a in e.axes}
        bounds, rest = self.loop_bounds(e, names)
        if kind in ("argmax", "argmin"):
            src_type = LOCAL_CTYPE[e.source.dtype]
            start = e.axes[0].lo if len(e.axes) == 1 else 0
            here.items.append(f"{ctype} {acc} = {start}; {src_type} {acc}_best = 0; "
                              f"int {acc}_found = 0;")
        else:
            self.declare(e, acc, here)
        siblings = self.siblings(e)
        self.emitting.update([e, *siblings])  # not a sibling of anything they contain
        for r in siblings:
            siblings[r] = self.fresh("acc")
            self.declare(r, siblings[r], here)
        deepest = {}  # conjunct -> position of the last own axis it uses (-1: none)
        for c in rest:
            used = [k for k, a in enumerate(e.axes) if a in free_vars(c)]
            deepest[c] = used[-1] if used else -1
        last = len(e.axes) - 1
        predicate = (kind in ("sum", "prod", "max", "min") and eager(e.source)
                     and all(eager(c) for c in rest))
        opened = []

        def guard(conds):
            if not conds:
                return
            test = " && ".join(self.value(c) for c in conds)
            block = Block(barrier=True, head=[f"if ({test}) {{"])
            self.stack.append(block)
            opened.append(block)

        guard([c for c in rest if deepest[c] == -1])
        # a small window (a pooling's 2x2, a 3x3 stencil) is unrolled, so that the loop
        # around it (over outputs) vectorizes instead of this one
        unroll = (not rest and math.prod(a.extent for a in e.axes) <= UNROLL
                  and all(bounds[a] == (str(a.lo), str(a.lo + a.extent)) for a in e.axes))
        for k, a in enumerate(e.axes):
            lo, hi = bounds[a]
            name = names[a]
            head = [f"#pragma GCC unroll {UNROLL}"] if unroll else []
            block = Block(frozenset((a,)), head=[
                *head, f"for (int {name} = {lo}; {name} < {hi}; {name}++) {{"], loop=True,
                unrolled=unroll)
            self.stack.append(block)
            opened.append(block)
            if k < last or not predicate:
                guard([c for c in rest if deepest[c] == k])
        inner = self.stack[-1]
        src = self.value(e.source)
        mask = [self.value(c) for c in rest if deepest[c] == last] if predicate else []
        inner.items.append(self.combine(e, acc, src, " && ".join(mask), names, flag=True))
        for r, r_acc in siblings.items():
            r_src = self.value(substitute(r.source, dict(zip(r.axes, e.axes, strict=True))))
            inner.items.append(self.combine(r, r_acc, r_src, "", names, flag=True))
        innermost_loop = opened[-1] if opened and opened[-1].loop else None
        for block in reversed(opened):
            self.stack.pop()
            self.stack[-1].items.append(block)
        accumulators = [(e, acc), *((r, a) for r, a in siblings.items())]
        for r, r_acc in accumulators:
            if _nan_flagged(r):
                here.items.append(f"if ({r_acc}_nan) {r_acc} = NAN;")
        for r, r_acc in siblings.items():
            self.memo[r] = (r_acc, here)
        if (innermost_loop is not None and not unroll and not innermost_loop.has_blocks()
                and not self.has_check
                and all(r.combiner.kind in SIMD_OPS and (dt.is_float(r.dtype) or r.combiner.kind
                                                         in ("max", "min"))
                        for r, _ in accumulators)):
            clauses = []
            for r, a in accumulators:
                clauses.append(f"reduction({SIMD_OPS[r.combiner.kind]}:{a})")
                if _nan_flagged(r):
                    clauses.append(f"reduction(|:{a}_nan)")
            innermost_loop.head.insert(0, f"#pragma omp simd {' '.join(clauses)}")
        for a, old in shadowed.items():
            if old is not None:
                self.vars[a] = old
        self.emitting.difference_update([e, *siblings])
        return acc

    def siblings(self, e: Reduce) -> dict:
        """Other reductions of the body over the same ranges, with no ``where``, placed in
        the same block, independent of ``e`` and safe to evaluate unguarded: computed in
        ``e``'s loop (one pass over a layer-norm row instead of three). Keys only; the
        caller fills in their accumulators."""
        if e.where is not None or e.combiner.kind not in FUSABLE:
            return {}
        here = len(self.stack) - 1
        bound = frozenset().union(*(b.binds for b in self.stack))
        spans = [(a.lo, a.extent) for a in e.axes]
        inside_e = set(walk(e))
        found: dict = {}
        for r in self.reductions:
            if (r is e or r in found or r in self.emitting or r.where is not None
                    or r.combiner.kind not in FUSABLE
                    or [(a.lo, a.extent) for a in r.axes] != spans or r in inside_e):
                continue
            hit = self.memo.get(r)
            if hit is not None and any(hit[1] is b for b in self.stack):
                continue
            if not free_vars(r) <= bound or self.place(r) != here or not reads_in_bounds(r):
                continue
            nodes = walk(r)  # e's axes may name r's own, not one bound inside r
            if e in nodes or any(isinstance(x, Var) and x in e.axes and x not in r.axes
                                 for x in nodes):
                continue
            found[r] = None
        return found

    def loop_bounds(self, e: Reduce, names: dict):
        """Per axis ``(lo, hi)`` C expressions (half-open), and the conjuncts left over."""
        bounds = {a: [str(a.lo), str(a.lo + a.extent)] for a in e.axes}
        rest = []
        conds = split_conjunction(e.where) if e.where is not None else []
        for c in conds:
            found = affine_bound(c)
            if found is None:
                rest.append(c)
                continue
            sides = []
            for coeffs, k, kind in found:
                own = [a for a in coeffs if a in bounds]
                if not own:
                    sides = None
                    break
                a = max(own, key=e.axes.index)  # the innermost own axis it uses
                others = {v: c for v, c in coeffs.items() if v is not a}
                if any(v in bounds and e.axes.index(v) > e.axes.index(a) for v in others) or \
                        not all(v in bounds or self._bound(v) for v in others):
                    sides = None
                    break
                if kind == "eq" and abs(coeffs[a]) != 1:
                    sides = None
                    break
                sides.append((a, coeffs[a], others, k, kind))
            if sides is None:
                rest.append(c)
                continue
            for a, coef, others, k, kind in sides:
                r = " + ".join([f"{c} * {names.get(v) or self.var(v)}" for v, c in
                                others.items()] + [f"{k}L"])
                lo, hi = bounds[a]
                if kind == "eq":  # coef * a + R == 0, coef = +-1
                    point = f"({-coef}L * ({r}))"
                    bounds[a] = [f"tg_imax({lo}, {point})", f"tg_imin({hi}, {point} + 1)"]
                elif coef > 0:  # a >= ceil(-R / coef)
                    bounds[a] = [f"tg_imax({lo}, tg_cdiv(-({r}), {coef}L))", hi]
                else:  # a <= floor(R / -coef)
                    bounds[a] = [lo, f"tg_imin({hi}, tg_fdiv({r}, {-coef}L) + 1)"]
        return {a: tuple(b) for a, b in bounds.items()}, rest

    def _bound(self, v) -> bool:
        return isinstance(v, Var) and v in self.vars and any(v in b.binds for b in self.stack)

    def declare(self, e: Reduce, acc: str, block: Block) -> None:
        identity = c_ops.literal(e.combiner.identity_value(e.dtype), e.dtype)
        block.items.append(f"{LOCAL_CTYPE[e.dtype]} {acc} = {identity};")
        if _nan_flagged(e):
            block.items.append(f"int {acc}_nan = 0;")

    def combine(self, e: Reduce, acc: str, src: str, mask: str, names: dict,
                flag: bool = False) -> str:
        """The statement folding ``src`` into ``acc``. ``flag``: a float max/min keeps a
        NaN flag (``acc_nan``) beside a plain compare, which vectorizes as an ``omp simd``
        max reduction; the caller sets ``acc`` to NaN after the loop if the flag is up
        (NumPy's max propagates NaN). Without it the compare itself propagates NaN."""
        kind = e.combiner.kind
        if kind == "sum":
            return f"{acc} += {f'{mask} ? {src} : 0' if mask else src};"
        if kind == "prod":
            return f"{acc} *= {f'{mask} ? {src} : 1' if mask else src};"
        if kind in ("max", "min") and flag and _nan_flagged(e):
            cmp = ">" if kind == "max" else "<"
            new = f"({acc} {cmp} {src} ? {acc} : {src})"
            nan = f"({mask}) && {src} != {src}" if mask else f"{src} != {src}"
            return (f"{acc} = {f'{mask} ? {new} : {acc}' if mask else new}; "
                    f"{acc}_nan |= {nan};")
        if kind in ("max", "min"):
            new = c_ops.binary(kind, acc, src, e.dtype, e.dtype)
            return f"{acc} = {f'{mask} ? {new} : {acc}' if mask else new};"
        if kind in ("argmax", "argmin"):
            worse = "<=" if kind == "argmax" else ">="
            if len(e.axes) == 1:
                pos = names[e.axes[0]]
            else:
                pos = "0"
                for a in e.axes:
                    pos = f"({pos}) * {a.extent}L + ({names[a]} - {a.lo}L)"
            return (f"if (!{acc}_found || ({acc}_best == {acc}_best && !({src} {worse} "
                    f"{acc}_best))) {{ {acc}_best = {src}; {acc} = {pos}; {acc}_found = 1; }}")
        if kind == "custom":
            c = e.combiner
            new = inline_combiner(c.combine, {c.lhs: acc, c.rhs: src})
            return f"{acc} = {new};"
        raise NotImplementedError(f"reduction {kind} in the C backend")


def affine_bound(c: Expr):
    """``c`` as ``[(coeffs, k, kind)]`` with ``sum coeffs * v + k >= 0`` (kind "ge") or
    ``== 0`` (kind "eq", one coefficient +-1 on some variable); None otherwise."""
    negated = isinstance(c, Unary) and c.op == "not" and isinstance(c.a, Binary)
    if negated and c.a.op in ("lt", "le"):
        a, b = c.a.a, c.a.b  # not (a < b): a - b >= 0; not (a <= b): a - b - 1 >= 0
        form = _difference(a, b, 0 if c.a.op == "lt" else -1)
        return None if form is None else [(*form, "ge")]
    if not isinstance(c, Binary) or c.op not in ("lt", "le", "eq"):
        return None
    if c.op == "eq":
        form = _difference(c.a, c.b, 0)
        if form is None or not any(abs(x) == 1 for x in form[0].values()):
            return None
        return [(*form, "eq")] if len(form[0]) >= 1 else None
    form = _difference(c.b, c.a, -1 if c.op == "lt" else 0)  # a < b: b - a - 1 >= 0
    return None if form is None else [(*form, "ge")]


def _difference(a: Expr, b: Expr, k: int):
    if not (dt.is_int(a.dtype) and dt.is_int(b.dtype)):
        return None
    ca, ka = linearize(a)
    cb, kb = linearize(b)
    coeffs = dict(ca)
    for atom, c in cb.items():
        coeffs[atom] = coeffs.get(atom, 0) - c
    coeffs = {v: c for v, c in coeffs.items() if c}
    if not coeffs or not all(isinstance(v, Var) for v in coeffs):
        return None
    return coeffs, ka - kb + k


def inline_combiner(e: Expr, env: dict) -> str:
    """A combiner's expression of its two parameters, as one C expression."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Const):
        return c_ops.literal(e.value, e.dtype)
    if isinstance(e, Unary):
        return c_ops.unary(e.op, inline_combiner(e.a, env), e.dtype if e.op != "not" else "bool")
    if isinstance(e, Binary):
        operand = dt.promote(e.a.dtype, e.b.dtype)
        a, b = inline_combiner(e.a, env), inline_combiner(e.b, env)
        return c_ops.binary(e.op, a, b, e.dtype, operand)
    if isinstance(e, Cast):
        return c_ops.cast(inline_combiner(e.a, env), e.dtype)
    if isinstance(e, Select):
        cond, a, b = (inline_combiner(x, env) for x in (e.cond, e.a, e.b))
        return f"({cond} ? {a} : {b})"
    raise NotImplementedError(f"custom reducer with {type(e).__name__} in the C backend")
