"""Shape ops: views, concatenation, padding and data movement, as ``torch`` defines them.

Every op is one ``compute`` whose reads of the input are affine in the output index,
with ``//`` and ``%`` where axes merge, split or wrap (reshape, roll, repeat, circular
pad) and ``if_then_else`` where an output region reads another tensor or a pad value
(cat, stack, pad). The generated backward is then a gather: ``x_bar[j] = y_bar[f^-1(j)]``.
Ops that return views in torch (``reshape``, ``transpose``, ``expand``, ``split``...)
are computes like any other; a built program makes one a NumPy view of its input where
the program returns it or only products read it (``lower/views.py``), and fuses it into
its readers' loops elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from ..frontend.math import all as tall
from ..frontend.math import equal, if_then_else
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axes, axis

__all__ = ["broadcast_to", "cat", "chunk", "concat", "expand", "flatten", "flip", "moveaxis",
           "movedim", "narrow", "pad", "permute", "repeat", "reshape", "roll", "slice_copy",
           "split", "squeeze", "stack", "tile", "transpose", "unsqueeze", "view"]


def _sizes(sizes: tuple, what: str) -> tuple[int, ...]:
    """``f(x, 2, 3)`` and ``f(x, (2, 3))`` alike."""
    if len(sizes) == 1 and isinstance(sizes[0], Sequence):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, int) for s in sizes):
        raise ValueError(f"{what} must be ints, got {sizes!r}")
    return tuple(sizes)


def _unflatten(flat, shape: Sequence[int]) -> list:
    """Row-major digits of ``flat`` in ``shape`` (``flat`` assumed in ``[0, numel)``)."""
    out, stride = [], prod(shape)
    for k, n in enumerate(shape):
        stride //= max(n, 1)
        digit = flat // stride if stride != 1 else flat
        out.append(0 if n == 1 else digit % n if k > 0 else digit)
    return out


def _flatten_index(idx: Sequence, shape: Sequence[int]):
    flat, stride = 0, 1
    for i, n in zip(reversed(idx), reversed(shape), strict=True):
        if n != 1:
            flat = flat + i * stride if stride != 1 else flat + i
        stride *= n
    return flat


# ---------------------------------------------------------------------------- views


def _groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Split two shapes of equal size into runs of axes with equal products, so a reshape
    reads ``x`` through ``//`` and ``%`` within each run only ((N, C, H, W) -> (N, CHW):
    ``N`` maps to itself)."""
    groups, a, b = [], 0, 0
    while a < len(src) or b < len(dst):
        sa, sb, pa, pb = [], [], 1, 1
        if a < len(src):
            sa, pa, a = [a], src[a], a + 1
        if b < len(dst):
            sb, pb, b = [b], dst[b], b + 1
        while pa != pb:
            if pa < pb and a < len(src):
                sa.append(a)
                pa, a = pa * src[a], a + 1
            elif b < len(dst):
                sb.append(b)
                pb, b = pb * dst[b], b + 1
            else:
                break
        groups.append((sa, sb))
    return groups


def reshape(input: Tensor, shape, *more: int) -> Tensor:
    """``torch.reshape``: same elements in row-major order, one size may be -1.
    Takes ``reshape(x, (2, 3))`` or ``reshape(x, 2, 3)``."""
    shape = _sizes((shape, *more), "shape")
    total = input.size
    given, known = shape, prod(s for s in shape if s != -1)
    if -1 in shape and known and shape.count(-1) == 1:
        shape = tuple(total // known if s == -1 else s for s in shape)
    if prod(shape) != total or min(shape, default=0) < 0:
        raise ValueError(f"shape {given} (one -1 at most) is invalid for an input of shape "
                         f"{input.shape} ({total} elements)")
    groups = [([*range(input.ndim)], [*range(len(shape))])] if total == 0 else \
        _groups(input.shape, shape)

    def body(*o):
        index = [None] * input.ndim
        for sa, sb in groups:
            flat = _flatten_index([o[b] for b in sb], [shape[b] for b in sb])
            for a, digit in zip(sa, _unflatten(flat, [input.shape[a] for a in sa]),
                                strict=True):
                index[a] = digit
        return input[tuple(index)]

    return compute(shape, body, name=unique_name("reshape"))


def view(input: Tensor, *shape) -> Tensor:
    """``Tensor.view``: :func:`reshape`."""
    return reshape(input, _sizes(shape, "shape"))


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``torch.flatten``: merge axes ``start_dim..end_dim`` into one."""
    if input.ndim == 0:
        return reshape(input, (1,))
    start, end = axis(start_dim, input.ndim, "start_dim"), axis(end_dim, input.ndim, "end_dim")
    if start > end:
        raise ValueError(f"flatten: start_dim={start_dim} comes after end_dim={end_dim}")
    s = input.shape
    return reshape(input, (*s[:start], prod(s[start:end + 1]), *s[end + 1:]))


def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """``torch.squeeze``: drop the size-1 axes among ``dim`` (every axis when None)."""
    drop = {a for a in axes(dim, input.ndim) if input.shape[a] == 1}
    return reshape(input, tuple(n for a, n in enumerate(input.shape) if a not in drop))


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """``torch.unsqueeze``: a size-1 axis inserted at ``dim`` (in ``[-ndim-1, ndim]``)."""
    d = axis(dim, input.ndim + 1)
    return reshape(input, (*input.shape[:d], 1, *input.shape[d:]))


def permute(input: Tensor, dims, *more: int) -> Tensor:
    """``torch.permute``: ``y[i_0, ..., i_n] = x[j]`` with ``j[dims[k]] = i_k``."""
    dims = _sizes((dims, *more), "dims")
    perm = [axis(d, input.ndim, "dims") for d in dims]
    if sorted(perm) != list(range(input.ndim)):
        raise ValueError(f"dims {dims} must be a permutation of the {input.ndim} axes")

    def body(*o):
        index = [None] * input.ndim
        for k, a in enumerate(perm):
            index[a] = o[k]
        return input[tuple(index)]

    return compute(tuple(input.shape[a] for a in perm), body, name=unique_name("permute"))


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``torch.transpose``: axes ``dim0`` and ``dim1`` swapped."""
    perm = list(range(input.ndim))
    a, b = axis(dim0, input.ndim, "dim0"), axis(dim1, input.ndim, "dim1")
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, perm)


