"""Convolutions in PyTorch's layouts (``N, C, *spatial``), written as gathers.

    conv        y[n, o, p] = b[o] + sum_{c, k} x[n, g(o) Cg + c, s p - P + d k] w[o, c, k]
    transposed  y[n, o, p] = b[o] + sum_{c, k : s | p + P - d k} x[n, c', (p + P - d k) / s]
                                                                  w[c', o - g(o) Og, k]
    unfold      cols[n, c K + k, l] = x[n, c, s l_(h,w) - P + d k]     (im2col)
    fold        out[n, c, p] = sum_{k : s | p + P - d k} cols[n, c K + k, (p + P - d k) / s]

(``g(o)`` the group of output channel ``o``, ``Cg``/``Og`` input/output channels per
group, ``c' = g(o) Cg + c``, ``k`` a window offset, spatial indices per axis.) Every
forward is a gather with affine index maps (``//`` and ``%`` for strides), padding is a
guard on the reduction domain, so the generated backwards are gathers too: conv's input
gradient is a transposed conv, the transposed conv's is a conv, fold's is unfold. Bias
is added by a separate compute, so the contraction stays a bare sum (BLAS in lower/).
"""

from __future__ import annotations

from ..frontend.math import all as tall
from ..frontend.math import equal, if_then_else
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import ntuple

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "depthwise_conv2d", "fold", "unfold"]


def _positive(values, what):
    if any(v < 1 for v in values):
        raise ValueError(f"{what} must be positive, got {values}")
    return values


def _check_operands(op, x, weight, bias, nd, groups, transposed):
    if not isinstance(x, Tensor) or x.ndim != nd + 2:
        raise ValueError(f"{op}: input must be a {nd + 2}-D tensor (N, C, {nd} spatial axes), "
                         f"got shape {getattr(x, 'shape', x)}")
    if not isinstance(weight, Tensor) or weight.ndim != nd + 2:
        raise ValueError(f"{op}: weight must be a {nd + 2}-D tensor, "
                         f"got shape {getattr(weight, 'shape', weight)}")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    c_in = x.shape[1]
    if c_in % groups:
        raise ValueError(f"{op}: input channels {c_in} are not divisible by groups={groups}")
    if transposed:  # weight (C_in, C_out / groups, *k)
        if weight.shape[0] != c_in:
            raise ValueError(f"{op}: weight {weight.shape} must have {c_in} (input channels) "
                             f"rows for input {x.shape}")
        c_out = weight.shape[1] * groups
    else:  # weight (C_out, C_in / groups, *k)
        if weight.shape[1] * groups != c_in:
            raise ValueError(f"{op}: weight {weight.shape} expects {weight.shape[1] * groups} "
                             f"input channels (groups={groups}), input {x.shape} has {c_in}")
        c_out = weight.shape[0]
        if c_out % groups:
            raise ValueError(f"{op}: output channels {c_out} are not divisible by "
                             f"groups={groups}")
    if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (c_out,)):
        raise ValueError(f"{op}: bias must have shape ({c_out},), "
                         f"got {getattr(bias, 'shape', bias)}")
    return c_out


def _same_or_explicit(op, padding, kernel, stride, dilation, nd):
    """``(left, right)`` padding per axis: explicit, ``"valid"`` or ``"same"`` (torch puts
    the odd extra of ``d (k - 1)`` on the right and refuses strides)."""
    if padding == "valid":
        return (0,) * nd, (0,) * nd
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride={stride}")
        total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    if isinstance(padding, str):
        raise ValueError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', "
                         f"got {padding!r}")
    pad = ntuple(padding, nd, f"{op}: padding")
    if any(p < 0 for p in pad):
        raise ValueError(f"{op}: padding must be non-negative, got {pad}")
    return pad, pad


