"""A scatter kernel's loop-nest tree (``nest.py``): a deterministic scatter-add.

A scatter (``scatter.py``) adds ``value(j, d)`` to ``T[j, g(j, d)]`` at every point of
its grid where ``conds(j, d)`` hold: ``j`` the free output axes (each names an output
dimension), ``d`` the reduction's axes, ``g`` the targets of the pinned dimensions
(data-dependent: ``ids[d]``, the floor of a sampling position). An embedding's weight
gradient ``dW[ids[i], e] += dY[i, e]`` becomes

    ZeroFill dW                                 (memset, in pieces shared out)
    FlatLoop over chunks of e, parallel         the free axes: disjoint parts of dW
      Loop i, in order                          every element's addends in grid order
        Let t1 = ids[i]
        Guard (0 <= t1, t1 < rows)
          ChunkLoop e                           a free last axis no target or guard uses
            AddAt dW[t1 * width + e] += dY[i * width + e]

**Determinism.** A free output axis picks the output element itself, so two iterations
of the parallel loop (over the free axes, or chunks of the last one) never add to the same
element: each element is summed by one thread, over its addends in the order of the
reduction axes, whatever the number of threads. The sum is the sequential one: no atomics,
no order that depends on timing, the same bits on every run and every thread count. It is
NumPy's reference up to rounding (``np.bincount`` adds in float64). A scatter with no free
axis (``take``: every dimension pinned) runs on one thread, as torch's accumulating
``index_put_`` does.

**Loop order.** The free axes other than the one kept innermost go outermost (``n, c`` of
a ``grid_sample``'s input gradient: one thread per plane); the reduction axes follow in
their order, a short innermost run of them unrolled (a bilinear sample's 2 x 2 taps); each
guard stands under the loop of the last axis it uses (one reading through data, as a max
gradient's tie test ``X[ids[d]] == m``, in a guard of its own under the bounds before it);
a free last axis that no target and no guard uses is innermost, contiguous in the output
and vectorized (an embedding row), since no two of its iterations add to the same element.
Values are placed by code motion (``nest_values.py``): a target is computed once per point
of the axes it uses.

**Zeroing.** Where the parallel loop runs over the leading output dimensions (``n, c`` of
the sample's gradient, the rows of a ``gather`` along the last), each iteration owns a
contiguous slab of the output and zeroes it first (``ZeroFill.slab``): no pass of its
own, and the slab is in cache for its addends. Otherwise (an embedding's chunks of
columns) the output is zeroed whole first, in pieces shared out over threads.

Known limits: the output is zeroed before the addends (as torch's ``zeros`` then
``index_add_``), not written once per touched row; a scatter with no free axis is serial.
"""

from __future__ import annotations

import math

from ..ir.expr import Expr, Read, Reduce, Var, binary, cast, const
from ..ir.traverse import free_vars, tensors_read, walk
from ..options import Options
from .nest import AddAt, Block, ChunkLoop, FlatLoop, Guard, Loop, LoopNest, ZeroFill
from .nest_build import COLUMN_CHUNK
from .nest_facts import unshadow, work_per_point
from .nest_reduce import ReduceLowering
from .scatter import Scatter

ZERO_PIECE = 1 << 15  # elements a thread zeroes at a time (128 KiB of float32)
SCALAR_DTYPES = ("float32", "float64", "int32", "int64")


def compilable(s: Scatter) -> bool:
    """A scatter this pass writes as a loop nest: its sum in the output's dtype, a
    non-empty output, every grid axis with a range."""
    return (s.dtype == s.out_dtype and s.dtype in SCALAR_DTYPES and math.prod(s.shape) > 0
            and all(v.extent for v in s.grid))


def scatter_nest(t, s: Scatter, name: str, options: Options | None = None) -> LoopNest:
    """The loop nest of the kernel ``name`` making ``t`` by the scatter ``s``."""
    return ScatterNestBuilder(t, s, name, options or Options.from_environment()).kernel


def scatter_reads(s: Scatter) -> list:
    """The tensors the scatter's value, guards and targets read, in order of first use."""
    found: dict = {}
    for e in (s.value, *s.conds, *s.out_index):
        found.update(dict.fromkeys(tensors_read(e)))
    return list(found)


