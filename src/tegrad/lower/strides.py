"""How far a read moves per step of a loop variable, and what a loop nest does about it.

A read ``X[f_1, ..., f_n]`` of a row-major ``X`` is at offset ``sum_d f_d s_d`` (``s_d``
the product of the extents after ``d``); its *step* along a variable ``v`` is that
offset's coefficient of ``v`` (0 where no affine index has ``v``).

* A loop over ``v`` vectorized loads a read of step beyond ``MAX_SIMD_STRIDE`` with
  gathers, which on x86 cost more than the scalar loop: ``gathers_along`` says so and the
  loop is left to the compiler (``nest_build``, ``nest_reduce``).
* A transposing kernel ``Y[i, j] = g(X[j, i])`` reads ``X`` at step 1 along ``i`` and
  step ``n`` along ``j``, the innermost loop: each element read is on a line of its own,
  and with ``n`` a multiple of 1024 floats those lines all fall in one set of the L1
  cache and evict each other before the next ``i`` reads them again. ``transposing``
  names ``i``: the loop nest runs it by residue classes of ``TILE`` (``i = TILE q + a``,
  the ``TILE`` bodies written out in the loop over ``j``; ``residue.unrolled_axes``), so
  each line read serves ``TILE`` consecutive elements before it is evicted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..ir.affine import linearize
from ..ir.expr import Expr, Read, Var
from ..ir.traverse import walk

MAX_SIMD_STRIDE = 8  # elements a read may move per iteration of a vectorized loop
TILE = 8  # consecutive elements of a transposing read used per line (Options.transpose_tile)


def steps(e: Expr, v: Var) -> Iterator[tuple[Read, int]]:
    """Each read of ``e`` with its step along ``v``."""
    for x in walk(e):
        if isinstance(x, Read) and x.indices:
            step, stride = 0, 1
            for extent, index in zip(reversed(x.tensor.shape), reversed(x.indices),
                                     strict=True):
                step += linearize(index)[0].get(v, 0) * stride
                stride *= extent
            yield x, step


def gathers_along(e: Expr, v: Var) -> bool:
    """Some read of ``e`` moves more than ``MAX_SIMD_STRIDE`` elements per step of ``v``
    (a loop over ``v`` vectorized would gather it). Small strides (a stride-2 pooling's
    ``X[2 j + b]``) vectorize with shuffles."""
    return any(abs(step) > MAX_SIMD_STRIDE for _, step in steps(e, v))


def transposing(body: Expr, axes: Sequence[Var], tile: int = TILE) -> dict[Var, int]:
    """``{i: tile}`` for the output axis ``i`` along which a read is contiguous that the
    innermost axis reads a long way apart (module header); {} where there is none, or
    ``tile`` does not divide ``i``'s range (``Options.transpose_tile``; 0: never)."""
    if len(axes) < 2 or tile < 2:
        return {}
    far = {x for x, step in steps(body, axes[-1]) if abs(step) > MAX_SIMD_STRIDE}
    for i in reversed(axes[:-1]):
        if i.extent % tile or i.lo % tile:
            continue
        if any(step == 1 for x, step in steps(body, i) if x in far):
            return {i: tile}
    return {}
