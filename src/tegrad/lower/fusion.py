"""Fusion: inlining producers into the general kernels that read them.

A general kernel ``P`` read only by general kernels (not by a contraction, a scatter or a
scan, which read materialized arrays, and not a plan output) can be inlined: each read
``P[f(i)]`` in a consumer becomes ``P``'s body with its axes replaced by ``f(i)``. A softmax

    m[i] = max_k X[i, k]     e[i, j] = exp(X[i, j] - m[i])     s[i] = sum_k e[i, k]
    Y[i, j] = e[i, j] / s[i]

becomes one kernel,

    Y[i, j] = exp(X[i, j] - max_k X[i, k]) / sum_k exp(X[i, k] - max_k' X[i, k']),

which a compiled backend evaluates in one pass per row: code motion (``backends/cpu/
codegen.py``) computes each row reduction once per row. No intermediate array is written.

**When.** Inlining trades memory traffic for recomputation. A read site is evaluated once
per iteration of the loops down to the innermost one whose variable it uses (the
consumer's axes, then the reductions around the site, outermost first), so the
recomputation ratio of ``P`` is ``sum over sites of evaluations / size(P)``. ``P`` is
inlined when that ratio is at most 1; at most ``max_inline_ratio`` (each element computed
about once or twice) where evaluating its reductions again at most doubles the consumers'
own work (``_work``); or, for a producer without reductions, when it is cheap (at most
``CHEAP_NODES`` nodes) and the ratio is at most ``max_cheap_inline_ratio`` (a 3x3 window over a
relu). A reduction that runs in column order stays a kernel (``_runs_in_columns``).
Producers are decided from the last to the first, so a site is counted where it
finally lands, after its consumer has itself been inlined.

Contractions that are not matrix products (``worth_blas``) become general kernels first,
so that a row sum or a per-row dot product is fused with its neighbours rather than sent
to BLAS. The pass is for compiled backends; the NumPy reference runs the plan unfused.
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir.affine import single_bound
from ..ir.bounds import is_pure_index
from ..ir.expr import Binary, Cast, Expr, Read, Reduce, Select, Unary, split_conjunction
from ..ir.tensor import Compute, make_compute
from ..ir.traverse import (
    children,
    free_vars,
    substitute,
    tensors_read,
    transform,
    walk,
    with_fresh_axes,
)
from ..options import Options
from .contraction import Contraction as ContractionForm
from .contraction import Factor, Piece
from .cost import reduction_width
from .kernels import Contraction, General, Plan, ScanKernel
from .nest_facts import column_order, reads_in_bounds
from .residue import unrolled_axes, unrolled_bodies

CHEAP_NODES = 6
BLAS_MIN_MACS = 1 << 14
GEMV_MIN_RUN = 16  # points: a reduced variable long enough to stream (see worth_blas)
GEMV_MIN_SIDE = 64  # the reduction's and the owner's output points of a matrix-vector product


def fuse(p: Plan, options: Options) -> Plan:
    bodies: dict[Compute, Compute] = {}  # general kernel -> the compute it evaluates
    parts: dict[Compute, tuple] = {}
    blocked = set(p.outputs)
    p = Plan([General(k.tensor) if isinstance(k, Contraction) and not worth_blas(k.contraction)
              else k for k in p.kernels], p.outputs, p.notes)
    for k in p.kernels:
        if isinstance(k, General):
            bodies[k.tensor] = k.body_of
            parts[k.tensor] = k.parts
        elif isinstance(k, ScanKernel):
            blocked.update([*k.op.inits, *k.op.external])
        else:
            blocked.update(tensors_read(k.tensor.body))
    inlined = set()
    reads: dict = {}  # consumer -> (its body, the tensors the body reads): walked once

    def reads_of(c: Compute) -> set:
        hit = reads.get(c)
        if hit is None or hit[0] is not bodies[c]:
            hit = reads[c] = (bodies[c], set(tensors_read(bodies[c].body)))
        return hit[1]

    for producer in reversed(list(bodies)):
        if producer in blocked:
            continue
        consumers = [c for c in bodies if c not in inlined and c is not producer
                     and producer in reads_of(c)]
        if not consumers or _runs_in_columns(bodies[producer], options) or not _worth_inlining(
                bodies[producer], producer, [bodies[c] for c in consumers], options):
            continue
        if not _exact(bodies[producer].body) and any(
                _compared(bodies[c].body, producer) for c in consumers):
            continue
        source = bodies[producer]
        for c in consumers:
            body = inline(bodies[c].body, producer, source)
            bodies[c] = make_compute(bodies[c].shape, bodies[c].axes, body, bodies[c].name)
        inlined.add(producer)
    kernels = []
    for k in p.kernels:
        if not isinstance(k, General):
            kernels.append(k)
        elif k.tensor not in inlined:
            kept = tuple(t for t in parts[k.tensor] if t not in inlined)  # (for describe)
            kernels.append(General(k.tensor, bodies[k.tensor], kept))
    return Plan(kernels, p.outputs, p.notes)


def _runs_in_columns(source: Compute, options: Options) -> bool:
    """Whether ``source`` is a reduction along the outer dimension of its reads, wider than
    a window (``nest_facts.column_order``, more than ``Options.unroll`` points): its own
    loop nest reads whole rows, but inlined at a point of a consumer its loop steps
    across them, one element of each row (the sum of ``exp`` over the 21 classes of an
    ``(N, C, H, W)`` cross entropy, at a stride of ``H W``), so it stays a kernel."""
    return (column_order(source.body, source.axes, source.shape)
            and reduction_width(source.body) > options.unroll)


def _compared(body: Expr, producer: Compute) -> bool:
    """Whether ``body`` tests a value of ``producer`` for equality (``P[j] == max_k P[k]``,
    the ties of a max reduction's gradient)."""
    def read_of(e: Expr) -> bool:
        while isinstance(e, Cast):
            e = e.a
        return isinstance(e, Read) and e.tensor is producer

    return any(isinstance(x, Binary) and x.op in ("eq", "ne") and (read_of(x.a) or read_of(x.b))
               for x in walk(body))


def _exact(body: Expr) -> bool:
    """Whether evaluating ``body`` again gives the same bits wherever it is compiled: no
    rounding arithmetic (reads, selects, constants, casts, negation, max and min). A
    producer compared for equality is inlined only then: ``tanh`` in a vectorized loop
    (libmvec) and in a scalar one (libm) can differ in the last bit, and a contraction
    into a fused multiply-add depends on the expression around it, so a recomputed
    ``P[j]`` may miss the ``max_k P[k]`` that another kernel computed from other copies
    of ``P``, and lose the gradient there."""
    def exact(x: Expr) -> bool:
        if not isinstance(x, (Unary, Binary, Cast, Reduce)) or not dt.is_float(x.dtype):
            return True
        if isinstance(x, Reduce):  # (a max picks one of its values: a pool's output)
            return x.combiner.kind in ("max", "min")
        return isinstance(x, Cast) or x.op in ("neg", "abs", "max", "min")

    return all(exact(x) for x in walk(body))


def worth_blas(c: ContractionForm) -> bool:
    """True when some piece is a matrix product big enough for BLAS: two factors sharing
    a reduced variable, each with an output variable of its own (M and N), and at least
    ``BLAS_MIN_MACS`` multiply-adds; or such a product with one owner (M = 1) whose loop
    would read badly (``_strided_matrix_vector``). A row sum, a per-row dot product
    (``sum_k dY[i, k] Y[i, k]``: no N) or a small product runs better as a fused loop."""
    for piece in c.pieces:
        if len(piece.factors) < 2:
            continue
        used = [{v for coeffs, _ in f.index for v, _ in coeffs} for f in piece.factors]
        outs = set(piece.out_vars)
        owners = [k for k, vs in enumerate(used)
                  if any(sum(v in w for w in used) == 1 for v in vs & outs)]
        shared = any(sum(v in w for w in used) >= 2 for v in piece.red_vars)
        macs = math.prod(hi - lo + 1 for _, lo, hi in piece.ranges)
        if not shared or macs < BLAS_MIN_MACS:
            continue
        if len(owners) >= 2:
            return True
        if owners and _strided_matrix_vector(piece, piece.factors[owners[0]], used[owners[0]]):
            return True
    return False


def _strided_matrix_vector(piece: Piece, owner: Factor, owned: set) -> bool:
    """``sum_{c, t} A[.., c, .., s t + j] v[c, t]`` with one factor ``A`` owning the output
    variables: True when the reduction has a variable ``c`` of ``GEMV_MIN_RUN`` or more
    points off ``A``'s innermost index, while the innermost index moves with a reduced
    variable ``t`` only in short or strided steps. The fused loop, a reduction per output
    point, then reads ``A`` with a stride in every order (a grouped transposed convolution
    with one output channel per group: 68 channels 13,872 floats apart under 2 taps
    at stride 2), where BLAS's matrix-vector product streams it. A column of unit steps
    (``sum_i H[i] A[i, k]``, ``t`` absent) or a long unit run (``sum_k A[i, k] v[k]``)
    stays a loop; a window alone (a depthwise convolution's taps, no ``c``) too."""
    extent = {v: hi - lo + 1 for v, lo, hi in piece.ranges}
    reduced = set(piece.red_vars)
    innermost = owner.index[-1][0]
    steps = [(v, c) for v, c in innermost if v in reduced]
    if not steps or any(abs(c) == 1 and extent[v] >= GEMV_MIN_RUN for v, c in steps):
        return False
    inner = {v for v, _ in innermost}
    across = [v for v in reduced & owned - inner if extent[v] >= GEMV_MIN_RUN]
    return (bool(across) and math.prod(extent[v] for v in reduced) >= GEMV_MIN_SIDE
            and math.prod(extent[v] for v in owned & set(piece.out_vars)) >= GEMV_MIN_SIDE)


def inline(body: Expr, producer: Compute, source: Compute) -> Expr:
    """``body`` with every read of ``producer`` replaced by ``source``'s body there."""
    def replace(e: Expr) -> Expr | None:
        if isinstance(e, Read) and e.tensor is producer:
            inlined = _fresh_reductions(source.body, free_vars(e))
            return substitute(inlined, dict(zip(source.axes, e.indices, strict=True)))
        return None

    return transform(body, replace)


def _fresh_reductions(body: Expr, outer: frozenset) -> Expr:
    """``body`` with fresh axes for every reduction binding a variable of ``outer``: the
    indices substituted for the producer's axes may use a reduce variable of the consumer
    (``P[2 j - t]`` inside ``sum_t``), which a reduction of the producer over the same
    variable object would otherwise capture."""
    def rename(e: Expr) -> Expr | None:
        if isinstance(e, Reduce) and outer & frozenset(e.axes):
            return with_fresh_axes(e)
        return None

    return transform(body, rename) if outer else body


def _worth_inlining(source: Compute, producer: Compute, consumers: list[Compute],
                    options: Options) -> bool:
    size = max(1, math.prod(producer.shape))
    guarded = _stays_guarded(source.body, options)
    evaluations = sum(_site_evaluations(c, producer, guarded, options.ragged_residues)
                      for c in consumers)
    ratio = evaluations / size
    if ratio <= 1:
        return True
    nodes = walk(source.body)
    reduces = any(isinstance(x, Reduce) for x in nodes)
    if ratio <= options.max_inline_ratio:
        if not reduces:
            return True
        # a reduction evaluated again: only where that at most doubles the consumers' work
        # (an LSTM's bias gradient, 1024 sums over 1600 rows, is not copied into the two
        # one-element-per-output kernels that read it)
        memo: dict = {}
        extra = (evaluations - size) * _work(source.body, memo)
        own = sum(max(1, math.prod(c.shape)) * _work(c.body, memo) for c in consumers)
        return extra <= own
    return ratio <= options.max_cheap_inline_ratio and len(nodes) <= CHEAP_NODES and not reduces


def _work(e: Expr, memo: dict) -> int:
    """Operations per evaluation of ``e``, roughly: its nodes, a reduction's source counted
    once per element of its range."""
    hit = memo.get(e)
    if hit is None:
        hit = 1 + sum(_work(c, memo) for c in children(e))
        if isinstance(e, Reduce):
            hit *= math.prod(a.extent for a in e.axes)
        memo[e] = hit
    return hit


def _stays_guarded(body: Expr, options: Options) -> bool:
    """Whether ``body``, inlined into a ``select`` branch, is evaluated inside that branch's
    guard in the loop nest (``nest_values``: a branch whose reads could leave their tensor
    and cannot be clamped is a ``Guard``, and nothing unsafe moves above it): it reads
    through an index tensor (``w[t[n]]``), or reads out of bounds under a reduction too
    wide to unroll or with a ``where``."""
    if reads_in_bounds(body):
        return False
    nodes = walk(body)
    if any(isinstance(x, Read) and not all(is_pure_index(i) for i in x.indices) for x in nodes):
        return True
    reduces = [x for x in nodes if isinstance(x, Reduce)]
    return bool(reduces) and (reduction_width(body) > options.unroll
                              or any(r.where is not None for r in reduces))


def _site_evaluations(consumer: Compute, producer: Compute, guarded: bool,
                      ragged: bool) -> int:
    """How many times the reads of ``producer`` in ``consumer`` are evaluated, with each
    read computed once per iteration of the loops down to its innermost variable, over the
    values those loops take under the ``select`` guards around it (a read of one gate in a
    concatenation of four runs on a quarter of the columns). A consumer run by residue
    classes (``residue.unrolled_axes``) evaluates what its bodies share once: a max pool's
    gradient reads the window's maximum once per window. ``guarded`` (``_stays_guarded``):
    a read in a ``select`` branch is evaluated at least once per iteration of the loops
    down to the select's innermost variable, where its guard is (a cross entropy's 0-d
    weight total, ``sum_n w[t[n]]``, read in the branch ``t[i] != ignore`` of its
    gradient ``dX[i, j]`` runs once per element, not once)."""
    total = 0
    seen, placed = set(), set()

    def go(e: Expr, loops: tuple, ranges: dict, floor: int = -1) -> None:
        nonlocal total
        key = (e, loops, tuple(sorted((v.uid, r) for v, r in ranges.items())), floor)
        if key in seen:
            return
        seen.add(key)
        if isinstance(e, Read) and e.tensor is producer:
            used = free_vars(e)
            depth = max((k for k, v in enumerate(loops) if v in used), default=-1)
            depth = max(depth, floor)
            counts = tuple(_count(v, ranges) for v in loops[: depth + 1])
            if (e, loops[: depth + 1], counts) not in placed:  # one evaluation where placed
                placed.add((e, loops[: depth + 1], counts))
                total += math.prod(counts)
        inner = loops + tuple(e.axes) if isinstance(e, Reduce) else loops
        if isinstance(e, Select):
            go(e.cond, inner, ranges, floor)
            branch = floor
            if guarded:  # (the select is placed at its innermost variable's loop)
                used = free_vars(e)
                branch = max([floor, *(k for k, v in enumerate(inner) if v in used)])
            go(e.a, inner, _narrowed(e.cond, ranges), branch)
            go(e.b, inner, ranges, branch)
            return
        for c in children(e):
            go(c, inner, ranges, floor)

    residues = (unrolled_axes(consumer.body, consumer.axes, ragged=ragged)
                if len(consumer.axes) > 1 else {})
    if residues:  # the compiled kernel's loops and bodies (lower/nest_build.py)
        loop, bodies = unrolled_bodies(consumer.body, consumer.axes, residues)
        for _, body, _ in bodies:
            go(body, tuple(loop), {})
    else:
        go(consumer.body, tuple(consumer.axes), {})
    return total


def _count(v, ranges: dict) -> int:
    lo, hi = ranges.get(v, (v.lo, v.lo + v.extent - 1))
    return max(0, hi - lo + 1)


def _narrowed(cond: Expr, ranges: dict) -> dict:
    """``ranges`` (variable -> inclusive bounds) narrowed by the conjuncts of ``cond`` that
    bound a single variable, ``m v + k >= 0``."""
    out = dict(ranges)
    for c in split_conjunction(cond):
        bound = single_bound(c)
        if bound is None or bound[0].extent is None:
            continue
        v, m, k = bound
        lo, hi = out.get(v, (v.lo, v.lo + v.extent - 1))
        if m > 0:  # v >= ceil(-k / m)
            lo = max(lo, -(k // m))
        else:  # v <= floor(k / -m)
            hi = min(hi, k // -m)
        out[v] = (lo, hi)
    return out
