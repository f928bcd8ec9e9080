"""Short sums carried in vector lanes across the loops around them.

A depthwise convolution's weight gradient sums each tap over rows of at most 14 columns:

    dW[c, r, s] = sum_n sum_h sum_w dY[n, c, h, w] X[n, c, h + r - 1, w + s - 1]

The innermost loop (``w``, 13 or 14 points) vectorizes as a reduction (``Loop.
simd_reductions``), but a vector of 16 lanes never fills: each row ends in gcc's scalar
tail, and the lanes are summed at the end of every row, 112 times per weight. Here the
row is masked vectors of ``LANES`` points instead, and their lanes are kept across the
rows:

    acc_v = 0 (16 lanes)                          LaneAccumulator, beside acc
    for n: for h:                                 the loops around, unchanged
        for b in [lo, hi) by 16:                  (one vector for a row of 14)
            m = lanes b + lane < hi
            acc_v[m] += dY[.., b + lane] X[.., b + lane + s - 1]   (masked loads)
    acc += sum of acc_v's lanes                   FoldLanes, after the loops

which reassociates the sum as the vectorized reduction does. It applies to a float32 sum
(its siblings too) whose last axis has ``MIN_LANE_EXTENT`` to ``MAX_LANE_EXTENT``
points, inside at least one other loop of the reduction, where the loop
body is ``lane_form``'s: loads whose index moves by one element per point of the axis
(or not at all), float32 ``add``/``sub``/``mul``/``div``/``neg`` of them and of values
from outside, comparisons of those as masks and a mask cast to 0 or 1 (a max pool's tie
count), integer index arithmetic affine in the axis, and unmasked ``Accumulate``s. A
float32 max or min (a pool's window rows) runs in lanes too, with a mask of the lanes
that saw NaN (a lane's max would drop it), folded into its NaN flag after the loops.
The renderer (``backends/c/render.py``) writes the masked vector where the compiler
targets AVX-512, the plain loop elsewhere (its lane accumulators then stay 0), and the
plain loop too if the body is no longer ``lane_form``'s when it renders.
"""

from __future__ import annotations

from .nest import Accumulate, Let, Loop
from .nest_forms import Apply, IndexTerm, Lit, Load, Ref

LANES = 16  # float32 lanes of an AVX-512 vector
MIN_LANE_EXTENT = 4  # a shorter row stays a scalar loop
MAX_LANE_EXTENT = 64  # a longer one is the vectorized reduction's: one sum per row is cheap
VECTOR_OPS = ("add", "sub", "mul", "div", "neg")
INDEX_OPS = ("add", "sub", "mul")
KINDS = ("sum", "max", "min")  # a max or min keeps a mask of the lanes that saw NaN
COMPARISONS = ("eq", "ne", "lt", "le")  # of float32 values, as a mask of lanes


def wanted(loop: Loop | None, extent: int, kinds: list[tuple[str, str]], nested: bool) -> bool:
    """Whether ``loop``, the innermost loop of a reduction whose accumulators have the
    ``(kind, dtype)`` pairs ``kinds``, over an axis of ``extent`` points, inside another
    of its loops when ``nested``, runs in lanes (module header)."""
    return (loop is not None and nested and not loop.partials and not loop.unroll
            and MIN_LANE_EXTENT <= extent <= MAX_LANE_EXTENT
            and all(kind in KINDS and dtype == "float32" for kind, dtype in kinds)
            and lane_form(loop) is not None)


def lane_form(loop: Loop) -> dict | None:
    """The names ``loop``'s body defines, each with its form in lanes: ``("vector",)``
    for a float32 value per lane, ``("index", c)`` for an integer ``c var + ...`` (``c``
    the coefficient of the loop's variable), and per load ``("load", c)`` with ``c`` 1
    (contiguous) or 0 (one value for every lane); None where the body has anything else
    (module header)."""
    forms: dict = {}

    def coefficient(x) -> int | None:
        if isinstance(x, Lit):
            return 0
        if x.name == loop.var:
            return 1
        form = forms.get(x.name)
        if form is None:  # (defined outside the loop: one value for every lane)
            return 0
        return form[1] if form[0] == "index" else None

    def vector_operand(x) -> bool:
        if isinstance(x, Lit):
            return x.dtype == "float32"
        form = forms.get(x.name)
        return form is None or form[0] in ("vector", "load")

    for item in loop.items:
        if isinstance(item, Accumulate):
            if (item.kind not in KINDS or item.dtype != "float32" or item.mask
                    or (item.flag and item.kind == "sum")
                    or not isinstance(item.acc, Ref) or not vector_operand(item.src)):
                return None
            continue
        if not isinstance(item, Let):
            return None
        value = item.value
        if isinstance(value, Load) and item.dtype == "float32":
            steps = [_term_step(t, coefficient) for t in value.index]
            if any(s is None for s in steps) or sum(steps) not in (0, 1):
                return None
            forms[item.name] = ("load", sum(steps))
        elif (isinstance(value, Apply) and item.dtype == "float32"
              and value.operand == "float32" and value.op in VECTOR_OPS
              and all(vector_operand(a) for a in value.args)):
            forms[item.name] = ("vector",)
        elif (isinstance(value, Apply) and item.dtype == "bool" and value.operand == "float32"
              and value.op in COMPARISONS and all(vector_operand(a) for a in value.args)):
            forms[item.name] = ("mask",)  # a tie test, X == m
        elif (isinstance(value, Apply) and value.op == "cast" and item.dtype == "float32"
              and value.operand == "bool" and isinstance(value.args[0], Ref)
              and forms.get(value.args[0].name) == ("mask",)):
            forms[item.name] = ("vector",)  # a tie counted: 1 where the mask holds
        elif (isinstance(value, Apply) and item.dtype.startswith("int")
              and value.op in INDEX_OPS and value.operand.startswith("int")):
            coefficients = [coefficient(a) for a in value.args]
            if any(c is None for c in coefficients):
                return None
            if value.op == "mul":
                if sum(c != 0 for c in coefficients) > 1 or not any(
                        isinstance(a, Lit) for a in value.args):
                    return None
                literal = next(a.value for a in value.args if isinstance(a, Lit))
                forms[item.name] = ("index", int(sum(coefficients) * literal))
            else:
                a, b = coefficients
                forms[item.name] = ("index", a + b if value.op == "add" else a - b)
        else:
            return None
    return forms


def _term_step(t: IndexTerm, coefficient) -> int | None:
    """How far one index term moves per point of the loop (None: not affine, clamped)."""
    if t.clamp is not None:
        return None
    c = coefficient(t.value)
    return None if c is None else c * t.stride
