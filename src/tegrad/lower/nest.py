"""A general kernel as a loop-nest tree: what every target renders, decided once.

``T[i, j] = sum_k A[i, k] B[k, j]`` over 512 x 32 x 16 (written as a general kernel; the
planner would give this product to BLAS) is, once ``nest_build.py`` has decided,

    LoopNest k0 (arguments T, A, B; T written)
      FlatLoop i0 over 512 (and the chunks of 64 columns), parallel
        ColumnAccumulators: 64 of float32, each 0
        Loop r0 over [0, 16), role column_reduce     the reduction outside the columns
          Let t1 = A[i0 * 16 + r0]                   (free in i0 and r0: above the columns)
          ChunkLoop i1                                the columns, vectorized
            Let t2 = B[r0 * 32 + i1]
            Let t3 = mul(t1, t2)
            Accumulate sum: ColumnSlot += t3
        StoreColumns: T[i0 * 32 + i1] for the chunk's columns

The tree holds decisions, not spelling: which axes a thread shares out (``FlatLoop``),
which loop vectorizes and over which accumulators (``Loop.vectorize``,
``Loop.simd_reductions``), which is unrolled, what sits under a guard (``Guard``, a
barrier nothing inside moves above), where every value is computed (``Let``, at the
outermost block binding its free variables), which reads are checked or clamped, which
outputs are staged and streamed. A target's renderer spells each node (C with OpenMP:
``backends/c/render.py``) and decides nothing.

Values are named in order of first use (``t5``, ``acc2``, ``i0``, ``r1``) by the pass that
builds the tree: the same structure, shapes and dtypes give the same names, so the
rendered text can be the cache key. The right side of a ``Let`` is a small scalar form
over operands that are names or literals, and loop bounds a small integer form
(``nest_forms.py``).

Blocks are plain (mutable) dataclasses: code motion puts a value into a block that is
already open below others, and row caches are declared at the head of their block once
it is filled, so a block's items grow while the pass runs. Everything inside a block
(operands, statements, bounds) is frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.expr import Combiner
from .nest_forms import Lit, Operand, Ref, RowIndex

# statements --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Let:
    """An immutable local: ``name = value``."""

    name: str
    dtype: str
    value: object


@dataclass(frozen=True, slots=True)
class Declare:
    """A mutable local, set later by ``Assign`` (``init``: its value until then)."""

    name: str
    dtype: str
    init: Operand | None = None


@dataclass(frozen=True, slots=True)
class Assign:
    name: str
    value: Operand


@dataclass(frozen=True, slots=True)
class CheckIndex:
    """``name = value`` when ``0 <= value < extent``; else 0, and the first bad index
    reported with the number ``slot`` (``LoopNest.gathers[slot - 1]``)."""

    name: str
    value: Operand
    extent: int
    slot: int


@dataclass(frozen=True, slots=True)
class Store:
    """Kernel argument ``arg`` at ``index`` (a ``RowIndex`` or ``ResidueIndex``) gets ``value``."""

    arg: int
    index: object
    value: Operand


@dataclass(frozen=True, slots=True)
class ZeroFill:
    """Kernel argument ``arg`` (``size`` elements) set to zero, in pieces of ``piece``
    elements shared out over threads (0: at once, by one thread): a scatter's output,
    before its addends. ``slab``: in a parallel loop's iteration ``f``, only its own
    ``size`` elements from ``f * size`` on."""

    arg: int
    dtype: str
    size: int
    piece: int = 0
    slab: bool = False


@dataclass(frozen=True, slots=True)
class AddAt:
    """Kernel argument ``arg`` at the flat offset ``index`` (an operand) gets ``value``
    added: a scatter's addend (``nest_scatter.py``)."""

    arg: int
    index: Operand
    value: Operand


@dataclass(frozen=True, slots=True)
class RowBuffer:
    """A row cache of ``length`` elements; ``row``: the output's own row at that offset
    of argument 0, else a buffer of its own (``row_cache.py``)."""

    name: str
    dtype: str
    length: int
    row: RowIndex | None = None


@dataclass(frozen=True, slots=True)
class BufferStore:
    buffer: str
    index: Operand
    value: Operand


@dataclass(frozen=True, slots=True)
class Accumulator:
    """A reduction's accumulator, starting at ``identity``; ``nan``: with a NaN flag
    beside it (a float max/min, see ``Accumulate``)."""

    name: str
    dtype: str
    identity: Lit
    nan: bool = False


@dataclass(frozen=True, slots=True)
class ArgAccumulator:
    """An argmax/argmin's position (from ``start``), best value and found flag."""

    name: str
    dtype: str
    source_dtype: str
    start: int


@dataclass(frozen=True, slots=True)
class ColumnSlot:
    """A column nest's accumulator of the current column (``ColumnAccumulators``)."""


@dataclass(frozen=True, slots=True)
class Accumulate:
    """``acc = acc (kind) src`` where every ``mask`` operand holds. ``flag``: a float
    max/min compares plainly and raises ``acc``'s NaN flag (vectorizes as an ordinary
    max reduction; ``RestoreNaN`` after the loop). ``position``: an argmax's point, one
    ``(name, extent, lo)`` per axis; ``combiner``: a custom reduction's."""

    kind: str
    acc: Ref | ColumnSlot
    src: Operand
    dtype: str
    mask: tuple = ()
    flag: bool = False
    position: tuple = ()
    combiner: Combiner | None = None


@dataclass(frozen=True, slots=True)
class LaneAccumulator:
    """Float32 reduction ``name``'s vector of lanes, each the identity of ``kind`` (a sum,
    max or min; ``nest_lanes.py``), with a mask of lanes that saw NaN where ``nan``."""

    name: str
    kind: str = "sum"
    nan: bool = False


