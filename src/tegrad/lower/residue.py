"""Residue splitting: make ``//`` and ``%`` of index variables affine.

Gradients of strided operators come out of the simplifier with variables under a
constant divisor. Conv stride 2, padding 1, 3x3, input gradient::

    dX[n, c, y, x] = sum(dO[n, k, (y+1)//2 - t, ...] * W[k, c, (y+1)%2 + 2*t, ...],
                         k, t in [0, 2), ..., where 0 <= (y+1)//2 - t < Hout && (y+1)%2 + 2*t < 3)

Method. A variable ``v`` that appears as ``c*v`` inside ``(...) // S`` or ``(...) % S``
is written ``v = L*q + a`` with ``L = S / gcd(S, c)`` (the lcm over all its uses), so
that ``c*L*q`` is a multiple of ``S`` and leaves the division:

    (S*Q + R) // S  =  Q + m        (S*Q + R) % S  =  R - m*S

whenever the remainder part ``R`` provably lies in ``[m*S, (m+1)*S)`` (interval
arithmetic over the variables' ranges). Two ways to pick ``a``:

* aligned: ``a`` is a new variable over ``[0, L)``. One piece, the axis becomes two
  axes (``o = Kg*g + kk`` for grouped convolutions). Needs ``L`` to divide the range and
  the remainder of every division to stay in one block.
* residue: ``a`` is each constant in ``range(L)``, one piece per residue class, with
  ``q`` over the values where ``L*q + a`` stays in ``v``'s range (ranges not divisible
  by ``L`` give classes of different sizes, possibly empty). Conv dX above: for ``y =
  2*q + 1`` the index becomes ``q + 1 - t`` and the guard ``2*t < 3`` one on ``t`` alone.

Worked example (the dX above, ``y = 2*q + 0``): ``(2*q + 1)//2 = q``, ``(2*q + 1)%2 = 1``,
so the piece reads ``dO[n, k, q - t, ...] * W[k, c, 1 + 2*t, ...]`` where ``1 + 2*t < 3``.

Limits: one round (a division of a division that needs a second split is left as is
and the caller falls back); at most ``MAX_PIECES`` pieces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.affine import Form, build, linearize
from ..ir.bounds import form_interval
from ..ir.expr import Binary, Const, Expr, Select, Unary, Var, binary, conjunction, const
from ..ir.traverse import free_vars, substitute, transform, walk
from .strides import TILE, transposing

MAX_PIECES = 64
MAX_UNROLLED = 16  # residue classes a compiled kernel unrolls in its loop body


def unrolled_axes(body: Expr, axes: Sequence[Var], tile: int = TILE,
                  ragged: bool = False) -> dict[Var, int]:
    """The output axes that a compiled kernel runs by residue class (``codegen``), with
    their split factors: those used under a constant ``//`` or ``%`` whose factor divides
    their range, at most ``MAX_UNROLLED`` classes in all. A max pool's gradient reads
    ``Y[i // 2, j // 2]``: with ``i = 2 q + a`` and ``a`` unrolled, the window's maximum
    is read (or computed, once inlined) once per window instead of once per element.
    With ``ragged`` (``Options.ragged_residues``), an axis may have a range the factor
    does not divide (a pool's 63 rows in classes of 2): its last quotient then holds only
    some classes, and the others are guarded there (``unrolled_bodies``; the loop nest
    makes that quotient a region of its own, where the guards fold). Where none is, the
    axis a transposing read is contiguous along, in classes of ``tile``
    (``strides.transposing``)."""
    need = divisors([body], axes)
    if not need:  # (a transposing read: its contiguous axis in residue classes)
        return transposing(body, axes, tile)
    if (any(v.lo % n or v.extent % n and (not ragged or v.extent < n)
            for v, n in need.items())
            or math.prod(need.values()) > MAX_UNROLLED):
        return {}
    return need


def unrolled_bodies(body: Expr, axes: Sequence[Var], need: dict[Var, int]):
    """``(loop axes, [(index forms of the axes, body, guard)])`` for ``unrolled_axes``:
    each split axis ``v`` becomes ``q`` over ``ceil(v / n)`` values, and there is one body
    per combination of residues ``a`` (``v = n q + a`` substituted, divisions
    simplified). Equal sub-expressions of the bodies are the same nodes (the window's
    maximum). ``guard``: None, or for a class that a ragged axis's last quotient does not
    hold, the condition ``n q + a <= last`` under which the body's point exists."""
    loop, quotient = [], {}
    for v in axes:
        if v in need:
            quotient[v] = Var.fresh(f"{v.name}.q", v.lo // need[v], -(-v.extent // need[v]))
        loop.append(quotient.get(v, v))
    bodies = []
    for residues in _product([range(need[v]) for v in need]):
        forms = dict(zip(need, residues, strict=True))
        mapping = {v: build({quotient[v]: need[v]}, a, v.dtype) for v, a in forms.items()}
        index = tuple(({quotient[v]: need[v]}, forms[v]) if v in forms else ({v: 1}, 0)
                      for v in axes)
        guard = conjunction(binary("le", mapping[v], const(v.lo + v.extent - 1, v.dtype))
                            for v, a in forms.items()
                            if v.extent % need[v] and a >= v.extent % need[v])
        bodies.append((index, normalize(substitute(body, mapping)), guard))
    return loop, bodies


@dataclass(frozen=True)
class Split:
    """One piece: the expressions over new variables, and where its output goes."""

    out_index: tuple[Form, ...]  # each original output axis, as an affine form of out_vars
    out_vars: tuple[Var, ...]
    red_vars: tuple[Var, ...]
    exprs: tuple[Expr, ...]
    kind: str  # "none", "aligned" or "residue"


def split_axes(out_axes: Sequence[Var], red_axes: Sequence[Var],
               exprs: Sequence[Expr]) -> list[Split] | None:
    """Pieces whose expressions have no ``//``/``%`` of variables, or None if impossible."""
    variables = (*out_axes, *red_axes)
    need = divisors(exprs, variables)
    if not need:
        return [_identity(out_axes, red_axes, exprs)]
    residue: set[Var] = set()
    aligned = {v for v, n in need.items() if v.extent % n == 0 and v.lo % n == 0}
    for _ in range(len(need) + 1):
        modes = {v: ("aligned" if v in aligned and v not in residue else "residue") for v in need}
        made = _pieces(out_axes, red_axes, exprs, need, modes)
        if made is None:
            return None
        pieces, origin = made
        stuck = set()
        for p in pieces:
            stuck |= _unsplit_vars(p.exprs)
        if not stuck:
            return pieces
        culprits = {origin[w] for w in stuck if w in origin} - residue
        culprits &= {v for v in need if modes[v] == "aligned"}
        if not culprits:
            return None
        residue |= culprits
    return None


def aligned_split(v: Var, n: int) -> tuple[Var, Var, Form]:
    """``v = n q + r`` for ``n`` dividing ``v``'s range: the quotient and remainder axes
    and that form."""
    q = Var.fresh(f"{v.name}.q", v.lo // n, v.extent // n)
    r = Var.fresh(f"{v.name}.r", 0, n)
    return q, r, ({q: n, r: 1}, 0)


def divisors(exprs: Sequence[Expr], variables: Sequence[Var]) -> dict[Var, int]:
    """For each variable used under a constant ``//`` or ``%``, the split factor ``L``."""
    wanted = set(variables)
    need: dict[Var, int] = {}
    for e in exprs:
        for x in walk(e):
            s = _divisor(x)
            if s is None:
                continue
            coeffs, _ = linearize(x.a)
            for atom, c in coeffs.items():
                if isinstance(atom, Var) and atom in wanted:
                    n = s // math.gcd(s, c)
                    if n > 1:
                        need[atom] = math.lcm(need.get(atom, 1), n)
    return need


def normalize(e: Expr) -> Expr:
    """Rewrite ``(S*Q + R)//S`` and ``(S*Q + R)%S`` where ``R``'s block is known, and
    fold conditions and selects that became constant."""
    return transform(e, _rewrite)


# --------------------------------------------------------------------------------------


def _identity(out_axes, red_axes, exprs) -> Split:
    index = tuple(({v: 1}, 0) for v in out_axes)
    exprs = tuple(normalize(e) for e in exprs)
    return Split(index, tuple(out_axes), tuple(red_axes), exprs, "none")


def _pieces(out_axes, red_axes, exprs, need, modes):
    """(pieces, {new variable: the variable it splits}) or None if too many pieces."""
    # per variable: a list of options (replacement expr, new vars, out-index form)
    options: dict[Var, list[tuple[Expr, tuple[Var, ...], Form]]] = {}
    origin: dict[Var, Var] = {}
    count = 1
    for v, n in need.items():
        if modes[v] == "aligned":
            q, r, form = aligned_split(v, n)
            options[v] = [(build(*form, v.dtype), (q, r), form)]
        else:
            opts = []
            for a in range(n):
                q_lo = -((a - v.lo) // n)  # ceil((lo - a) / n)
                q_hi = (v.lo + v.extent - 1 - a) // n
                if q_hi < q_lo:
                    continue
                q = Var.fresh(f"{v.name}.{a}", q_lo, q_hi - q_lo + 1)
                form = ({q: n}, a)
                opts.append((build(*form, v.dtype), (q,), form))
            options[v] = opts
        origin.update({w: v for opt in options[v] for w in opt[1]})
        count *= max(len(options[v]), 1)
    if count > MAX_PIECES:
        return None
    kind = "residue" if any(m == "residue" for m in modes.values()) else "aligned"
    out: list[Split] = []
    for choice in _product([options[v] for v in need]):
        mapping = dict(zip(need, (c[0] for c in choice), strict=True))
        made = dict(zip(need, choice, strict=True))
        out_index, out_vars, red_vars = [], [], []
        for v in out_axes:
            if v in made:
                out_index.append(made[v][2])
                out_vars.extend(made[v][1])
            else:
                out_index.append(({v: 1}, 0))
                out_vars.append(v)
        for v in red_axes:
            red_vars.extend(made[v][1] if v in made else (v,))
        new = tuple(normalize(substitute(e, mapping)) for e in exprs)
        out.append(Split(tuple(out_index), tuple(out_vars), tuple(red_vars), new, kind))
    return out, origin


def _product(lists):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for rest in _product(lists[1:]):
            yield (head, *rest)


def _unsplit_vars(exprs) -> set[Var]:
    out: set[Var] = set()
    for e in exprs:
        for x in walk(e):
            if _divisor(x) is not None:
                out |= {w for w in free_vars(x) if w.extent is not None}
    return out


def _divisor(x: Expr) -> int | None:
    if (isinstance(x, Binary) and x.op in ("floordiv", "floormod") and isinstance(x.b, Const)
            and dt.is_int(x.b.dtype) and int(x.b.value) > 0):
        return int(x.b.value)
    return None


def _rewrite(x: Expr) -> Expr | None:
    s = _divisor(x)
    if s is not None:
        return _divmod(x, s)
    if isinstance(x, Binary) and x.op in ("lt", "le", "eq", "ne") and dt.is_int(x.a.dtype):
        coeffs, k = linearize(x.b - x.a)
        if not coeffs:
            value = {"lt": k > 0, "le": k >= 0, "eq": k == 0, "ne": k != 0}[x.op]
            return const(value, "bool")
        return None
    if isinstance(x, Binary) and x.op in ("and", "or"):
        return _logic(x)
    if isinstance(x, Unary) and x.op == "not" and isinstance(x.a, Const):
        return const(not x.a.value, "bool")
    if isinstance(x, Select) and isinstance(x.cond, Const):
        return x.a if x.cond.value else x.b
    return None


def _divmod(x: Binary, s: int) -> Expr | None:
    coeffs, k = linearize(x.a)
    whole = {a: c // s for a, c in coeffs.items() if c % s == 0}
    rest = {a: c for a, c in coeffs.items() if c % s != 0}
    base, k_rest = k // s, k % s
    iv = form_interval(rest, k_rest)
    if iv is None or iv[0] // s != iv[1] // s:
        return None
    m = iv[0] // s
    if x.op == "floordiv":
        return build(whole, base + m, x.dtype)
    return build(rest, k_rest - m * s, x.dtype)


def _logic(x: Binary) -> Expr | None:
    a, b = x.a, x.b
    absorbing = x.op == "or"  # true absorbs "or", false absorbs "and"
    for p, other in ((a, b), (b, a)):
        if isinstance(p, Const):
            return const(absorbing, "bool") if bool(p.value) == absorbing else other
    return None
