"""A general kernel of the plan as one Triton kernel: the lanes, the loops, code motion.

**Lanes.** A kernel over the domain ``D = d0 x ... x dn`` (a compute's axes, or a
scatter's grid) is launched on ``cdiv(|D|, XBLOCK)`` programs. Program ``p`` owns the flat
points ``xindex = p XBLOCK + [0, XBLOCK)``, a ``[XBLOCK, 1]`` block; each axis is
``(xc // stride) % extent`` of ``xc = min(xindex, |D| - 1)``. Clamping the flat index makes
every lane of a tail block a copy of the last point, so every value a lane computes is one
the reference computes too; only the store is masked (``xindex < |D|``).

**The rows layout.** Where the body has a row statistic (a reduction depending on some of
the output axes only: a softmax's max and sum over the last axis or over the channels, an
instance norm's mean over h and w), the lanes are the rows of the axes the statistics
read and the other axes lie along the block's ``CBLOCK`` columns (``cindex``, flattened
and clamped likewise, ``by_rows``): the statistic, computed in a ``[XBLOCK, 1]`` value,
is made once per row. A reduction that reads a column axis is then a scalar loop over
``[XBLOCK, CBLOCK]`` values.

**Loads never leave their tensors.** The NumPy reference clips every index into its
dimension (the verifier proved that a read whose index can leave the tensor sits under a
guard that discards it, ``host/evaluate.py``); here an index that the interval analysis
cannot keep in ``[0, dim)`` is clamped the same way. So loads need no masks: a value
computed off its guards is never used, and no lane reads outside an array, whatever code
motion does with guarded reads.

**Reductions.** ``Reduce(f, source, axes, where)`` of ``R`` points is

* *blocked* where it depends on the lanes' axes only (it would be computed at the top of
  the kernel) and ``f`` is a sum, max or min: a loop over chunks of ``RBLOCK`` points,
  the source evaluated on a ``[XBLOCK, RBLOCK]`` block, accumulated elementwise
  (``acc = f(acc, where ? source : identity)``) and folded once after the loop
  (``tl.sum``/``tl.max``/``tl.min`` along the chunk axis, a NaN flag beside a max or min);
* else a *scalar loop*: one point per iteration, ``acc = f(acc, value)`` on the block of
  its context; it is exact for any combiner (products, argmax with NumPy's first-index
  ties, custom combiners) and for reductions nested in a blocked one.

The block shape of a value follows from its free variables: ``XBLOCK`` rows if it reads a
lane axis, ``RBLOCK`` columns if it reads a blocked reduction's axis, ``CBLOCK`` columns
if it reads a column axis of the rows layout (never both), ``[1, 1]`` else.

**Code motion.** Every value is placed in the innermost block that binds one of its free
variables (the top of the kernel, or the loop of a reduction), so a softmax's row max is
computed once per lane, before the row sum's loop, not once per point of it. A value
containing a gather through ids is placed where it is met (its index check needs the
conditions of its path). Values are named once per block (interned nodes: a memo by node
and block); a block's names die with it.

**Gathers through ids** (an index that reads a tensor) are checked: a lane whose index is
outside its dimension while every condition of its path holds sets flag ``g`` of the
kernel's error buffer and stores its index there; the program raises the reference's
``IndexError`` after the run.

**Integers.** Offsets are int32 unless a tensor of the kernel has ``2^31`` elements or
more (then the lane and loop indices are int64, Inductor's rule).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from ...ir import dtype as dt
from ...ir.bounds import interval, is_pure_index
from ...ir.expr import (
    Binary,
    Cast,
    Combiner,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    node_memo,
    split_conjunction,
)
from ...ir.tensor import Compute, Tensor
from ...ir.traverse import free_vars, walk
from ...lower.nest_facts import index_in_bounds
from ...lower.scatter import Scatter
from . import tl_math
from .tl_ops import (
    BINARY,
    BY_KIND,
    COMPARISONS,
    FLOAT_VALUED,
    INTEGRAL_IDENTITY,
    LOGIC,
    PLAIN_WHEN_NON_NEGATIVE,
    POWERS,
    SIGNATURE_DTYPE,
    TL_DTYPE,
    UNARY,
    in_dtype,
)

WIDE = 1 << 31  # elements from which offsets are int64
MAX_COLUMNS = 4096  # the widest last axis the rows layout takes in one block
SPLIT_LANES, SPLIT_POINTS, MAX_SPLITS = 1024, 4096, 256  # split_reduction
BLOCKED = ("sum", "max", "min")


class Unsupported(NotImplementedError):
    """A kernel this generator cannot write (the target then fails, saying what)."""


@dataclass(frozen=True)
class KernelText:
    """One kernel's module: ``text`` defines ``name``, taking the outputs' pointers, then
    those of ``reads``, then (with ``gathers``) the error buffer, then ``XBLOCK`` and
    ``RBLOCK`` and ``CBLOCK``. ``outputs``: ``(shape, dtype)`` per output; ``numel``: the
    lanes (rows in the rows layout); ``columns``: the last axis's extent in the rows layout
    (1: the flat one); ``reduction``: the most points of a blocked reduction (0: none);
    ``gathers``: per checked gather, its message (``{value}`` for the index found)."""

    name: str
    text: str
    reads: tuple[Tensor, ...]
    outputs: tuple[tuple[tuple[int, ...], str], ...]
    numel: int
    reduction: int
    gathers: tuple[str, ...]
    wide: bool
    columns: int = 1
    splits: int = 1  # programs along a split reduction (its output: partials per split)
    fold: str = ""  # a split reduction's combiner ("sum", "max", "min"), folding the splits

    def signature(self) -> dict:
        """Triton's signature of the kernel's arguments (for compiling it ahead of a GPU)."""
        sig = {f"out{k}": f"*{SIGNATURE_DTYPE[d]}" for k, (_, d) in enumerate(self.outputs)}
        sig.update({f"in{k}": f"*{SIGNATURE_DTYPE[t.dtype]}" for k, t in enumerate(self.reads)})
        if self.gathers:
            sig["err"] = "*i64"
        sig.update(XBLOCK="constexpr", RBLOCK="constexpr", CBLOCK="constexpr")
        return sig


def general_text(name: str, t: Compute) -> KernelText:
    """The kernel writing compute ``t`` (its own body, over its axes), in the rows layout
    where a reduction of it is one per row (``by_rows``), else flat; a large sum, max or
    min over few outputs in splits (``split_reduction``)."""
    w = _Writer(t.axes, _wide(t, [t.shape]), by_rows(t))
    found = split_reduction(t)
    if found is not None:
        w.split_reduce, w.splits = found
        value = w.emit(found[0], ())
        w.put(0, f"tl.store(out0 + xindex * {w.splits} + tl.program_id(1), "
                 f"{w.broadcast(value)}, mask=xmask)")
        return replace(w.text(name, [((*t.shape, w.splits), found[0].dtype)]),
                       fold=found[0].combiner.kind)
    value = w.emit(t.body, ())
    w.put(0, f"tl.store(out0 + {w.store_offset}, {w.broadcast(value)}.to({TL_DTYPE[t.dtype]}), "
             f"mask={w.store_mask})")
    return w.text(name, [(t.shape, t.dtype)])


def split_reduction(t: Compute) -> tuple[Reduce, int] | None:
    """``(the reduction, splits)`` where ``t``'s body is (a cast of) a sum, max or min of
    at least ``SPLIT_POINTS`` points for at most ``SPLIT_LANES`` outputs (a loss, a bias
    or norm weight gradient, a batch norm's statistics): one program per output would
    leave a GPU idle, so program ``(x, s)`` reduces split ``s`` of the points into
    ``partial[x, s]``, and the program folds the splits in order after the kernel (the
    same sums in the same order every run)."""
    body = t.body.a if isinstance(t.body, Cast) else t.body
    if not (isinstance(body, Reduce) and body.combiner.kind in BLOCKED):
        return None
    points = math.prod(a.extent for a in body.axes)
    lanes = math.prod(t.shape)
    if lanes > SPLIT_LANES or points < SPLIT_POINTS:
        return None
    return body, min(MAX_SPLITS, 2 * points // SPLIT_POINTS)


def by_rows(t: Compute) -> tuple[Var, ...]:
    """The column axes of the rows layout, or ``()`` for the flat one. A row statistic is
    a reduction of the body over some of its axes only (a softmax's max over the last
    axis, or over the channels of NCHW; an instance norm's mean over h and w); the rows
    are the axes the statistics read, the columns the others, so each statistic is
    computed once per row. Taken where the columns hold 2 to ``MAX_COLUMNS`` points."""
    axes = frozenset(t.axes)
    read = set()
    for x in walk(t.body):
        if isinstance(x, Reduce) and free_vars(x) <= axes and free_vars(x) != axes:
            read |= free_vars(x)
    columns = tuple(v for v in t.axes if v not in read)
    if not read or not 2 <= math.prod(v.extent for v in columns) <= MAX_COLUMNS:
        return ()
    return columns


def scatter_text(name: str, s: Scatter) -> KernelText:
    """The kernel of a scatter's grid: per point its flat target in the output (-1 where
    a condition fails) and its value, in the accumulation dtype (``segments.py`` adds
    them up in grid order)."""
    grid_shape = tuple(v.extent for v in s.grid)
    w = _Writer(s.grid, _wide(s, [grid_shape, s.shape]))
    holds = [w.emit(c, s.conds[:k]) for k, c in enumerate(s.conds)]
    strides = [math.prod(s.shape[m + 1:]) for m in range(len(s.shape))]
    flat = [f"{w.emit(e, s.conds)}.to(tl.int64) * {stride}"
            for e, stride in zip(s.out_index, strides, strict=True)]
    target = " + ".join(flat) or "tl.zeros([1, 1], tl.int64)"
    mask = " & ".join(holds) or "(xindex >= 0)"
    w.put(0, f"tl.store(out0 + xindex, tl.broadcast_to(tl.where({mask}, {target}, -1), "
             "[XBLOCK, 1]), mask=xmask)")
    accumulate = "float64" if dt.is_float(s.dtype) else s.dtype
    value = w.cast(w.emit(s.value, s.conds), s.value.dtype, accumulate)
    w.put(0, f"tl.store(out1 + xindex, {w.broadcast(value)}.to({TL_DTYPE[accumulate]}), "
             "mask=xmask)")
    return w.text(name, [(grid_shape, "int64"), (grid_shape, accumulate)])


def _wide(owner, shapes: list) -> bool:
    body = owner.body if isinstance(owner, Compute) else owner.value
    sizes = [math.prod(s) for s in shapes]
    sizes += [math.prod(x.tensor.shape) for x in walk(body) if isinstance(x, Read)]
    if isinstance(owner, Scatter):
        for c in (*owner.conds, *owner.out_index):
            sizes += [math.prod(x.tensor.shape) for x in walk(c) if isinstance(x, Read)]
    return max(sizes, default=0) >= WIDE


@dataclass
class _Block:
    indent: int
    lines: list
    parent: int = 0  # the block its lines join when it closes
    shadowed: list = field(default_factory=list)  # (var, its outer binding) to restore


class _Writer:
    """Writes one kernel's body (module docstring): ``emit(e, conds)`` names the value of
    ``e`` under the conditions ``conds`` of its path."""

    def __init__(self, domain, wide: bool, columns: tuple = ()):
        self.domain = tuple(domain)
        self.wide = wide
        self.rows = rows = bool(columns)
        self.index = "tl.int64" if wide else "tl.int32"
        self.blocks = [_Block(1, [])]
        self.level_of: dict[Var, int] = {}
        self.dims_of: dict[Var, tuple[bool, str]] = {}  # rows?, "R" / "C" / "" columns
        self.name_of: dict[Var, str] = {}
        self.memo: dict = {}
        self.split_reduce: Reduce | None = None  # made in ``splits`` parts (split_reduction)
        self.splits = 1
        self.numbers = itertools.count()
        self.reads: dict[Tensor, str] = {}
        self.gathers: list[str] = []
        self.reduction = 0
        lanes = tuple(v for v in self.domain if v not in columns)
        self.numel = math.prod(v.extent for v in lanes)
        self.columns = math.prod(v.extent for v in columns) if rows else 1
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        self.put(0, f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        self.put(0, f"xmask = xindex < {self.numel}")
        self.put(0, f"xc = tl.minimum(xindex, {max(self.numel - 1, 0)})")
        self._bind_flat(lanes, "xc", 0, (True, ""))
        self.store_offset, self.store_mask = "xindex", "xmask"
        if rows:  # the column axes along the block's columns
            self.put(0, "cindex = tl.arange(0, CBLOCK)[None, :]")
            self.put(0, f"cmask = cindex < {self.columns}")
            self.put(0, f"cc = tl.minimum(cindex, {self.columns - 1})")
            self._bind_flat(columns, "cc", 0, (False, "C"))
            self.store_mask = "xmask & cmask"
            if self.domain[len(lanes):] == columns:  # the trailing axes: one offset each
                self.store_offset = f"xindex * {self.columns} + cindex"
            else:
                shape = [v.extent for v in self.domain]
                self.store_offset = " + ".join(
                    f"{self.name_of[v]} * {math.prod(shape[k + 1:])}"
                    for k, v in enumerate(self.domain))

    # -- the text --------------------------------------------------------------------
    def put(self, level: int, line: str) -> None:
        block = self.blocks[level]
        block.lines.append("    " * block.indent + line)

    def fresh(self, prefix: str = "t") -> str:
        return f"{prefix}{next(self.numbers)}"

    def assign(self, level: int, text: str, prefix: str = "t") -> str:
        name = self.fresh(prefix)
        self.put(level, f"{name} = {text}")
        return name

    def text(self, name: str, outputs: list) -> KernelText:
        args = [f"out{k}" for k in range(len(outputs))]
        args += [self.reads[t] for t in self.reads]
        if self.gathers:
            args.append("err")
        head = (f"@triton.jit\ndef {name}({', '.join(args)}, XBLOCK: tl.constexpr, "
                "RBLOCK: tl.constexpr, CBLOCK: tl.constexpr):")
        body = "\n".join(self.blocks[0].lines)
        return KernelText(name, f"{tl_math.TEXT}\n\n{head}\n{body}\n", tuple(self.reads),
                          tuple((tuple(s), d) for s, d in outputs), self.numel,
                          self.reduction, tuple(self.gathers), self.wide, self.columns,
                          self.splits)

    def shape(self, dims: tuple[bool, str]) -> str:
        second = {"R": "RBLOCK", "C": "CBLOCK", "": 1}[dims[1]]
        return f"[{'XBLOCK' if dims[0] else 1}, {second}]"

    def broadcast(self, name: str) -> str:
        return f"tl.broadcast_to({name}, [XBLOCK, {'CBLOCK' if self.rows else 1}])"

    # -- variables and placement ---------------------------------------------------------
    def _bind_flat(self, axes, flat: str, level: int, dims: tuple[bool, str]) -> None:
        """Bind ``axes`` (row-major) from the flat index ``flat`` at ``level``."""
        extents = [v.extent for v in axes]
        for k, v in enumerate(axes):
            stride = math.prod(extents[k + 1:])
            text = flat if stride == 1 else f"({flat} // {stride})"
            if k > 0 and extents[k] * stride < math.prod(extents):
                text = f"({text} % {extents[k]})"
            if v.lo:
                text = f"({text} + {v.lo})"
            if v in self.level_of:  # a reduction rebinding a variable bound around it
                self.blocks[level].shadowed.append(
                    (v, (self.name_of[v], self.level_of[v], self.dims_of[v])))
            self.name_of[v] = self.assign(level, text, "i")
            self.level_of[v] = level
            self.dims_of[v] = dims

    def level(self, e: Expr) -> int:
        """The innermost block binding a free variable of ``e`` (0: the top)."""
        return max((self.level_of[v] for v in free_vars(e)), default=0)

    def dims(self, e: Expr) -> tuple[bool, str]:
        """Whether a value of ``e`` spans the block's rows, and which columns: a blocked
        reduction's chunk ("R"), the last axis in the rows layout ("C") or none ("")."""
        fv = free_vars(e)
        second = {self.dims_of[v][1] for v in fv} - {""}
        if len(second) > 1:
            raise Unsupported("a value over both the columns and a reduction's chunk")
        return any(self.dims_of[v][0] for v in fv), next(iter(second), "")

    def open(self, header: str, level: int) -> int:
        """A loop block inside ``level``'s; its lines join it at ``close``."""
        self.blocks.append(_Block(self.blocks[level].indent + 1, [header], level))
        return len(self.blocks) - 1

    def close(self, level: int) -> None:
        block = self.blocks.pop()
        parent = self.blocks[block.parent]
        parent.lines.append("    " * (block.indent - 1) + block.lines[0])
        parent.lines.extend(block.lines[1:])
        gone = len(self.blocks)
        self.memo = {k: v for k, v in self.memo.items() if k[1] < gone}
        for v in [v for v, lv in self.level_of.items() if lv >= gone]:
            del self.level_of[v]
        for v, (name, lv, dims) in reversed(block.shadowed):
            self.name_of[v], self.level_of[v], self.dims_of[v] = name, lv, dims

    # -- expressions --------------------------------------------------------------------
    def emit(self, e: Expr, conds: tuple) -> str:
        if isinstance(e, Var):
            return self.name_of[e]
        if _gathers(e):  # where it is met, under its conditions (module docstring)
            key = (e, len(self.blocks) - 1, conds)
        else:
            key = (e, self.level(e))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self.render(e, conds, key[1])
        return hit

    def cast(self, name: str, have: str, want: str) -> str:
        if have == want:
            return name
        if want == "bool":
            return f"({name} != 0)"
        return f"{name}.to({TL_DTYPE[want]})"

    def render(self, e: Expr, conds: tuple, level: int) -> str:
        if isinstance(e, Const):
            return self.constant(e)
        if isinstance(e, Read):
            return self.read(e, conds, level)
        if isinstance(e, Unary):
            a = self.emit(e.a, conds)
            if e.op in FLOAT_VALUED:
                a = self.cast(a, e.a.dtype, e.dtype)
            elif e.op in INTEGRAL_IDENTITY and not dt.is_float(e.a.dtype):
                return self.cast(a, e.a.dtype, e.dtype)
            return self.assign(level, in_dtype(UNARY[e.op], e.dtype).format(a=a))
        if isinstance(e, Cast):
            return self.assign(level, self.cast(self.emit(e.a, conds), e.a.dtype, e.dtype))
        if isinstance(e, Binary):
            return self.binary(e, conds, level)
        if isinstance(e, Select):
            c = self.emit(e.cond, conds)
            a = self.cast(self.emit(e.a, conds + tuple(split_conjunction(e.cond))),
                          e.a.dtype, e.dtype)
            b = self.cast(self.emit(e.b, conds + (Unary("not", e.cond, "bool"),)),
                          e.b.dtype, e.dtype)
            return self.assign(level, f"tl.where({c}, {a}, {b})")
        if isinstance(e, Reduce):
            return self.reduce(e, conds, level)
        raise Unsupported(f"no Triton form for {type(e).__name__}")

    def constant(self, e: Const) -> str:
        return self.assign(0, f"tl.full([1, 1], {_literal(e.value, e.dtype)}, "
                              f"{TL_DTYPE[e.dtype]})", "c")

    def binary(self, e: Binary, conds: tuple, level: int) -> str:
        op = e.op
        if op == "pow" and isinstance(e.b, Const) and float(e.b.value) in POWERS:
            form = POWERS[float(e.b.value)]
            if form is None:
                return self.constant(Const(1, e.dtype))
            a = self.cast(self.emit(e.a, conds), e.a.dtype, e.dtype)
            return self.assign(level, in_dtype(form, e.dtype).format(a=a))
        a, b = self.emit(e.a, conds), self.emit(e.b, conds)
        if op in COMPARISONS:
            common = dt.promote(e.a.dtype, e.b.dtype)
            a, b = self.cast(a, e.a.dtype, common), self.cast(b, e.b.dtype, common)
            return self.assign(level, BINARY[op].format(a=a, b=b))
        if op in LOGIC:
            a, b = self.cast(a, e.a.dtype, "bool"), self.cast(b, e.b.dtype, "bool")
            return self.assign(level, BINARY[op].format(a=a, b=b))
        a, b = self.cast(a, e.a.dtype, e.dtype), self.cast(b, e.b.dtype, e.dtype)
        if op in BY_KIND:
            whole = not dt.is_float(e.dtype)
            if whole and op in PLAIN_WHEN_NON_NEGATIVE and _non_negative(e.a, e.b):
                form = PLAIN_WHEN_NON_NEGATIVE[op]
            else:
                form = BY_KIND[op][0 if whole else 1]
                if form is None:
                    raise Unsupported(f"{op} of {e.dtype} operands")
            return self.assign(level, form.format(a=a, b=b))
        if op == "pow" and not dt.is_float(e.dtype):
            a, b = self.cast(a, e.dtype, "float64"), self.cast(b, e.dtype, "float64")
            return self.assign(level, f"round_even(power({a}, {b})).to({TL_DTYPE[e.dtype]})")
        return self.assign(level, BINARY[op].format(a=a, b=b))

    def read(self, e: Read, conds: tuple, level: int) -> str:
        pointer = self.reads.get(e.tensor)
        if pointer is None:
            pointer = self.reads[e.tensor] = f"in{len(self.reads)}"
        shape = e.tensor.shape
        terms = []
        for axis, (index, dim) in enumerate(zip(e.indices, shape, strict=True)):
            if dim == 1:
                continue
            name = self.emit(index, conds)
            if self.wide:
                name = f"{name}.to(tl.int64)"
            if not is_pure_index(index):
                self.check_gather(e, axis, name, dim, conds, level)
            if not (is_pure_index(index) and index_in_bounds(index, dim)):
                name = f"tl.minimum(tl.maximum({name}, 0), {dim - 1})"
            stride = math.prod(shape[axis + 1:])
            terms.append(name if stride == 1 else f"{name} * {stride}")
        offset = " + ".join(terms) or "0"
        return self.assign(level, f"tl.load({pointer} + {offset} + tl.zeros([1, 1], "
                                  f"{self.index}))")

    def check_gather(self, e: Read, axis: int, name: str, dim: int, conds: tuple,
                     level: int) -> None:
        g = len(self.gathers)
        self.gathers.append(f"gather {e.tensor.name}[...] index {axis} got value {{value}}, "
                            f"outside [0, {dim}) (from {e.indices[axis]!r})")
        # inside a blocked reduction of the rows layout, conditions over the last axis
        # ("C") cannot join those over the chunk ("R") in one block: they come apart
        chunked = "R" in {self.dims(x)[1] for x in (e.indices[axis], *conds)}
        mine, across = [], []
        for k, c in enumerate(conds):
            held = self.cast(self.emit(c, conds[:k]), c.dtype, "bool")
            (across if chunked and self.dims(c)[1] == "C" else mine).append(held)
        bad = self.assign(level, " & ".join([f"(({name} < 0) | ({name} >= {dim}))", *mine]),
                          "bad")
        first = f"tl.where({bad}, {name}.to(tl.int64), {1 << 62})"
        if across:
            # a reduction hoisted out of a condition on the last axis (rows layout): some
            # point of the chunk is bad and some column's condition holds, row by row
            rows = self.assign(level, f"tl.max({bad}.to(tl.int32), 1)[:, None] > 0")
            first = self.assign(level, f"tl.min({first}, 1)[:, None]")
            bad = self.assign(level, " & ".join([rows, *across]), "bad")
            first = f"tl.where({bad}, {first}, {1 << 62})"
        found = self.assign(level, f"tl.max({bad}.to(tl.int32))")
        first = self.assign(level, f"tl.min({first})")
        self.put(level, f"tl.store(err + {2 * g}, {found}.to(tl.int64), mask={found} > 0)")
        self.put(level, f"tl.store(err + {2 * g + 1}, {first}, mask={found} > 0)")

    # -- reductions -----------------------------------------------------------------------
    def reduce(self, e: Reduce, conds: tuple, level: int) -> str:
        kind = e.combiner.kind
        inner = conds + (tuple(split_conjunction(e.where)) if e.where is not None else ())
        points = math.prod(a.extent for a in e.axes)
        if level == 0 and kind in BLOCKED and self.dims(e)[1] != "C":
            return self.blocked(e, conds, inner, points)
        return self.scalar_loop(e, conds, inner, points, level)

    def _masks(self, e: Reduce, conds: tuple, lane: str | None) -> list[str]:
        """The reduction's ``where`` and the chunk's ``lane`` mask, as conditions."""
        masks = [lane] if lane else []
        if e.where is not None:
            masks.append(self.cast(self.emit(e.where, conds), e.where.dtype, "bool"))
        return masks

    def _masked(self, e: Reduce, conds: tuple, value: str, fill: str, lane: str | None) -> str:
        """``value`` where the reduction's ``where`` (and the chunk's ``lane`` mask) holds,
        else ``fill``."""
        masks = self._masks(e, conds, lane)
        return f"tl.where({' & '.join(masks)}, {value}, {fill})" if masks else value

    def _taken(self, e: Reduce, conds: tuple, test: str, lane: str | None) -> str:
        """The condition ``test`` where the reduction's masks hold."""
        return " & ".join([*self._masks(e, conds, lane), test])

    def blocked(self, e: Reduce, conds: tuple, inner: tuple, points: int) -> str:
        kind, dtype = e.combiner.kind, e.dtype
        self.reduction = max(self.reduction, points)
        dims = self.dims(e)
        identity = _literal(e.combiner.identity_value(dtype), dtype)
        acc = self.assign(0, f"tl.full([{'XBLOCK' if dims[0] else 1}, RBLOCK], {identity}, "
                             f"{TL_DTYPE[dtype]})", "acc")
        chunk = self.fresh("r")
        if e is self.split_reduce:  # program (x, s) sums split s of the points
            part = self.assign(0, f"(({-(-points // self.splits)} + RBLOCK - 1) // RBLOCK) "
                                  "* RBLOCK", "per")
            start = self.assign(0, f"tl.program_id(1) * {part}", "first")
            level = self.open(f"for {chunk} in range({start}, tl.minimum({start} + {part}, "
                              f"{points}), RBLOCK):", 0)
        else:
            level = self.open(f"for {chunk} in range(0, {points}, RBLOCK):", 0)
        lanes = self.assign(level, f"{chunk} + tl.arange(0, RBLOCK)[None, :]", "r")
        if self.wide:
            lanes = self.assign(level, f"{lanes}.to(tl.int64)", "r")
        lane = self.assign(level, f"{lanes} < {points}", "rm")
        clamped = self.assign(level, f"tl.minimum({lanes}, {max(points - 1, 0)})", "r")
        self._bind_flat(e.axes, clamped, level, (False, "R"))
        value = self.cast(self.emit(e.source, inner), e.source.dtype, dtype)
        self._accumulate(e, conds, acc, value, lane, level)
        self.close(level)
        folded = self.assign(0, f"tl.{kind}({acc}, 1)[:, None]")
        if kind != "sum" and dt.is_float(dtype):
            nan = self.assign(0, f"tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None]")
            folded = self.assign(0, f"tl.where({nan} > 0, NAN, {folded})")
        return folded

    def scalar_loop(self, e: Reduce, conds: tuple, inner: tuple, points: int, level: int) -> str:
        comb, dtype = e.combiner, e.dtype
        kind = comb.kind
        shape = self.shape(self.dims(e))
        source_dtype = e.source.dtype
        if kind in ("argmax", "argmin"):
            worst = _literal(Combiner("max" if kind == "argmax" else "min", "")
                             .identity_value(source_dtype), source_dtype)
            best = self.assign(level, f"tl.full({shape}, {worst}, {TL_DTYPE[source_dtype]})",
                               "best")
            first = e.axes[0].lo if len(e.axes) == 1 else 0
            acc = self.assign(level, f"tl.full({shape}, {first}, {TL_DTYPE[dtype]})", "acc")
        else:
            identity = comb.identity_value(dtype)
            if isinstance(identity, Expr):
                raise Unsupported(f"combiner {comb.name}: an identity that is an expression")
            acc = self.assign(level, f"tl.full({shape}, {_literal(identity, dtype)}, "
                                     f"{TL_DTYPE[dtype]})", "acc")
        step = self.fresh("s")
        loop = self.open(f"for {step} in range({points}):", level)
        point = self.assign(loop, f"{step} + tl.zeros([1, 1], {self.index})", "s")
        self._bind_flat(e.axes, point, loop, (False, ""))
        if kind in ("argmax", "argmin"):
            value = self.emit(e.source, inner)
            better = ">" if kind == "argmax" else "<"
            test = f"({value} {better} {best})"
            if dt.is_float(source_dtype):
                test = f"({test} | (({value} != {value}) & ({best} == {best})))"
            taken = self.assign(loop, self._taken(e, conds, test, None))
            position = point if len(e.axes) != 1 or not first else f"({point} + {first})"
            self.put(loop, f"{best} = tl.where({taken}, {value}, {best})")
            self.put(loop, f"{acc} = tl.where({taken}, {position}.to({TL_DTYPE[dtype]}), {acc})")
        elif kind == "custom":
            value = self.cast(self.emit(e.source, inner), source_dtype, dtype)
            value = self.assign(loop, self._masked(
                e, conds, value, _literal(comb.identity_value(dtype), dtype), None))
            for param, name in ((comb.lhs, acc), (comb.rhs, value)):
                self.name_of[param], self.level_of[param] = name, loop
                self.dims_of[param] = self.dims(e)
            combined = self.cast(self.emit(comb.combine, ()), comb.combine.dtype, dtype)
            self.put(loop, f"{acc} = tl.broadcast_to({combined}, {shape})")
        else:
            value = self.cast(self.emit(e.source, inner), source_dtype, dtype)
            self._accumulate(e, conds, acc, value, None, loop)
        self.close(loop)
        return acc

    def _accumulate(self, e: Reduce, conds: tuple, acc: str, value: str, lane: str | None,
                    level: int) -> None:
        """``acc = f(acc, value)`` where the reduction's masks hold, for ``f`` a sum, a
        product, or a max or min that keeps NaN."""
        kind = e.combiner.kind
        if kind in ("sum", "prod"):
            fill, sign = ("0", "+") if kind == "sum" else ("1", "*")
            self.put(level, f"{acc} = {acc} {sign} {self._masked(e, conds, value, fill, lane)}")
            return
        test = f"({value} {'>' if kind == 'max' else '<'} {acc})"
        if dt.is_float(e.dtype):
            test = f"({test} | ({value} != {value}))"
        self.put(level, f"{acc} = tl.where({self._taken(e, conds, test, lane)}, {value}, {acc})")


def _literal(value, dtype: str) -> str:
    """``value`` as Triton source of ``dtype``."""
    if dtype == "bool":
        return "1" if value else "0"
    if dt.is_float(dtype):
        value = float(value)
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INF" if value > 0 else "-INF"
        return repr(value)
    return str(int(value))


def _non_negative(a: Expr, b: Expr) -> bool:
    """Whether ``a >= 0`` and ``b > 0`` over their variables' ranges (plain ``//``, ``%``)."""
    ia, ib = interval(a), interval(b)
    return (ia is not None and ia[0] is not None and ia[0] >= 0
            and ib is not None and ib[0] is not None and ib[0] > 0)


def _gathers(e: Expr) -> bool:
    """Whether ``e`` reads through ids anywhere (memoized on the node)."""
    memo = node_memo(e)
    found = memo.get("cuda_gathers")
    if found is None:
        found = memo["cuda_gathers"] = any(
            isinstance(x, Read) and not all(map(is_pure_index, x.indices)) for x in walk(e))
    return found
