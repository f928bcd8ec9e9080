"""A general kernel's loop-nest tree (``nest.py``): every loop decision, for every target.

``T[i, j] = body`` becomes

    FlatLoop (i)          outer axes merged until there are ``THREAD_CHUNKS`` iterations,
      <what depends on i>   shared out over threads when the work is ``parallel_work``
      Loop j                or more (points x ``nest_facts.work_per_point``)
        <what depends on j>  Store T[i, j]

with every value placed by code motion (``nest_values.py``) and every reduction's loops
where it is placed (``nest_reduce.py``). The shapes other than this row nest:

**Column order.** A compute that is a reduction along the outer dimension of reads
contiguous in its last axis (a weight gradient ``dW[d] = sum_n dY[n, d] X[n, d]``) puts
the reduce loops outside that axis, over chunks of ``COLUMN_CHUNK`` accumulators
(``_column_nest``, ``nest_facts.column_order``).

**Regions.** Guards that bound the last axis alone (a concatenation's gradient reads one
part per range of columns) split its loop into one loop per range, each over the body
with those guards folded (``nest_facts.regions``, at most ``Options.max_regions``).

**Flattened axes.** A body that uses its last two axes only together, as the row-major
point ``n_b a + b``, and at least once under a ``//`` or ``%`` (a roll of the flattened
array read in its shape: ``X[(n_b a + b + s) % L]``) loops over that point alone
(``nest_facts.flattened``): the roll's wrap is then one cut of one loop (``regions``),
each side a contiguous copy.

**Residue classes.** Axes read under ``// n`` (a max pool's gradient reads its window's
maximum at ``[i // 2, j // 2]``) loop over their quotients, the body written once per
residue class (``lower/residue.unrolled_axes``): the window's values are shared. An
axis before the last with ``Options.looped_residues`` or more classes (a group norm of 12
channels per group reads its statistics at ``[c // 12]``) is two loops instead, ``c = 12
q + r`` (``_residue_axes``): what depends on ``q`` alone is computed once above the
loop over ``r``, and the merged loop stops before ``r``.

**Row caches.** An expensive value a row reduction computes and the output loop needs
again is kept in a row buffer (``row_cache.py``, ``_row_buffers``).

**Grouped outputs.** Tensors ``also`` written at the same point (``grouping.py``) are
stored beside the output; column sums ``columns`` are added per thread into partial rows,
combined in thread order after the loop (deterministic for a thread count).

**Coalesced loops.** Once built, two nested loops that only address a contiguous block
(an image plane's rows and columns) are one loop over its points (``coalesce.py``,
``Options.coalesce_loops``).

**Streaming stores.** A store to a line the cache does not hold first reads that line
from memory. An output that no later kernel of the program reads (``stream``), of
``Options.stream_bytes`` or more, written by a kernel that moves
``Options.stream_traffic_bytes`` or more in all (so its arrays cannot stay cached from one
call to the next), is staged per iteration of the parallel loop and then written past the
caches (``_stage``): a layer norm's gradient reads ``dY`` and ``X`` and writes ``dX``, so
moves 4 row streams with plain stores and 3 with these. Below the traffic limit the
arrays stay cached and streaming them out only costs; ``benchmarks/bench_ab.py --knob
stream`` measures both sides.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.affine import build
from ..ir.expr import Const, Expr, Reduce, Select, Var
from ..ir.tensor import Compute
from ..ir.traverse import free_vars, substitute, walk
from ..options import Options
from .coalesce import coalesced
from .hoist import hoisted
from .kernels import General
from .nest import (
    AddPartial,
    Block,
    ChunkLoop,
    ClosePartials,
    ColumnAccumulators,
    ColumnSlot,
    CombinePartials,
    FlatLoop,
    Guard,
    Loop,
    LoopNest,
    OpenPartials,
    PartialRow,
    RowBuffer,
    Stage,
    Store,
    StoreColumns,
    StreamOut,
)
from .nest_facts import (
    column_order,
    condition_bounds,
    flattened,
    region_limit,
    regions,
    specialized,
    stride_ordered,
    unshadow,
    work_per_point,
)
from .nest_forms import Lit, Ref, ResidueIndex, RowIndex
from .nest_reduce import ReduceLowering, accumulate
from .nest_values import both_bounds
from .residue import aligned_split, normalize, unrolled_axes, unrolled_bodies
from .row_cache import row_caches
from .strides import gathers_along, transposing

THREAD_CHUNKS = 16  # merge leading axes until the parallel loop has this many iterations
COLUMN_CHUNK = 64  # accumulators per thread in a column reduction
COLUMN_PAD = 1024  # bytes between the partial rows of column sums (see _open_partials)
STAGE_BYTES = 16 << 10  # an iteration's part of a streamed output, staged: at most


def kernel_nest(t: Compute, body_of: Compute, name: str, also: tuple = (), columns: tuple = (),
                stream: frozenset = frozenset(), options: Options | None = None) -> LoopNest:
    """The loop nest of the kernel ``name`` computing ``t`` (its body: ``body_of``'s);
    ``also``: ``(tensor, body over body_of's axes)`` also written, ``columns``: ``(tensor,
    summand over body_of's axes)`` summed over every axis but the last (``grouping.py``);
    ``stream``: outputs no later kernel reads."""
    return NestBuilder(t, body_of, name, also, columns, stream,
                      options or Options.from_environment()).kernel


class NestBuilder(ReduceLowering):
    """The pass building one kernel's nest (``kernel_nest``)."""

    def __init__(self, t: Compute, body_of: Compute, name: str, also: tuple, columns: tuple,
                 stream: frozenset, options: Options):
        reads, makes = General(t, body_of, (), also, columns).reads_and_makes()
        args = list(dict.fromkeys([*makes, *reads]))  # outputs first, then each tensor read
        super().__init__(t, args, options)
        self.name = name
        self.also = also
        self.columns = columns
        self.stream = stream
        self.outputs = len(makes)
        self.kernel = self._function(body_of)

    def _function(self, body_of: Compute) -> LoopNest:
        shape = self.tensor.shape
        axes = body_of.axes
        size = math.prod(shape)
        parallel = size * work_per_point(body_of.body) >= self.options.parallel_work and size > 1
        body = unshadow(body_of.body, frozenset(axes))
        if len(axes) > 1 and not self.also and not self.columns and (
                found := flattened(body, axes[-2], axes[-1])):
            body, last = found  # (the last two axes as one: ``nest_facts.flattened``)
            axes, shape = [*axes[:-2], last], (*shape[:-2], last.extent)
        if self.options.order_reductions:  # (the grouped outputs' sums too)
            body = stride_ordered(body)
            self.also = tuple((tensor, stride_ordered(other)) for tensor, other in self.also)
        self.reductions = [x for x in walk(body) if isinstance(x, Reduce)]
        # (a 1-D kernel's parts nest on their own, their ``also`` unspecialized: no windows)
        split = (self._regions([body], axes[0], shape[0], windows=not self.also)
                 if len(axes) == 1 else None)
        if split:  # one loop nest per range (``_region_loops`` for the last of 2+ axes)
            for v, part in self._parts(body, axes[0], split):
                self._nest(part, [v], [v.extent], parallel)
        else:
            if self.columns:  # (grouping.py: only kernels of 2+ axes)
                self._open_partials(shape[-1])
            self._nest(body, axes, shape, parallel)
            if self.columns:
                self._close_partials(shape[-1])
        kernel = LoopNest(self.name, self.args, self.outputs, self.root, self.gathers)
        if self.options.coalesce_loops:
            kernel = coalesced(kernel)
        return hoisted(kernel) if self.options.hoist_unrolled else kernel

    def _nest(self, body: Expr, axes, shape, parallel: bool) -> None:
        if column_order(body, axes, shape):
            self._column_nest(body, axes, shape, parallel)
        else:
            self._row_nest(body, axes, shape, parallel)

    def _parts(self, body: Expr, v, split: list) -> list:
        """``(variable over the range, body there)`` per range of ``split``."""
        return [(w, part) for w, (part,) in self._shared_parts([body], v, split)]

    def _shared_parts(self, bodies: list, v, split: list) -> list:
        """``(variable over the range, [each body there])`` per range of ``split``, one
        variable for all the bodies; the reductions of every part are candidates for
        sharing a loop (``siblings``)."""
        out = []
        for lo, hi in split:
            w = Var.fresh(v.name, lo, hi - lo)
            parts = [specialized(body, v, lo, hi, w)[1] for body in bodies]
            for part in parts:
                self.reductions += [x for x in walk(part) if isinstance(x, Reduce)]
            out.append((w, parts))
        return out

    # loops --------------------------------------------------------------------------------

    def _merged_loop(self, axes, shape, parallel: bool, chunks: int = 0,
                     columns: int = 0) -> FlatLoop:
        """One loop over the leading ``axes`` (and ``chunks`` column chunks after them)."""
        names = [self.bind(v, "i") for v in axes]
        return FlatLoop(frozenset(axes), loop=True, parallel=parallel,
                        vars=tuple(zip(names, shape, (v.lo for v in axes), strict=True)),
                        chunks=chunks, chunk=COLUMN_CHUNK if chunks else 0, columns=columns)

    def _row_loops(self, axes, shape, parallel: bool, nested: int = 1) -> list[Block]:
        """The loops over ``axes``: the leading ones merged (until there are
        ``THREAD_CHUNKS`` iterations to share out, or all but the last ``nested``), the
        rest nested."""
        merged = 0
        if shape:
            merged, count = 1, shape[0]
            while merged < len(shape) - nested and count < THREAD_CHUNKS:
                count *= shape[merged]
                merged += 1
        blocks: list[Block] = []
        if merged:
            blocks.append(self._merged_loop(axes[:merged], shape[:merged], parallel))
            for v, n in zip(axes[merged:], shape[merged:], strict=True):
                blocks.append(Loop(frozenset((v,)), loop=True, var=self.bind(v, "i"),
                                   lo=v.lo, hi=v.lo + n))
        return blocks

    def _row_nest(self, body: Expr, axes, shape, parallel: bool) -> None:
        """Output axes outermost, in order; the body evaluated at each point."""
        tile = self.options.transpose_tile
        # (residue classes write the body alone: a grouped kernel's other arrays and column
        # sums take the plain nest; grouping.py checks the body before inlining, where a
        # producer's ``i % 7`` is not yet seen: differential seed 122495)
        ragged = self.options.ragged_residues
        residues = (unrolled_axes(body, axes, tile, ragged)
                    if len(axes) > 1 and not self.also and not self.columns else {})
        least = self.options.looped_residues
        looped = {v: n for v, n in residues.items()  # (not a transposing read's tiles)
                  if v is not axes[-1] and 0 < least <= n and v.extent % n == 0
                  and residues != transposing(body, axes, tile)}
        nested = 1  # (the loops kept out of the merged one: a looped residue's and after)
        if looped and not self.also and not self.columns:
            first = min(axes.index(v) for v in looped)
            body, axes, shape = _residue_axes(body, axes, shape, looped)
            self.reductions += [x for x in walk(body) if isinstance(x, Reduce)]  # (siblings)
            residues = unrolled_axes(body, axes, tile, ragged)
            nested = len(axes) - first - 1
        if residues:
            self._residue_nest(body, axes, shape, parallel, residues, nested)
            return
        bodies = [body, *(unshadow(other, frozenset(axes)) for _, other in self.also)]
        targets = [0, *(self.arg(tensor) for tensor, _ in self.also)]
        rows = self._regions(bodies, axes[-2], shape[-2], rows=True) if len(axes) > 2 else None
        blocks = self._row_loops(axes, shape, parallel, max(nested, 2 if rows else 1))
        split = self._regions(bodies, axes[-1], shape[-1]) if len(blocks) > 1 else None
        if split or rows:
            self._region_loops(bodies, axes, shape, blocks[:-2] if rows else blocks[:-1], rows,
                               lambda k, bound: (targets[k], _row_index(self, bound, shape)))
            self._stage(blocks[0], shape, len(self.also))
            return
        self.stack.extend(blocks)
        if len(blocks) > 1:
            self._row_buffers(body, axes, shape, blocks)
        value = self.value(body)
        flat = _row_index(self, axes, shape)
        self.stack[-1].items.append(Store(0, flat, value))
        for tensor, other in self.also:  # the same point of the grouped kernels' arrays
            other = unshadow(other, frozenset(axes))
            self.stack[-1].items.append(Store(self.arg(tensor), flat, self.value(other)))
        for m, (tensor, summand) in enumerate(self.columns):  # this thread's column sums
            blocks[0].items.insert(0, PartialRow(m, tensor.dtype, len(self.columns),
                                                 self.partial_stride))
            summand = unshadow(summand, frozenset(axes))
            index = Ref(self.var(axes[-1]))
            self.stack[-1].items.append(AddPartial(m, index, self.value(summand)))
        innermost = self.stack[-1]
        self.close(blocks)
        if (len(blocks) > 1 and innermost.straight() and not innermost.checks()
                and not any(gathers_along(b, axes[-1]) for b in bodies)):
            innermost.vectorize = True
        if blocks:
            self._stage(blocks[0], shape, len(self.also))

    def _residue_nest(self, body: Expr, axes, shape, parallel: bool, residues: dict,
                      nested: int = 1) -> None:
        """Axes used under ``// n`` (``lower.residue.unrolled_axes``) looped over their
        quotients ``q``, the body written out once per combination of residues ``a``
        (``v = n q + a``) in the innermost loop: what the copies share (a pooling window's
        maximum, its gradient's value) is computed once per window."""
        loop, bodies = unrolled_bodies(body, axes, residues)
        for _, part, _ in bodies:  # (candidates for sharing a loop, as in _parts)
            self.reductions += [x for x in walk(part) if isinstance(x, Reduce)]
        extents = [v.extent for v in loop]
        parts = [part for _, part, _ in bodies]
        # a ragged class's guard as a probe: a body of its own, whose regions and
        # specialization the parts' follow (nothing stored where it folds to 0)
        probes = [_probe(guard) for _, _, guard in bodies]
        seen = parts + [p for p in probes if not isinstance(p, Const)]
        rows = self._regions(seen, loop[-2], extents[-2], rows=True) if len(loop) > 2 else None
        blocks = self._row_loops(loop, extents, parallel, max(nested, 2 if rows else 1))

        def store(k: int, bound) -> tuple:  # body k's point, ``bound`` for ``loop``
            named = dict(zip(loop, bound, strict=True))
            return 0, ResidueIndex(tuple(
                (tuple((c, self.var(named[v])) for v, c in coeffs.items()), k_,
                 math.prod(shape[m + 1:]))
                for m, (coeffs, k_) in enumerate(bodies[k][0])))

        split = self._regions(seen, loop[-1], extents[-1]) if len(blocks) > 1 else None
        if split or rows:
            self._region_loops(parts, loop, extents, blocks[:-2] if rows else blocks[:-1], rows,
                               store, probes)
        else:
            self.stack.extend(blocks)
            for k, part in enumerate(parts):
                self._store(store(k, loop), part, probes[k])
            self.close(blocks)
        if not any(v in residues for v in axes[:len(blocks[0].binds)]):
            self._stage(blocks[0], shape, 0)

    def _regions(self, bodies: list, v, n: int, rows: bool = False,
                 windows: bool = True) -> list | None:
        """``nest_facts.regions`` of ``v``, their cuts joined over ``bodies``: the guards'
        ranges, and (``windows``) for a kernel without column sums (the region loops add
        no ``columns``) the ranges where a small window's bounds are constant. An axis
        before the last (``rows``) is split too, but not in a kernel with column sums."""
        window = 0 if self.columns or not windows else self.options.unroll
        if rows and self.columns:
            return None
        limit = self.options.max_regions
        cuts = set()
        for body in bodies:
            cuts.update(lo for lo, _ in regions(body, v, n, limit, window) or ())
        limit = max(region_limit(body, v, n, limit) for body in bodies)
        cuts.discard(0)
        if not cuts or len(cuts) >= limit:
            return None
        edges = [0, *sorted(cuts), n]
        return list(zip(edges[:-1], edges[1:], strict=True))

    def _store(self, where: tuple, body: Expr, probe: Expr) -> None:
        """``Store(*where, body)`` in the innermost open block, where its ``probe``
        (``_probe``) holds: always (1), never (0), or under a guard, above which only what
        reads in bounds everywhere moves."""
        if isinstance(probe, Const):
            if probe.value:
                self.stack[-1].items.append(Store(*where, self.value(body)))
            return
        guard = probe.cond
        block = Guard(conds=(self.value(guard),))
        self.stack.append(block)
        saved = self.proven
        self.proven = both_bounds(self.proven, condition_bounds(guard))
        try:
            block.items.append(Store(*where, self.value(body)))
        finally:
            self.proven = saved
            self.stack.pop()
        self.stack[-1].items.append(block)

    def _region_loops(self, bodies: list, axes, shape, outer: list, rows: list | None,
                      store, probes: list | None = None) -> None:
        """The last axis as one loop per range of ``_regions``, each over the bodies with
        the guards that are constant on it folded (branch-free: vectorized); what does
        not depend on that axis is computed once, above them. With ``rows``, the axis
        before it first, one loop per range (a padded window's top, interior and bottom
        rows), each over its own ranges of the last axis: the interior of a padded 3x3
        window is then unrolled and vectorized along its rows. ``store(k, bound)``: the
        argument and index body ``k`` stores at, ``bound`` the variables standing for
        ``axes`` (a grouped kernel's ``also`` are bodies of their own)."""
        self.stack.extend(outer)
        count = len(bodies)
        probes = probes or [_ALWAYS] * count
        bodies = [*bodies, *probes]  # (specialized with them: see _residue_nest)
        for v, parts in self._shared_parts(bodies, axes[-2], rows) if rows else [(None, bodies)]:
            row = [*axes[:-2], v] if rows else list(axes[:-1])
            if rows:
                self.stack.append(Loop(frozenset((v,)), loop=True, var=self.bind(v, "i"),
                                       lo=v.lo, hi=v.lo + v.extent))
            seen = [*parts[:count], *(p for p in parts[count:] if not isinstance(p, Const))]
            split = self._regions(seen, axes[-1], shape[-1]) or [(0, shape[-1])]
            for w, pieces in self._shared_parts(parts, axes[-1], split):
                inner = Loop(frozenset((w,)), loop=True, var=self.bind(w, "i"), lo=w.lo,
                             hi=w.lo + w.extent)
                self.stack.append(inner)
                for k, piece in enumerate(pieces[:count]):
                    self._store(store(k, [*row, w]), piece, pieces[count + k])
                self.close([inner])
                if (inner.straight() and not inner.checks()
                        and not any(gathers_along(piece, w) for piece in pieces)):
                    inner.vectorize = True
            if rows:
                self.close([self.stack[-1]])
        self.close(outer)

    def _column_nest(self, body: Reduce, axes, shape, parallel: bool) -> None:
        """A reduction along the outer dimension of its reads (``dW[d] = sum_n dY[n, d]
        X[n, d]``): the reduce loops outside, the last output axis innermost over a chunk of
        ``COLUMN_CHUNK`` accumulators, so that every read is contiguous and vectorized."""
        n = shape[-1]
        outer = self._merged_loop(axes[:-1], shape[:-1], parallel, -(-n // COLUMN_CHUNK), n)
        identity = Lit(body.combiner.identity_value(body.dtype), body.dtype)
        outer.items.append(ColumnAccumulators(body.dtype, identity, COLUMN_CHUNK))
        self.stack.append(outer)
        names = {a: self.bind(a, "r") for a in body.axes}
        blocks: list[Block] = [
            Loop(frozenset((a,)), loop=True, var=names[a], lo=a.lo, hi=a.lo + a.extent,
                 role="column_reduce") for a in body.axes]
        last = self.bind(axes[-1], "i")
        blocks.append(ChunkLoop(frozenset((axes[-1],)), loop=True, var=last, lo=axes[-1].lo))
        self.stack.extend(blocks)
        src = self.value(body.source)
        self.stack[-1].items.append(accumulate(body, ColumnSlot(), src, (), names))
        self.close(blocks)
        outer.items.append(StoreColumns(_row_index(self, axes[:-1], shape), axes[-1].lo))
        self.close([outer])

    # column sums, row caches, streamed outputs --------------------------------------------

    def _open_partials(self, n: int) -> None:
        """The column sums' partial sums: per thread, one zeroed row of ``n`` per column
        sum, ``COLUMN_PAD`` bytes apart (a row read right after a store to the output at
        the same address modulo 4 KiB waits for that store, "4K aliasing": the renderer
        places the rows off the output's alignment)."""
        width = max(n * (8 if t.dtype == "float64" else 4) for t, _ in self.columns) + COLUMN_PAD
        self.partial_stride = width = -(-width // 64) * 64
        self.root.items.append(OpenPartials(len(self.columns), width))

    def _close_partials(self, n: int) -> None:
        """Each column sum: its threads' partial sums added in thread order."""
        for m, (tensor, _) in enumerate(self.columns):
            self.root.items.append(CombinePartials(m, self.arg(tensor), tensor.dtype, n,
                                                   len(self.columns), self.partial_stride))
        self.root.items.append(ClosePartials())

    def _stage(self, merged: FlatLoop, shape, also: int) -> None:
        """Outputs ``0`` .. ``also`` that no later kernel reads (``stream``), large enough
        (module header), written past the caches: each iteration ``f`` of the parallel
        loop ``merged`` (over the leading axes it binds) writes its part of the output,
        ``span`` elements from ``f * span``, into a buffer of its own (``Stage``: the body
        and its row caches unchanged), then streams the buffer out (``StreamOut``)."""
        if not merged.parallel:
            return
        if any(v.lo for v in merged.binds):  # (a region's variable: an offset loop)
            return
        itemsize = {a: np.dtype(a.dtype).itemsize for a in self.args}
        if sum(a.size * itemsize[a] for a in self.args) < self.options.stream_traffic_bytes:
            return
        span = math.prod(shape[len(merged.binds):])
        for k, t in enumerate(self.args[:1 + also]):
            size = itemsize[t]
            if (t not in self.stream or t.size * size < self.options.stream_bytes
                    or not self.options.stage_min_bytes <= span * size <= STAGE_BYTES):
                continue
            merged.stages.append(Stage(k, t.dtype, span))
            merged.items.append(StreamOut(k, span * size))

    def _row_buffers(self, body: Expr, axes, shape, blocks: list) -> None:
        """Declare the row caches of ``row_cache.py`` where their reductions go, and emit
        those reductions first: a buffer is read only if some loop has written it (a
        reduction fused into a sibling's loop writes through the sibling's variable).

        The first buffer of the output's dtype whose block knows the row is the output's
        own row: the reduction writes ``E(k)`` there, and the output loop reads ``E(j)``
        back before it writes element ``j`` (a softmax: ``exp`` into ``Y``'s row, then
        ``Y[j] = Y[j] * (1 / s)``), which saves a buffer's traffic. Divisions are not
        turned into multiplications here, which would change their last bit from
        NumPy's; softmax multiplies by the reciprocal because its definition does
        (``nn/softmax.py``)."""
        found = row_caches(body, axes, shape, self.options.row_cache_buffers)
        homes: dict = {}
        row_start = _row_index(self, axes[:-1], shape) if len(axes) > 1 else None
        for e, twin, r in found:
            fv = free_vars(r)
            home = next((b for b in reversed(blocks) if b.binds & fv), self.root)
            if twin not in self.cache_read:
                buffer = self.fresh("row")
                bound = set().union(*(b.binds for b in blocks[:_index(blocks, home) + 1]))
                if (row_start and e.dtype == self.tensor.dtype
                        and set(axes[:-1]) <= bound):  # the output's own row (see above)
                    home.items.insert(0, RowBuffer(buffer, e.dtype, shape[-1], row_start))
                    row_start = None
                else:
                    home.items.insert(0, RowBuffer(buffer, e.dtype, shape[-1]))
                self.cache_read[twin] = (buffer, axes[-1])
                homes[buffer] = home
            buffer = self.cache_read[twin][0]
            if homes[buffer] is home:  # written in the block it is declared in
                self.cache_write[e] = (buffer, r.axes[0])
        for r in dict.fromkeys(r for _, _, r in found):
            self.value(r)


_ALWAYS = Const(1, "int32")


def _probe(guard: Expr | None) -> Expr:
    """A ragged residue class's guard as an expression that specializing folds like a
    body's (1 where it holds, 0 where not): 1 for a class with none."""
    if guard is None:
        return _ALWAYS
    return Select(guard, _ALWAYS, Const(0, "int32"), "int32")


def _residue_axes(body: Expr, axes, shape, split: dict) -> tuple[Expr, list, list]:
    """``body`` over ``axes`` with each axis ``v`` of ``split`` written ``n q + r`` (``n
    = split[v]``, which divides its range), ``q`` and ``r`` two axes in its place: the same
    row-major points in the same order, and ``(n q + r) // n`` is ``q``."""
    new_axes, new_shape, mapping = [], [], {}
    for v, extent in zip(axes, shape, strict=True):
        if v not in split:
            new_axes.append(v)
            new_shape.append(extent)
            continue
        q, r, form = aligned_split(v, split[v])
        mapping[v] = build(*form, v.dtype)
        new_axes += [q, r]
        new_shape += [q.extent, r.extent]
    return normalize(substitute(body, mapping)), new_axes, new_shape


def _row_index(nest: NestBuilder, axes, shape) -> RowIndex:
    """The offset in a row-major array of ``shape`` of the point at the bound ``axes``
    (its leading dimensions)."""
    return RowIndex(tuple((nest.var(v), math.prod(shape[k + 1:])) for k, v in enumerate(axes)))


def _index(blocks: list, block) -> int:
    return next((k for k, b in enumerate(blocks) if b is block), -1)
