"""NumPy execution of each kernel form of a plan.

general      ``evaluate_compute`` (the reference semantics)
contraction  per piece: zero-pad each read to the index range it needs, view it with
             ``as_strided`` (one dimension per variable), contract two operands with one
             ``np.matmul`` laid out as batch x M x K @ batch x K x N (written straight into
             the output when its layout allows), more operands with ``np.einsum``;
             pieces that are the phases of a strided output (residue classes) write one
             workspace that one copy interleaves into the output (``_phase_grid``)
scatter      evaluate value and target indices over the grid (chunked), then a
             deterministic ``np.bincount`` (floats, accumulated in float64) or ``np.add.at``
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..lower.contraction import MIN_TERM_DEPTH, Contraction, Factor, Piece, index_range
from ..lower.scatter import Scatter
from .numpy_eval import Evaluator

GRID_LIMIT = 1 << 22
PARALLEL_COPY_MIN = 1 << 18  # elements; smaller copies run on the calling thread
BLOCK_ELEMENTS = 1 << 21  # a laid-out GEMM operand larger than this is made in blocks
MIN_PHASES = 2  # the fewest pieces written through one interleaving copy (_phase_grid)
MAX_TERMS = 64  # a looped reduction's products (see _looped), each at least MIN_TERM_DEPTH deep
# the largest overlap copy (_overlap_layout), made in parts beyond (_overlap_parts); a
# recorded contraction keeps at most 32 MiB of workspace (backends/cpu/replay.py), the
# operand's zero-padded copy with it
OVERLAP_BYTES = 24 << 20


def run_kernel(kernel, arrays, evaluate_compute):
    if kernel.kind == "general":
        body_of = getattr(kernel.detail, "body_of", kernel.tensor)
        return evaluate_compute(body_of, arrays)
    if kernel.kind == "contraction":
        return run_contraction(kernel.detail, arrays)
    if kernel.kind == "scatter":
        return run_scatter(kernel.detail, arrays, kernel.tensor.name)
    raise NotImplementedError(kernel.kind)


# contractions ---------------------------------------------------------------------------


def run_contraction(c: Contraction, arrays: dict) -> np.ndarray:
    acc = np.dtype(c.dtype)
    empty = EMPTY.get()
    if empty is None:
        out = (np.empty if c.covers else np.zeros)(c.shape, dtype=acc)
    else:
        out = empty(c.shape, acc.name)
        if not c.covers:
            out.fill(0)
    cache: dict = {}
    targets = [_view(out, p.out_index, _ranges(p), writeable=True)[0] for p in c.pieces]
    phases = _phase_grid(out, targets) if c.disjoint else None
    if phases is not None:  # each piece's product written whole, then one interleaving copy
        targets, stacked, grid = phases
    for piece, target in zip(c.pieces, targets, strict=True):
        _run_piece(piece, arrays, target, not c.disjoint, cache)
    if phases is not None:
        _copy(grid, stacked)
    return out if c.out_dtype == c.dtype else out.astype(c.out_dtype)


def _ranges(p: Piece) -> dict:
    return {v: (lo, hi) for v, lo, hi in p.ranges}


def _phase_grid(out: np.ndarray, targets: list):
    """``(slots, stacked, grid)`` where the pieces' targets are the phases of a strided output
    (a stride-2 convolution's input gradient: ``dX[.., 2q + a, 2r + b]``, one piece per
    ``(a, b)``), else None. A product cannot write such a target (no dimension has unit
    stride): it would write a temporary that one copy per piece then scatters, each copy
    touching every line of the output. Instead each piece writes its slot, a C-order
    block of the workspace ``stacked`` (phases first, in the order of their offsets), and
    one copy moves that to ``grid``, the output viewed with the phases as leading dims,
    writing each line once.
    Needs two or more targets of one shape and strides, no unit stride, starting at
    offsets that form a grid ``o + i s1 + j s2`` (one or two phase dims)."""
    if len(targets) < MIN_PHASES:
        return None
    first = targets[0]
    if first.size == 0 or first.ndim == 0 or min(map(abs, first.strides)) <= out.itemsize:
        return None
    order = sorted(range(len(targets)), key=lambda k: _address(targets[k]))
    rel = [_address(targets[k]) - _address(targets[order[0]]) for k in order]
    run = next((i for i, r in enumerate(rel) if r != i * rel[1]), len(rel))  # inner phases
    if rel[1] == 0 or len(rel) % run:
        return None
    grid = _grid_view([targets[k] for k in order], [len(rel) // run, run], writeable=True)
    if grid is None:
        return None
    stacked = _WORKSPACE.get("phases", grid.shape, out.dtype)
    flat = stacked.reshape(-1, *first.shape)
    slots = [flat[order.index(k)] for k in range(len(targets))]
    return slots, stacked, grid


def _run_piece(p: Piece, arrays: dict, target: np.ndarray, accumulate: bool,
               cache: dict) -> None:
    ranges = _ranges(p)
    pitch: dict = {}
    if p.widen is not None:  # see contraction.widening
        x, width, dims = p.widen
        pitch = {k: (m, width, [index_range(form, ranges) for form in p.factors[k].index])
                 for k, m in dims}
        ranges[x] = (ranges[x][0], ranges[x][0] + width - 1)
    ext = {v: hi - lo + 1 for v, (lo, hi) in ranges.items()}
    ops = []
    for k, f in enumerate(p.factors):
        batch = (set(p.out_vars).difference(*(_variables(g) for g in p.factors if g is not f))
                 if f.phases else ())  # (only a phased factor's layout uses it)
        op = _factor_view(f, arrays[f.tensor], ranges, target.dtype, cache, pitch.get(k), batch)
        if op is None:  # reads only padding: the piece is zero
            if not accumulate:
                _untraceable("a piece that reads only padding")
                target[...] = 0
            return
        ops.append(op)
    zero = _PaddingReads(p, ranges)
    _contract(ops, list(p.out_vars), target, ext, p.red_vars, p.scale, accumulate, zero)


def _view(buf: np.ndarray, index, ranges, origin=None, writeable=False):
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


def _variables(f: Factor) -> set:
    return {v for coeffs, _ in f.index for v, _ in coeffs}


def _factor_view(f: Factor, array: np.ndarray, ranges, acc, cache, pitch=None, batch=()):
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
            return _view(array, f.index, ranges)
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
        buf = _WORKSPACE.get(("pad", len(cache)), [shape[d] for d in order], acc, slack)
        buf = np.transpose(buf, np.argsort(order))
        if f.phases:
            _fill_phases(buf, f.phases, array, spans, box)
        else:  # copy only the natural spans: beyond them (widened columns) the buffer is 0
            src, dst = _clipped(spans, box, array.shape, {})
            if src is None:
                return None
            _fill(buf, dst, array[tuple(src)])
        cache[key] = buf
    return _view(buf, f.index, ranges, origin=[lo for lo, _ in box])


def _phased_layout(f: Factor, batch) -> list[int]:
    """The memory order of a phased factor's buffer dims: the phase dims, then the
    tensor's, but with the batch dims (read as one ``batch`` variable alone) between the
    last two, so that one channel's rows of every image of a phase plane form one matrix
    row (``_batch_layouts``)."""
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


def _fill(buf: np.ndarray, dst: list, src: np.ndarray | None) -> None:
    """``buf[dst] = src``, the rest of ``buf`` (its borders around ``dst``) zero; with
    ``src`` None the borders alone."""
    for m, (d, n) in enumerate(zip(dst, buf.shape, strict=True)):
        head = (slice(None),) * m
        if d.start:
            buf[(*head, slice(0, d.start))] = 0
        if d.stop < n:
            buf[(*head, slice(d.stop, n))] = 0
    if src is not None:
        _copy(buf[tuple(dst)], src)


def _fill_phases(buf, phases, array, spans, box) -> None:
    """Fill a phased factor's buffer (``contraction.phase_split``): one zero-padded plane
    per value of its phase indices (the leading dims), plane ``a`` of dim ``(m, S, o)``
    holding the elements ``S*q + a + o``. The planes' copies are one copy where they
    line up (``_joined``): the copy helper then reads each source row once, not once per
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
            _fill(plane, dst, None)
            pairs.append((plane[tuple(dst)], array[tuple(src)]))
    joined = _joined(pairs, sizes)
    for dst_view, src_view in [joined] if joined is not None else filter(None, pairs):
        _copy(dst_view, src_view)


