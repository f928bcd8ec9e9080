"""Values of a loop nest: every sub-expression as a ``Let``, placed by code motion.

**Code motion.** A sub-expression is computed once, at the outermost open block where
all its free variables are bound (``place``): in a softmax backward ``dX[i, j] = Y[i, j]
(dY[i, j] - sum_k dY[i, k] Y[i, k])`` the sum is computed once per row, in the ``i``
loop, not once per element. Structurally equal sub-expressions are the same node
(interning), so they are computed once (common sub-expressions, ``memo``).

**Guards.** A ``select`` whose branches are always safe is branch-free (``Choose``),
which vectorizes. A branch whose affine reads could leave their tensor when the
condition is false (a padding's ``select(1 <= i, U[i - 1, j], 0)``) is branch-free too,
its reads at indices clamped into the tensor (``clampable``): the value read there is
discarded. Compilers if-convert a guarded load into a masked load, and gcc 12.2
vectorizes some such loops wrongly once it has unrolled a short inner loop (issue 27);
clamped reads are plain loads. So is a gather whose data-dependent index the select's
condition bounds (``nest_facts.condition_bounds``: a bilinear sample's corner
``select(0 <= iy && iy <= h - 1 && .., x[iy, ix], 0)``): wherever the branch is taken
the clamp changes nothing, and no check is needed (nor in a ``Guard`` on such a
condition); such a value is reused only where the same bounds hold (``relies``). A
branch that holds a reduction with a ``where`` or over more than ``Options.unroll``
points, or a gather no condition bounds (whose index is checked), is evaluated in a
``Guard``, and nothing inside it moves above it: such a read is never evaluated outside
the guards that the verifier proved keep it in bounds. Indices read from integer tensors
are checked on every read (``CheckIndex``); the first bad one is reported.

Reductions are the subclass's (``nest_reduce.ReduceLowering.reduce``).
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir.bounds import interval, is_pure_index
from ..ir.expr import (
    Binary,
    Cast,
    Const,
    Expr,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    binary,
    cast,
    const,
    read,
    select,
)
from ..ir.traverse import children, free_vars, walk, with_children
from ..options import Options
from .cost import reduction_width
from .nest import (
    Assign,
    Block,
    BufferStore,
    CheckIndex,
    Declare,
    FlatLoop,
    Gather,
    Guard,
    Let,
    Loop,
)
from .nest_facts import condition_bounds, eager, index_in_bounds, reads_in_bounds, widened
from .nest_forms import Apply, BufferLoad, Choose, IndexTerm, Lit, Load, Operand, Ref


class ExprLowering:
    """The open blocks of a nest being built (``stack``, ``root`` outermost), the names
    given so far, and the values computed in them."""

    def __init__(self, tensor, args: list, options: Options):
        self.tensor = tensor
        self.args = args  # the kernel's arguments: outputs first, then each tensor read
        self.options = options
        self.gathers: list[Gather] = []
        self.vars: dict = {}  # variable -> its name
        self.bound: dict = {}  # prefix -> variables named so far
        self.counter = 0
        self.memo: dict = {}  # value -> (operand, block computing it)
        self.emitting: set = set()  # reductions whose loops are being written
        self.cache_write: dict = {}  # row caches (row_cache.py): value -> (buffer, axis)
        self.cache_read: dict = {}  # its twin in the output loop -> (buffer, axis)
        self.written: set = set()  # buffers some emitted loop writes
        self.safe_memo: dict = {}
        self.clamping = False  # reads at clamped indices (a branch-free select's branch)
        self.proven: dict = {}  # indices the enclosing selects' conditions bound
        self.relies: dict = {}  # value -> the proven indices its computation clamped
        self.reductions: list = []  # the body's reductions, candidates for sharing a loop
        self.root = Block()
        self.stack: list[Block] = [self.root]

    # names --------------------------------------------------------------------------------

    def fresh(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def var(self, v: Var) -> str:
        name = self.vars.get(v)
        if name is None:
            raise NotImplementedError(f"{self.tensor.name}: variable {v.name} is not bound")
        return name

    def bind(self, v: Var, prefix: str) -> str:
        number = self.bound.get(prefix, 0)
        self.bound[prefix] = number + 1
        name = f"{prefix}{number}"
        self.vars[v] = name
        return name

    def arg(self, t) -> int:
        return self.args.index(t)

    # placement ----------------------------------------------------------------------------

    def place(self, e: Expr) -> int:
        """Index in the stack of the block where ``e`` is computed: the innermost block
        binding one of its variables, or a guarded branch it must stay under (only if
        one of its reads could leave its tensor: a causal softmax's row max moves out of
        the guard around each element, else it is computed once per element)."""
        fv = free_vars(e)
        for k in range(len(self.stack) - 1, 0, -1):
            b = self.stack[k]
            if b.binds & fv or (b.barrier and not self.safe(e)):
                return k
        return 0

    def safe(self, e: Expr) -> bool:
        if self.clamping:  # (every read is at an index clamped into its tensor)
            return True
        found = self.safe_memo.get(e)
        if found is None:
            found = self.safe_memo[e] = reads_in_bounds(e)
        return found

    def close(self, blocks: list) -> None:
        """Pop ``blocks`` (the top of the stack) and attach each to its parent."""
        for b in reversed(blocks):
            self.stack.pop()
            self.stack[-1].items.append(b)

    # values -------------------------------------------------------------------------------

    def value(self, e: Expr) -> Operand:
        """The operand holding ``e`` where the innermost open block runs, computed (at
        its place) if it is not yet."""
        if isinstance(e, Const):
            return Lit(e.value, e.dtype)
        if isinstance(e, Var):
            return Ref(self.var(e))
        hit = self.memo.get(e)
        if hit is not None and any(hit[1] is b for b in self.stack) and self.still_proven(e):
            return hit[0]
        k = self.place(e)
        saved, self.stack = self.stack, self.stack[: k + 1]
        try:
            if e in self.cache_read and self.cache_read[e][0] in self.written:
                buffer, j = self.cache_read[e]
                name = self.emit(e, BufferLoad(buffer, Ref(self.var(j))))
            elif isinstance(e, Reduce):
                name = self.reduce(e)
            elif isinstance(e, Select):
                name = self.select(e)
            elif isinstance(e, Read):
                name = self.read(e)
            elif (wrapped := one_wrap(e)) is not None:
                name = self.value(wrapped)
            else:
                name = self.emit(e, self.expression(e))
            if e in self.cache_write and e not in self.cache_read:
                buffer, k_axis = self.cache_write[e]
                self.stack[-1].items.append(BufferStore(buffer, Ref(self.var(k_axis)), name))
                self.written.add(buffer)
        finally:
            self.stack = saved
        self.memo[e] = (name, self.stack[k])
        self.relies.pop(e, None)
        if self.proven:
            used = {(widened(i), n) for x in walk(e) if isinstance(x, Read)
                    for i, n in zip(x.indices, x.tensor.shape, strict=True)
                    if not is_pure_index(i) and self.bounded(i, n)}
            if used:
                self.relies[e] = used
        return name

    def still_proven(self, e: Expr) -> bool:
        """A value computed with gathers at indices clamped (unchecked) on the strength
        of enclosing conditions (``relies``) is reused only where the same indices are
        proven."""
        used = self.relies.get(e)
        return used is None or all(self.bounded(i, n) for i, n in used)

    def reduce(self, e: Reduce) -> Ref:
        """A reduction's loops, where it is placed (``nest_reduce.ReduceLowering``)."""
        raise NotImplementedError

    def emit(self, e: Expr, value) -> Ref:
        name = self.fresh()
        self.stack[-1].items.append(Let(name, e.dtype, value))
        return Ref(name)

    def expression(self, e: Expr) -> Apply:
        if isinstance(e, Unary):
            dtype = e.dtype if e.op != "not" else "bool"
            return Apply(e.op, (self.value(e.a),), dtype, dtype)
        if isinstance(e, Binary):
            operand = dt.promote(e.a.dtype, e.b.dtype)
            a = self.value(e.a)
            return Apply(e.op, (a, self.value(e.b)), e.dtype, operand,
                         truncating=_truncation_is_floor(e))
        if isinstance(e, Cast):
            return Apply("cast", (self.value(e.a),), e.dtype, e.a.dtype)
        raise TypeError(f"cannot compile {type(e).__name__}")

    def read(self, e: Read) -> Ref:
        for axis, index in enumerate(e.indices):
            if (chosen := chosen_index(index)) is not None:  # (see chosen_index)
                cond, a, b = chosen
                at = lambda i, axis=axis: read(  # noqa: E731
                    e.tensor, (*e.indices[:axis], i, *e.indices[axis + 1:]))
                return self.value(select(cond, at(a), at(b)))
        shape = e.tensor.shape
        terms = []
        for axis, index, stride in flat_pairs(e.indices, shape):
            if stride is not None:  # ``x // n, x % n``: element ``x`` of the two (below)
                extent = shape[axis] * shape[axis + 1]
                clamp = (extent - 1 if self.clamping and not index_in_bounds(index, extent)
                         else None)
                terms.append(IndexTerm(self.value(index), stride, clamp))
                continue
            ix = self.value(index)
            clamp = None
            if not is_pure_index(index) and self.bounded(index, shape[axis]):
                clamp = shape[axis] - 1  # (in bounds wherever the branch is taken)
            elif not is_pure_index(index):
                checked = self.fresh("ix")
                self.gathers.append(Gather(e.tensor.name, axis, repr(index), shape[axis]))
                self._check_block(index).items.append(
                    CheckIndex(checked, ix, shape[axis], len(self.gathers)))
                ix = Ref(checked)
            elif self.clamping and not index_in_bounds(index, shape[axis]):
                clamp = shape[axis] - 1
            terms.append(IndexTerm(ix, math.prod(shape[axis + 1:]), clamp))
        return self.emit(e, Load(self.arg(e.tensor), tuple(terms)))

    def _check_block(self, index: Expr) -> Block:
        """Where a gather's index is checked: in the block that computes the index (a
        scan step's time row ``X[i, t]``, an embedding's ``W[ids[i], j]``: once, not at
        every point of the loops inside, which then stay branch-free), when every block
        between is a loop of constant, positive trip count, so the check runs exactly
        where the read does; else here."""
        hit = self.memo.get(index)
        depth = next((k for k, b in enumerate(self.stack) if hit and b is hit[1]), None)
        if depth is None:
            return self.stack[-1]
        for b in self.stack[depth + 1:]:
            if isinstance(b, Loop):
                counted = isinstance(b.lo, int) and isinstance(b.hi, int) and b.hi > b.lo
            elif isinstance(b, FlatLoop):
                counted = all(isinstance(n, int) and n > 0 for _, n, _ in b.vars)
            else:
                counted = False
            if not counted or b.barrier:
                return self.stack[-1]
        return self.stack[depth]

    # selects ------------------------------------------------------------------------------

    def select(self, e: Select) -> Ref:
        cond = self.value(e.cond)
        proven = condition_bounds(e.cond)
        if self.unguarded(e.a) and self.unguarded(e.b):
            a = self.branch(e.a, proven)
            return self.emit(e, Choose(cond, a, self.value(e.b)))
        if self.clampable(e.a, proven) and self.clampable(e.b):
            saved, self.clamping = self.clamping, True
            try:
                a, b = self.branch(e.a, proven), self.value(e.b)
            finally:
                self.clamping = saved
            return self.emit(e, Choose(cond, a, b))
        name = self.fresh()
        here = self.stack[-1]
        if isinstance(e.b, Const):
            here.items.append(Declare(name, e.dtype, self.value(e.b)))
            branches = [(False, e.a)]
        else:
            here.items.append(Declare(name, e.dtype))
            branches = [(False, e.a), (True, e.b)]
        for negate, branch in branches:
            block = Guard(conds=(cond,), negate=negate)
            self.stack.append(block)
            saved = self.proven
            if not negate:  # (inside, the condition holds: its bounds too)
                self.proven = both_bounds(self.proven, proven)
            try:
                block.items.append(Assign(name, self.value(branch)))
            finally:
                self.proven = saved
            self.stack.pop()
            here.items.append(block)
        return Ref(name)

    def unguarded(self, e: Expr) -> bool:
        """``e`` may be evaluated whether or not its branch is taken: it is ``eager``, or
        its reads stay in bounds and its reductions are small windows (unrolled, so the
        loop around them still vectorizes; a max pool's gradient reads its window's max
        and tie count in the branch of the element that is the max), the reductions that
        code motion computes outside the current block counting as values."""
        if eager(e):
            return True
        if not self.safe(e):
            return False
        # a reduction that code motion computes outside this block (a causal softmax's row
        # max and sum, in its output loop's select(s <= l, exp(S - m) / z, 0)) is a value
        # here, computed once per row whichever branch is taken
        top = len(self.stack) - 1
        outside = {r for r in walk(e) if isinstance(r, Reduce) and self.place(r) < top}
        memo: dict = {}

        def inside(x: Expr) -> Expr:  # (top-down: an outside reduction may hold another)
            if x not in memo:
                memo[x] = Const(0, x.dtype) if x in outside else with_children(
                    x, tuple(inside(c) for c in children(x)))
            return memo[x]

        e = inside(e) if outside else e
        return reduction_width(e) <= self.options.unroll and all(
            r.where is None for r in walk(e) if isinstance(r, Reduce))

    def branch(self, e: Expr, proven: dict) -> Operand:
        """The taken branch ``e`` of a select whose condition bounds the indices
        ``proven`` (``nest_facts.condition_bounds``): while clamping, its gathers at those
        indices read at clamped ones (no check: the clamp changes nothing wherever the
        branch is taken)."""
        if not (self.clamping and proven):
            return self.value(e)
        saved, self.proven = self.proven, both_bounds(self.proven, proven)
        try:
            return self.value(e)
        finally:
            self.proven = saved

    def bounded(self, index: Expr, n: int, proven: dict | None = None) -> bool:
        """``index`` is one the enclosing conditions keep in ``[0, n)``."""
        lo, hi = (self.proven if proven is None else proven).get(widened(index), (None, None))
        return lo is not None and hi is not None and 0 <= lo and hi < n

    def clampable(self, e: Expr, proven: dict | None = None) -> bool:
        """``e`` may be evaluated branch-free with its reads at indices clamped into their
        tensors (the value is discarded where they would leave it): its reads are affine,
        or gathers at indices that the conditions of the selects they sit in bound
        (``proven``: those of the select of which ``e`` is the taken branch), and its
        reductions are small windows without a ``where``. A padding's read ``select(0 <=
        i - 1, U[i - 1], 0)`` is then no branch (see the module header), nor a bilinear
        sample's ``select(0 <= iy && iy <= h - 1 && .., x[iy, ix], 0)``; a gather no
        condition bounds keeps its check, in its branch."""
        nodes = walk(e)
        reduces = [x for x in nodes if isinstance(x, Reduce)]
        if reduces and reduction_width(e) > self.options.unroll or any(
                r.where is not None for r in reduces):
            return False
        start = both_bounds(self.proven, proven or {}) if self.clamping else proven or {}
        seen: dict = {}

        def reads_clamp(x: Expr, known: dict) -> bool:
            key = (x, frozenset(known.items()))
            if key not in seen:
                seen[key] = _reads_clamp(x, known)
            return seen[key]

        def _reads_clamp(x: Expr, known: dict) -> bool:
            if isinstance(x, Select):
                inside = both_bounds(known, condition_bounds(x.cond))
                return (reads_clamp(x.cond, known) and reads_clamp(x.a, inside)
                        and reads_clamp(x.b, known))
            if isinstance(x, Read) and not all(
                    is_pure_index(i) or self.bounded(i, n, known)
                    for i, n in zip(x.indices, x.tensor.shape, strict=True)):
                return False
            return all(reads_clamp(c, known) for c in children(x))

        return reads_clamp(e, start)