def movedim(input: Tensor, source, destination) -> Tensor:
    """``torch.movedim``: axes ``source`` moved to positions ``destination``."""
    src = [axis(d, input.ndim, "source") for d in _sizes((source,), "source")]
    dst = [axis(d, input.ndim, "destination") for d in _sizes((destination,), "destination")]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim: source {source} and destination {destination} must be "
                         "distinct axes, as many of each")
    perm: list[int | None] = [None] * input.ndim
    for s, d in zip(src, dst, strict=True):
        perm[d] = s
    rest = iter(a for a in range(input.ndim) if a not in src)
    return permute(input, [p if p is not None else next(rest) for p in perm])


moveaxis = movedim


def expand(input: Tensor, *sizes) -> Tensor:
    """``Tensor.expand``: size-1 axes repeated to ``sizes`` (-1 keeps an axis), new
    leading axes allowed."""
    sizes = _sizes(sizes, "sizes")
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise ValueError(f"expand: {len(sizes)} sizes {sizes} for a tensor of {input.ndim} "
                         f"dims {input.shape}")
    shape = []
    for k, s in enumerate(sizes):
        own = input.shape[k - lead] if k >= lead else None
        if s == -1 and own is not None:
            s = own
        if s < 0 or (own is not None and own != 1 and own != s):
            raise ValueError(f"expand: size {sizes[k]} at axis {k} does not fit input shape "
                             f"{input.shape} (only size-1 axes expand)")
        shape.append(s)

    def body(*o):
        return input[tuple(0 if input.shape[a] == 1 else o[a + lead] for a in range(input.ndim))]

    return compute(tuple(shape), body, name=unique_name("expand"))


def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    """``torch.broadcast_to``: :func:`expand` to ``size``."""
    return expand(input, tuple(size))


# ---------------------------------------------------------------------------- joins