def _joined(pairs: list, sizes: list[int]):
    """``(dst, src)``: the copies ``pairs`` (one per point of a grid of ``sizes``, in
    row-major order) as one copy with the grid's dims leading (``_grid_view``), or None."""
    if len(pairs) < 2 or None in pairs:
        return None
    dst = _grid_view([d for d, _ in pairs], sizes, writeable=True)
    src = _grid_view([s for _, s in pairs], sizes)
    return None if dst is None or src is None else (dst, src)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _grid_view(views: list, sizes: list[int], writeable: bool = False):
    """``views`` (one per point of a grid of ``sizes``, in row-major order) as one view
    with the grid's dims leading, or None where they are not all of one shape and strides
    at addresses affine in the grid index."""
    first = views[0]
    if any(v.shape != first.shape or v.strides != first.strides for v in views):
        return None
    address = [_address(v) for v in views]
    steps = [address[math.prod(sizes[g + 1:])] - address[0] if sizes[g] > 1 else 0
             for g in range(len(sizes))]
    for index, at in zip(itertools.product(*map(range, sizes)), address, strict=True):
        if at != address[0] + sum(i * d for i, d in zip(index, steps, strict=True)):
            return None
    return as_strided(first, (*sizes, *first.shape), (*steps, *first.strides),
                      writeable=writeable)