def chosen_index(index: Expr) -> tuple[Expr, Expr, Expr] | None:
    """``(c, a, b)`` for a pure index ``select(c, a, b)`` or a condition made an integer
    (``c, 1, 0``): the read there is ``select(c, X[a], X[b])``. gcc 12.2 vectorizes a load
    at a condition made 0 or 1 (``a[i >= 7 ? 1 : 0]``) as a load at the lanes' mask, -1
    where the condition holds; two loads and a blend are right (and ``Choose``, with
    the branch not taken clamped, stays branch-free)."""
    if not (dt.is_int(index.dtype) and is_pure_index(index)):
        return None
    inner = index
    while isinstance(inner, Cast) and dt.is_int(inner.a.dtype):
        inner = inner.a
    if isinstance(inner, Select):
        return inner.cond, cast(inner.a, index.dtype), cast(inner.b, index.dtype)
    if isinstance(inner, Cast) and inner.a.dtype == "bool":
        return inner.a, const(1, index.dtype), const(0, index.dtype)
    return None


def flat_pairs(indices: tuple, shape: tuple):
    """``(axis, index, None)`` per dimension of a read, but ``(axis, x, stride)`` for
    two neighbours read at ``[x // n, x % n]`` where ``n`` is the second's extent (a
    flattened array read back in its shape): ``(x // n) n + x % n = x`` for floor
    division, so the pair is element ``x`` of a dimension of the second's stride, and
    neither the quotient nor the remainder is computed. Only pure indices pair: both
    are then in bounds wherever the read is made (the verifier's proof), so is ``x``;
    in a discarded branch (``clamping``) ``x`` is clamped into the pair's extent."""
    k = 0
    while k < len(indices):
        q = indices[k]
        if k + 1 < len(indices) and _pairs(q, indices[k + 1], shape[k + 1]):
            yield k, q.a, math.prod(shape[k + 2:])
            k += 2
        else:
            yield k, q, None
            k += 1


