"""C source for a general kernel: a compute's body as one fused loop nest.

``T[i, j] = body`` becomes

    #pragma omp parallel for                         (outer axes merged until there is
    for (long i = 0; i < I; i++) {                    enough work for every thread)
        <everything that depends on i only>
        for (long j = 0; j < J; j++) {
            <what depends on j>  out[i * J + j] = value;  } }

**Code motion.** Every sub-expression is emitted once, as a constant local, at the
outermost loop where all its free variables are bound: in a softmax backward
``dX[i, j] = Y[i, j] (dY[i, j] - sum_k dY[i, k] Y[i, k])`` the sum is computed once per
row, in the ``i`` loop, not once per element. Structurally equal sub-expressions are the
same node (interning), so they are emitted once (common sub-expressions).

**Reductions** open their own loops where they are placed (``reduction.py``: loop bounds
from the ``where``, sibling sums in one loop). A compute that is a reduction along the
outer dimension of reads contiguous in its last axis (a weight gradient ``dW[d] = sum_n
dY[n, d] X[n, d]``) puts the reduce loops outside that axis instead (``_column_nest``).

**Regions.** Guards that bound the last axis alone (a concatenation's gradient reads one
part per range of columns) split its loop into one loop per range, each over the body
with those guards folded (``kernel_facts.regions``).

**Residue classes.** Axes read under ``// n`` (a max pool's gradient reads its window's
maximum at ``[i // 2, j // 2]``) loop over their quotients, the body written once per
residue class (``lower/residue.unrolled_axes``): the window's values are shared.

**Guards.** Branches that are always safe become a branch-free ``c ? a : b``, which gcc
vectorizes. A branch whose affine reads could leave their tensor when the condition is
false (a padding's ``select(1 <= i, U[i - 1, j], 0)``) is branch-free too, its reads at
indices clamped into the tensor (``KernelSource.clampable``): the value read there is
discarded. gcc 12.2 if-converts a guarded load into a masked load, and vectorizes some
such loops wrongly once it has unrolled a short inner loop (a padded row read under an
all-false mask; a guarded row stored three times without its permutation: issue 27);
``-fno-code-hoisting`` (``compiler.FLAGS``) keeps it from moving the clamped loads back
under the condition. A branch that holds a reduction with a ``where`` or over more than
``UNROLL`` points, or a gather (whose index is checked), is evaluated in an ``if`` block,
and nothing inside that block moves above it: such a read is never evaluated outside the
guards that the verifier proved keep it in bounds. Indices read from integer tensors are
checked on every read; the first bad one is reported through ``err``.

**Streaming stores.** A store to a line the cache does not hold first reads that line from
memory. An output that no later kernel of the program reads, large (``STREAM_BYTES``) and
written by a kernel that moves more than the L3 cache holds (``STREAM_TRAFFIC_BYTES``), is
staged per iteration of the parallel loop on the thread's stack and then copied out with
non-temporal stores (``_stage``, ``c_ops.tg_stream``): a layer norm's gradient reads
``dY`` and ``X`` and writes ``dX``, 48 MiB, and so moves 64 MiB with plain stores and 48
with these. Against plain stores (``benchmarks/bench_ab.py --knob stream``: both versions
and torch in turns in one process, 4096 x 1024, three runs each): the layer norm's
gradient took 0.84-0.94x the time, the softmax's 0.77-1.07x. With the traffic limit
lifted (two runs each): a max pool's gradient, 16 MiB, 1.09-1.15x; the softmax forward,
32 MiB, 0.98-1.03x; hence the limit.

Names in the source (``i0``, ``r1``, ``t5``, ``a2``) are given in order of first use, so
the same structure, shapes and dtypes give the same text: the text is the cache key.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import dtype as dt
from ...ir.bounds import interval, is_pure_index
from ...ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var
from ...ir.tensor import Compute
from ...ir.traverse import free_vars, tensors_read, walk
from ...lower.cost import reduction_width
from ...lower.residue import unrolled_axes, unrolled_bodies
from . import c_ops
from .blocks import Block, Gather
from .c_ops import CTYPE, LOCAL_CTYPE
from .kernel_facts import (
    column_order,
    eager,
    index_in_bounds,
    reads_in_bounds,
    regions,
    specialized,
    unshadow,
)
from .reduction import UNROLL, ReductionEmitter
from .row_cache import row_caches

PARALLEL_WORK = 1 << 17  # points x work per point below which a kernel runs on one thread
TRANSCENDENTAL_COST = 8  # a library call (exp, tanh, ...) weighs this many additions
THREAD_CHUNKS = 16  # merge leading axes until the parallel loop has this many iterations
COLUMN_CHUNK = 64  # accumulators per thread in a column reduction
COLUMN_PAD = 1024  # bytes between the partial rows of column sums (see _open_partials)
# Outputs that no later kernel of the program reads are streamed (``KernelSource._stage``)
# when they are this large (more than a core's L2 cache here, 1 MiB) and the kernel
# reads and writes this much in all (more than this machine's 32 MiB L3 cache: its arrays
# cannot stay cached from one call to the next).
STREAM_BYTES = 4 << 20
STREAM_TRAFFIC_BYTES = 40 << 20
STAGE_BYTES = 16 << 10  # an iteration's part of the output, staged on the stack: at most
STAGE_MIN_BYTES = 256  # and at least (whole lines to stream)


class KernelSource(ReductionEmitter):
    """The C function ``name`` computing ``t`` (its body: ``body_of``'s)."""

    def __init__(self, t: Compute, body_of: Compute, name: str, also: tuple = (),
                 columns: tuple = (), stream: frozenset = frozenset()):
        self.tensor = t
        self.name = name
        self.also = also  # (tensor, body over body_of's axes): also written (grouping.py)
        self.columns = columns  # (tensor, summand over body_of's axes): summed (grouping.py)
        self.stream = stream  # outputs no later kernel reads: written past the caches
        extra = (*also, *columns)
        self.outputs = 1 + len(extra)
        self.args: list = [t, *(u for u, _ in extra)]  # outputs first, then each tensor read
        for r in [*tensors_read(body_of.body), *(r for _, b in extra for r in tensors_read(b))]:
            if r not in self.args:
                self.args.append(r)
        self.gathers: list[Gather] = []
        self.has_check = False
        self.vars: dict = {}
        self.bound: dict = {}  # prefix -> variables named so far
        self.counter = 0
        self.memo: dict = {}
        self.emitting: set = set()  # reductions whose loops are being written
        self.cache_write: dict = {}  # row caches (row_cache.py): value -> (buffer, axis)
        self.cache_read: dict = {}  # its twin in the output loop -> (buffer, axis)
        self.written: set = set()  # buffers some emitted loop writes
        self.safe_memo: dict = {}
        self.clamping = False  # reads at clamped indices (a branch-free select's branch)
        self.root = Block()
        self.stack = [self.root]
        self.text = self._function(body_of)

    # names ------------------------------------------------------------------------------

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

    def arg(self, t) -> str:
        return f"a{self.args.index(t)}"

    # the function -----------------------------------------------------------------------

    def _function(self, body_of: Compute) -> str:
        t = self.tensor
        header = []
        for k, a in enumerate(self.args):
            const = "" if k < self.outputs else "const "
            header.append(f"{const}{CTYPE[a.dtype]} *restrict a{k} = "
                          f"({const}{CTYPE[a.dtype]} *)args[{k}];")
        shape = t.shape
        axes = body_of.axes
        size = math.prod(shape)
        parallel = size * _work_per_point(body_of.body) >= PARALLEL_WORK and size > 1
        body = unshadow(body_of.body, frozenset(axes))
        self.reductions = [x for x in walk(body) if isinstance(x, Reduce)]
        split = regions(body, axes[0], shape[0]) if len(axes) == 1 else None
        if split:  # one loop nest per range (``_region_loops`` for the last of 2+ axes)
            parts = self._parts(body, axes[0], split)
            for v, part in parts:
                self._nest(part, [v], [v.extent], parallel)
        else:
            if self.columns:  # (grouping.py: only kernels of 2+ axes)
                self._open_partials(shape[-1])
            self._nest(body, axes, shape, parallel)
            if self.columns:
                self._close_partials(shape[-1])
        lines = [f"void {self.name}(void **args, long *err, int nthreads) {{"]
        lines += ["  " + h for h in header]
        self.root.render(lines, 1)
        lines.append("}")
        return "\n".join(lines)

    def _nest(self, body: Expr, axes, shape, parallel: bool) -> None:
        if column_order(body, axes, shape):
            self._column_nest(body, axes, shape, parallel)
        else:
            self._row_nest(body, axes, shape, parallel)

    def _parts(self, body: Expr, v: Var, split: list) -> list:
        """``(variable over the range, body there)`` per range of ``split``; the
        reductions of every part are candidates for sharing a loop (``siblings``)."""
        parts = [specialized(body, v, lo, hi) for lo, hi in split]
        for _, part in parts:
            self.reductions += [x for x in walk(part) if isinstance(x, Reduce)]
        return parts

    def _merged_loop(self, axes, shape, parallel: bool, chunks: int = 0) -> Block:
        """One loop over the leading ``axes`` (and ``chunks`` column chunks after them)."""
        extents = list(shape) + ([chunks] if chunks else [])
        names = [self.bind(v, "i") for v in axes] + (["cs"] if chunks else [])
        head = []
        if parallel:
            head.append("#pragma omp parallel for schedule(static) num_threads(nthreads)")
        head.append(f"for (long f = 0; f < {math.prod(extents)}L; f++) {{")
        for k, name in enumerate(names):
            inner = math.prod(extents[k + 1:])
            div = f"f / {inner}L" if inner > 1 else "f"
            value = f"({div}) % {extents[k]}L" if k else div
            if chunks and k == len(names) - 1:
                value = f"({value}) * {COLUMN_CHUNK}L"
            elif axes[k].lo:  # a region's variable (``_parts``)
                value = f"{axes[k].lo}L + {value}"
            head.append(f"  const long {name} = {value};")
        return Block(frozenset(axes), head=head, loop=True)

    def _row_loops(self, axes, shape, parallel: bool) -> list[Block]:
        """The loops over ``axes``: the leading ones merged (until there are
        ``THREAD_CHUNKS`` iterations to share out), the rest nested."""
        merged = 0
        if shape:
            merged, count = 1, shape[0]
            while merged < len(shape) - 1 and count < THREAD_CHUNKS:
                count *= shape[merged]
                merged += 1
        blocks = []
        if merged:
            blocks.append(self._merged_loop(axes[:merged], shape[:merged], parallel))
            for v, n in zip(axes[merged:], shape[merged:], strict=True):
                name = self.bind(v, "i")
                # int, not long: gcc vectorizes gathers (x[i / 2]) only with int indices
                blocks.append(Block(frozenset((v,)), head=[
                    f"for (int {name} = {v.lo}; {name} < {v.lo + n}; {name}++) {{"],
                    loop=True))
        return blocks

    def _row_nest(self, body: Expr, axes, shape, parallel: bool) -> None:
        """Output axes outermost, in order; the body evaluated at each point."""
        residues = unrolled_axes(body, axes) if len(axes) > 1 else {}
        if residues:
            self._residue_nest(body, axes, shape, parallel, residues)
            return
        blocks = self._row_loops(axes, shape, parallel)
        split = regions(body, axes[-1], shape[-1]) if len(blocks) > 1 else None
        if split:
            self._region_loops(body, axes, shape, blocks[:-1], split)
            return
        self.stack.extend(blocks)
        if len(blocks) > 1:
            self._row_buffers(body, axes, shape, blocks)
        value = self.value(body)
        flat = " + ".join(f"{self.var(v)} * {math.prod(shape[k + 1:])}L"
                          for k, v in enumerate(axes)) or "0"
        self.stack[-1].items.append(f"a0[{flat}] = {value};")
        for tensor, other in self.also:  # the same point of the grouped kernels' arrays
            other = unshadow(other, frozenset(axes))
            self.stack[-1].items.append(f"{self.arg(tensor)}[{flat}] = {self.value(other)};")
        for m, (tensor, summand) in enumerate(self.columns):  # this thread's column sums
            ctype = LOCAL_CTYPE[tensor.dtype]
            blocks[0].items.insert(0, f"{ctype} *restrict mine{m} = "
                                      f"{self._partial_row(m, 'omp_get_thread_num()')};")
            summand = unshadow(summand, frozenset(axes))
            self.stack[-1].items.append(
                f"mine{m}[{self.var(axes[-1])}] += {self.value(summand)};")
        innermost = self.stack[-1]
        self._close(blocks)
        if len(blocks) > 1 and innermost.straight() and not self.has_check:
            innermost.head.insert(0, "#pragma omp simd")
        if blocks:
            self._stage(blocks[0], shape, len(self.also))

    def _open_partials(self, n: int) -> None:
        """The column sums' partial sums: per thread, one zeroed row of ``n`` per column
        sum. The rows start 2 KiB past the output's address modulo 4 KiB (the inputs'
        too, when they are aligned alike, as NumPy's large arrays are), 1 KiB apart: a
        row read right after a store to the output at the same address modulo 4 KiB waits
        for that store ("4K aliasing"; a layer norm's gradient, one-off C timing: 3.5 ms
        with ``calloc``'s placement, 1.9 ms placed so, 1.4 ms without the sums)."""
        width = max(n * (8 if t.dtype == "float64" else 4) for t, _ in self.columns) + COLUMN_PAD
        self.partial_stride = width = -(-width // 64) * 64
        total = f"(size_t)nthreads * {len(self.columns) * width}"
        self.root.items += [
            f"char *raw = (char *)malloc({total} + 4096);",
            "if (!raw) { err[0] = -1; return; }",
            "char *part = raw + ((uintptr_t)a0 + 2048 - (uintptr_t)raw) % 4096;",
            f"memset(part, 0, {total});"]

    def _partial_row(self, m: int, thread: str) -> str:
        """The address of column sum ``m``'s partial row of ``thread``."""
        ctype = LOCAL_CTYPE[self.columns[m][0].dtype]
        return (f"(({ctype} *)(part + ((long)({thread}) * {len(self.columns)} + {m}) * "
                f"{self.partial_stride}L))")

    def _close_partials(self, n: int) -> None:
        """Each column sum: its threads' partial sums added in thread order."""
        for m, (tensor, _) in enumerate(self.columns):
            ctype = LOCAL_CTYPE[tensor.dtype]
            self.root.items.append(
                f"for (long j = 0; j < {n}L; j++) {{ {ctype} s = 0; for (int t = 0; "
                f"t < nthreads; t++) s += {self._partial_row(m, 't')}[j]; "
                f"{self.arg(tensor)}[j] = s; }}")
        self.root.items.append("free(raw);")

    def _residue_nest(self, body: Expr, axes, shape, parallel: bool, residues: dict) -> None:
        """Axes used under ``// n`` (``lower.residue.unrolled_axes``) looped over their
        quotients ``q``, the body written out once per combination of residues ``a``
        (``v = n q + a``) in the innermost loop: what the copies share (a pooling window's
        maximum, its gradient's value) is computed once per window."""
        loop, bodies = unrolled_bodies(body, axes, residues)
        blocks = self._row_loops(loop, [v.extent for v in loop], parallel)
        self.stack.extend(blocks)
        for index, part in bodies:
            value = self.value(part)
            flat = " + ".join(
                f"({' + '.join(f'{c}L * {self.var(v)}' for v, c in coeffs.items())} + {k}L)"
                f" * {math.prod(shape[m + 1:])}L" for m, (coeffs, k) in enumerate(index))
            self.stack[-1].items.append(f"a0[{flat}] = {value};")
        self._close(blocks)
        if not any(v in residues for v in axes[:len(blocks[0].binds)]):
            self._stage(blocks[0], shape, 0)

    def _region_loops(self, body: Expr, axes, shape, outer: list, split: list) -> None:
        """The last axis as one loop per range of ``kernel_facts.regions``, each over the
        body with the guards that are constant on it folded (branch-free: vectorized);
        what does not depend on that axis is computed once, above them."""
        self.stack.extend(outer)
        for v, part in self._parts(body, axes[-1], split):
            name = self.bind(v, "i")
            loop = Block(frozenset((v,)), head=[
                f"for (int {name} = {v.lo}; {name} < {v.lo + v.extent}; {name}++) {{"],
                loop=True)
            self.stack.append(loop)
            value = self.value(part)
            flat = " + ".join(f"{self.var(u)} * {math.prod(shape[k + 1:])}L"
                              for k, u in enumerate([*axes[:-1], v]))
            loop.items.append(f"a0[{flat}] = {value};")
            self._close([loop])
            if loop.straight() and not self.has_check:
                loop.head.insert(0, "#pragma omp simd")
        self._close(outer)
        self._stage(outer[0], shape, 0)

    def _stage(self, merged: Block, shape, also: int) -> None:
        """Outputs ``a0`` .. ``a{also}`` that no later kernel reads (``stream``), of
        ``STREAM_BYTES`` or more, written past the caches: each iteration ``f`` of the
        parallel loop ``merged`` (over the leading axes it binds) writes its part of the
        output, ``span`` elements from ``f * span``, into a buffer on its thread's stack
        (``a{k}`` redefined to point there, so the body and its row caches are unchanged),
        then streams the buffer out (``c_ops.tg_stream``). A store to a line the cache
        does not hold first reads the line from memory; these do not (measured: see the
        module header)."""
        if not merged.head or not merged.head[0].startswith("#pragma omp parallel"):
            return
        if any(v.lo for v in merged.binds):  # (a region's variable: an offset loop)
            return
        itemsize = {a: np.dtype(a.dtype).itemsize for a in self.args}
        if sum(a.size * itemsize[a] for a in self.args) < STREAM_TRAFFIC_BYTES:
            return
        span = math.prod(shape[len(merged.binds):])
        for k, t in enumerate(self.args[:1 + also]):
            size = itemsize[t]
            if (t not in self.stream or t.size * size < STREAM_BYTES
                    or not STAGE_MIN_BYTES <= span * size <= STAGE_BYTES):
                continue
            ctype = CTYPE[t.dtype]
            merged.head += [f"  {ctype} stage{k}[{span}] __attribute__((aligned(64)));",
                            f"  {ctype} *restrict a{k} = stage{k} - f * {span}L;"]
            merged.items.append(f"tg_stream((char *)args[{k}] + f * {span * size}L, "
                                f"(const char *)stage{k}, {span * size}L);")

    def _row_buffers(self, body: Expr, axes, shape, blocks: list) -> None:
        """Declare the row caches of ``row_cache.py`` where their reductions go, and emit
        those reductions first: a buffer is read only if some loop has written it (a
        reduction fused into a sibling's loop writes through the sibling's variable).

        The first buffer of the output's dtype whose block knows the row is the output's
        own row: the reduction writes ``E(k)`` there, and the output loop reads
        ``E(j)`` back before it writes element ``j`` (a softmax: ``exp`` into ``Y``'s
        row, then ``Y[j] = Y[j] * (1 / s)``). That skips a stack buffer: a 4096 x 1024
        softmax (then still dividing) took 2.36-2.42 ms instead of 2.72-2.85 ms, in a
        one-off C timing (not in the repo). Divisions are not turned into
        multiplications here, which would change their last bit from NumPy's; softmax
        multiplies by the reciprocal because its definition does (``nn/softmax.py``)."""
        found = row_caches(body, axes, shape)
        homes: dict = {}
        row_start = self._output_row(axes, shape)
        for e, twin, r in found:
            fv = free_vars(r)
            home = next((b for b in reversed(blocks) if b.binds & fv), self.root)
            if twin not in self.cache_read:
                buffer = self.fresh("row")
                bound = set().union(*(b.binds for b in blocks[:_index(blocks, home) + 1]))
                if (row_start and e.dtype == self.tensor.dtype
                        and set(axes[:-1]) <= bound):  # the output's own row (see above)
                    home.items.insert(0, f"{LOCAL_CTYPE[e.dtype]} *{buffer} = a0 + {row_start};")
                    row_start = None
                else:
                    home.items.insert(0, f"{LOCAL_CTYPE[e.dtype]} {buffer}[{shape[-1]}];")
                self.cache_read[twin] = (buffer, axes[-1])
                homes[buffer] = home
            buffer = self.cache_read[twin][0]
            if homes[buffer] is home:  # written in the block it is declared in
                self.cache_write[e] = (buffer, r.axes[0])
        for r in dict.fromkeys(r for _, _, r in found):
            self.value(r)

    def _output_row(self, axes, shape) -> str | None:
        """The offset in ``a0`` of the output row at the bound ``axes[:-1]``."""
        return " + ".join(f"{self.var(v)} * {math.prod(shape[k + 1:])}L"
                          for k, v in enumerate(axes[:-1])) or None

    def _column_nest(self, body: Reduce, axes, shape, parallel: bool) -> None:
        """A reduction along the outer dimension of its reads (``dW[d] = sum_n dY[n, d]
        X[n, d]``): the reduce loops outside, the last output axis innermost over a chunk of
        ``COLUMN_CHUNK`` accumulators, so that every read is contiguous and vectorized."""
        n = shape[-1]
        chunks = -(-n // COLUMN_CHUNK)
        outer = self._merged_loop(axes[:-1], shape[:-1], parallel, chunks)
        outer.head.append(f"  const long cn = tg_imin({COLUMN_CHUNK}L, {n}L - cs);")
        ctype = LOCAL_CTYPE[body.dtype]
        identity = c_ops.literal(body.combiner.identity_value(body.dtype), body.dtype)
        outer.items.append(f"{ctype} cacc[{COLUMN_CHUNK}];")
        outer.items.append(f"for (long j = 0; j < {COLUMN_CHUNK}; j++) cacc[j] = {identity};")
        self.stack.append(outer)
        names = {a: self.bind(a, "r") for a in body.axes}
        blocks = [Block(frozenset((a,)), head=[
            f"for (long {names[a]} = {a.lo}; {names[a]} < {a.lo + a.extent}; {names[a]}++) {{"],
            loop=True) for a in body.axes]
        last = self.bind(axes[-1], "i")
        blocks.append(Block(frozenset((axes[-1],)), head=[
            "#pragma omp simd", "for (long j = 0; j < cn; j++) {",
            f"  const long {last} = {axes[-1].lo}L + cs + j;"], loop=True))
        self.stack.extend(blocks)
        src = self.value(body.source)
        self.stack[-1].items.append(self.combine(body, "cacc[j]", src, "", names))
        self._close(blocks)
        base = " + ".join(f"{self.var(v)} * {math.prod(shape[k + 1:])}L"
                          for k, v in enumerate(axes[:-1])) or "0"
        outer.items.append(f"for (long j = 0; j < cn; j++) a0[{base} + {axes[-1].lo}L + cs + j]"
                           " = cacc[j];")
        self._close([outer])

    def _close(self, blocks: list) -> None:
        """Pop ``blocks`` (the top of the stack) and attach each to its parent."""
        for b in reversed(blocks):
            self.stack.pop()
            self.stack[-1].items.append(b)

    # expressions --------------------------------------------------------------------------

    def place(self, e: Expr) -> int:
        """Index in the stack of the block where ``e`` is emitted: the innermost block
        binding one of its variables, or a guarded branch it must stay under (only if
        one of its reads could leave its tensor: a causal softmax's row max moves out of
        the ``if (j <= i)`` around each element, else it is computed once per element)."""
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

    def value(self, e: Expr) -> str:
        if isinstance(e, Const):
            return c_ops.literal(e.value, e.dtype)
        if isinstance(e, Var):
            return self.var(e)
        hit = self.memo.get(e)
        if hit is not None and any(hit[1] is b for b in self.stack):
            return hit[0]
        k = self.place(e)
        saved, self.stack = self.stack, self.stack[: k + 1]
        try:
            if e in self.cache_read and self.cache_read[e][0] in self.written:
                buffer, j = self.cache_read[e]
                name = self.emit(e, f"{buffer}[{self.var(j)}]")
            elif isinstance(e, Reduce):
                name = self.reduce(e)
            elif isinstance(e, Select):
                name = self.select(e)
            elif isinstance(e, Read):
                name = self.read(e)
            else:
                name = self.emit(e, self.expression(e))
            if e in self.cache_write and e not in self.cache_read:
                buffer, k_axis = self.cache_write[e]
                self.stack[-1].items.append(f"{buffer}[{self.var(k_axis)}] = {name};")
                self.written.add(buffer)
        finally:
            self.stack = saved
        self.memo[e] = (name, self.stack[k])
        return name

    def emit(self, e: Expr, code: str) -> str:
        name = self.fresh()
        self.stack[-1].items.append(f"const {LOCAL_CTYPE[e.dtype]} {name} = {code};")
        return name

    def expression(self, e: Expr) -> str:
        if isinstance(e, Unary):
            return c_ops.unary(e.op, self.value(e.a), e.dtype if e.op != "not" else "bool")
        if isinstance(e, Binary):
            operand = dt.promote(e.a.dtype, e.b.dtype)
            if _plain_division(e):  # C's truncation is the floor for these operands
                op = "/" if e.op == "floordiv" else "%"
                return f"({self.value(e.a)} {op} {self.value(e.b)})"
            return c_ops.binary(e.op, self.value(e.a), self.value(e.b), e.dtype, operand)
        if isinstance(e, Cast):
            return c_ops.cast(self.value(e.a), e.dtype)
        raise TypeError(f"cannot compile {type(e).__name__}")

    def read(self, e: Read) -> str:
        shape = e.tensor.shape
        terms = []
        for axis, index in enumerate(e.indices):
            ix = self.value(index)
            if not is_pure_index(index):
                checked = self.fresh("ix")
                self.gathers.append(Gather(e.tensor.name, axis, repr(index), shape[axis]))
                self.has_check = True
                self.stack[-1].items.append(
                    f"long {checked} = (long)({ix}); if ({checked} < 0 || {checked} >= "
                    f"{shape[axis]}L) {{ if (!err[0]) {{ err[0] = {len(self.gathers)}; "
                    f"err[1] = {checked}; }} {checked} = 0; }}")
                ix = checked
            elif self.clamping and not index_in_bounds(index, shape[axis]):
                ix = f"tg_imin(tg_imax({ix}, 0L), {shape[axis] - 1}L)"
            stride = math.prod(shape[axis + 1:])
            terms.append(f"(long)({ix}) * {stride}L" if stride != 1 else f"(long)({ix})")
        return self.emit(e, f"{self.arg(e.tensor)}[{' + '.join(terms) or '0'}]")

    # selects ------------------------------------------------------------------------------

    def select(self, e: Select) -> str:
        cond = self.value(e.cond)
        if self.unguarded(e.a) and self.unguarded(e.b):
            return self.emit(e, f"({cond} ? {self.value(e.a)} : {self.value(e.b)})")
        if self.clampable(e.a) and self.clampable(e.b):
            saved, self.clamping = self.clamping, True
            try:
                a, b = self.value(e.a), self.value(e.b)
            finally:
                self.clamping = saved
            return self.emit(e, f"({cond} ? {a} : {b})")
        name = self.fresh()
        ctype = LOCAL_CTYPE[e.dtype]
        here = self.stack[-1]
        if isinstance(e.b, Const):
            here.items.append(f"{ctype} {name} = {self.value(e.b)};")
            branches = [(f"if ({cond}) {{", e.a)]
        else:
            here.items.append(f"{ctype} {name};")
            branches = [(f"if ({cond}) {{", e.a), ("if (!" + cond + ") {", e.b)]
        for head, branch in branches:
            block = Block(barrier=True, head=[head])
            self.stack.append(block)
            block.items.append(f"{name} = {self.value(branch)};")
            self.stack.pop()
            here.items.append(block)
        return name

    def unguarded(self, e: Expr) -> bool:
        """``e`` may be evaluated whether or not its branch is taken: it is ``eager``, or
        its reads stay in bounds and its reductions are small windows (unrolled, so the
        loop around them still vectorizes; a max pool's gradient reads its window's max
        and tie count in the branch of the element that is the max)."""
        if eager(e):
            return True
        return self.safe(e) and reduction_width(e) <= UNROLL and all(
            r.where is None for r in walk(e) if isinstance(r, Reduce))

    def clampable(self, e: Expr) -> bool:
        """``e`` may be evaluated branch-free with its reads at indices clamped into their
        tensors (the value is discarded where they would leave it): its reads are affine
        (a gather's index is checked, so it stays in its branch) and its reductions small
        windows without a ``where``. A padding's read ``select(0 <= i - 1, U[i - 1], 0)``
        is then no branch: gcc 12 miscompiles some loops whose branches it turns into
        masked loads (see the module header)."""
        nodes = walk(e)
        reduces = [x for x in nodes if isinstance(x, Reduce)]
        return (not reduces or reduction_width(e) <= UNROLL) and all(
            r.where is None for r in reduces) and all(
            all(is_pure_index(i) for i in x.indices) for x in nodes if isinstance(x, Read))

    # reductions ---------------------------------------------------------------------------


def _work_per_point(body: Expr) -> int:
    """The parallel-work estimate of one output point: its widest reduction, weighted by
    the transcendental functions in the body (each the cost of ~``TRANSCENDENTAL_COST``
    additions: an LSTM step's gates are worth two threads at 8K points)."""
    calls = sum(1 for x in walk(body) if isinstance(x, Unary) and x.op in c_ops.TRANSCENDENTAL)
    return reduction_width(body) * (1 + TRANSCENDENTAL_COST * calls)


def _index(blocks: list, block) -> int:
    return next((k for k, b in enumerate(blocks) if b is block), -1)


def _plain_division(e: Binary) -> bool:
    """An integer ``//`` or ``%`` by a positive constant of a value that is never negative
    (an index ``h // 2``): C's ``/`` and ``%`` give the same, and vectorize."""
    if e.op not in ("floordiv", "floormod") or not dt.is_int(e.dtype):
        return False
    if not (isinstance(e.b, Const) and int(e.b.value) > 0):
        return False
    iv = interval(e.a)
    return iv is not None and iv[0] is not None and iv[0] >= 0
