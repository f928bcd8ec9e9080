"""How a generated kernel is launched: its block sizes and grid.

On a GPU a program holds about 1024 lanes of work: ``XBLOCK`` lanes (up to 1024, a power of
two) and, for kernels with blocked reductions, ``RBLOCK`` points of a chunk (up to 64, so
``XBLOCK x RBLOCK <= 2048``). In Triton's interpreter every ``tl`` operation is one NumPy
call on a whole block, so the cost is programs x operations: blocks are as large as fit in
``INTERPRETED_POINTS`` elements (one or a few programs for the sizes CI runs).
"""

from __future__ import annotations

from .codegen import KernelText

GPU_POINTS = 2048
GPU_LANES = 1024
GPU_CHUNK = 64
INTERPRETED_POINTS = 1 << 18


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def launch_blocks(kernel: KernelText, interpreted: bool) -> tuple[int, int]:
    """``(XBLOCK, RBLOCK)`` for ``kernel``."""
    points = INTERPRETED_POINTS if interpreted else GPU_POINTS
    chunk = 1
    if kernel.reduction:
        chunk = min(next_power_of_2(kernel.reduction), points if interpreted else GPU_CHUNK)
    lanes = min(next_power_of_2(kernel.numel), max(points // chunk, 1),
                points if interpreted else GPU_LANES)
    return lanes, chunk


def grid(kernel: KernelText, lanes: int) -> tuple[int]:
    return (-(-kernel.numel // lanes),)
