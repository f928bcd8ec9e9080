"""The host contraction engine's operands: strided views, padded and phased copies, and
BLAS-ready matrix layouts (``products.py`` multiplies them).

A factor read at affine indices is a strided view of its array (``view``), or of a
zero-padded copy where it reads outside it (``factor_view``); a phased factor (a stride-2
read split into residue classes, ``contraction.phase_split``) is one padded plane per
phase (``_fill_phases``). ``arrange`` makes an operand a (batch, rows, columns) matrix BLAS
takes, copying only where no view is one. Every copy goes through ``host.copy``
(``ops.py``), which a compiled target puts on its own helper and a recorder logs.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...lower.contraction import Factor, Piece, index_range
from .ops import HostOps
from .workspace import WORKSPACE


def ranges_of(p: Piece) -> dict:
    return {v: (lo, hi) for v, lo, hi in p.ranges}


def view(buf: np.ndarray, index, ranges, origin=None, writeable=False):
    """``buf[index(vars)]`` as a strided view with one dimension per variable."""
    order: list = []
    for coeffs, _ in index:
        order.extend(v for v, _ in coeffs if v not in order)
    start = [k + sum(c * ranges[v][0] for v, c in coeffs) for coeffs, k in index]
    if origin is not None:
        start = [s - o for s, o in zip(start, origin, strict=True)]
    strides = []
    for v in order:
        strides.append(sum(c * buf.strides[m] for m, (coeffs, _) in enumerate(index)
                           for w, c in coeffs if w is v))
    base = buf[tuple(slice(s, s + 1) for s in start)] if buf.ndim else buf
    shape = [ranges[v][1] - ranges[v][0] + 1 for v in order]
    return as_strided(base, shape, strides, writeable=writeable), order


def variables(f: Factor) -> set:
    return {v for coeffs, _ in f.index for v, _ in coeffs}


def factor_view(f: Factor, array: np.ndarray, ranges, acc, cache, host: HostOps, pitch=None,
                batch=()):
    """The view of factor ``f`` over ``ranges``; None when it reads only padding. With
    ``pitch = (m, P, spans)`` (row widening, see ``contraction.widening``), the buffer is
    always padded, from ``spans`` (the index ranges before widening), dim ``m`` is ``P``
    wide and ``P`` zeroed elements of slack follow the buffer. ``batch``: the output
    variables no other factor reads (see ``_phased_layout``)."""
    key = (f.tensor, "cast")
    if array.dtype != acc:
        if key not in cache:
            cache[key] = array.astype(acc)
        array = cache[key]
    if pitch is None:
        spans = [index_range(form, ranges) for form in f.index]
        if not f.phases and all(lo >= 0 and hi < d for (lo, hi), d
                                in zip(spans, array.shape, strict=True)):
            return view(array, f.index, ranges)
        box = spans
    else:
        m, width, spans = pitch
        box = list(spans)
        box[m] = (spans[m][0], spans[m][0] + width - 1)
    key = (f.tensor, tuple(box), tuple(spans))
    buf = cache.get(key)
    if buf is None:
        shape = [hi - lo + 1 for lo, hi in box]
        slack = pitch[1] if pitch is not None else 0
        order = _phased_layout(f, batch) if f.phases else list(range(len(shape)))
        buf = WORKSPACE.get(("pad", len(cache)), [shape[d] for d in order], acc, slack)
        buf = np.transpose(buf, np.argsort(order))
        if f.phases:
            _fill_phases(buf, f.phases, array, spans, box, host)
        else:  # copy only the natural spans: beyond them (widened columns) the buffer is 0
            src, dst = _clipped(spans, box, array.shape, {})
            if src is None:
                return None
            _fill(buf, dst, array[tuple(src)], host)
        cache[key] = buf
    return view(buf, f.index, ranges, origin=[lo for lo, _ in box])


def _phased_layout(f: Factor, batch) -> list[int]:
    """The memory order of a phased factor's buffer dims: the phase dims, then the
    tensor's, but with the batch dims (read as one ``batch`` variable alone) between the
    last two, so that one channel's rows of every image of a phase plane form one matrix
    row (``_batch_layout``)."""
    count = len(f.phases)
    dims = list(range(count, len(f.index)))
    moved = [d for d in dims[:-2] if len(f.index[d][0]) == 1
             and f.index[d][0][0][0] in batch and f.index[d][0][0][1] == 1]
    rest = [d for d in dims if d not in moved]
    return [*range(count), *rest[:-1], *moved, rest[-1]]


def _clipped(spans, box, dims, steps: dict):
    """``(source slices, destination slices)`` copying the part of ``spans`` inside the
    array (of ``dims``) into a buffer over ``box``; ``(None, None)`` when none is. Dim ``d``
    in ``steps`` reads elements ``S*q + a`` for ``q`` in its span (``steps[d] = (S, a)``)."""
    src, dst = [], []
    for d, ((lo, hi), (blo, _), n) in enumerate(zip(spans, box, dims, strict=True)):
        step, a = steps.get(d, (1, 0))
        first, last = max(lo, -(a // step)), min(hi, (n - 1 - a) // step)
        if first > last:
            return None, None
        src.append(slice(step * first + a, step * last + a + 1, step))
        dst.append(slice(first - blo, last + 1 - blo))
    return src, dst


def _fill(buf: np.ndarray, dst: list, src: np.ndarray | None, host: HostOps) -> None:
    """``buf[dst] = src``, the rest of ``buf`` (its borders around ``dst``) zero; with
    ``src`` None the borders alone."""
    for m, (d, n) in enumerate(zip(dst, buf.shape, strict=True)):
        head = (slice(None),) * m
        if d.start:
            buf[(*head, slice(0, d.start))] = 0
        if d.stop < n:
            buf[(*head, slice(d.stop, n))] = 0
    if src is not None:
        host.copy(buf[tuple(dst)], src)


def _fill_phases(buf, phases, array, spans, box, host: HostOps) -> None:
    """Fill a phased factor's buffer (``contraction.phase_split``): one zero-padded plane
    per value of its phase indices (the leading dims), plane ``a`` of dim ``(m, S, o)``
    holding the elements ``S*q + a + o``. The planes' copies are one copy where they
    line up (``joined``): the copy helper then reads each source row once, not once per
    phase along it."""
    count = len(phases)
    sizes = [hi - lo + 1 for lo, hi in spans[:count]]
    pairs = []
    for values in itertools.product(*(range(lo, hi + 1) for lo, hi in spans[:count])):
        plane = buf[tuple(v - blo for v, (blo, _) in zip(values, box, strict=False))]
        steps = {m: (step, a + o) for (m, step, o), a in zip(phases, values, strict=True)}
        src, dst = _clipped(spans[count:], box[count:], array.shape, steps)
        if src is None:
            plane[...] = 0
            pairs.append(None)
        else:
            _fill(plane, dst, None, host)
            pairs.append((plane[tuple(dst)], array[tuple(src)]))
    one = joined(pairs, sizes)
    for dst_view, src_view in [one] if one is not None else filter(None, pairs):
        host.copy(dst_view, src_view)


def joined(pairs: list, sizes: list[int]):
    """``(dst, src)``: the copies ``pairs`` (one per point of a grid of ``sizes``, in
    row-major order) as one copy with the grid's dims leading (``grid_view``), or None."""
    if len(pairs) < 2 or None in pairs:
        return None
    dst = grid_view([d for d, _ in pairs], sizes, writeable=True)
    src = grid_view([s for _, s in pairs], sizes)
    return None if dst is None or src is None else (dst, src)


