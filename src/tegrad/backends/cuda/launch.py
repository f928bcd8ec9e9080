"""How a generated kernel is launched: its block sizes, warps and grid.

On a GPU a flat kernel's program holds ``GPU_LANES`` lanes, or, with blocked reductions,
``XBLOCK x RBLOCK <= GPU_POINTS`` with chunks of up to ``GPU_CHUNK`` points. A rows-layout
kernel holds its whole row (``CBLOCK``, the last axis to a power of two) and reduces in
chunks of up to ``GPU_ROW_CHUNK`` (a whole row of up to that many in one chunk: a
persistent reduction), with as many rows as fit in ``GPU_ROW_POINTS`` elements; 8 warps
from 4096 elements a block. In Triton's interpreter every ``tl`` operation is one NumPy
call on a whole block, so the cost is programs x operations: blocks are as large as fit
in ``INTERPRETED_POINTS`` elements (one or a few programs at the sizes CI runs).
"""

from __future__ import annotations

from typing import NamedTuple

from .codegen import KernelText

GPU_LANES = 1024
GPU_POINTS = 2048
GPU_CHUNK = 64
GPU_ROW_CHUNK = 1024
GPU_ROW_POINTS = 4096
INTERPRETED_POINTS = 1 << 18


class Blocks(NamedTuple):
    x: int
    r: int
    c: int
    warps: int


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def launch_blocks(kernel: KernelText, interpreted: bool) -> Blocks:
    """The block sizes and warps of ``kernel``'s launch."""
    columns = next_power_of_2(kernel.columns) if kernel.columns > 1 else 1
    reduction = next_power_of_2(kernel.reduction) if kernel.reduction else 1
    if interpreted:
        budget = INTERPRETED_POINTS
        chunk = min(reduction, budget // columns)
    elif kernel.columns > 1:
        budget = GPU_ROW_POINTS
        chunk = min(reduction, GPU_ROW_CHUNK)
    else:
        budget = GPU_POINTS if kernel.reduction else GPU_LANES
        chunk = min(reduction, GPU_CHUNK)
    lanes = max(1, min(next_power_of_2(kernel.numel), budget // max(chunk, columns)))
    warps = 8 if lanes * max(chunk, columns) >= 4096 else 4
    return Blocks(lanes, chunk, columns, warps)


def grid(kernel: KernelText, lanes: int) -> tuple[int, int]:
    return (-(-kernel.numel // lanes), kernel.splits)
