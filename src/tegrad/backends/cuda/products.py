"""Contractions on the device's BLAS: each piece one ``torch.einsum`` of strided views.

A piece (``lower/contraction.py``) is

    out[o(u)] (+)= scale * sum over r of prod_f T_f[i_f(u, r)]      u, r in their ranges

with affine indices ``i_f``. Each factor becomes a view with one dimension per variable it
reads: element ``(v_1..v_k)`` of the view is ``T_f[i_f(v)]``, so its stride along ``v`` is
``sum_m c_{m,v} stride_m`` and its offset ``sum_m i_{f,m}(lo) stride_m`` (``torch.as_strided``
on the padded tensor, which pads with zeros where the index leaves the tensor: the matched
form guarantees that padding makes the dropped conditions true, see ``lower/contraction``).
``torch.einsum`` then multiplies the views (``bmm`` on cuBLAS: IEEE float32 unless
``torch.backends.cuda.matmul.allow_tf32`` is set), and the result lands in the region
``o(u)`` of the output.

torch has no negative strides, so a negative coefficient is moved off the views:

* a reduction variable read with negative coefficients in the larger operands is reversed
  (``r = lo + hi - r'``): every coefficient of it changes sign;
* a tensor dimension whose index has only non-positive coefficients is flipped (a copy of
  that operand, ``torch.flip``): ``i -> (dim - 1) - i``.

A piece that still needs a negative stride, reads phase planes (``phase_split``), or
writes an output index that is not one variable per dimension, is made as a general
kernel instead (``program.blueprint``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...lower.contraction import Contraction, Piece

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


class NotAProduct(Exception):
    """A piece this module cannot make as views (the general kernel makes it)."""


@dataclass(frozen=True)
class FactorView:
    """How one factor's tensor becomes its view: ``flip`` dims, then zero ``pad`` per dim
    ``(before, after)``, then ``as_strided(sizes, strides, offset)`` of the padded tensor."""

    tensor: object
    flip: tuple[int, ...]
    pad: tuple[tuple[int, int], ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    letters: str


@dataclass(frozen=True)
class PieceProduct:
    views: tuple[FactorView, ...]
    equation: str
    scale: float
    region: tuple[tuple[int, int, int], ...]  # per output dim: start, stop, step


@dataclass(frozen=True)
class Product:
    """A contraction as einsums: its output ``shape``, accumulation and output dtypes, and
    its pieces (added into zeros unless they cover the output disjointly)."""

    shape: tuple[int, ...]
    dtype: str
    out_dtype: str
    pieces: tuple[PieceProduct, ...]
    covers: bool


def product_of(c: Contraction) -> Product:
    """``c`` as einsums of views, or ``NotAProduct``."""
    if len(c.pieces) > len(LETTERS):
        raise NotAProduct("too many pieces")
    pieces = tuple(_piece(p, c.shape) for p in c.pieces)
    return Product(tuple(c.shape), c.dtype, c.out_dtype, pieces, c.covers and c.disjoint)


def _piece(p: Piece, shape) -> PieceProduct:
    variables = [*p.out_vars, *p.red_vars]
    if len(variables) > len(LETTERS):
        raise NotAProduct("too many variables")
    ranges = {v: (lo, hi) for v, lo, hi in p.ranges}
    letter = {v: LETTERS[k] for k, v in enumerate(variables)}
    if any(f.phases for f in p.factors):
        raise NotAProduct("a factor of phase planes")
    reversed_vars = _reversals(p)
    views = tuple(_view(f, ranges, letter, reversed_vars) for f in p.factors)
    region = []
    used = set()
    for (terms, const), size in zip(p.out_index, shape, strict=True):
        if len(terms) != 1:
            raise NotAProduct("an output index of several variables")
        (v, c), = terms
        if c <= 0 or v in used or v not in p.out_vars:
            raise NotAProduct("an output index that is not one variable")
        used.add(v)
        lo, hi = ranges[v]
        region.append((c * lo + const, c * hi + const + 1, c))
        if not (0 <= c * lo + const and c * hi + const < size):
            raise NotAProduct("an output region outside the output")
    if used != set(p.out_vars):
        raise NotAProduct("an output variable no index writes")
    read = {v for f in p.factors for terms, _ in f.index for v, c in terms if c}
    if not set(variables) <= read:
        raise NotAProduct("a variable no factor reads")
    out_letters = "".join(letter[v] for (((v, _),), _) in p.out_index)
    equation = ",".join(view.letters for view in views) + "->" + out_letters
    return PieceProduct(views, equation, p.scale, tuple(region))


def _reversals(p: Piece) -> frozenset:
    """The reduction variables to reverse: those read with a negative coefficient in the
    factor of most elements."""
    weight = {}
    for f in p.factors:
        size = math.prod(f.tensor.shape)
        for terms, _ in f.index:
            for v, c in terms:
                if v in p.red_vars and c:
                    weight[v] = weight.get(v, 0) + (size if c < 0 else -size)
    return frozenset(v for v, w in weight.items() if w > 0)


def _view(f, ranges: dict, letter: dict, reversed_vars: frozenset) -> FactorView:
    shape = f.tensor.shape
    forms = []
    for terms, const in f.index:  # reversed variables: r = lo + hi - r'
        coeffs: dict = {}
        for v, c in terms:
            if v in reversed_vars:
                lo, hi = ranges[v]
                const += c * (lo + hi)
                c = -c
            coeffs[v] = coeffs.get(v, 0) + c
        forms.append(({v: c for v, c in coeffs.items() if c}, const))
    flip = []
    for m, (coeffs, const) in enumerate(forms):
        if any(c < 0 for c in coeffs.values()):
            if any(c > 0 for c in coeffs.values()):
                raise NotAProduct("a dimension read with coefficients of both signs")
            flip.append(m)
            forms[m] = ({v: -c for v, c in coeffs.items()}, shape[m] - 1 - const)
    pad = []
    for (coeffs, const), dim in zip(forms, shape, strict=True):
        low = const + sum(c * ranges[v][0] for v, c in coeffs.items())
        high = const + sum(c * ranges[v][1] for v, c in coeffs.items())
        pad.append((max(0, -low), max(0, high - (dim - 1))))
    padded = [dim + a + b for dim, (a, b) in zip(shape, pad, strict=True)]
    dim_strides = [math.prod(padded[m + 1:]) for m in range(len(padded))]
    order = []
    for coeffs, _ in forms:
        order += [v for v in coeffs if v not in order]
    sizes, strides = [], []
    for v in order:
        lo, hi = ranges[v]
        sizes.append(hi - lo + 1)
        strides.append(sum(coeffs.get(v, 0) * s for (coeffs, _), s in zip(forms, dim_strides,
                                                                        strict=True)))
    offset = sum((const + pad[m][0] + sum(c * ranges[v][0] for v, c in coeffs.items()))
                 * dim_strides[m] for m, (coeffs, const) in enumerate(forms))
    return FactorView(f.tensor, tuple(flip), tuple(pad), tuple(sizes), tuple(strides), offset,
                      "".join(letter[v] for v in order))


def run_product(product: Product, arrays: dict, device):
    """The contraction's output tensor."""
    import torch
    import torch.nn.functional as F

    from .device import torch_dtype

    acc = torch_dtype(product.dtype)
    make = torch.empty if product.covers else torch.zeros
    out = make(product.shape, dtype=acc, device=device)
    for piece in product.pieces:
        operands = []
        for view in piece.views:
            t = arrays[view.tensor]
            if view.flip:
                t = torch.flip(t, view.flip)
            if any(a or b for a, b in view.pad):
                t = F.pad(t, [n for a, b in reversed(view.pad) for n in (a, b)])
            t = t.contiguous()
            if t.dtype != acc:
                t = t.to(acc)
            operands.append(torch.as_strided(t, view.sizes, view.strides, view.offset))
        value = torch.einsum(piece.equation, *operands)
        if piece.scale != 1:
            value = value * piece.scale
        target = out[tuple(slice(a, b, c) for a, b, c in piece.region)]
        if product.covers:
            target.copy_(value)
        else:
            target.add_(value)
    return out if product.out_dtype == product.dtype else out.to(torch_dtype(product.out_dtype))