def _pairs(q: Expr, r: Expr, n: int) -> bool:
    return (isinstance(q, Binary) and q.op == "floordiv" and isinstance(r, Binary)
            and r.op == "floormod" and q.a is r.a and isinstance(q.b, Const)
            and isinstance(r.b, Const) and int(q.b.value) == int(r.b.value) == n
            and is_pure_index(q) and dt.is_int(q.dtype))


def one_wrap(e: Expr) -> Expr | None:
    """``x % n`` (integers, ``n > 0`` constant) where ``x`` takes values in ``[lo, hi]``
    holding at most one multiple of ``n`` past ``q n``, ``q = lo // n`` (a roll's ``(i +
    s) % L``): ``select(x >= (q + 1) n, x - (q + 1) n, x - q n)``, a compare and a blend
    where the division takes a multiply-high sequence per lane, or a loop of divisions
    where the lanes have no such instruction. None for any other expression, or where the
    range is unknown.

    Not ``x // n`` as ``q + (x >= (q + 1) n)``: gcc 12.2 vectorizes a load at an index
    that is a comparison made 0 or 1 (``a[i >= 7 ? 1 : 0]``) as a load at the lanes'
    mask, -1 where it holds (differential seed 130116); the quotient keeps its division."""
    if not (isinstance(e, Binary) and e.op == "floormod" and dt.is_int(e.dtype)
            and isinstance(e.b, Const) and int(e.b.value) > 0):
        return None
    n, iv = int(e.b.value), interval(e.a)
    if iv is None or iv[0] is None or iv[1] is None:
        return None
    q = iv[0] // n
    if iv[1] // n > q + 1:
        return None
    below = binary("sub", e.a, const(q * n, e.dtype)) if q else e.a
    if iv[1] // n == q:
        return below
    return select(binary("le", const((q + 1) * n, e.dtype), e.a),
                  binary("sub", e.a, const((q + 1) * n, e.dtype)), below)


def _truncation_is_floor(e: Binary) -> bool:
    """An integer ``//`` or ``%`` by a positive constant of a value that is never negative
    (an index ``h // 2``): truncating division gives the floor, and vectorizes."""
    if e.op not in ("floordiv", "floormod") or not dt.is_int(e.dtype):
        return False
    if not (isinstance(e.b, Const) and int(e.b.value) > 0):
        return False
    iv = interval(e.a)
    return iv is not None and iv[0] is not None and iv[0] >= 0


def both_bounds(outer: dict, inner: dict) -> dict:
    """The bounds of two conditions that both hold (``nest_facts.condition_bounds``)."""
    out = dict(outer)
    for e, (lo, hi) in inner.items():
        was_lo, was_hi = out.get(e, (None, None))
        out[e] = (lo if was_lo is None else was_lo if lo is None else max(lo, was_lo),
                  hi if was_hi is None else was_hi if hi is None else min(hi, was_hi))
    return out
