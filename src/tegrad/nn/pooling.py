"""Pooling, as ``torch.nn.functional`` computes it, in N-d: one window reduction per kind
that the 1d/2d/3d functions call. Inputs are ``(N, C, *spatial)`` or ``(C, *spatial)``.

    window    o -> o s - p + r d,  r in [0, k)   (s stride, p padding, d dilation)
    size      out = floor((L + 2p - d (k - 1) - 1 [+ s - 1 if ceil_mode]) / s) + 1,
              less one when ceil_mode's last window would start past ``L + p``
    max       y[o] = max_r x[o s - p + r d]      over the window's reads inside [0, L)
    avg       y[o] = sum_r x[o s - p + r] / D(o), D = prod_d (min(o s - p + k, L + p) -
              (o s - p)) with count_include_pad, the in-bounds count without it
    adaptive  bin o of L -> O: [floor(o L / O), ceil((o + 1) L / O)), a reduction over
              the widest bin's width with a guard (no guard where O divides L); an
              average whose bins do not divide some axis goes one axis at a time,
              y[o] = sum_h A[o, h] x[h] with the bin matrix A (``_separable_avg``)

Padding is never materialized: the reads are masked by the reduction's ``where``, so
out-of-range positions count as -inf for max and 0 for sums. Every index map is affine
(with ``//`` for adaptive bins), so the generated backward is a gather (but where stride
and dilation are coprime and both > 1: the core leaves ``s o + d r = i`` a scatter).
Departures: tied maxima share the gradient evenly (torch picks one); a max window that
lies wholly in the padding (dilation can make one) gives -inf and no gradient, where
torch gives -inf and routes the gradient to an index outside the window.
"""

from __future__ import annotations

from ..frontend.math import abs as tabs
from ..frontend.math import all as tall
from ..frontend.math import cast, if_then_else, maximum, minimum, power
from ..frontend.reduce import argmax, reduce_axis
from ..frontend.reduce import max as tmax
from ..frontend.reduce import min as tmin
from ..frontend.reduce import sum as tsum
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import ntuple

__all__ = [
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "global_avg_pool2d", "global_max_pool2d",
    "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
]


# ---------------------------------------------------------------------------- arguments