@dataclass(frozen=True, slots=True)
class FoldLanes:
    """``name`` combined with the reduction of its lanes (``nest_lanes.py``), after the
    loops adding to them; its NaN flag raised where a lane saw NaN (``nan``)."""

    name: str
    kind: str = "sum"
    nan: bool = False


@dataclass(frozen=True, slots=True)
class RestoreNaN:
    """``acc = NaN`` if its flag went up."""

    name: str


@dataclass(frozen=True, slots=True)
class ColumnAccumulators:
    """A column nest's ``size`` accumulators, each starting at ``identity``."""

    dtype: str
    identity: Lit
    size: int


@dataclass(frozen=True, slots=True)
class StoreColumns:
    """The column accumulators into argument 0 from ``base + lo`` on, one per column."""

    base: RowIndex
    lo: int


@dataclass(frozen=True, slots=True)
class OpenPartials:
    """Per thread, ``count`` zeroed rows of partial column sums, ``stride`` bytes apart."""

    count: int
    stride: int


@dataclass(frozen=True, slots=True)
class PartialRow:
    """This thread's row of column sum ``m`` (of ``count``), for ``AddPartial``."""

    m: int
    dtype: str
    count: int
    stride: int


@dataclass(frozen=True, slots=True)
class AddPartial:
    m: int
    index: Operand
    value: Operand


@dataclass(frozen=True, slots=True)
class CombinePartials:
    """Column sum ``m`` into argument ``arg``: its threads' rows added in thread order."""

    m: int
    arg: int
    dtype: str
    n: int
    count: int
    stride: int


@dataclass(frozen=True, slots=True)
class ClosePartials:
    """The partial rows released."""


@dataclass(frozen=True, slots=True)
class Stage:
    """Output ``arg`` of a parallel iteration written to a ``span``-element buffer first."""

    arg: int
    dtype: str
    span: int


@dataclass(frozen=True, slots=True)
class StreamOut:
    """The staged part of output ``arg`` (``nbytes``) written past the caches."""

    arg: int
    nbytes: int


# blocks ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Block:
    """A scope: ``items`` (statements and inner blocks) in order. ``binds``: the
    ``tegrad.ir`` variables it binds; ``barrier``: a guarded branch, nothing inside it
    is computed above it."""

    binds: frozenset = frozenset()
    barrier: bool = False
    items: list = field(default_factory=list)
    loop: bool = False
    unrolled: bool = False  # a short loop of constant trip count, unrolled

    def has_blocks(self) -> bool:
        return any(isinstance(i, Block) for i in self.items)

    def checks(self) -> bool:
        """Some gather's index is checked inside (``CheckIndex``: an error slot written, a
        branch): not a loop to vectorize."""
        return any(isinstance(i, CheckIndex) or isinstance(i, Block) and i.checks()
                   for i in self.items)

    def straight(self) -> bool:
        """No branches and no loops inside but unrolled ones: the enclosing loop can be
        vectorized across its iterations."""
        return all(i.unrolled and i.straight() for i in self.items if isinstance(i, Block))


@dataclass(eq=False)
class Loop(Block):
    """``var`` over ``[lo, hi)``. ``role``: ``output`` (an output axis), ``reduce`` (a
    reduction's axis) or ``column_reduce`` (a column nest's reduce loops). ``unroll``:
    the trip count to unroll (0: none); ``vectorize``: across iterations, with
    ``simd_reductions`` (``(kind, accumulator, nan flag)``) carried. ``partials``: a
    reduction's loop shared out over threads, each thread's part of ``[lo, hi)`` into
    its own copies of these accumulators (``(name, dtype, identity, kind, nan flag)``),
    combined in thread order after the loop (a 0-d kernel's sum: deterministic for a
    thread count). ``lanes``: the loop is one masked vector of that many lanes, adding
    to its sums' ``LaneAccumulator``s (``nest_lanes.py``)."""

    var: str = ""
    lo: object = 0
    hi: object = 0
    role: str = "output"
    unroll: int = 0
    vectorize: bool = False
    simd_reductions: tuple = ()
    partials: tuple = ()
    lanes: int = 0


@dataclass(eq=False)
class FlatLoop(Block):
    """One loop over the leading axes ``vars`` (``(name, extent, lo)`` each, the first
    outermost), shared out over threads when ``parallel``. ``chunks``: a column nest's
    chunks of ``chunk`` columns of ``columns`` follow the axes. ``stages``: outputs staged
    per iteration (``Stage``)."""

    vars: tuple = ()
    parallel: bool = False
    chunks: int = 0
    chunk: int = 0
    columns: int = 0
    stages: list = field(default_factory=list)


@dataclass(eq=False)
class ChunkLoop(Block):
    """A column nest's innermost loop over the columns of the current chunk; ``var`` is
    the column, ``lo`` plus the chunk's start plus the loop's position. Its reads are
    contiguous: it vectorizes (``vectorize``)."""

    var: str = ""
    lo: int = 0
    vectorize: bool = True


@dataclass(eq=False)
class Guard(Block):
    """Its items run where every one of ``conds`` holds (``negate``: where the one
    condition does not); a barrier."""

    barrier: bool = True
    conds: tuple = ()
    negate: bool = False


@dataclass
class Gather:
    """A checked read of an index tensor, for the error message."""

    tensor: str
    axis: int
    index: str
    dim: int


@dataclass(eq=False)
class LoopNest:
    """The function ``name``: ``args`` (tensors; the first ``outputs`` written), its
    ``body`` and the checked reads ``gathers`` (``CheckIndex.slot`` numbers them)."""

    name: str
    args: list
    outputs: int
    body: Block
    gathers: list