def _contract(ops, out_vars, target, ext, red_vars, scale, accumulate, zero=None):
    present = set().union(*(vs for _, vs in ops))
    scale *= math.prod(ext[v] for v in red_vars if v not in present)
    summed = []
    for k, (a, vs) in enumerate(ops):
        others = set(out_vars).union(*(set(w) for j, (_, w) in enumerate(ops) if j != k))
        drop = [i for i, v in enumerate(vs) if v not in others]
        if drop:
            a = a.sum(axis=tuple(drop))
            vs = [v for v in vs if v in others]
        summed.append((a, vs))
    if len(summed) == 2:
        _matmul(summed, out_vars, target, ext, scale, accumulate, zero)
        return
    if len(summed) == 1:
        result, rvars = summed[0]
    else:
        letters = {v: i for i, v in enumerate(present)}
        args = []
        for a, vs in summed:
            args += [a, [letters[v] for v in vs]]
        rvars = [v for v in out_vars if v in present]
        result = np.einsum(*args, [letters[v] for v in rvars], optimize="greedy")
    if scale != 1:
        result = result * np.asarray(scale, dtype=target.dtype)
    _write(target, out_vars, result, rvars, accumulate)


def _write(target, out_vars, result, rvars, accumulate):
    perm = [rvars.index(v) for v in out_vars if v in rvars]
    result = np.transpose(result, perm)
    result = result.reshape([result.shape[perm.index(rvars.index(v))] if v in rvars else 1
                             for v in out_vars])
    result = result[tuple(slice(0, n) for n in target.shape)]  # drop widened columns
    if accumulate:
        _untraceable("an accumulated product")
        target += result
    else:
        _copy(target, result)


