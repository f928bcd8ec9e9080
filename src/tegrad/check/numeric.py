"""Derivatives by differences, with error estimates, and the probe directions.

Directional derivative of ``f`` at ``x`` along ``t``, in float64:

- ``f`` affine in ``x``: ``J t = (f(x + t) - f(x - t)) / 2`` holds for any step, so the
  step is 1 and only rounding remains.
- otherwise: central differences at steps ``h`` and ``h/2`` with
  ``h = eps^(1/3) max(1, |x|) / |t|``, Richardson's combination
  ``R = (4 D(h/2) - D(h)) / 3`` as the value and ``|R - D(h/2)|`` (plus rounding
  ``eps |f| / h``) as its error estimate. The same five evaluations
  (``x, x ± h t, x ± h/2 t``) give one-sided differences ``D+``, ``D-`` at both steps: at a
  kink (a tie of a max, relu or abs at 0) the jump ``|D+ - D-|`` stays put when the step
  halves, where for a smooth function it halves with it. Such points are kinks, and there
  any value between ``D-`` and ``D+`` is a valid derivative.

Probes: signed Gaussian directions, and Gaussian directions restricted to one boundary
region of the input each (first and last two indices of every axis, every phase modulo 2
and 3), so that an error confined to a border or a stride phase is as visible as one
spread over the whole tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS64 = float(np.finfo(np.float64).eps)
STEP = EPS64 ** (1 / 3)
KINK_PERSISTENCE = 0.75  # jump(h/2) / jump(h) above this: the jump does not shrink


@dataclass
class Differences:
    """``value[k]``: ``J t_k`` (stack over probes, output-shaped); ``error[k]``: its error
    estimate; ``lo``/``hi``: one-sided bounds, equal to ``value`` away from kinks;
    ``kink[k]``: True where the jump persists."""

    value: np.ndarray
    error: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    kink: np.ndarray


def differences(forward, x: np.ndarray, ts: np.ndarray, affine: bool,
                scale: np.ndarray | None = None) -> Differences:
    """``forward(xs) -> ys`` evaluates a stack; ``ts`` is a stack of directions.

    ``scale``: ``M(f)`` at ``x`` (the magnitude of the forward's terms, ``graph.py``)
    where known. The rounding of ``f`` is relative to its terms, not to its value: in
    ``x (1 + tanh(u))`` at ``tanh(u) ~ -1`` the value is tiny and its rounding is not,
    so the rounding estimate of a difference uses the larger of the two.

    Nonlinear: where the error estimate at the default step exceeds 1e-6 of the value
    (the function bends on a scale finer than ``|x|``, e.g. a normalisation of inputs
    with a large mean), the differences are repeated at a 64 times smaller step and
    each entry keeps the estimate with the smaller error."""
    if affine:
        return _differences(forward, x, ts, True, 1.0)
    first = _differences(forward, x, ts, False, 1.0, scale)
    rough = first.error > 1e-6 * (np.abs(first.value) + np.max(np.abs(first.value)))
    if not rough.any():
        return first
    fine = _differences(forward, x, ts, False, 1 / 64, scale)
    better = fine.error < first.error
    pick = lambda a, b: np.where(better, b, a)  # noqa: E731
    return Differences(pick(first.value, fine.value), pick(first.error, fine.error),
                       pick(first.lo, fine.lo), pick(first.hi, fine.hi),
                       pick(first.kink, fine.kink))


def _differences(forward, x, ts, affine: bool, shrink: float, scale=None) -> Differences:
    n = len(ts)
    if affine:
        ys = forward(np.concatenate([x + ts, x - ts]))
        plus, minus = ys[:n], ys[n:]
        value = (plus - minus) / 2
        error = 4 * EPS64 * (np.abs(plus) + np.abs(minus))
        none = np.zeros(value.shape, bool)
        return Differences(value, error, value, value, none)
    axes = tuple(range(1, ts.ndim))
    t_scale = np.max(np.abs(ts), axis=axes, keepdims=True)
    t_scale[t_scale == 0] = 1
    x_scale = np.maximum(1.0, np.max(np.abs(x)))
    h = shrink * STEP * x_scale / t_scale  # one step per probe, shape (n, 1, ..., 1)
    stack = np.concatenate([x + h * ts, x - h * ts, x + h / 2 * ts, x - h / 2 * ts, x[None]])
    ys = forward(stack)
    f1, f2, f3, f4, f0 = ys[:n], ys[n : 2 * n], ys[2 * n : 3 * n], ys[3 * n : 4 * n], ys[4 * n]
    hy = h.reshape((n,) + (1,) * (ys.ndim - 1))
    d1 = (f1 - f2) / (2 * hy)
    d2 = (f3 - f4) / hy
    value = (4 * d2 - d1) / 3
    size = np.abs(f0) + np.abs(f1) + np.abs(f2)
    if scale is not None:
        size = np.maximum(size, 3 * np.abs(scale))
    rounding = 8 * EPS64 * size / hy
    error = np.abs(value - d2) + rounding
    plus1, minus1 = (f1 - f0) / hy, (f0 - f2) / hy
    plus2, minus2 = (f3 - f0) / (hy / 2), (f0 - f4) / (hy / 2)
    jump1, jump2 = np.abs(plus1 - minus1), np.abs(plus2 - minus2)
    kink = (jump2 > KINK_PERSISTENCE * jump1) & (jump2 > 100 * error + 1e3 * rounding)
    kink &= jump2 > 1e-6 * (np.abs(plus2) + np.abs(minus2))
    lo = np.where(kink, np.minimum(plus2, minus2), value)
    hi = np.where(kink, np.maximum(plus2, minus2), value)
    return Differences(value, error, lo, hi, kink)


def gaussian_probes(shape: tuple[int, ...], count: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((count, *shape))


def boundary_regions(shape: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
    """(description, mask) of the regions a boundary probe targets."""
    regions: list[tuple[str, np.ndarray]] = []
    seen: set[bytes] = set()
    grids = np.indices(shape) if shape else []
    for axis, size in enumerate(shape):
        if size < 2:
            continue
        idx = grids[axis]
        picks = [(f"axis {axis} = {v}", idx == v) for v in sorted({0, 1, size - 2, size - 1})]
        for m in (2, 3):
            if size > m:
                picks += [(f"axis {axis} = {r} mod {m}", idx % m == r) for r in range(m)]
        for label, mask in picks:
            key = mask.tobytes()
            if key not in seen and mask.any() and not mask.all():
                seen.add(key)
                regions.append((label, mask))
    return regions


def boundary_probes(shape, rng) -> tuple[list[str], np.ndarray]:
    regions = boundary_regions(shape)
    if not regions:
        return [], np.zeros((0, *shape))
    masks = np.stack([m for _, m in regions])
    return [label for label, _ in regions], rng.standard_normal(masks.shape) * masks


def one_hot(shape: tuple[int, ...], start: int, stop: int) -> np.ndarray:
    """Unit directions ``e_start .. e_(stop-1)`` (flat order), stacked."""
    n = stop - start
    out = np.zeros((n, int(np.prod(shape, dtype=np.int64))))
    out[np.arange(n), np.arange(start, stop)] = 1.0
    return out.reshape((n, *shape))
