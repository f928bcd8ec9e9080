"""Resampling in PyTorch's layouts: pixel (un)shuffle, nearest/linear interpolation and
``grid_sample``.

    pixel_shuffle   y[.., c, h, w] = x[.., c r^2 + (h % r) r + w % r, h // r, w // r]
    nearest         y[.., d] = x[.., (p d + b) // q]       (torch's source index, exactly)
    linear          y[.., d] = (1 - l(d)) x[.., i(d)] + l(d) x[.., i(d) + 1]
                    i(d) = (A d + B) // C = floor(src(d)),  l(d) = src(d) - i(d)
    grid_sample     y[n, c, h, w] = sum_{a, b in {0, 1}} w_ab(g[n, h, w])
                                        x[n, c, floor(g_y) + a, floor(g_x) + b]

Interpolation's source coordinates are rational in the output index, so the integer part
is an affine map with ``//``: the backward is a gather. The integers ``p, b, q`` and
``A, B, C`` are found once per call and checked against torch's own float formula for
every output position. Linear modes are separable: one compute per resized axis.
``grid_sample`` reads at data-dependent positions (the floor of the grid), so its input
gradient is a scatter-add.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..frontend.math import abs as tabs
from ..frontend.math import all as tall
from ..frontend.math import cast, equal, floor, if_then_else, maximum, minimum
from ..frontend.math import round as tround
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name

__all__ = ["grid_sample", "interpolate", "pixel_shuffle", "pixel_unshuffle", "upsample",
           "upsample_bilinear", "upsample_nearest"]


def _factor(value, what):
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return value


def pixel_shuffle(input, upscale_factor):  # noqa: A002
    """``F.pixel_shuffle``: ``(*, C r^2, H, W) -> (*, C, H r, W r)``."""
    x, r = input, _factor(upscale_factor, "pixel_shuffle: upscale_factor")
    if not isinstance(x, Tensor) or x.ndim < 3 or x.shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: input must be (*, C r^2, H, W) with r={r}, "
                         f"got shape {getattr(x, 'shape', x)}")
    *batch, c, h, w = x.shape

    def body(*i):
        *b, k, y, z = i
        return x[(*b, k * r * r + (y % r) * r + z % r, y // r, z // r)]

    return compute((*batch, c // (r * r), h * r, w * r), body, name=unique_name("pixel_shuffle"))


def pixel_unshuffle(input, downscale_factor):  # noqa: A002
    """``F.pixel_unshuffle``: ``(*, C, H r, W r) -> (*, C r^2, H, W)``."""
    x, r = input, _factor(downscale_factor, "pixel_unshuffle: downscale_factor")
    if not isinstance(x, Tensor) or x.ndim < 3 or x.shape[-2] % r or x.shape[-1] % r:
        raise ValueError(f"pixel_unshuffle: input must be (*, C, H r, W r) with r={r}, "
                         f"got shape {getattr(x, 'shape', x)}")
    *batch, c, h, w = x.shape

    def body(*i):
        *b, k, y, z = i
        return x[(*b, k // (r * r), y * r + (k // r) % r, z * r + k % r)]

    return compute((*batch, c * r * r, h // r, w // r), body,
                   name=unique_name("pixel_unshuffle"))


# ---------------------------------------------------------------------------- interpolate

_MODES = {"nearest": None, "linear": 3, "bilinear": 4, "trilinear": 5}


def _per_axis(value, n, what, kind):
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,) * n
    if len(values) != n or not all(isinstance(v, kind) and v > 0 for v in values):
        raise ValueError(f"interpolate: {what} must be one positive value or {n}, "
                         f"got {value!r}")
    return values


def _floor_map(values, candidates, tolerance=0.0):
    """Integers ``(a, b, c)`` with ``(a d + b) // c == floor(values[d])`` for every ``d``
    (positions within ``tolerance`` of an integer may round either way)."""
    d = np.arange(len(values), dtype=np.int64)
    exact = np.floor(values)
    near = np.abs(values - np.round(values)) <= tolerance
    for a, b, c in candidates:
        got = (a * d + b) // c
        if np.all((got == exact) | (near & (np.abs(got - values) <= 1))):
            return a, b, c
    return None


def _ratio(scale_factor):
    """``1 / scale_factor`` as a ratio of small integers."""
    return 1 / Fraction(scale_factor).limit_denominator(10_000)


def _nearest_map(n, m, scale_factor, dtype, shortcuts):
    """torch's nearest source index ``min(floor(d * scale), n - 1)``: ``scale = n / m``
    (exact for float64, float32 arithmetic for float32) or ``1 / scale_factor``; torch's
    2-d kernel (``shortcuts``) takes ``d`` where ``m = n`` and ``d // 2`` where ``m = 2 n``
    whatever the scale factor, its 1-d and 3-d ones do not."""
    if shortcuts and m in (n, 2 * n):
        return (1, 0, m // n)
    d = np.arange(m)
    if scale_factor is not None:
        fr = _ratio(scale_factor)
        wide = np.float32 if dtype == "float32" else np.float64
        src = d.astype(wide) * wide(1.0 / scale_factor)
    else:
        fr = Fraction(n, m)
        src = (d.astype(np.float32) * (np.float32(n) / np.float32(m)) if dtype == "float32"
               else (d * n) // m)
    src = np.minimum(np.floor(src), n - 1)
    p, q = fr.numerator, fr.denominator
    found = _floor_map(src, [(p, 0, q), (p, -1, q)])
    if found is None:
        raise NotImplementedError(f"interpolate: the nearest source indices of {n} -> {m} "
                                  f"(scale_factor {scale_factor}) are not an affine map with "
                                  "//; pass size= instead")
    return found


def _linear_map(n, m, scale_factor, align_corners):
    """``(scale, offset, (A, B, C))``: ``src(d) = scale d + offset`` (before torch's clamp
    at 0) and ``floor(src(d)) = (A d + B) // C``."""
    d = np.arange(m, dtype=np.float64)
    if align_corners:
        scale = (n - 1) / (m - 1) if m > 1 else 0.0
        src, offset = d * scale, 0.0
        candidates = [(n - 1, 0, m - 1) if m > 1 else (0, 0, 1)]
    else:
        fr = Fraction(n, m) if scale_factor is None else _ratio(scale_factor)
        scale = n / m if scale_factor is None else 1.0 / scale_factor
        src, offset = (d + 0.5) * scale - 0.5, 0.5 * scale - 0.5
        p, q = fr.numerator, fr.denominator
        candidates = [(2 * p, p - q, 2 * q)]
    found = _floor_map(src, candidates, tolerance=1e-9)
    if found is None:
        raise NotImplementedError(f"interpolate: scale_factor {scale_factor} is not a ratio "
                                  "of small integers; pass size= instead")
    return scale, offset, found