def _leading(input: Tensor, n: int, op: str) -> int:
    """How many non-spatial dims lead: 2 for ``(N, C, *sp)``, 1 for ``(C, *sp)``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: input must be a tg.Tensor, got {type(input).__name__}")
    if input.ndim not in (n + 1, n + 2):
        raise ValueError(f"{op}: input must have {n + 1} or {n + 2} dims (C or N, C, then "
                         f"{n} spatial), got shape {input.shape}")
    if not input.dtype.startswith("float"):
        raise ValueError(f"{op}: input must be a float tensor, got {input.dtype}")
    return input.ndim - n


def _positive(values: tuple[int, ...], what: str, op: str, low: int = 1) -> tuple[int, ...]:
    if any(v < low for v in values):
        raise ValueError(f"{op}: {what} must be >= {low}, got {values}")
    return values


def _window(n: int, op: str, kernel_size, stride, padding, dilation, sizes, ceil_mode):
    """Normalized ``(k, s, p, d)`` and the output sizes, with torch's checks."""
    k = _positive(ntuple(kernel_size, n, f"{op}: kernel_size"), "kernel_size", op)
    empty = stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0)
    s = k if empty else _positive(ntuple(stride, n, f"{op}: stride"), "stride", op)
    p = _positive(ntuple(padding, n, f"{op}: padding"), "padding", op, low=0)
    d = _positive(ntuple(dilation, n, f"{op}: dilation"), "dilation", op)
    if any(pi > ki // 2 for pi, ki in zip(p, k, strict=True)):
        raise ValueError(f"{op}: padding must be at most half the kernel size, got "
                         f"padding={p} for kernel_size={k}")
    out = tuple(_out_size(*a, ceil_mode) for a in zip(sizes, k, s, p, d, strict=True))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: input spatial size {tuple(sizes)} is too small for "
                         f"kernel_size={k}, dilation={d}, padding={p}: output {out}")
    return k, s, p, d, out


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's ``pooling_output_shape``: the last ceil_mode window starts inside the input
    or its left padding."""
    span = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _adaptive_sizes(output_size, sizes: tuple[int, ...], op: str) -> tuple[int, ...]:
    n = len(sizes)
    values = (output_size,) * n if output_size is None or isinstance(output_size, int) \
        else tuple(output_size)
    if len(values) != n or not all(v is None or isinstance(v, int) for v in values):
        raise ValueError(f"{op}: output_size must be an int, None or {n} of them, "
                         f"got {output_size!r}")
    out = tuple(size if v is None else v for v, size in zip(values, sizes, strict=True))
    return _positive(out, "output_size", op)


# ---------------------------------------------------------------------------- window maps


def _affine(v, scale: int, offset=0):
    """``v * scale + offset``, printed without ``* 1`` or ``+ 0``."""
    v = v if scale == 1 else v * scale
    if isinstance(offset, int):
        return v if offset == 0 else v + offset if offset > 0 else v - (-offset)
    return v + offset


def _product(factors):
    """The product of ints and integer expressions (an int when every factor is)."""
    number, exprs = 1, []
    for f in factors:
        if isinstance(f, int):
            number *= f
        else:
            exprs.append(f)
    if not exprs:
        return number
    total = exprs[0]
    for f in exprs[1:]:
        total = total * f
    return _affine(total, number)


def _fixed(lead, k, s, p, d, sizes, out):
    """Index map and guard of fixed windows: ``o s - p + r d``, guarded on each axis whose
    windows can leave ``[0, L)``."""
    def window(i, r):
        idx, conds = list(i[:lead]), []
        for a in range(len(k)):
            pos = _affine(_affine(i[lead + a], s[a]) + _affine(r[a], d[a]), 1, -p[a])
            idx.append(pos)
            if p[a] > 0:
                conds.append(pos >= 0)
            if (out[a] - 1) * s[a] - p[a] + (k[a] - 1) * d[a] >= sizes[a]:
                conds.append(pos < sizes[a])
        return tuple(idx), conds
    return window


def _avg_count(lead, k, s, p, sizes, out, count_include_pad):
    """torch's divisor ``D(o)`` as an integer expression (an int where constant): per
    axis ``min(start + k, L + p) - start`` counting the padding, else
    ``min(start + k, L) - max(start, 0)``, with ``start = o s - p``."""
    def count(i):
        factors = []
        for a in range(len(k)):
            start = _affine(i[lead + a], s[a], -p[a])
            hi = sizes[a] + p[a] if count_include_pad else sizes[a]
            clip_end = (out[a] - 1) * s[a] - p[a] + k[a] > hi  # only ceil_mode's last
            clip_start = not count_include_pad and p[a] > 0
            if not (clip_end or clip_start):
                factors.append(k[a])
                continue
            end = minimum(start + k[a], hi) if clip_end else start + k[a]
            factors.append(end - (maximum(start, 0) if clip_start else start))
        return _product(factors)
    return count


def _bins(lead, sizes, out):
    """Adaptive bins ``[floor(j L / O), ceil((j + 1) L / O))``: index map and guard, each
    axis's widest bin, and the bin sizes' product."""
    def bounds(j, size, o):
        return (j * size) // o, ((j + 1) * size + o - 1) // o

    widths = [max(hi - lo for lo, hi in (bounds(j, size, o) for j in range(o)))
              for size, o in zip(sizes, out, strict=True)]

    def window(i, r):
        idx, conds = list(i[:lead]), []
        for a, (size, o) in enumerate(zip(sizes, out, strict=True)):
            if size % o == 0:  # fixed bins of size L / O
                idx.append(_affine(i[lead + a], size // o) + r[a])
                continue
            lo, hi = bounds(i[lead + a], size, o)
            idx.append(lo + r[a])
            conds.append(lo + r[a] < hi)
        return tuple(idx), conds

    def count(i):
        factors = []
        for a, (size, o) in enumerate(zip(sizes, out, strict=True)):
            lo, hi = bounds(i[lead + a], size, o)
            factors.append(size // o if size % o == 0 else hi - lo)
        return _product(factors)
    return window, widths, count


# ---------------------------------------------------------------------------- reductions


def _reduce(reducer, input, window, extents, i):
    """``reducer_r x[window(i, r)]`` over the window's guarded reads."""
    r = [reduce_axis(e, name=f"r{a}") for a, e in enumerate(extents)]
    idx, conds = window(i, r)
    return reducer(input[idx], axis=r, where=tall(conds) if conds else None)


def _max(input, lead, window, extents, out, return_indices, name):
    """``max`` over each window; with ``return_indices`` also torch's flat input index
    (over the spatial dims) of the first maximum, as int64."""
    shape = (*input.shape[:lead], *out)
    values = compute(shape, lambda *i: _reduce(tmax, input, window, extents, i), name=name)
    if not return_indices:
        return values
    first = compute(shape, lambda *i: _reduce(argmax, input, window, extents, i),
                    name=f"{name}.argmax")  # row-major position in the window
    sizes = input.shape[lead:]

    def index(*i):
        offsets, inner = [], 1
        for a in reversed(range(len(extents))):  # unflatten the window position
            offset = first[i] if inner == 1 else first[i] // inner
            offsets.insert(0, offset if a == 0 else offset % extents[a])
            inner *= extents[a]
        pos = window(i, offsets)[0][lead:]
        total = pos[0]
        for a in range(1, len(pos)):
            total = total * sizes[a] + pos[a]
        return cast(total, "int64")

    return values, compute(shape, index, name=f"{name}.indices")


