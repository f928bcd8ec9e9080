"""A scatter kernel on the host: value and target indices evaluated over the grid (in
boxes of at most ``SCATTER_GRID_POINTS``), then a deterministic ``np.bincount`` (floats,
accumulated in float64) or ``np.add.at`` (``lower/scatter.py``)."""

from __future__ import annotations

import math

import numpy as np

from ...lower.scatter import Scatter
from .evaluate import Evaluator

SCATTER_GRID_POINTS = 1 << 22  # points a scatter evaluates at once


def run_scatter(s: Scatter, arrays: dict, owner: str) -> np.ndarray:
    floating = np.dtype(s.dtype).kind == "f"
    acc = np.float64 if floating else np.dtype(s.dtype)
    size = math.prod(s.shape)
    out = np.zeros(size, dtype=acc)
    dim_strides = [math.prod(s.shape[m + 1:]) for m in range(len(s.shape))]
    n = len(s.grid)
    for region in regions([v.extent for v in s.grid], SCATTER_GRID_POINTS):
        env = {}
        for k, (v, (lo, hi)) in enumerate(zip(s.grid, region, strict=True)):
            shape = [1] * n
            shape[k] = hi - lo
            env[v] = (np.arange(v.lo + lo, v.lo + hi).reshape(shape), k)
        full = tuple(hi - lo for lo, hi in region)
        ev = Evaluator(arrays, env, n, owner)
        mask = np.broadcast_to(ev.holds(s.conds, n), full)
        if not mask.any():
            continue
        flat = np.zeros(full, dtype=np.int64)
        for m, e in enumerate(s.out_index):
            if dim_strides[m]:
                idx = np.where(mask, ev.go(e, n, s.conds), 0)
                flat += idx.astype(np.int64) * dim_strides[m]
        value = np.broadcast_to(ev.go(s.value, n, s.conds), full)
        where, weights = flat[mask], value[mask]
        if floating:
            out += np.bincount(where, weights=weights, minlength=size)
        else:
            np.add.at(out, where, weights.astype(acc))
    return out.reshape(s.shape).astype(s.out_dtype, copy=False)


def regions(extents: list[int], limit: int) -> list[list[tuple[int, int]]]:
    """Boxes covering the grid, each with at most ``limit`` points (row-major order)."""
    regions: list[list[tuple[int, int]]] = [[]]
    for k, size in enumerate(extents):
        rest = math.prod(extents[k + 1:])
        step = max(1, limit // max(rest, 1))
        if step >= size:
            return [r + [(0, e) for e in extents[k:]] for r in regions]
        regions = [r + [(lo, min(lo + step, size))] for r in regions for lo in range(0, size, step)]
        if rest <= limit:
            return [r + [(0, e) for e in extents[k + 1:]] for r in regions]
    return regions
