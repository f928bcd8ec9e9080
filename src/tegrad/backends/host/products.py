"""The host contraction engine: a contraction kernel as NumPy products on strided views.

Per piece (``lower/contraction.py``): zero-pad each read to the index range it needs and
view it with ``as_strided``, one dimension per variable (``views.py``); contract two
operands with one product laid out as batch x M x K @ batch x K x N (written straight
into the output when its layout allows), more operands with ``np.einsum``. Pieces that
are the phases of a strided output (residue classes) write one workspace that one copy
interleaves into the output (``views.phase_grid``). A reduction over shifted reads (a
convolution's taps) may run as a sum of products over views instead of one product over
an im2col copy (``_choose_loop``), or over a copy that overlaps its rows
(``_overlap_layout``).

Products, copies and the output array come from ``host`` (``ops.py``): NumPy's on the
reference target, the compiled helpers and buffer pool on the cpu target, a recorder's
while ``backends/cpu/replay.py`` records a layout.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...ir.expr import Var
from ...ir.tensor import placeholder
from ...lower.contraction import MIN_TERM_DEPTH, Contraction, Factor, Piece, index_range
from .ops import HostOps
from .views import (
    PaddingReads,
    arrange,
    c_blasable,
    factor_view,
    matrix_view,
    phase_grid,
    ranges_of,
    result_view,
    variables,
    view,
)
from .workspace import WORKSPACE

BLOCK_ELEMENTS = 1 << 21  # a laid-out GEMM operand larger than this is made in blocks


MAX_TERMS = 64  # a looped reduction's products (see _looped), each at least MIN_TERM_DEPTH deep


def run_contraction(c: Contraction, arrays: dict, host: HostOps) -> np.ndarray:
    """The contraction's output array (module header), its products and copies made by
    ``host``."""
    acc = np.dtype(c.dtype)
    empty = host.empty
    if empty is None:
        out = (np.empty if c.covers else np.zeros)(c.shape, dtype=acc)
    else:
        out = empty(c.shape, acc.name)
        if not c.covers:
            out.fill(0)
    cache: dict = {}
    targets = [view(out, p.out_index, ranges_of(p), writeable=True)[0] for p in c.pieces]
    phases = phase_grid(out, targets, host.min_phases) if c.disjoint else None
    if phases is not None:  # each piece's product written whole, then one interleaving copy
        targets, stacked, grid = phases
    for piece, target in zip(c.pieces, targets, strict=True):
        _run_piece(piece, arrays, target, not c.disjoint, cache, host)
    if phases is not None:
        host.copy(grid, stacked)
    return out if c.out_dtype == c.dtype else out.astype(c.out_dtype)


def _run_piece(p: Piece, arrays: dict, target: np.ndarray, accumulate: bool,
               cache: dict, host: HostOps) -> None:
    if _through_taps(p, arrays, target, accumulate, cache, host):
        return
    ranges = ranges_of(p)
    pitch: dict = {}
    if p.widen is not None:  # see contraction.widening
        x, width, dims = p.widen
        pitch = {k: (m, width, [index_range(form, ranges) for form in p.factors[k].index])
                 for k, m in dims}
        ranges[x] = (ranges[x][0], ranges[x][0] + width - 1)
    ext = {v: hi - lo + 1 for v, (lo, hi) in ranges.items()}
    ops = []
    for k, f in enumerate(p.factors):
        batch = (set(p.out_vars).difference(*(variables(g) for g in p.factors if g is not f))
                 if f.phases else ())  # (only a phased factor's layout uses it)
        op = factor_view(f, arrays[f.tensor], ranges, target.dtype, cache, host, pitch.get(k),
                         batch)
        if op is None:  # reads only padding: the piece is zero
            if not accumulate:
                host.untraceable("a piece that reads only padding")
                target[...] = 0
            return
        ops.append(op)
    zero = PaddingReads(p, ranges)
    _contract(ops, list(p.out_vars), target, ext, p.red_vars, p.scale, accumulate, host, zero)


TAP_GROWTH = 16  # the largest tap product over the output it is summed into


def _through_taps(p: Piece, arrays: dict, target: np.ndarray, accumulate: bool,
                  cache: dict, host: HostOps) -> bool:
    """Run a piece as a product of its two operands over their shared variables alone,
    then a sum of shifted views of it; False (nothing run) where that does not apply.

    The input gradient of a convolution of small images, ``dX[n, c, h, w] = sum_{o, i, j}
    dY[n, o, i, j] W[o, c, h - i + 1, w - j + 1]``, reads the weight (the larger operand)
    at shifted positions: the general path lays it out anew on every call (an im2col copy
    of the weight) for a product of a few columns. But the only variable both operands
    read as a plain dimension is ``o``, so

        T[n, i, j, c, r, s] = sum_o dY[n, o, i, j] W[o, c, r, s]       (one product: the
                                                                        weight as it lies)
        dX[n, c, h, w]      = sum_{i, j} T[n, i, j, c, h - i + 1, w - j + 1]

    the second a view of ``T`` zero-padded as the reads were (a position outside an
    operand is outside ``T`` too). In general: ``T`` holds the product over the shared
    variables (each read as one plain dimension by both operands and nowhere else) with
    every other dimension of either operand its own, and the piece is the sum of ``T``
    read at the operands' index forms. Taken where the larger operand's shifted reads
    name output variables of a thin output (their extents' product under
    ``Options.thin_batch``), and ``T`` is no larger than that operand (whose layout copy
    it saves) nor than ``TAP_GROWTH`` times the output (a weight gradient's ``T`` over
    both operands' positions would be)."""
    if len(p.factors) != 2 or any(f.phases for f in p.factors) or host.thin_batch <= 0:
        return False
    ranges = ranges_of(p)
    ext = {v: hi - lo + 1 for v, (lo, hi) in ranges.items()}
    data = [arrays[f.tensor] for f in p.factors]
    if any(a.dtype != target.dtype for a in data):
        return False
    uses: dict = {}
    for f in p.factors:
        for coeffs, _ in f.index:
            for v, _ in coeffs:
                uses[v] = uses.get(v, 0) + 1

    def plain(form):
        coeffs, _ = form
        return coeffs[0][0] if len(coeffs) == 1 and coeffs[0][1] == 1 else None

    shared = [v for v in p.red_vars if uses.get(v) == 2 and all(
        sum(plain(form) is v for form in f.index) == 1 for f in p.factors)]
    big = 0 if data[0].size >= data[1].size else 1
    shifted = {v for coeffs, _ in p.factors[big].index if len(coeffs) > 1
               for v, _ in coeffs if v in p.out_vars}
    if not shared or not shifted or math.prod(ext[v] for v in shifted) >= host.thin_batch:
        return False
    ops, t_vars, t_forms = [], [], []
    for f, a in zip(p.factors, data, strict=True):
        vs, cut = [], []
        for form, dim in zip(f.index, a.shape, strict=True):
            v = plain(form)
            if v in shared:
                lo, hi = ranges[v][0] + form[1], ranges[v][1] + form[1]
                if lo < 0 or hi >= dim:
                    return False  # (padding along a shared variable: the general path)
                vs.append(v)
                cut.append(slice(lo, hi + 1))
            else:
                fresh = Var.fresh("t", 0, dim)
                vs.append(fresh)
                t_vars.append(fresh)
                t_forms.append(form)
                cut.append(slice(None))
        ops.append((a[tuple(cut)], vs))
    t_shape = [v.extent for v in t_vars]
    if math.prod(t_shape) > min(data[big].size, TAP_GROWTH * target.size):
        return False  # (larger than the copy of the larger operand it saves)
    taps = WORKSPACE.get("taps", t_shape, target.dtype)
    _contract(ops, t_vars, taps, {**ext, **{v: v.extent for v in t_vars}}, shared, 1.0,
              False, host)
    read = Factor(placeholder(tuple(t_shape), target.dtype.name, "taps"), tuple(t_forms))
    op = factor_view(read, taps, ranges, target.dtype, cache, host)
    if op is None:  # reads only padding: the piece is zero
        if not accumulate:
            target[...] = 0
        return True
    rest = [v for v in p.red_vars if v not in shared]
    _contract([op], list(p.out_vars), target, ext, rest, p.scale, accumulate, host)
    return True


def _contract(ops, out_vars, target, ext, red_vars, scale, accumulate, host: HostOps,
              zero=None):
    present = set().union(*(vs for _, vs in ops))
    scale *= math.prod(ext[v] for v in red_vars if v not in present)
    if len(ops) == 1 and scale == 1 and _sum_of_views(*ops[0], out_vars, target, accumulate,
                                                      host):
        return
    summed = []
    for k, (a, vs) in enumerate(ops):
        others = set(out_vars).union(*(set(w) for j, (_, w) in enumerate(ops) if j != k))
        drop = [i for i, v in enumerate(vs) if v not in others]
        if drop:
            a = a.sum(axis=tuple(drop))
            vs = [v for v in vs if v in others]
        summed.append((a, vs))
    if len(summed) == 2:
        _matmul(summed, out_vars, target, ext, scale, accumulate, host, zero)
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
    _write(target, out_vars, result, rvars, accumulate, host)


MAX_VIEW_SUMS = 64  # a sum over more views of one operand than this is NumPy's


def _sum_of_views(a, vs, out_vars, target, accumulate, host: HostOps) -> bool:
    """``target (+)= a`` summed over its variables outside ``out_vars``, as one copy and
    adds of views of ``a`` (which a recording logs: the sum of shifted views of
    ``_through_taps``); False (nothing run) for a sum of more than ``MAX_VIEW_SUMS``."""
    kept = [v for v in vs if v in out_vars]
    summed = [v for v in vs if v not in out_vars]
    t = np.transpose(a, [vs.index(v) for v in (*kept, *summed)])
    if math.prod(t.shape[len(kept):]) > MAX_VIEW_SUMS:
        return False
    for n, index in enumerate(np.ndindex(*t.shape[len(kept):])):
        _write(target, out_vars, t[(Ellipsis, *index)], kept, accumulate or n > 0, host)
    return True


def _write(target, out_vars, result, rvars, accumulate, host: HostOps):
    perm = [rvars.index(v) for v in out_vars if v in rvars]
    result = np.transpose(result, perm)
    result = result.reshape([result.shape[perm.index(rvars.index(v))] if v in rvars else 1
                             for v in out_vars])
    result = result[tuple(slice(0, n) for n in target.shape)]  # drop widened columns
    if accumulate:
        host.add(target, result)
    else:
        host.copy(target, result)


def _matmul(ops, out_vars, target, ext, scale, accumulate, host: HostOps, zero=None):
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
    m_side = "a" if n_side == "b" else "b"
    if (not m_vars and any(side(v) == m_side for v in prefix)) or (
            not n_vars and any(side(v) == n_side for v in prefix)):
        # a batch variable at a smaller output stride than a free one (the head h of
        # attention's dQ[n, l, h D + d] = sum_s dS[n, h, l, s] K[n, s, h D + d]) left that
        # one in the batch too: a batch of matrix-vector products (n l h of 1 x 64, a
        # hundred times slower); batch over the shared variables, M and N over the rest,
        # and the result copied into place
        prefix = [v for v in order if side(v) == "ab"]
        m_vars = [v for v in order if side(v) == m_side]
        n_vars = [v for v in order if side(v) == n_side]
    (x, xv), (y, yv) = ((a, av), (b, bv)) if n_side == "b" else ((b, bv), (a, av))
    prefix, m_vars, n_vars = _merge_thin_batch(prefix, m_vars, n_vars, side, n_side,
                                               (x, xv), (y, yv), ext, host.thin_batch)
    k_vars = [v for v in xv if v in yv and v not in outs]
    big, big_vars = (x, xv) if x.size >= y.size else (y, yv)
    k_vars.sort(key=lambda v: -abs(big.strides[big_vars.index(v)]))
    looped, kept, prefix, m_vars, n_vars, overlap = _looped(x, xv, y, yv, prefix, m_vars,
                                                            n_vars, k_vars, ext,
                                                            host.overlap_bytes, zero)
    k_vars = [v for v in k_vars if v not in looped]
    layout = (looped, kept, prefix, m_vars, n_vars, k_vars, overlap)
    # block along the outermost batch axis so that each laid-out operand stays in cache
    # (an operand read where it lies is not laid out: a 3x3 convolution's weight at 2 x 2,
    # 512 x 4608, was two products of half its depth, summed by NumPy)
    size = max(_laid_out_size(x, xv, prefix, m_vars, k_vars, ext),
               _laid_out_size(y, yv, prefix, k_vars, n_vars, ext))
    # (or, with no batch axis, along the outermost reduced axis, adding the blocks up)
    lead = prefix[0] if prefix else (k_vars[0] if k_vars else None)
    blocks = 1 if lead is None or looped or overlap else min(ext[lead],
                                                               max(1, -(-size // BLOCK_ELEMENTS)))
    if blocks and len(prefix) >= 2 and not looped and not overlap and not all(
            _batch_merges(arr, vs, prefix, ext)
            for arr, vs in ((x, xv), (y, yv), (target, out_vars))):
        blocks = ext[lead]  # one product per value of the first: a batch BLAS takes
    if blocks <= 1:
        _gemm(x, xv, y, yv, layout, out_vars, target, ext, scale, accumulate, host)
        return
    step = -(-ext[lead] // blocks)
    for lo in range(0, ext[lead], step):
        cut = slice(lo, min(lo + step, ext[lead]))
        xs = x[(slice(None),) * xv.index(lead) + (cut,)] if lead in xv else x
        ys = y[(slice(None),) * yv.index(lead) + (cut,)] if lead in yv else y
        sub = {**ext, lead: cut.stop - cut.start}
        if lead in out_vars:
            ts = target[(slice(None),) * out_vars.index(lead) + (cut,)]
            _gemm(xs, xv, ys, yv, layout, out_vars, ts, sub, scale, accumulate, host)
        else:
            _gemm(xs, xv, ys, yv, layout, out_vars, target, sub, scale, accumulate or lo > 0,
                  host)


def _laid_out_size(a, vs, prefix, rows, cols, ext) -> int:
    """The elements of ``a``'s layout copy as (prefix, rows, cols); 0 where it is a view."""
    if matrix_view(a, vs, prefix, rows, cols, ext) is not None:
        return 0
    return math.prod(ext[v] for v in (*prefix, *rows, *cols) if v in vs)


def _merge_thin_batch(prefix, m_vars, n_vars, side, n_side, x, y, ext, thin: int):
    """``(prefix, m_vars, n_vars)`` with each batch variable that one operand reads moved
    into that operand's free dimensions, where its products are thin (a free extent under
    ``thin``, ``Options.thin_batch``) and the other operand at least as large as one
    batch of it. A convolution of small images, ``Y[n, o, p, q] = sum W[o, c, r, s]
    X[n, c, p + r, q + s]`` at 2 x 2, batched over the images ``n``, reads all of ``W``
    once per image for a product of 4 columns (a matrix-vector product each, at memory
    speed); one product of ``4 N`` columns reads it once. The thin operand and the
    result are then copied into place (``arrange``, ``_write``): small, since the
    products were thin."""
    (xa, xv), (ya, yv) = x, y
    for v in [v for v in prefix if side(v) != "ab"]:
        mine_n = side(v) == n_side
        free = n_vars if mine_n else m_vars
        thin_op, thin_vars, other = (ya, yv, xa) if mine_n else (xa, xv, ya)
        if (math.prod(ext[w] for w in free) >= thin
                or other.size * ext[v] < thin_op.size or v not in thin_vars):
            continue
        prefix = [w for w in prefix if w is not v]
        if mine_n:
            n_vars = [v, *n_vars]
        else:
            m_vars = [v, *m_vars]
    return prefix, m_vars, n_vars


def _batch_merges(a: np.ndarray, vs: list, prefix: list, ext: dict) -> bool:
    """Whether the dimensions of ``a`` (one per variable of ``vs``) over the batch
    variables ``prefix`` merge into one batch dimension of constant stride, as a BLAS
    call's batch must (a variable ``a`` lacks is a zero stride; ``dQ[n, l, h D + d]``
    over the batch ``(n, h)`` does not: ``h`` is the inner of the columns)."""
    dims = [(a.strides[vs.index(v)] if v in vs else 0, ext[v]) for v in prefix if ext[v] > 1]
    return all(s0 == n1 * s1 for (s0, _), (s1, n1) in zip(dims, dims[1:], strict=False))


_LOOPED: dict = {}  # _looped's choices by operand layout and variables


def _looped(x, xv, y, yv, prefix, m_vars, n_vars, k_vars, ext, overlap_bytes, zero=None):
    """``_choose_loop``, remembered per layout (it tries tens of views)."""
    key = (x.shape, x.strides, y.shape, y.strides, tuple(xv), tuple(yv), tuple(prefix),
           tuple(m_vars), tuple(n_vars), tuple(k_vars), tuple(ext[v] for v in (*xv, *yv)),
           zero, overlap_bytes)
    choice = _LOOPED.get(key)
    if choice is None:
        if len(_LOOPED) >= 4096:
            _LOOPED.clear()
        choice = _LOOPED[key] = _choose_loop(x, xv, y, yv, prefix, m_vars, n_vars, k_vars,
                                             ext, overlap_bytes, zero)
    return choice


def _choose_loop(x, xv, y, yv, prefix, m_vars, n_vars, k_vars, ext, overlap_bytes, zero=None):
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
    the larger operand reads may join its free dimension there (``_batch_layout``).
    Where no such loop exists, ``_overlap_layout``'s copy replaces im2col's if it can."""
    sides = sorted([(x, xv, True), (y, yv, False)], key=lambda s: -s[0].size)
    big, bv, left = sides[0]
    best, unchanged = None, ([], [], prefix, m_vars, n_vars, None)
    if len(k_vars) < 2 or matrix_view(big, bv, prefix, m_vars if left else n_vars, k_vars,
                                       ext) is not None:
        return unchanged
    for r in range(1, len(k_vars)):
        for loop in map(list, itertools.combinations(k_vars, r)):
            rest = [v for v in k_vars if v not in loop]
            depth = math.prod(ext[v] for v in rest)
            if math.prod(ext[v] for v in loop) > MAX_TERMS or depth < MIN_TERM_DEPTH:
                continue
            found = _batch_layout(big, bv, loop, rest, prefix, m_vars if left else n_vars,
                                  sides[1][:2], ext)
            if found is not None:
                pre, free = found
                kept = _live_terms(loop, ext, zero)
                if _calls_too_small(pre, free, n_vars if left else m_vars, kept, ext):
                    continue
                if best is None or (len(kept) * depth, len(kept)) < best[0]:
                    layout = (pre, free, n_vars) if left else (pre, m_vars, free)
                    best = (len(kept) * depth, len(kept)), (loop, kept, *layout, None)
    if best is None:
        return _overlap_layout(big, bv, left, prefix, m_vars, n_vars, k_vars, ext,
                               overlap_bytes, zero) or unchanged
    return best[1]


# a looped layout of this many products or more, each with fewer output elements than
# TINY_PRODUCT, is not taken (im2col's copy and one product instead): a strided 1-D
# convolution's weight gradient, 4 outputs x 2 taps per channel, looped over 64 images
# for each of 96 channels, was 6144 BLAS calls of 8 outputs each (2.5 ms; ~0.4 us a
# call, 2 threads), where the copy and one product cost 0.6 ms
MANY_PRODUCTS = 512
TINY_PRODUCT = 64


def _calls_too_small(pre, free, other_free, kept, ext) -> bool:
    """Whether the looped layout is ``MANY_PRODUCTS`` or more products (the batch ``pre``
    times the kept terms), each of fewer than ``TINY_PRODUCT`` outputs (``free`` times
    ``other_free``)."""
    calls = math.prod(ext[v] for v in pre) * len(kept)
    size = math.prod(ext[v] for v in free) * math.prod(ext[v] for v in other_free)
    return calls >= MANY_PRODUCTS and size < TINY_PRODUCT


def _overlap_layout(big, bv, left, prefix, m_vars, n_vars, k_vars, ext, overlap_bytes, zero):
    """A layout that copies the larger operand less than im2col does, or None.

    A weight gradient ``dW[k, c, r, s] = sum_{n, h, w} dY[n, k, h, w] X[n, c, h + r, w +
    s]`` reads ``X`` with ``r`` and ``h`` at one stride. Its im2col copy holds ``X`` nine
    times over ``(c, r, s) x (h, w)``. Copy it instead over ``(n, c, s, u, w)``, ``u = h +
    r`` (``ext(h) + ext(r) - 1`` rows, three copies): the kernel row ``r`` is then an
    offset into the copy, a batch of products ``(c, s) x (h, w)``, and the images ``n``
    (the reduced variables outside ``h``) are looped as terms. The variables: ``o`` of the
    operand's free side and ``k`` reduced, at one nonzero stride (an address ``o S + k S =
    (o + k) S``: the copy reads only what the view reads). Of those pairs, the smallest
    copy, made in parts of at most ``overlap_bytes`` (``Options.overlap_bytes``) along the
    first looped variable (``_overlap_parts``); none with a batch prefix already (its dims
    would not merge into one batch of products). Returns ``(looped, kept, [o], m_vars,
    n_vars, (o, k))``, ``o`` left out of its side."""
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
            if part <= overlap_bytes and (best is None or size < best[0]):
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


def _batch_layout(big, bv, loop, rest, prefix, free, small, ext):
    """``(prefix, free)`` of the larger operand ``big`` (its variables ``bv``) that is a
    view with the ``loop`` variables looped and ``rest`` reduced, or None; ``small``: the
    other operand and its variables, ``other``. Tried in turn:
    ``(prefix, free)`` as given, then with each batch variable that ``other`` (the other
    operand's variables) lacks moved into ``free`` at each position: a phased input
    stores the batch between its rows and columns (``_phased_layout``), so that one
    product per term covers every image, where at stride 2 one image's rows are short.
    Else, of those with the leading free variables that ``other`` lacks moved into the
    batch (``other`` read at batch stride 0), the one of the widest products: a strided
    3-D convolution's phase planes have a row more than its output, so its depth does not
    merge with their rows and pixels, and is a batch of products (else im2col copies the
    input 27 times). Their batch must be one stride in both operands (as a BLAS call's
    is: ``_batch_merges``)."""
    other = small[1]
    layouts = [(prefix, free)]
    for v in prefix:
        if v not in other:
            others = [u for u in prefix if u is not v]
            layouts += [(others, [*free[:at], v, *free[at:]]) for at in range(len(free) + 1)]
    for pre, fr in layouts:
        if matrix_view(big, bv, loop + pre, fr, rest, ext) is not None:
            return pre, fr
    batched = []
    for pre, fr in layouts:
        for at in range(1, len(fr)):
            if fr[at - 1] in other:
                break
            batch = [*pre, *fr[:at]]
            if (matrix_view(big, bv, loop + batch, fr[at:], rest, ext) is not None
                    and _batch_merges(big, bv, batch, ext) and _batch_merges(*small, batch, ext)):
                batched.append((batch, fr[at:]))
    return max(batched, key=lambda lay: math.prod(ext[v] for v in lay[1]), default=None)


def _gemm(x, xv, y, yv, layout, out_vars, target, ext, scale, accumulate, host: HostOps):
    """``target (+)= scale * x @ y`` laid out as (prefix, M, K) @ (prefix, K, N), summed
    over the ``kept`` values of the ``looped`` variables (``_choose_loop``), in parts where
    an overlap copy would be too large (``_overlap_parts``), each added to the first."""
    looped, kept, prefix, m_vars, n_vars, k_vars, overlap = layout
    matmul = host.matmul
    rvars = prefix + m_vars + n_vars
    # the target itself as the product's (batch, M, N) result, or as its transpose
    widened = any(ext[v] != n for v, n in zip(out_vars, target.shape, strict=True))
    whole = len(rvars) == len(out_vars) and not widened
    plain = result_view(target, out_vars, prefix, m_vars, n_vars, ext) if whole else None
    turned = result_view(target, out_vars, prefix, n_vars, m_vars, ext) if whole else None
    result = swap = direct = None
    for part, (xp, yp, part_kept, sub) in enumerate(
            _overlap_parts(x, xv, y, yv, looped, kept, overlap, ext, host.overlap_bytes)):
        xm = arrange(xp, xv, looped + prefix, m_vars, k_vars, sub, "x", host, overlap)
        ym = arrange(yp, yv, looped + prefix, k_vars, n_vars, sub, "y", host, overlap)
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
            # and a product both of whose operands lie transposed, written to a
            # temporary anyway: as its transpose, neither is (a thin 1x1 convolution's
            # input gradient, 2048 x 8 x 512 with both transposed: 16.8 ms on MKL here, 5.0
            # as its transpose)
            (rows, inner), cols = xm.shape[-2:], ym.shape[-1]
            swap = (turned is not None or plain is None and c_blasable(xm)
                    and not c_blasable(ym) and 8 * rows * cols <= inner * max(rows, cols)
                    or plain is None and not c_blasable(xm) and not c_blasable(ym))
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
    _write(target, out_vars, result, rvars, accumulate, host)


def _overlap_parts(x, xv, y, yv, looped, kept, overlap, ext, overlap_bytes):
    """``(x, y, kept, ext)`` of each part of a product: the whole, or, where the overlap
    copy (``_overlap_layout``) would exceed ``overlap_bytes``, parts along the first looped
    variable (a weight gradient's images) whose copies do not, one after the other into
    the same workspace."""
    if overlap is None or not looped:
        yield x, y, kept, ext
        return
    lead = looped[0]
    big, bv = (x, xv) if overlap[0] in xv else (y, yv)
    step = max(1, overlap_bytes // (_overlap_bytes(big, bv, ext, *overlap) // ext[lead]))
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


def _split_terms(m: np.ndarray, looped: list, kept: list):
    """``m`` itself, or with ``looped`` leading dimensions the list of its matrices'
    stacks at the ``kept`` indices, one per term."""
    return [m[index] for index in kept] if looped else m