def _with_bias(y: Tensor, bias: Tensor | None) -> Tensor:
    """``y + b[o]`` as its own compute: the contraction stays a bare sum, which ``lower/``
    runs as one BLAS contraction (a sum inside ``sum + b`` is not recognised as one)."""
    if bias is None:
        return y
    return compute(y.shape, lambda n, o, *p: y[(n, o, *p)] + bias[o], name=f"{y.name}.bias")


def _affine(scale: int, q, shift: int = 0):
    """``scale q + shift`` without writing unit factors and zero shifts."""
    e = q if scale == 1 else scale * q
    return e if shift == 0 else (e + shift if shift > 0 else e - (-shift))


def _window(name, kernel):
    return [reduce_axis(k, name=f"{name}{a}") for a, k in enumerate(kernel)]


def _conv_nd(op, x, weight, bias, stride, padding, dilation, groups, nd):
    c_out = _check_operands(op, x, weight, bias, nd, groups, transposed=False)
    kernel = weight.shape[2:]
    stride = _positive(ntuple(stride, nd, f"{op}: stride"), f"{op}: stride")
    dilation = _positive(ntuple(dilation, nd, f"{op}: dilation"), f"{op}: dilation")
    left, right = _same_or_explicit(op, padding, kernel, stride, dilation, nd)
    size = x.shape[2:]
    out = tuple((n + lo + hi - d * (k - 1) - 1) // s + 1
                for n, lo, hi, k, s, d in zip(size, left, right, kernel, stride, dilation,
                                              strict=True))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: input {x.shape} padded by {left}/{right} is smaller than the "
                         f"dilated kernel {kernel} (dilation {dilation})")
    c_group, o_group = weight.shape[1], c_out // groups
    ci = reduce_axis(c_group, name="ci")
    ks = _window("k", kernel)

    def body(n, o, *p):
        at = [_affine(s, q, -lo) + _affine(d, k)
              for q, k, s, lo, d in zip(p, ks, stride, left, dilation, strict=True)]
        conds = []
        for a, (i, q_max) in enumerate(zip(at, out, strict=True)):
            if left[a]:
                conds.append(0 <= i)
            if (q_max - 1) * stride[a] - left[a] + dilation[a] * (kernel[a] - 1) >= size[a]:
                conds.append(i < size[a])
        c = ci if groups == 1 else (o // o_group) * c_group + ci
        return tsum(x[(n, c, *at)] * weight[(o, ci, *ks)], axis=[ci, *ks],
                    where=tall(conds) if conds else None)

    return _with_bias(compute((x.shape[0], c_out, *out), body, name=unique_name(op)), bias)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """``F.conv1d``: ``y[n,o,p] = b[o] + sum_{c,k} x[n, c, s p - P + d k] w[o, c, k]``."""
    return _conv_nd("conv1d", input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """``F.conv2d`` (cross-correlation, NCHW); padding an int, a tuple, "valid" or "same"."""
    return _conv_nd("conv2d", input, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """``F.conv3d`` (NCDHW); the same N-d gather as ``conv2d``."""
    return _conv_nd("conv3d", input, weight, bias, stride, padding, dilation, groups, 3)


def depthwise_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1):  # noqa: A002
    """Convenience (no torch function of that name): ``conv2d`` with ``groups = C``, weight
    ``(C m, 1, kh, kw)`` (channel multiplier ``m``)."""
    if not isinstance(input, Tensor) or input.ndim != 4:
        raise ValueError(f"depthwise_conv2d: input must be 4-D (N, C, H, W), "
                         f"got shape {getattr(input, 'shape', input)}")
    c = input.shape[1]
    if not isinstance(weight, Tensor) or weight.ndim != 4 or weight.shape[1] != 1 \
            or weight.shape[0] % c:
        raise ValueError(f"depthwise_conv2d: weight must be (C * m, 1, kh, kw) with C={c}, "
                         f"got {getattr(weight, 'shape', weight)}")
    return _conv_nd("depthwise_conv2d", input, weight, bias, stride, padding, dilation, c, 2)


def _transposed_nd(op, x, weight, bias, stride, padding, output_padding, groups, dilation, nd):
    c_out = _check_operands(op, x, weight, bias, nd, groups, transposed=True)
    kernel, size = weight.shape[2:], x.shape[2:]
    stride = _positive(ntuple(stride, nd, f"{op}: stride"), f"{op}: stride")
    dilation = _positive(ntuple(dilation, nd, f"{op}: dilation"), f"{op}: dilation")
    if isinstance(padding, str):
        raise ValueError(f"{op}: padding must be an int or a tuple, got {padding!r}")
    pad = ntuple(padding, nd, f"{op}: padding")
    extra = ntuple(output_padding, nd, f"{op}: output_padding")
    if any(p < 0 for p in pad) or any(e < 0 for e in extra):
        raise ValueError(f"{op}: padding and output_padding must be non-negative, "
                         f"got {pad} and {extra}")
    for e, s, d in zip(extra, stride, dilation, strict=True):
        if e >= s and e >= d:
            raise ValueError(f"{op}: output_padding {extra} must be smaller than either "
                             f"stride {stride} or dilation {dilation}")
    out = tuple((n - 1) * s - 2 * p + d * (k - 1) + e + 1
                for n, s, p, d, k, e in zip(size, stride, pad, dilation, kernel, extra,
                                            strict=True))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: output size {out} is not positive (input {x.shape}, "
                         f"padding {pad})")
    c_group, o_group = x.shape[1] // groups, weight.shape[1]
    ci = reduce_axis(c_group, name="ci")
    ks = _window("k", kernel)

    def body(n, o, *p):
        at, conds = [], []
        for q, k, s, lo, d, m in zip(p, ks, stride, pad, dilation, size, strict=True):
            t = _affine(1, q, lo) - _affine(d, k)  # = s * (input position)
            conds += [0 <= t, t <= s * (m - 1)]
            if s > 1:
                conds.append(equal(t % s, 0))
            at.append(t // s if s > 1 else t)
        c = ci if groups == 1 else (o // o_group) * c_group + ci
        oc = o if groups == 1 else o % o_group
        return tsum(x[(n, c, *at)] * weight[(c, oc, *ks)], axis=[ci, *ks], where=tall(conds))

    return _with_bias(compute((x.shape[0], c_out, *out), body, name=unique_name(op)), bias)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose1d``: the adjoint of ``conv1d``, written as a gather over the input
    positions ``(p + P - d k) / s`` that are integers."""
    return _transposed_nd("conv_transpose1d", input, weight, bias, stride, padding,
                          output_padding, groups, dilation, 1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose2d`` (weight ``(C_in, C_out / groups, kh, kw)``), as a gather."""
    return _transposed_nd("conv_transpose2d", input, weight, bias, stride, padding,
                          output_padding, groups, dilation, 2)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose3d``, the same N-d gather as ``conv_transpose2d``."""
    return _transposed_nd("conv_transpose3d", input, weight, bias, stride, padding,
                          output_padding, groups, dilation, 3)


def _blocks(op, size, kernel, dilation, padding, stride):
    blocks = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                   for n, k, d, p, s in zip(size, kernel, dilation, padding, stride,
                                            strict=True))
    if any(b < 1 for b in blocks):
        raise ValueError(f"{op}: size {size} padded by {padding} holds no block of kernel "
                         f"{kernel} (dilation {dilation})")
    return blocks


def _window_args(op, kernel_size, dilation, padding, stride):
    kernel = _positive(ntuple(kernel_size, 2, f"{op}: kernel_size"), f"{op}: kernel_size")
    dilation = _positive(ntuple(dilation, 2, f"{op}: dilation"), f"{op}: dilation")
    stride = _positive(ntuple(stride, 2, f"{op}: stride"), f"{op}: stride")
    padding = ntuple(padding, 2, f"{op}: padding")
    if any(p < 0 for p in padding):
        raise ValueError(f"{op}: padding must be non-negative, got {padding}")
    return kernel, dilation, padding, stride


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """``F.unfold`` (im2col): ``(N, C, H, W) -> (N, C kh kw, L)``, row ``c kh kw + i kw + j``,
    column ``l = bh W_b + bw``; a 3-D ``(C, H, W)`` input gives ``(C kh kw, L)``."""
    x = input
    if not isinstance(x, Tensor) or x.ndim not in (3, 4):
        raise ValueError(f"unfold: input must be (N, C, H, W) or (C, H, W), "
                         f"got shape {getattr(x, 'shape', x)}")
    kernel, dil, pad, stride = _window_args("unfold", kernel_size, dilation, padding, stride)
    c, size = x.shape[-3], x.shape[-2:]
    bh, bw = _blocks("unfold", size, kernel, dil, pad, stride)
    kh, kw = kernel
    name = unique_name("unfold")

    def window(*idx):  # (..., c, i, j, bh, bw): the pixel under tap (i, j) of block (bh, bw)
        i, j, p, q = idx[-4:]
        h = _affine(stride[0], p, -pad[0]) + _affine(dil[0], i)
        w = _affine(stride[1], q, -pad[1]) + _affine(dil[1], j)
        value = x[(*idx[:-4], h, w)]
        if not any(pad):
            return value
        return if_then_else(tall(0 <= h, h < size[0], 0 <= w, w < size[1]), value, 0.0)

    # the 6-D window then a reshape: with the two in one compute, the generated backward
    # keeps a sum over every channel (simplify/ does not tighten ``0 <= 9 q + rho - 9 c``)
    view = compute((*x.shape[:-2], kh, kw, bh, bw), window, name=f"{name}.window")

    def rows(*idx):
        r, col = idx[-2:]
        return view[(*idx[:-2], r // (kh * kw), (r // kw) % kh, r % kw, col // bw, col % bw)]

    return compute((*x.shape[:-3], c * kh * kw, bh * bw), rows, name=name)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """``F.fold`` (col2im): each output pixel sums the ``(N, C kh kw, L)`` columns of the
    blocks that cover it, written as a gather over the window taps."""
    cols = input
    if not isinstance(cols, Tensor) or cols.ndim not in (2, 3):
        raise ValueError(f"fold: input must be (N, C kh kw, L) or (C kh kw, L), "
                         f"got shape {getattr(cols, 'shape', cols)}")
    kernel, dil, pad, stride = _window_args("fold", kernel_size, dilation, padding, stride)
    size = ntuple(output_size, 2, "fold: output_size")
    kh, kw = kernel
    rows, length = cols.shape[-2:]
    if rows % (kh * kw):
        raise ValueError(f"fold: input rows {rows} are not divisible by kh * kw = {kh * kw}")
    bh, bw = _blocks("fold", size, kernel, dil, pad, stride)
    if length != bh * bw:
        raise ValueError(f"fold: input has {length} columns, output_size {size} with kernel "
                         f"{kernel} gives {bh} x {bw} = {bh * bw} blocks")
    i, j = reduce_axis(kh, name="i"), reduce_axis(kw, name="j")

    def body(*idx):
        c, y, z = idx[-3:]
        ty, tz = y + pad[0] - i * dil[0], z + pad[1] - j * dil[1]
        conds = [0 <= ty, ty <= stride[0] * (bh - 1), 0 <= tz, tz <= stride[1] * (bw - 1)]
        if stride[0] > 1:
            conds.append(equal(ty % stride[0], 0))
        if stride[1] > 1:
            conds.append(equal(tz % stride[1], 0))
        col = (ty // stride[0]) * bw + tz // stride[1]
        return tsum(cols[(*idx[:-3], c * kh * kw + i * kw + j, col)], axis=[i, j],
                    where=tall(conds))

    return compute((*cols.shape[:-2], rows // (kh * kw), *size), body, name=unique_name("fold"))