def _linear_axis(x, axis, m, scale_factor, align_corners, name):
    """Resize axis ``axis`` of ``x`` to ``m`` by linear interpolation (torch's weights:
    all on ``x[0]`` left of the first center, all on ``x[n - 1]`` right of the last)."""
    n = x.shape[axis]
    if m == n:  # torch copies an axis whose size does not change, whatever the scale
        return x
    scale, offset, (a, b, c) = _linear_map(n, m, scale_factor, align_corners)
    floors = [(a * d + b) // c for d in range(m)]
    low, high = min(floors) < 0, max(floors) > n - 2

    def body(*i):
        d = i[axis]
        i0 = (a * d + b) // c
        lam = cast(d, x.dtype) * scale + offset - cast(i0, x.dtype)

        def tap(k):
            at = i0 + k
            idx = (*i[:axis], at, *i[axis + 1:])
            conds = ([0 <= at] if low else []) + ([at <= n - 1] if high else [])
            return if_then_else(tall(conds), x[idx], 0.0) if conds else x[idx]

        w0, w1 = 1.0 - lam, lam
        if high:  # right of the last center: everything on x[n - 1]
            w0, w1 = if_then_else(i0 <= n - 2, w0, 1.0), if_then_else(i0 <= n - 2, w1, 0.0)
        if low:  # left of the first center (src < 0): everything on x[0]
            w0, w1 = if_then_else(0 <= i0, w0, 0.0), if_then_else(0 <= i0, w1, 1.0)
        return w0 * tap(0) + w1 * tap(1)

    shape = (*x.shape[:axis], m, *x.shape[axis + 1:])
    return compute(shape, body, name=f"{name}.axis{axis}")


def interpolate(input, size=None, scale_factor=None, mode="nearest",  # noqa: A002
                align_corners=None, recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` for modes nearest (1-3 spatial axes), linear, bilinear, trilinear;
    torch's source indices and weights exactly. ``antialias``, bicubic, area, nearest-exact:
    not implemented."""
    x = input
    if not isinstance(x, Tensor) or x.ndim not in (3, 4, 5):
        raise ValueError(f"interpolate: input must be 3-D, 4-D or 5-D (N, C, *spatial), "
                         f"got shape {getattr(x, 'shape', x)}")
    if mode in ("bicubic", "area", "nearest-exact"):
        raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented; "
                                  "use 'nearest', 'linear', 'bilinear' or 'trilinear'")
    if mode not in _MODES:
        raise ValueError(f"interpolate: unknown mode {mode!r}")
    if _MODES[mode] is not None and _MODES[mode] != x.ndim:
        raise ValueError(f"interpolate: mode {mode!r} needs a {_MODES[mode]}-D input, "
                         f"got {x.ndim}-D {x.shape}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not implemented")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners can only be set with the linear modes")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    nd, spatial = x.ndim - 2, x.shape[2:]
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("interpolate: recompute_scale_factor needs scale_factor, not size")
        out, factors = _per_axis(size, nd, "size", int), (None,) * nd
    else:
        factors = _per_axis(scale_factor, nd, "scale_factor", (int, float))
        out = tuple(math.floor(float(n) * f) for n, f in zip(spatial, factors, strict=True))
        if any(o < 1 for o in out):
            raise ValueError(f"interpolate: scale_factor {scale_factor} gives the empty "
                             f"size {out} for input {x.shape}")
        if recompute_scale_factor:
            factors = (None,) * nd
    name = unique_name(f"interpolate_{mode}")
    if mode == "nearest":
        maps = [_nearest_map(n, m, f, x.dtype, nd == 2)
                for n, m, f in zip(spatial, out, factors, strict=True)]

        def body(n, c, *d):
            return x[(n, c, *((p * i + b) // q if (p, b, q) != (1, 0, 1) else i
                              for i, (p, b, q) in zip(d, maps, strict=True)))]

        return compute((*x.shape[:2], *out), body, name=name)
    y = x
    for k, (m, f) in enumerate(zip(out, factors, strict=True)):
        y = _linear_axis(y, 2 + k, m, f, bool(align_corners), name)
    if y is x:  # every axis is the identity map
        y = compute(x.shape, lambda *i: x[i], name=name)
    return y


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):  # noqa: A002
    """``F.upsample`` (deprecated in torch): ``interpolate`` with the same arguments."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    """``F.upsample_nearest``: ``interpolate(mode="nearest")``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    """``F.upsample_bilinear``: ``interpolate(mode="bilinear", align_corners=True)``."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---------------------------------------------------------------------------- grid_sample


def _reflect(v, twice_low: int, twice_high: int):
    """torch's ``reflect_coordinates``: fold ``v`` into ``[low, high]`` by reflections."""
    if twice_low == twice_high:
        return 0.0 * v
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    a = tabs(v - low)
    flips = floor(a / span)
    extra = a - span * flips
    even = equal(flips - 2.0 * floor(flips * 0.5), 0.0)
    return if_then_else(even, extra + low, span - extra + low)


def _source(coord, size: int, padding_mode: str, align_corners: bool):
    """Grid coordinate in [-1, 1] -> pixel coordinate, then torch's padding transform."""
    v = (coord + 1.0) * (0.5 * (size - 1)) if align_corners else \
        ((coord + 1.0) * size - 1.0) * 0.5
    if padding_mode == "reflection":
        v = _reflect(v, 0, 2 * (size - 1)) if align_corners else _reflect(v, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        v = minimum(maximum(v, 0.0), float(size - 1))
    return v


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros",  # noqa: A002
                align_corners=None):
    """``F.grid_sample`` for 4-D inputs: ``y[n,c,h,w]`` samples ``x[n,c]`` at
    ``grid[n,h,w] = (x, y)`` in [-1, 1]; modes bilinear/nearest, padding zeros/border/
    reflection. Differentiable in input and grid; bicubic is not implemented."""
    x = input
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ValueError(f"grid_sample: input must be 4-D (N, C, H, W), "
                         f"got shape {getattr(x, 'shape', x)}")
    if not isinstance(grid, Tensor) or grid.ndim != 4 or grid.shape[0] != x.shape[0] \
            or grid.shape[3] != 2:
        raise ValueError(f"grid_sample: grid must be (N, H_out, W_out, 2) with N={x.shape[0]}, "
                         f"got shape {getattr(grid, 'shape', grid)}")
    if mode == "bicubic":
        raise NotImplementedError("grid_sample: mode 'bicubic' is not implemented")
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"grid_sample: mode must be 'bilinear' or 'nearest', got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or "
                         f"'reflection', got {padding_mode!r}")
    corners = bool(align_corners)
    batch, channels, height, width = x.shape
    name = unique_name("grid_sample")
    at = grid.shape[:3]
    sx = compute(at, lambda n, h, w: _source(grid[n, h, w, 0], width, padding_mode, corners),
                 name=f"{name}.x")
    sy = compute(at, lambda n, h, w: _source(grid[n, h, w, 1], height, padding_mode, corners),
                 name=f"{name}.y")

    def pixel(n, c, iy, ix):
        inside = tall(0 <= iy, iy <= height - 1, 0 <= ix, ix <= width - 1)
        return if_then_else(inside, x[n, c, iy, ix], 0.0)

    if mode == "nearest":
        return compute((batch, channels, *at[1:]), lambda n, c, h, w: pixel(
            n, c, cast(tround(sy[n, h, w]), "int64"), cast(tround(sx[n, h, w]), "int64")),
            name=name)

    def tap(n, a, b, h, w):
        fx, fy = sx[n, h, w], sy[n, h, w]
        wx, wy = fx - floor(fx), fy - floor(fy)
        return if_then_else(equal(a, 0), 1.0 - wy, wy) * if_then_else(equal(b, 0), 1.0 - wx, wx)

    # the corners' weights as a tensor of their own: the grid's gradient goes through
    # theirs, one sum over the channels per corner, shared by both coordinates (weights
    # written inline, each coordinate summed the channels at every corner again: 5x
    # slower at 8 x 64 x 56^2)
    weights = compute((batch, 2, 2, *at[1:]), tap, name=f"{name}.weights")

    def body(n, c, h, w):
        ix, iy = cast(floor(sx[n, h, w]), "int64"), cast(floor(sy[n, h, w]), "int64")
        # the four corners as one sum over (a, b): the input gradient is then one
        # scatter-add, which lower/ runs in one pass (a sum of four would not be matched)
        a, b = reduce_axis(2, name="a"), reduce_axis(2, name="b")
        return tsum(weights[n, a, b, h, w] * pixel(n, c, iy + a, ix + b), axis=[a, b])

    return compute((batch, channels, *at[1:]), body, name=name)
