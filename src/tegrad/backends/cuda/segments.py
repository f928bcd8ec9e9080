"""Deterministic scatter-adds: a stable sort of the targets, then one sum per segment.

A scatter's grid kernel (``codegen.scatter_text``) gives every grid point its flat target
``g`` (-1 where a condition fails) and its value. The sums are made without atomics, so
they are the same from run to run: the points sorted by target (stable: grid order within
a target), ``count[b]`` points for bin ``b`` starting at ``start[b]``, and one lane per bin
adds its points in that order. That is the order ``np.bincount`` adds them in, and floats
accumulate in float64, as the NumPy reference's scatter does.
"""

from __future__ import annotations

import triton
import triton.language as tl

BINS_PER_PROGRAM = 256


@triton.jit
def segment_sums(out, values, order, start, count, bins, longest, BLOCK: tl.constexpr):
    b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = b < bins
    first = tl.load(start + b, mask=inside, other=0)
    n = tl.load(count + b, mask=inside, other=0)
    acc = tl.zeros([BLOCK], out.dtype.element_ty)
    for k in range(0, longest):
        taken = inside & (k < n)
        point = tl.load(order + first + k, mask=taken, other=0)
        acc += tl.load(values + point, mask=taken, other=0)
    tl.store(out + b, acc, mask=inside)


def scatter_add(targets, values, size: int):
    """``out[g] = sum of values[i] over targets[i] == g``, in grid order, for the flat
    ``targets`` (-1: none) and ``values`` of one grid; ``out`` has ``size`` elements, of
    ``values``' dtype."""
    import torch

    out = torch.zeros(size, dtype=values.dtype, device=values.device)
    if targets.numel() == 0 or size == 0:
        return out
    order = torch.argsort(targets, stable=True)
    kept = targets >= 0
    count = torch.bincount(targets[kept], minlength=size)
    skipped = targets.numel() - int(kept.sum())
    start = torch.cumsum(count, 0) - count + skipped
    longest = int(count.max())
    if longest == 0:
        return out
    lanes = BINS_PER_PROGRAM
    segment_sums[(-(-size // lanes),)](out, values, order, start, count, size, longest,
                                        BLOCK=lanes)
    return out