def _joinable(tensors, dim: int | None, what: str) -> tuple[list[Tensor], int | None]:
    """The tensors (same rank and dtype, same sizes outside ``dim``; all sizes when
    ``dim`` is None) and ``dim`` as a non-negative axis."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what} needs at least one tensor")
    first = tensors[0]
    d = None if dim is None else axis(dim, first.ndim)
    for k, t in enumerate(tensors):
        if t.ndim != first.ndim or t.dtype != first.dtype or any(
                t.shape[a] != first.shape[a] for a in range(t.ndim) if a != d):
            where = "" if d is None else f" outside dim {dim}"
            raise ValueError(f"{what}: tensor {k} is {t.dtype} {t.shape}, tensor 0 is "
                             f"{first.dtype} {first.shape}; they must match{where}")
    return tensors, d


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``torch.cat``: ``y[.., o_k + i, ..] = t_k[.., i, ..]`` along ``dim``."""
    tensors, d = _joinable(tensors, dim, "cat")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[d])
    parts = [(t, o) for t, o in zip(tensors, offsets, strict=False) if t.shape[d] > 0]
    shape = (*tensors[0].shape[:d], offsets[-1], *tensors[0].shape[d + 1:])

    def body(*o):
        def part(k):
            t, offset = parts[k]
            return t[(*o[:d], o[d] - offset, *o[d + 1:])]
        value = part(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            value = if_then_else(o[d] < parts[k + 1][1], part(k), value)
        return value

    return compute(shape, body, name=unique_name("cat"))


concat = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``torch.stack``: ``y[.., k, ..] = t_k`` along a new axis ``dim``."""
    tensors, _ = _joinable(tensors, None, "stack")
    first = tensors[0]
    d = axis(dim, first.ndim + 1)

    def body(*o):
        inner = (*o[:d], *o[d + 1:])
        value = tensors[-1][inner]
        for k in range(len(tensors) - 2, -1, -1):
            value = if_then_else(equal(o[d], k), tensors[k][inner], value)
        return value

    shape = (*first.shape[:d], len(tensors), *first.shape[d:])
    return compute(shape, body, name=unique_name("stack"))


def slice_copy(input: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,
               step: int = 1) -> Tensor:
    """``torch.slice_copy``: ``input[..., start:end:step]`` along ``dim`` (Python slice
    rules, ``step > 0``)."""
    d = axis(dim, input.ndim)
    if not isinstance(step, int) or step <= 0:
        raise ValueError(f"slice_copy: step must be a positive int, got {step!r}")
    first, _, _ = slice(start, end, step).indices(input.shape[d])
    count = len(range(*slice(start, end, step).indices(input.shape[d])))

    def body(*o):
        return input[(*o[:d], first + step * o[d] if step != 1 else first + o[d], *o[d + 1:])]

    shape = (*input.shape[:d], count, *input.shape[d + 1:])
    return compute(shape, body, name=unique_name("slice_copy"))


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``torch.narrow``: elements ``start .. start + length - 1`` along ``dim``."""
    d = axis(dim, input.ndim)
    n = input.shape[d]
    if not -n <= start <= n:
        raise ValueError(f"narrow: start={start} is out of range for dim {dim} of size {n}")
    start = start % n if start < 0 else start
    if length < 0 or start + length > n:
        raise ValueError(f"narrow: start={start} + length={length} exceeds dim {dim} "
                         f"of size {n}")
    return slice_copy(input, d, start, start + length)


def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """``torch.split``: pieces of ``split_size`` (the last may be shorter) or of the
    given section sizes along ``dim``."""
    d = axis(dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0 and n > 0:
            raise ValueError(f"split: split_size must be positive, got {size}")
        sections = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != n or any(s < 0 for s in sections):
            raise ValueError(f"split: sections {sections} must be >= 0 and sum to the "
                             f"size {n} of dim {dim}")
    starts = [sum(sections[:k]) for k in range(len(sections))]
    return tuple(slice_copy(tensor, d, s, s + m) for s, m in zip(starts, sections, strict=True))


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``torch.chunk``: :func:`split` into pieces of ``ceil(n / chunks)`` (so possibly
    fewer than ``chunks`` pieces, as torch)."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    n = input.shape[axis(dim, input.ndim)]
    return split(input, max(-(-n // chunks), 1), dim)


# ---------------------------------------------------------------------------- movement


def flip(input: Tensor, dims) -> Tensor:
    """``torch.flip``: ``y[.., i, ..] = x[.., n - 1 - i, ..]`` on each axis of ``dims``."""
    flipped = axes(dims, input.ndim)

    def body(*o):
        return input[tuple(input.shape[a] - 1 - o[a] if a in flipped and input.shape[a] > 1
                           else o[a] for a in range(input.ndim))]

    return compute(input.shape, body, name=unique_name("flip"))


def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """``torch.roll``: ``y[.., i, ..] = x[.., (i - shift) % n, ..]``; without ``dims``,
    over the flattened tensor."""
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise ValueError(f"roll: without dims, shifts must be one int, got {shifts}")
        # through a 1-D copy: each step's index map inverts (one ``%`` of a flat index
        # does not, once split into digits)
        flat = roll(reshape(input, (-1,)), shifts, 0)
        return reshape(flat, input.shape)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(dims) != len(shifts):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} differ in length")
    by_axis = {a: 0 for a in range(input.ndim)}
    for s, d in zip(shifts, dims, strict=True):
        a = axis(d, input.ndim, "dims")
        by_axis[a] = (by_axis[a] + s) % max(input.shape[a], 1)

    def body(*o):
        return input[tuple((o[a] + (input.shape[a] - by_axis[a])) % input.shape[a]
                           if by_axis[a] else o[a] for a in range(input.ndim))]

    return compute(input.shape, body, name=unique_name("roll"))


def repeat(input: Tensor, *sizes) -> Tensor:
    """``Tensor.repeat``: ``y[i] = x[i % n]`` per axis, tiled ``sizes`` times (extra
    leading sizes add axes)."""
    sizes = _sizes(sizes, "sizes")
    lead = len(sizes) - input.ndim
    if lead < 0 or any(s < 0 for s in sizes):
        raise ValueError(f"repeat: sizes {sizes} must be >= 0 and at least as many as the "
                         f"{input.ndim} dims of the input")
    shape = (*sizes[:lead], *(n * s for n, s in zip(input.shape, sizes[lead:], strict=True)))

    def body(*o):
        return input[tuple(0 if n == 1 else o[a + lead] % n if sizes[a + lead] != 1
                           else o[a + lead] for a, n in enumerate(input.shape))]

    return compute(shape, body, name=unique_name("repeat"))


def tile(input: Tensor, dims: Sequence[int]) -> Tensor:
    """``torch.tile``: :func:`repeat`, with ``dims`` padded by leading ones to the rank."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


# ---------------------------------------------------------------------------- padding


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value=None) -> Tensor:
    """``F.pad``: ``pad = (left_last, right_last, left_second_last, ...)``. Modes
    ``constant`` (negative pads crop), ``reflect`` (no edge repeat), ``replicate``,
    ``circular``; the non-constant modes accept any leading axes, unlike torch's rank rules."""
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim or not all(isinstance(p, int) for p in pad):
        raise ValueError(f"pad must hold an even number (at most {2 * input.ndim}) of ints, "
                         f"got {pad!r}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular',"
                         f" got {mode!r}")
    if mode != "constant" and value not in (None, 0, 0.0):
        raise ValueError(f"pad: value={value!r} only applies to mode='constant'")
    widths = {input.ndim - 1 - k: (pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)}
    for a, (lo, hi) in widths.items():
        n = input.shape[a]
        kept = n - max(-lo, 0) - max(-hi, 0)
        if {"constant": n + lo + hi < 0, "reflect": min(lo, hi) < 0 or max(lo, hi) >= n,
                "replicate": min(lo, hi) < 0 or n == 0,
                "circular": kept <= 0 or max(lo, hi) > kept}[mode]:
            raise ValueError(f"pad: widths ({lo}, {hi}) do not fit dim {a} of size {n} in mode "
                             f"{mode!r} (reflect: 0 <= width < size; replicate: width >= 0; "
                             "circular: wrap at most once)")
    shape = tuple(n + sum(widths.get(a, (0, 0))) for a, n in enumerate(input.shape))
    name = unique_name(f"pad_{mode}")
    if mode == "constant":
        return compute(shape, lambda *o: _constant(input, widths, o, value or 0.0), name=name)
    if mode == "circular":
        return compute(shape, lambda *o: input[tuple(
            _circular(o[a], *widths.get(a, (0, 0)), n) for a, n in enumerate(input.shape))],
            name=name)
    padded = sorted(a for a, (lo, hi) in widths.items() if lo > 0 or hi > 0)
    return compute(shape, lambda *o: _edges(input, widths, list(o), padded, mode), name=name)


def _constant(input, widths, o, value):
    index, inside = [], []
    for a, n in enumerate(input.shape):
        lo, hi = widths.get(a, (0, 0))
        index.append(o[a] - lo if lo else o[a])
        if lo > 0:
            inside.append(o[a] >= lo)
        if hi > 0:
            inside.append(o[a] < lo + n)
    if not inside:
        return input[tuple(index)]
    return if_then_else(tall(inside), input[tuple(index)], value)


def _circular(i, lo, hi, n):
    """Torch crops first (negative widths), then wraps within what is left."""
    start, kept = max(-lo, 0), n - max(-lo, 0) - max(-hi, 0)
    if lo <= 0 and hi <= 0:
        return i + start if start else i
    shift = (kept - max(lo, 0)) % kept  # i - lo == i + shift (mod kept)
    wrapped = (i + shift) % kept if shift else i % kept
    return wrapped + start if start else wrapped


def _edges(input, widths, o, padded, mode, chosen=None):
    """Reflect/replicate: on each padded axis, three regions (before, inside, after), each
    an affine read; nested selects over the padded axes (at most 3^len(padded) reads)."""
    chosen = chosen or {}
    if not padded:
        return input[tuple(chosen[a] if a in chosen else o[a] - widths.get(a, (0, 0))[0]
                           for a in range(input.ndim))]
    a, rest = padded[0], padded[1:]
    lo, n, i = widths[a][0], input.shape[a], o[a]

    def at(index):
        return _edges(input, widths, o, rest, mode, {**chosen, a: index})

    if mode == "replicate":
        before, after = at(0), at(n - 1)
    else:  # reflect about the first and last element, which are not repeated
        before, after = at(lo - i), at(2 * (n - 1) + lo - i)
    return if_then_else(i < lo, before, if_then_else(i >= lo + n, after, at(i - lo)))