class ScatterNestBuilder(ReduceLowering):
    """The pass building one scatter's nest (``scatter_nest``)."""

    def __init__(self, t, s: Scatter, name: str, options: Options):
        super().__init__(t, [t, *scatter_reads(s)], options)
        grid = frozenset(s.grid)
        self.value_expr = unshadow(s.value, grid)
        self.conds = [unshadow(c, grid) for c in s.conds]
        self.out_index = [unshadow(e, grid) for e in s.out_index]
        self.reductions = [x for x in walk(self.value_expr) if isinstance(x, Reduce)]
        self.kernel = self._function(s, name)

    def _function(self, s: Scatter, name: str) -> LoopNest:
        shape = s.shape
        free = [s.out_index[m] for m in range(len(shape)) if m not in s.pinned]
        steered = set().union(*(free_vars(e) for m, e in enumerate(self.out_index)
                                if m in s.pinned), *(free_vars(c) for c in self.conds))
        last = s.out_index[-1]
        inner = last if (len(shape) - 1 not in s.pinned and last not in steered
                         and shape[-1] > 1) else None
        outer = [v for v in free if v is not inner]
        axes = [v for v in s.grid if v not in free]  # the reduction's, in order
        size = math.prod(shape)
        work = math.prod(v.extent for v in s.grid) * work_per_point(self.value_expr)
        parallel = work >= self.options.parallel_work
        slab = bool(outer) and inner is None and outer == list(s.out_index[:len(outer)])
        if not slab:  # (else each iteration zeroes the part it owns, just before)
            self.root.items.append(ZeroFill(0, s.dtype, size, ZERO_PIECE if (
                parallel or size >= self.options.parallel_work) else 0))
        blocks: list[Block] = []
        if outer or inner is not None:
            chunks = -(-shape[-1] // COLUMN_CHUNK) if inner is not None else 0
            names = [self.bind(v, "i") for v in outer]
            count = math.prod(v.extent for v in outer) * max(chunks, 1)
            blocks.append(FlatLoop(frozenset(outer), loop=True, parallel=parallel and count > 1,
                                   vars=tuple(zip(names, (v.extent for v in outer),
                                                  (v.lo for v in outer), strict=True)),
                                   chunks=chunks, chunk=COLUMN_CHUNK if chunks else 0,
                                   columns=shape[-1] if chunks else 0))
            if slab:
                blocks[0].items.append(ZeroFill(0, s.dtype, math.prod(shape[len(outer):]),
                                                slab=True))
        unrolled = _unrolled_tail(axes, self.options.unroll)
        self.stack.extend(blocks)
        self._guards(outer, -1, axes)
        for k, a in enumerate(axes):
            short = k >= len(axes) - unrolled
            loop = Loop(frozenset((a,)), loop=True, unrolled=short, var=self.bind(a, "r"),
                        lo=a.lo, hi=a.lo + a.extent, role="reduce",
                        unroll=self.options.unroll if short else 0)
            self.stack.append(loop)
            blocks.append(loop)
            self._guards(outer, k, axes)
        if inner is not None:
            chunk = ChunkLoop(frozenset((inner,)), loop=True, var=self.bind(inner, "i"),
                              lo=inner.lo)
            self.stack.append(chunk)
        index = self.value(_flat_index(self.out_index, shape, inner))
        self.stack[-1].items.append(AddAt(0, index, self.value(self.value_expr)))
        if inner is not None:
            chunk.vectorize = chunk.straight() and not chunk.checks()
            self.close([chunk])
        opened = self.stack[1:]
        self.close(opened)
        return LoopNest(name, self.args, 1, self.root, self.gathers)

    def _guards(self, outer: list, k: int, axes: list) -> None:
        """A guard over the conditions whose last reduction axis used is ``axes[k]``
        (``k = -1``: those using none), opened in the innermost block."""
        here = []
        for c in self.conds:
            used = [j for j, a in enumerate(axes) if a in free_vars(c)]
            if (used[-1] if used else -1) == k:
                here.append(c)
        # a condition reading through data (``X[ids[d]] == m``) opens a guard of its own
        # under the ones before it (``0 <= ids[d] < rows``): its read is in bounds only there
        runs: list[list] = []
        for c in here:
            if not runs or _reads_through_data(c):
                runs.append([])
            runs[-1].append(c)
        for run in runs:
            self.stack.append(Guard(conds=tuple(self.value(c) for c in run)))


def _reads_through_data(e: Expr) -> bool:
    """Whether ``e`` reads a tensor at an index that is itself read from a tensor."""
    return any(isinstance(x, Read) and any(tensors_read(i) for i in x.indices)
               for x in walk(e))


def _unrolled_tail(axes: list, unroll: int) -> int:
    """How many of the innermost reduction axes to unroll: the longest run whose points
    number at most ``unroll`` (a bilinear sample's 2 x 2 taps)."""
    count, points = 0, 1
    for a in reversed(axes):
        if points * a.extent > unroll:
            break
        points *= a.extent
        count += 1
    return count


def _flat_index(out_index: list, shape: tuple, inner: Var | None) -> Expr:
    """The row-major offset of ``out_index`` in an array of ``shape`` (int64), the inner
    axis added last, so that the rest is computed outside its loop."""
    flat: Expr | None = None
    for m, e in enumerate(out_index):
        if e is inner:
            continue
        stride = math.prod(shape[m + 1:])
        term = cast(e, "int64")
        if stride != 1:
            term = binary("mul", term, const(stride, "int64"))
        flat = term if flat is None else binary("add", flat, term)
    if inner is not None:
        term = cast(inner, "int64")
        flat = term if flat is None else binary("add", flat, term)
    return flat if flat is not None else const(0, "int64")