def _sum(input, lead, window, extents, out, scale, name, transform=None, finish=None,
         gain: int = 1):
    """``finish(gain / scale(o) * sum_r transform(x[window]))``."""
    def body(*i):
        r = [reduce_axis(e, name=f"r{a}") for a, e in enumerate(extents)]
        idx, conds = window(i, r)
        v = input[idx] if transform is None else transform(input[idx])
        total = tsum(v, axis=r, where=tall(conds) if conds else None)
        divisor = scale(i)
        if not isinstance(divisor, int):
            total = _affine(total, gain) / cast(divisor, input.dtype)
        elif divisor != gain:
            total = total / float(divisor) if gain == 1 else total * (gain / divisor)
        return total if finish is None else finish(total)
    return compute((*input.shape[:lead], *out), body, name=name)


# ---------------------------------------------------------------------------- fixed windows


def _fixed_pool(n, op, input, kernel_size, stride, padding, dilation, ceil_mode):
    """``(lead, k, s, p, out, window)`` of a fixed-window pool, arguments checked."""
    lead = _leading(input, n, op)
    k, s, p, d, out = _window(n, op, kernel_size, stride, padding, dilation,
                              input.shape[lead:], ceil_mode)
    return lead, k, s, p, out, _fixed(lead, k, s, p, d, input.shape[lead:], out)


def _max_pool(n, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    op = f"max_pool{n}d"
    lead, k, _, _, out, window = _fixed_pool(n, op, input, kernel_size, stride, padding,
                                             dilation, ceil_mode)
    return _max(input, lead, window, k, out, return_indices, unique_name(op))


def _avg_pool(n, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, transform=None, finish=None, op=None, gain=1):
    op = op or f"avg_pool{n}d"
    lead, k, s, p, out, window = _fixed_pool(n, op, input, kernel_size, stride, padding,
                                             1, ceil_mode)
    if divisor_override is not None:
        if not isinstance(divisor_override, int) or divisor_override == 0:
            raise ValueError(f"{op}: divisor_override must be a non-zero int, "
                             f"got {divisor_override!r}")
        scale = lambda i: divisor_override  # noqa: E731
    else:
        scale = _avg_count(lead, k, s, p, input.shape[lead:], out, count_include_pad)
    return _sum(input, lead, window, k, out, scale, unique_name(op), transform, finish, gain)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``y[o] = max_r x[o s - p + r d]`` (padding never wins); ``return_indices`` gives
    the first maximum's position, as torch does for untied windows."""
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-d ``max_pool1d``; indices are flat over ``(H, W)``. Tied maxima share the
    gradient evenly (torch gives it to one)."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """3-d ``max_pool1d``; indices are flat over ``(D, H, W)``."""
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """``y[o] = sum_r x[o s - p + r] / D(o)``, ``D`` torch's window count (with or
    without the padding)."""
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-d ``avg_pool1d``; ``divisor_override`` replaces ``D``."""
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """3-d ``avg_pool1d``; ``divisor_override`` replaces ``D``."""
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _lp_pool(n, input, norm_type, kernel_size, stride, ceil_mode):
    op = f"lp_pool{n}d"
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) \
            or norm_type == 0 or norm_type != norm_type:
        raise ValueError(f"{op}: norm_type must be a non-zero number, got {norm_type!r}")
    if norm_type in (float("inf"), float("-inf")):  # torch: max (min) of |x| per window
        lead, k, _, _, out, window = _fixed_pool(n, op, input, kernel_size, stride, 0, 1,
                                                 ceil_mode)
        # |x| as its own tensor, as torch does: the max rule then compares plain reads
        # instead of materializing |x| per window position
        magnitude = compute(input.shape, lambda *i: tabs(input[i]), name=unique_name(f"{op}.abs"))
        reducer = tmax if norm_type > 0 else tmin
        return compute((*input.shape[:lead], *out), lambda *i: _reduce(
            reducer, magnitude, window, k, i), name=unique_name(op))
    numel = 1
    for k in ntuple(kernel_size, n, f"{op}: kernel_size"):
        numel *= k
    p = float(norm_type)
    return _avg_pool(n, input, kernel_size, stride, 0, ceil_mode, True, None,
                     transform=lambda v: power(v, p), finish=lambda v: power(v, 1.0 / p),
                     op=op, gain=numel)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``y = (k / D(o) sum_r x^p)^(1/p)``, torch's ``avg_pool(x^p) * k`` (``D = k`` but
    for ceil_mode's partial last window); ``p = +-inf``: the max (min) of ``|x|``."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """2-d ``lp_pool1d``: ``(kh kw / D(o) sum_r x^p)^(1/p)``."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """3-d ``lp_pool1d``: ``(kd kh kw / D(o) sum_r x^p)^(1/p)``."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