def start_address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def grid_view(views: list, sizes: list[int], writeable: bool = False):
    """``views`` (one per point of a grid of ``sizes``, in row-major order) as one view
    with the grid's dims leading, or None where they are not all of one shape and strides
    at addresses affine in the grid index."""
    first = views[0]
    if any(v.shape != first.shape or v.strides != first.strides for v in views):
        return None
    address = [start_address(v) for v in views]
    steps = [address[math.prod(sizes[g + 1:])] - address[0] if sizes[g] > 1 else 0
             for g in range(len(sizes))]
    for index, at in zip(itertools.product(*map(range, sizes)), address, strict=True):
        if at != address[0] + sum(i * d for i, d in zip(index, steps, strict=True)):
            return None
    return as_strided(first, (*sizes, *first.shape), (*steps, *first.strides),
                      writeable=writeable)


def phase_grid(out: np.ndarray, targets: list, min_phases: int = 2):
    """``(slots, stacked, grid)`` where the pieces' targets are the phases of a strided output
    (a stride-2 convolution's input gradient: ``dX[.., 2q + a, 2r + b]``, one piece per
    ``(a, b)``), else None. A product cannot write such a target (no dimension has unit
    stride): it would write a temporary that one copy per piece then scatters, each copy
    touching every line of the output. Instead each piece writes its slot, a C-order
    block of the workspace ``stacked`` (phases first, in the order of their offsets), and
    one copy moves that to ``grid``, the output viewed with the phases as leading dims,
    writing each line once.
    Needs two or more targets of one shape and strides, no unit stride, starting at
    offsets that form a grid ``o + i s1 + j s2`` (one or two phase dims); at least
    ``min_phases`` of them (``Options.min_phases``)."""
    if len(targets) < min_phases:
        return None
    first = targets[0]
    if first.size == 0 or first.ndim == 0 or min(map(abs, first.strides)) <= out.itemsize:
        return None
    order = sorted(range(len(targets)), key=lambda k: start_address(targets[k]))
    rel = [start_address(targets[k]) - start_address(targets[order[0]]) for k in order]
    run = next((i for i, r in enumerate(rel) if r != i * rel[1]), len(rel))  # inner phases
    if rel[1] == 0 or len(rel) % run:
        return None
    grid = grid_view([targets[k] for k in order], [len(rel) // run, run], writeable=True)
    if grid is None:
        return None
    stacked = WORKSPACE.get("phases", grid.shape, out.dtype)
    flat = stacked.reshape(-1, *first.shape)
    slots = [flat[order.index(k)] for k in range(len(targets))]
    return slots, stacked, grid


def matrix_view(a, vs, prefix, rows, cols, ext):
    """``a`` (dims ``vs``) as a BLAS-ready view (prefix..., prod(rows), prod(cols)), or
    None when its layout allows none."""
    perm = [vs.index(v) for v in (*prefix, *rows, *cols) if v in vs]
    shape = [ext[v] if v in vs else 1 for v in prefix]
    shape += [math.prod(ext[v] for v in rows), math.prod(ext[v] for v in cols)]
    try:
        m = np.reshape(np.transpose(a, perm), shape, copy=False)
    except ValueError:
        return None
    return m if c_blasable(m) or c_blasable(np.swapaxes(m, -1, -2)) else None


def arrange(a, vs, prefix, rows, cols, ext, role, host: HostOps, overlap=None):
    """``a`` (dims ``vs``) as (prefix..., prod(rows), prod(cols)), BLAS-ready: a view when
    the layout allows, else a copy into workspace ``role``: the overlap copy where ``a``
    reads both variables of ``overlap`` (``_overlap_layout``), else one made in whichever
    of (rows, cols) and (cols, rows) copies with the longer inner rows."""
    m = matrix_view(a, vs, prefix, rows, cols, ext)
    if m is not None:
        return m
    if overlap is not None and overlap[0] in vs:
        m = _overlap_copy(a, vs, prefix, rows, cols, ext, role, host, *overlap)
        if m is not None:
            return m
    perm = [vs.index(v) for v in (*prefix, *rows, *cols) if v in vs]
    shape = [ext[v] if v in vs else 1 for v in prefix]
    shape += [math.prod(ext[v] for v in rows), math.prod(ext[v] for v in cols)]
    t = np.transpose(a, perm)
    full = [ext[v] if v in vs else 1 for v in (*prefix, *rows, *cols)]
    t = t.reshape(full) if t.ndim != len(full) else t
    npre = len(prefix)

    def run(first, group):
        """Elements per innermost copy row if ``group`` goes last (dims merge while the
        source strides nest)."""
        n = 1
        for i in reversed(range(first, first + len(group))):
            n *= t.shape[i]
            if i == first or t.strides[i - 1] != t.shape[i] * t.strides[i]:
                break
        return n

    if run(npre, rows) > run(npre + len(rows), cols):  # copy as (cols, rows), pass transposed
        order = list(range(npre)) + [npre + len(rows) + i for i in range(len(cols))] + [
            npre + i for i in range(len(rows))]
        tt = np.transpose(t, order)
        buf = WORKSPACE.get(role, tt.shape, t.dtype)
        host.copy(buf, tt)
        return np.swapaxes(buf.reshape(shape[:-2] + [shape[-1], shape[-2]]), -1, -2)
    buf = WORKSPACE.get(role, t.shape, t.dtype)
    host.copy(buf, t)
    return buf.reshape(shape)


def _overlap_copy(a, vs, prefix, rows, cols, ext, role, host: HostOps, o, k):
    """``a`` as ``arrange`` returns it, through a copy over the prefix without ``o``, the
    free side, and the reduced side with ``k`` extended to ``u = o + k`` (``ext(o) +
    ext(k) - 1`` values; ``_overlap_layout``): C-ordered so that the reduced side merges
    into one dimension, ``o`` and ``k`` both read at ``u``'s stride. (None, were that copy
    no matrix after all: ``arrange`` then copies as it otherwise does.)"""
    reduced, free = (rows, cols) if k in rows else (cols, rows)
    order = [v for v in (*prefix, *free, *reduced) if v in vs and v is not o]
    stride = dict(zip(vs, a.strides, strict=True))
    shape = [ext[v] + ext[o] - 1 if v is k else ext[v] for v in order]
    buf = WORKSPACE.get(role, shape, a.dtype)
    host.copy(buf, as_strided(a, shape, [stride[v] for v in order]))
    at = dict(zip(order, buf.strides, strict=True))
    at[o] = at[k]
    return matrix_view(as_strided(buf, a.shape, [at[v] for v in vs]), vs, prefix, rows,
                        cols, ext)


def result_view(target, out_vars, prefix, first, second, ext) -> np.ndarray | None:
    """``target`` as a (batch, rows, columns) stack of C-order matrices, rows over the
    variables ``first`` and columns over ``second``, or None when it is not one."""
    perm = [out_vars.index(v) for v in prefix + first + second]
    shape = [ext[v] for v in prefix] + [math.prod(ext[v] for v in first),
                                         math.prod(ext[v] for v in second)]
    try:
        view = np.reshape(np.transpose(target, perm), shape, copy=False)
    except ValueError:
        return None
    return view if c_blasable(view) else None


def c_blasable(m: np.ndarray) -> bool:
    rows, cols = m.shape[-2:]
    s_row, s_col = m.strides[-2:]
    size = m.itemsize
    return s_col == size and s_row % size == 0 and s_row // size >= cols and s_row > 0


class PaddingReads:
    """``zero(offsets)``: True when, with each variable given at ``offsets`` from the
    start of its range (the others over their ranges), some unphased factor of piece ``p``
    reads only outside its tensor, i.e. padding (``contraction.phase_split``'s extra kernel
    offsets). Equal for one piece and ranges (a key of ``_LOOPED``)."""

    def __init__(self, p: Piece, ranges: dict):
        self.p, self.ranges = p, ranges
        self.key = (id(p), tuple(ranges.items()))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, PaddingReads) and self.key == other.key and self.p is other.p

    def __call__(self, offsets: dict) -> bool:
        for f in self.p.factors:
            if f.phases:
                continue
            for (coeffs, c), n in zip(f.index, f.tensor.shape, strict=True):
                lo = hi = c
                for v, cv in coeffs:
                    a, b = self.ranges[v]
                    if v in offsets:
                        a = b = a + offsets[v]
                    lo, hi = lo + min(cv * a, cv * b), hi + max(cv * a, cv * b)
                if hi < 0 or lo > n - 1:
                    return True
        return False