def _matmul(ops, out_vars, target, ext, scale, accumulate, zero=None):
    (a, av), (b, bv) = ops
    sa, sb = set(av), set(bv)
    outs = [v for v in out_vars if v in sa or v in sb]
    stride = {v: abs(target.strides[i]) for i, v in enumerate(out_vars)}
    order = sorted(outs, key=lambda v: -stride[v])

    def side(v):
        return "ab" if v in sa and v in sb else ("a" if v in sa else "b")

    j = len(order)
    if order and side(order[-1]) != "ab":
        n_side = side(order[-1])
        while j > 0 and side(order[j - 1]) == n_side:
            j -= 1
        i = j
        while i > 0 and side(order[i - 1]) not in ("ab", n_side):
            i -= 1
    else:
        n_side, i = "b", j
    prefix, m_vars, n_vars = order[:i], order[i:j], order[j:]
    (x, xv), (y, yv) = ((a, av), (b, bv)) if n_side == "b" else ((b, bv), (a, av))
    k_vars = [v for v in xv if v in yv and v not in outs]
    big, big_vars = (x, xv) if x.size >= y.size else (y, yv)
    k_vars.sort(key=lambda v: -abs(big.strides[big_vars.index(v)]))
    looped, kept, prefix, m_vars, n_vars, overlap = _looped(x, xv, y, yv, prefix, m_vars,
                                                            n_vars, k_vars, ext, zero)
    k_vars = [v for v in k_vars if v not in looped]
    layout = (looped, kept, prefix, m_vars, n_vars, k_vars, overlap)
    # block along the outermost batch axis so that each laid-out operand stays in cache
    size = max(math.prod(ext[v] for v in (*prefix, *m_vars, *k_vars) if v in xv),
               math.prod(ext[v] for v in (*prefix, *k_vars, *n_vars) if v in yv))
    # (or, with no batch axis, along the outermost reduced axis, adding the blocks up)
    lead = prefix[0] if prefix else (k_vars[0] if k_vars else None)
    blocks = 1 if lead is None or looped or overlap else min(ext[lead], -(-size // BLOCK_ELEMENTS))
    if blocks <= 1:
        _gemm(x, xv, y, yv, layout, out_vars, target, ext, scale, accumulate)
        return
    step = -(-ext[lead] // blocks)
    for lo in range(0, ext[lead], step):
        cut = slice(lo, min(lo + step, ext[lead]))
        xs = x[(slice(None),) * xv.index(lead) + (cut,)] if lead in xv else x
        ys = y[(slice(None),) * yv.index(lead) + (cut,)] if lead in yv else y
        sub = {**ext, lead: cut.stop - cut.start}
        if lead in out_vars:
            ts = target[(slice(None),) * out_vars.index(lead) + (cut,)]
            _gemm(xs, xv, ys, yv, layout, out_vars, ts, sub, scale, accumulate)
        else:
            _gemm(xs, xv, ys, yv, layout, out_vars, target, sub, scale, accumulate or lo > 0)


_LOOPED: dict = {}  # _looped's choices by operand layout and variables


def _looped(x, xv, y, yv, prefix, m_vars, n_vars, k_vars, ext, zero=None):
    """``_choose_loop``, remembered per layout (it tries tens of views)."""
    key = (x.shape, x.strides, y.shape, y.strides, tuple(xv), tuple(yv), tuple(prefix),
           tuple(m_vars), tuple(n_vars), tuple(k_vars), tuple(ext[v] for v in (*xv, *yv)),
           zero)
    choice = _LOOPED.get(key)
    if choice is None:
        if len(_LOOPED) >= 4096:
            _LOOPED.clear()
        choice = _LOOPED[key] = _choose_loop(x, xv, y, yv, prefix, m_vars, n_vars, k_vars,
                                             ext, zero)
    return choice


def _choose_loop(x, xv, y, yv, prefix, m_vars, n_vars, k_vars, ext, zero=None):
    """``(looped, kept, prefix, m_vars, n_vars, overlap)``: the reduced variables to run as
    a sum of products, one per value, and the indices of the values whose products are
    kept (none: ``[]`` twice and the layout as given); ``overlap``: None, or the pair of
    variables that the larger operand's copy merges (``_overlap_layout``).

    A convolution's input read ``X[n, c, h + r, w + s]`` is no matrix over ``(c, r, s) x
    (h, w)``: laying it out copies it nine times (im2col). For each fixed ``(r, s)`` it
    is one, a shifted view ``(c) x (h, w)`` (with the rows widened, see
    ``contraction.widening``). So where the larger operand needs a copy with every reduced
    variable in K, and is a view with some of them left out (at most ``MAX_TERMS``
    products, each at least ``MIN_TERM_DEPTH`` deep; of those, the fewest multiply-adds,
    products that read only padding skipped), those are looped: each BLAS thread
    adds the products of its block of the output up (``gemm.py``). A batch variable only
    the larger operand reads may join its free dimension there (``_batch_layouts``).
    Where no such loop exists, ``_overlap_layout``'s copy replaces im2col's if it can."""
    sides = sorted([(x, xv, True), (y, yv, False)], key=lambda s: -s[0].size)
    big, bv, left = sides[0]
    best, unchanged = None, ([], [], prefix, m_vars, n_vars, None)
    if len(k_vars) < 2 or _matrix_view(big, bv, prefix, m_vars if left else n_vars, k_vars,
                                       ext) is not None:
        return unchanged
    for r in range(1, len(k_vars)):
        for loop in map(list, itertools.combinations(k_vars, r)):
            rest = [v for v in k_vars if v not in loop]
            depth = math.prod(ext[v] for v in rest)
            if math.prod(ext[v] for v in loop) > MAX_TERMS or depth < MIN_TERM_DEPTH:
                continue
            for pre, free in _batch_layouts(prefix, m_vars if left else n_vars,
                                            yv if left else xv):
                if _matrix_view(big, bv, loop + pre, free, rest, ext) is not None:
                    kept = _live_terms(loop, ext, zero)
                    if best is None or (len(kept) * depth, len(kept)) < best[0]:
                        layout = (pre, free, n_vars) if left else (pre, m_vars, free)
                        best = (len(kept) * depth, len(kept)), (loop, kept, *layout, None)
                    break
    if best is None:
        return _overlap_layout(big, bv, left, prefix, m_vars, n_vars, k_vars, ext,
                               zero) or unchanged
    return best[1]


def _overlap_layout(big, bv, left, prefix, m_vars, n_vars, k_vars, ext, zero):
    """A layout that copies the larger operand less than im2col does, or None.

    A weight gradient ``dW[k, c, r, s] = sum_{n, h, w} dY[n, k, h, w] X[n, c, h + r, w + s]``
    reads ``X`` with ``r`` and ``h`` at one stride. Its im2col copy holds ``X`` nine times
    over ``(c, r, s) x (h, w)``. Copy it instead over ``(n, c, s, u, w)``, ``u = h + r``
    (``ext(h) + ext(r) - 1`` rows, three copies): the kernel row ``r`` is then an offset
    into the copy, a batch of products ``(c, s) x (h, w)``, and the images ``n`` (the
    reduced variables outside ``h``) are looped as terms. The variables: ``o`` of the
    operand's free side and ``k`` reduced, at one nonzero stride (an address ``o S + k S =
    (o + k) S``: the copy reads only what the view reads). Of those pairs, the smallest
    copy, made in parts of at most ``OVERLAP_BYTES`` along the first looped variable
    (``_overlap_parts``); none with a batch prefix already (its dims would not merge into
    one batch of products). Returns ``(looped, kept, [o], m_vars, n_vars,
    (o, k))``, ``o`` left out of its side."""
    if prefix:
        return None
    free = m_vars if left else n_vars
    stride = dict(zip(bv, big.strides, strict=True))
    best = None
    for o in free:
        for at, k in enumerate(k_vars):
            if stride[o] != stride[k] or stride[o] == 0:
                continue
            loop, depth = k_vars[:at], math.prod(ext[v] for v in k_vars[at:])
            if math.prod(ext[v] for v in loop) > MAX_TERMS or depth < MIN_TERM_DEPTH:
                continue
            size = _overlap_bytes(big, bv, ext, o, k)
            part = size // ext[loop[0]] if loop else size  # (made in parts: _overlap_parts)
            if part <= OVERLAP_BYTES and (best is None or size < best[0]):
                best = size, o, k, loop
    if best is None:
        return None
    _, o, k, loop = best
    rest = [v for v in free if v is not o]
    kept = _live_terms(loop, ext, zero)
    return (loop, kept, [o], rest, n_vars, (o, k)) if left else (
        loop, kept, [o], m_vars, rest, (o, k))


def _live_terms(looped: list, ext: dict, zero) -> list[tuple]:
    """The indices of the looped variables' values where no factor reads only padding."""
    return [v for v in np.ndindex(*(ext[u] for u in looped))
            if zero is None or not zero(dict(zip(looped, v, strict=True)))]


def _batch_layouts(prefix, free, other):
    """``(prefix, free)`` as given, then with each batch variable that ``other`` (the
    other operand's variables) lacks moved into ``free`` at each position: a phased
    input stores the batch between its rows and columns (``_phased_layout``), so that one
    product per term covers every image, where at stride 2 one image's rows are short."""
    yield prefix, free
    for v in prefix:
        if v not in other:
            rest = [u for u in prefix if u is not v]
            for at in range(len(free) + 1):
                yield rest, [*free[:at], v, *free[at:]]


def _gemm(x, xv, y, yv, layout, out_vars, target, ext, scale, accumulate):
    """``target (+)= scale * x @ y`` laid out as (prefix, M, K) @ (prefix, K, N), summed
    over the ``kept`` values of the ``looped`` variables (``_choose_loop``), in parts where
    an overlap copy would be too large (``_overlap_parts``), each added to the first."""
    looped, kept, prefix, m_vars, n_vars, k_vars, overlap = layout
    matmul = MATMUL.get() or product_sum
    rvars = prefix + m_vars + n_vars
    # the target itself as the product's (batch, M, N) result, or as its transpose
    widened = any(ext[v] != n for v, n in zip(out_vars, target.shape, strict=True))
    whole = len(rvars) == len(out_vars) and not widened
    plain = _result_view(target, out_vars, prefix, m_vars, n_vars, ext) if whole else None
    turned = _result_view(target, out_vars, prefix, n_vars, m_vars, ext) if whole else None
    result = swap = direct = None
    for part, (xp, yp, part_kept, sub) in enumerate(
            _overlap_parts(x, xv, y, yv, looped, kept, overlap, ext)):
        xm = _arrange(xp, xv, looped + prefix, m_vars, k_vars, sub, "x", overlap)
        ym = _arrange(yp, yv, looped + prefix, k_vars, n_vars, sub, "y", overlap)
        if scale != 1:
            s = np.asarray(scale, dtype=target.dtype)
            if xm.size <= ym.size:
                xm = xm * s
            else:
                ym = ym * s
        if part == 0:
            # else a small result from a right operand laid out transposed (weight
            # gradients): OpenBLAS runs the transposed product, with that operand on the
            # left, about 25% faster
            (rows, inner), cols = xm.shape[-2:], ym.shape[-1]
            swap = (turned is not None or plain is None and _c_blasable(xm)
                    and not _c_blasable(ym) and 8 * rows * cols <= inner * max(rows, cols))
            direct = turned if swap else plain  # (accumulating: BLAS adds to it, beta = 1)
        if swap:
            xm, ym = np.swapaxes(ym, -1, -2), np.swapaxes(xm, -1, -2)
        xs, ys = _split_terms(xm, looped, part_kept), _split_terms(ym, looped, part_kept)
        if direct is not None:
            matmul(xs, ys, out=direct, accumulate=accumulate or part > 0)
        elif result is None:
            result = matmul(xs, ys)
        else:
            matmul(xs, ys, out=result, accumulate=True)
    if direct is not None:
        return
    if swap:
        result = np.swapaxes(result, -1, -2)
    result = result.reshape([ext[v] for v in rvars])
    _write(target, out_vars, result, rvars, accumulate)


def _overlap_parts(x, xv, y, yv, looped, kept, overlap, ext):
    """``(x, y, kept, ext)`` of each part of a product: the whole, or, where the overlap
    copy (``_overlap_layout``) would exceed ``OVERLAP_BYTES``, parts along the first looped
    variable (a weight gradient's images) whose copies do not, one after the other into
    the same workspace."""
    if overlap is None or not looped:
        yield x, y, kept, ext
        return
    lead = looped[0]
    big, bv = (x, xv) if overlap[0] in xv else (y, yv)
    step = max(1, OVERLAP_BYTES // (_overlap_bytes(big, bv, ext, *overlap) // ext[lead]))
    if step >= ext[lead]:
        yield x, y, kept, ext
        return
    for lo in range(0, ext[lead], step):
        hi = min(lo + step, ext[lead])
        part = [(i - lo, *rest) for i, *rest in kept if lo <= i < hi]
        if part:
            x_part, y_part = (a[(slice(None),) * vs.index(lead) + (slice(lo, hi),)]
                              if lead in vs else a for a, vs in ((x, xv), (y, yv)))
            yield x_part, y_part, part, {**ext, lead: hi - lo}


def _overlap_bytes(a, vs, ext, o, k) -> int:
    """The size of operand ``a``'s overlap copy (``_overlap_copy``)."""
    rest = math.prod(ext[v] for v in vs if v is not o and v is not k)
    return a.itemsize * rest * (ext[k] + ext[o] - 1)


def _result_view(target, out_vars, prefix, first, second, ext) -> np.ndarray | None:
    """``target`` as a (batch, rows, columns) stack of C-order matrices, rows over the
    variables ``first`` and columns over ``second``, or None when it is not one."""
    perm = [out_vars.index(v) for v in prefix + first + second]
    shape = [ext[v] for v in prefix] + [math.prod(ext[v] for v in first),
                                         math.prod(ext[v] for v in second)]
    try:
        view = np.reshape(np.transpose(target, perm), shape, copy=False)
    except ValueError:
        return None
    return view if _c_blasable(view) else None


def _split_terms(m: np.ndarray, looped: list, kept: list):
    """``m`` itself, or with ``looped`` leading dimensions the list of its matrices'
    stacks at the ``kept`` indices, one per term."""
    return [m[index] for index in kept] if looped else m


class _PaddingReads:
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
        return isinstance(other, _PaddingReads) and self.key == other.key and self.p is other.p

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


def _matrix_view(a, vs, prefix, rows, cols, ext):
    """``a`` (dims ``vs``) as a BLAS-ready view (prefix..., prod(rows), prod(cols)), or
    None when its layout allows none."""
    perm = [vs.index(v) for v in (*prefix, *rows, *cols) if v in vs]
    shape = [ext[v] if v in vs else 1 for v in prefix]
    shape += [math.prod(ext[v] for v in rows), math.prod(ext[v] for v in cols)]
    try:
        m = np.reshape(np.transpose(a, perm), shape, copy=False)
    except ValueError:
        return None
    return m if _c_blasable(m) or _c_blasable(np.swapaxes(m, -1, -2)) else None


def _arrange(a, vs, prefix, rows, cols, ext, role, overlap=None):
    """``a`` (dims ``vs``) as (prefix..., prod(rows), prod(cols)), BLAS-ready: a view when
    the layout allows, else a copy into workspace ``role``: the overlap copy where ``a``
    reads both variables of ``overlap`` (``_overlap_layout``), else one made in whichever
    of (rows, cols) and (cols, rows) copies with the longer inner rows."""
    m = _matrix_view(a, vs, prefix, rows, cols, ext)
    if m is not None:
        return m
    if overlap is not None and overlap[0] in vs:
        m = _overlap_copy(a, vs, prefix, rows, cols, ext, role, *overlap)
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
        buf = _WORKSPACE.get(role, tt.shape, t.dtype)
        _copy(buf, tt)
        return np.swapaxes(buf.reshape(shape[:-2] + [shape[-1], shape[-2]]), -1, -2)
    buf = _WORKSPACE.get(role, t.shape, t.dtype)
    _copy(buf, t)
    return buf.reshape(shape)


def _overlap_copy(a, vs, prefix, rows, cols, ext, role, o, k):
    """``a`` as ``_arrange`` returns it, through a copy over the prefix without ``o``, the
    free side, and the reduced side with ``k`` extended to ``u = o + k`` (``ext(o) +
    ext(k) - 1`` values; ``_overlap_layout``): C-ordered so that the reduced side merges
    into one dimension, ``o`` and ``k`` both read at ``u``'s stride. (None, were that copy
    no matrix after all: ``_arrange`` then copies as it otherwise does.)"""
    reduced, free = (rows, cols) if k in rows else (cols, rows)
    order = [v for v in (*prefix, *free, *reduced) if v in vs and v is not o]
    stride = dict(zip(vs, a.strides, strict=True))
    shape = [ext[v] + ext[o] - 1 if v is k else ext[v] for v in order]
    buf = _WORKSPACE.get(role, shape, a.dtype)
    _copy(buf, as_strided(a, shape, [stride[v] for v in order]))
    at = dict(zip(order, buf.strides, strict=True))
    at[o] = at[k]
    return _matrix_view(as_strided(buf, a.shape, [at[v] for v in vs]), vs, prefix, rows,
                        cols, ext)


class _Workspace(threading.local):
    """Scratch buffers reused from call to call (per thread), one per role, grown to the
    largest request: fresh multi-megabyte arrays cost a page fault per 4 KiB."""

    def __init__(self):
        self.buffers: dict = {}

    def get(self, role, shape, dtype, slack: int = 0) -> np.ndarray:
        """A C-contiguous array; ``slack`` zeroed elements follow it in memory."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        total = nbytes + slack * dtype.itemsize
        buf = self.buffers.get(role)
        if buf is None or buf.nbytes < total:
            buf = np.empty(max(total, 1), dtype=np.uint8)
            self.buffers[role] = buf
        if slack:
            buf[nbytes:total] = 0
        return buf[:nbytes].view(dtype).reshape(shape)


_WORKSPACE = _Workspace()


def workspace_buffers() -> list[np.ndarray]:
    """This thread's scratch buffers (the roots the roles' arrays are views of)."""
    return list(_WORKSPACE.buffers.values())


def release_workspace(root: np.ndarray) -> None:
    """Hand this thread's scratch buffer ``root`` over to the caller: its role gets a new
    buffer on its next use (a recorded contraction keeps the bytes its calls wrote)."""
    for role, buf in list(_WORKSPACE.buffers.items()):
        if buf is root:
            del _WORKSPACE.buffers[role]


def clear_workspace() -> None:
    """Release this thread's scratch buffers."""
    _WORKSPACE.buffers.clear()


def terms(x) -> list[np.ndarray]:
    """The terms of a product operand: ``x`` itself, or the arrays of a list."""
    return list(x) if isinstance(x, list | tuple) else [x]


def product_sum(a, b, out: np.ndarray | None = None, accumulate: bool = False) -> np.ndarray:
    """``np.matmul(a, b, out=out)``; with lists of terms (a looped reduction, see
    ``_looped``), the sum of their products; ``accumulate``: added to ``out``."""
    a_terms, b_terms = terms(a), terms(b)
    if accumulate:
        out += product_sum(a, b)
        return out
    out = np.matmul(a_terms[0], b_terms[0], out=out)
    for x, y in zip(a_terms[1:], b_terms[1:], strict=True):
        out += np.matmul(x, y)
    return out


def _c_blasable(m: np.ndarray) -> bool:
    rows, cols = m.shape[-2:]
    s_row, s_col = m.strides[-2:]
    size = m.itemsize
    return s_col == size and s_row % size == 0 and s_row // size >= cols and s_row > 0


def _threads() -> int:
    """Threads for large copies: ``TEGRAD_COPY_THREADS``, default 1. Splitting copies
    measured slower on a 2-vCPU machine, where the BLAS worker threads still spin on the
    cores after each GEMM; machines with cores to spare may gain."""
    value = os.environ.get("TEGRAD_COPY_THREADS", "1")
    return max(1, int(value)) if value.isdigit() else 1


_THREADS = _threads()
_POOL: list = []


# a compiled backend's matmul(a, b, out=None, accumulate=False) (a product, or with lists
# of terms the sum of theirs, added to out when accumulating: product_sum), copy(dst, src)
# and empty(shape, dtype) (its buffer pool), for the duration of its run
# (backends/cpu/gemm.py, copy.py, buffers.py)
MATMUL: ContextVar = ContextVar("tegrad_matmul", default=None)
COPY: ContextVar = ContextVar("tegrad_copy", default=None)
EMPTY: ContextVar = ContextVar("tegrad_empty", default=None)
# a recorder of a contraction's products and copies (backends/cpu/replay.py); every other
# write to an array the products read or to the output calls _untraceable
TRACE: ContextVar = ContextVar("tegrad_trace", default=None)


@contextmanager
def hooks(*pairs):
    """Set each ``(ContextVar, value)`` of ``pairs`` for the duration, restoring after."""
    tokens = [(hook, hook.set(value)) for hook, value in pairs]
    try:
        yield
    finally:
        for hook, token in reversed(tokens):
            hook.reset(token)


def _untraceable(why: str) -> None:
    tracer = TRACE.get()
    if tracer is not None:
        tracer.untraceable(why)


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (broadcasting), split over threads along an outer axis when large:
    NumPy copies on one core and releases the GIL while it does."""
    hook = COPY.get()
    if hook is not None:
        hook(dst, src)
        return
    if _THREADS < 2 or dst.size < PARALLEL_COPY_MIN:
        np.copyto(dst, src)
        return
    src = np.broadcast_to(src, dst.shape)
    axis = next((i for i, n in enumerate(dst.shape) if n >= _THREADS), None)
    if axis is None:
        np.copyto(dst, src)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_THREADS - 1, thread_name_prefix="tegrad-copy"))
    n = dst.shape[axis]
    bounds = [n * i // _THREADS for i in range(_THREADS + 1)]
    head = (slice(None),) * axis
    parts = [(dst[(*head, slice(a, b))], src[(*head, slice(a, b))])
             for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    jobs = [_POOL[0].submit(np.copyto, d, s) for d, s in parts[1:]]
    np.copyto(*parts[0])  # the calling thread does its share
    for job in jobs:
        job.result()


# scatter --------------------------------------------------------------------------------


def run_scatter(s: Scatter, arrays: dict, owner: str) -> np.ndarray:
    floating = np.dtype(s.dtype).kind == "f"
    acc = np.float64 if floating else np.dtype(s.dtype)
    size = math.prod(s.shape)
    out = np.zeros(size, dtype=acc)
    dim_strides = [math.prod(s.shape[m + 1:]) for m in range(len(s.shape))]
    n = len(s.grid)
    for region in _regions([v.extent for v in s.grid], GRID_LIMIT):
        env = {}
        for k, (v, (lo, hi)) in enumerate(zip(s.grid, region, strict=True)):
            shape = [1] * n
            shape[k] = hi - lo
            env[v] = (np.arange(v.lo + lo, v.lo + hi).reshape(shape), k)
        full = tuple(hi - lo for lo, hi in region)
        ev = Evaluator(arrays, env, n, owner)
        mask = np.ones(full, dtype=bool)
        for c in s.conds:
            mask &= np.broadcast_to(ev.go(c, n, ()), full)
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


def _regions(extents: list[int], limit: int) -> list[list[tuple[int, int]]]:
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