# ---------------------------------------------------------------------------- adaptive


def _adaptive_avg(n, input, output_size, op=None):
    op = op or f"adaptive_avg_pool{n}d"
    lead = _leading(input, n, op)
    sizes = input.shape[lead:]
    out = _adaptive_sizes(output_size, sizes, op)
    if all(size % o == 0 for size, o in zip(sizes, out, strict=True)):
        window, widths, count = _bins(lead, sizes, out)
        return _sum(input, lead, window, widths, out, count, unique_name(op))
    return _separable_avg(input, lead, out, unique_name(op))


def _separable_avg(input, lead, out, name):
    """Bins where some axis's do not divide it, one axis at a time (a box mean is the
    product of its axes' means): ``y[.., j, ..] = sum_h A[j, h] x[.., h, ..]`` with the
    bin matrix ``A[j, h] = [lo(j) <= h < hi(j)] / (hi(j) - lo(j))``. The gradient is
    then the same small contraction, ``dx[.., h, ..] = sum_j A[j, h] dy[.., j, ..]``;
    the window form's gradient solves ``h = lo(j) + r`` per point under floor bounds
    (8x torch's time). An axis its bins divide keeps a fixed window of ``L / O``, an
    unchanged one is left out."""
    x = input
    axes = [a for a, (size, o) in enumerate(zip(input.shape[lead:], out, strict=True))
            if size != o]
    for k, a in enumerate(axes):
        d, size, o = lead + a, x.shape[lead + a], out[a]
        shape = (*x.shape[:d], o, *x.shape[d + 1:])
        step = name if k == len(axes) - 1 else unique_name(f"{name}_axis{a}")
        if size % o == 0:
            x = _mean_window(x, d, size // o, shape, step)
            continue
        bins = _bin_matrix(size, o, x.dtype, unique_name(f"{name}_bins{a}"))

        def body(*i, x=x, d=d, bins=bins, size=size):
            h = reduce_axis(size, name="h")
            return tsum(bins[i[d], h] * x[(*i[:d], h, *i[d + 1:])], axis=h)
        x = compute(shape, body, name=step)
    return x


def _mean_window(x, d, width, shape, name):
    """The mean over fixed windows of ``width`` along dim ``d``."""
    def body(*i):
        r = reduce_axis(width, name="r")
        return tsum(x[(*i[:d], _affine(i[d], width) + r, *i[d + 1:])], axis=r) / float(width)
    return compute(shape, body, name=name)


def _bin_matrix(size: int, o: int, dtype: str, name: str) -> Tensor:
    """``A[j, h] = 1 / (hi - lo)`` inside bin ``j = [lo, hi)`` of ``size`` into ``o``, else 0."""
    def body(j, h):
        lo, hi = (j * size) // o, ((j + 1) * size + o - 1) // o
        inside = tall(lo <= h, h < hi)
        return if_then_else(inside, 1.0 / cast(hi - lo, dtype), cast(0, dtype))
    return compute((o, size), body, name=name)


def _adaptive_max(n, input, output_size, return_indices, op=None):
    op = op or f"adaptive_max_pool{n}d"
    lead = _leading(input, n, op)
    out = _adaptive_sizes(output_size, input.shape[lead:], op)
    window, widths, _ = _bins(lead, input.shape[lead:], out)
    return _max(input, lead, window, widths, out, return_indices, unique_name(op))


def adaptive_avg_pool1d(input, output_size):
    """Mean over bin ``[floor(o L / O), ceil((o + 1) L / O))``; ``None`` keeps ``L``."""
    return _adaptive_avg(1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    """2-d ``adaptive_avg_pool1d`` (bins per axis)."""
    return _adaptive_avg(2, input, output_size)


def adaptive_avg_pool3d(input, output_size):
    """3-d ``adaptive_avg_pool1d`` (bins per axis)."""
    return _adaptive_avg(3, input, output_size)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max over bin ``[floor(o L / O), ceil((o + 1) L / O))``; ``None`` keeps ``L``."""
    return _adaptive_max(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """2-d ``adaptive_max_pool1d``; indices are flat over ``(H, W)``."""
    return _adaptive_max(2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """3-d ``adaptive_max_pool1d``; indices are flat over ``(D, H, W)``."""
    return _adaptive_max(3, input, output_size, return_indices)


def global_avg_pool2d(input):
    """Not in torch: ``(N, C, H, W) -> (N, C, 1, 1)``, the mean over ``H, W``."""
    return _adaptive_avg(2, input, 1, op="global_avg_pool2d")


def global_max_pool2d(input):
    """Not in torch: ``(N, C, H, W) -> (N, C, 1, 1)``, the max over ``H, W``."""
    return _adaptive_max(2, input, 1, False, op="global_max_pool2d")
