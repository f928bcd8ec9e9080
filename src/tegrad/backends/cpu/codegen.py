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

**Reductions** open their own loops where they are placed. A conjunct of the ``where``
that is affine in one reduce axis with coefficient ``c`` (``c k + R >= 0`` or ``== 0``,
``R`` over variables bound outside that loop) becomes a bound of its loop
(``k >= ceil(-R / c)`` for ``c > 0``, ``k <= floor(R / -c)`` for ``c < 0``): the guards of
a gather-form convolution or pooling backward cost nothing per element. The other
conjuncts test each point.

**Guards.** A ``select`` branch whose reads could leave their tensor when the condition
is false (by interval bounds), or that holds a reduction, is evaluated in an ``if``
block, and nothing inside that block moves above it: a read is never evaluated outside
the guards that the verifier proved keep it in bounds. Branches that are always safe
become a branch-free ``c ? a : b``, which gcc vectorizes. Indices read from integer
tensors are checked on every read; the first bad one is reported through ``err``.

Names in the source (``i0``, ``r1``, ``t5``, ``a2``) are given in order of first use, so
the same structure, shapes and dtypes give the same text: the text is the cache key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...ir import dtype as dt
from ...ir.affine import linearize
from ...ir.bounds import interval, is_pure_index
from ...ir.expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var
from ...ir.tensor import Compute
from ...ir.traverse import children, free_vars, substitute, tensors_read, walk, with_children
from ...ir.verify import split_conjunction
from . import c_ops
from .c_ops import CTYPE

PARALLEL_WORK = 1 << 17  # points x reduction width below which a kernel runs on one thread
THREAD_CHUNKS = 16  # merge leading axes until the parallel loop has this many iterations
COLUMN_CHUNK = 64  # accumulators per thread in a column reduction
FUSABLE = ("sum", "prod", "max", "min")  # reductions that may share a loop


@dataclass(eq=False)
class Block:
    """A C block: ``head`` lines, then ``items`` (lines and closed inner blocks)."""

    binds: frozenset = frozenset()
    barrier: bool = False  # a guarded branch: nothing inside moves above it
    head: list = field(default_factory=list)
    items: list = field(default_factory=list)
    loop: bool = False

    def render(self, out: list[str], indent: int) -> None:
        pad = "  " * indent
        for line in self.head:
            out.append(pad + line)
        inner = indent + 1 if self.head else indent
        for item in self.items:
            if isinstance(item, Block):
                item.render(out, inner)
            else:
                out.append("  " * inner + item)
        if self.head:
            out.append(pad + "}")

    def has_blocks(self) -> bool:
        return any(isinstance(i, Block) for i in self.items)


@dataclass
class Gather:
    """A checked read of an index tensor, for the error message."""

    tensor: str
    axis: int
    index: str
    dim: int


class KernelSource:
    """The C function ``name`` computing ``t`` (its body: ``body_of``'s)."""

    def __init__(self, t: Compute, body_of: Compute, name: str):
        self.tensor = t
        self.name = name
        self.args: list = [t]  # out first, then every tensor read
        for r in tensors_read(body_of.body):
            if r not in self.args:
                self.args.append(r)
        self.gathers: list[Gather] = []
        self.has_check = False
        self.vars: dict = {}
        self.bound: dict = {}  # prefix -> variables named so far
        self.counter = 0
        self.memo: dict = {}
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
            const = "" if k == 0 else "const "
            header.append(f"{const}{CTYPE[a.dtype]} *restrict a{k} = "
                          f"({const}{CTYPE[a.dtype]} *)args[{k}];")
        shape = t.shape
        axes = body_of.axes
        size = math.prod(shape)
        parallel = size * _reduction_width(body_of) >= PARALLEL_WORK and size > 1
        body = _unshadow(body_of.body, frozenset(axes))
        self.reductions = [x for x in walk(body) if isinstance(x, Reduce)]
        if _column_order(body, axes, shape):
            self._column_nest(body, axes, shape, parallel)
        else:
            self._row_nest(body, axes, shape, parallel)
        lines = [f"void {self.name}(void **args, long *err, int nthreads) {{"]
        lines += ["  " + h for h in header]
        self.root.render(lines, 1)
        lines.append("}")
        return "\n".join(lines)

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
            head.append(f"  const long {name} = {value};")
        return Block(frozenset(axes), head=head, loop=True)

    def _row_nest(self, body: Expr, axes, shape, parallel: bool) -> None:
        """Output axes outermost, in order; the body evaluated at each point."""
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
                blocks.append(Block(frozenset((v,)), head=[
                    f"for (long {name} = 0; {name} < {n}L; {name}++) {{"], loop=True))
        self.stack.extend(blocks)
        value = self.value(body)
        flat = " + ".join(f"{self.var(v)} * {math.prod(shape[k + 1:])}L"
                          for k, v in enumerate(axes)) or "0"
        self.stack[-1].items.append(f"a0[{flat}] = {value};")
        innermost = self.stack[-1]
        self._close(blocks)
        if len(blocks) > 1 and not innermost.has_blocks() and not self.has_check:
            innermost.head.insert(0, "#pragma omp simd")

    def _column_nest(self, body: Reduce, axes, shape, parallel: bool) -> None:
        """A reduction along the outer dimension of its reads (``dW[d] = sum_n dY[n, d]
        X[n, d]``): the reduce loops outside, the last output axis innermost over a chunk of
        ``COLUMN_CHUNK`` accumulators, so that every read is contiguous and vectorized."""
        n = shape[-1]
        chunks = -(-n // COLUMN_CHUNK)
        outer = self._merged_loop(axes[:-1], shape[:-1], parallel, chunks)
        outer.head.append(f"  const long cn = tg_imin({COLUMN_CHUNK}L, {n}L - cs);")
        ctype = CTYPE[body.dtype]
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
            f"  const long {last} = cs + j;"], loop=True))
        self.stack.extend(blocks)
        src = self.value(body.source)
        self.stack[-1].items.append(self.combine(body, "cacc[j]", src, "", names))
        self._close(blocks)
        base = " + ".join(f"{self.var(v)} * {math.prod(shape[k + 1:])}L"
                          for k, v in enumerate(axes[:-1])) or "0"
        outer.items.append(f"for (long j = 0; j < cn; j++) a0[{base} + cs + j] = cacc[j];")
        self._close([outer])

    def _close(self, blocks: list) -> None:
        """Pop ``blocks`` (the top of the stack) and attach each to its parent."""
        for b in reversed(blocks):
            self.stack.pop()
            self.stack[-1].items.append(b)

    # expressions --------------------------------------------------------------------------

    def place(self, e: Expr) -> int:
        """Index in the stack of the block where ``e`` is emitted."""
        fv = free_vars(e)
        for k in range(len(self.stack) - 1, 0, -1):
            b = self.stack[k]
            if b.barrier or (b.binds & fv):
                return k
        return 0

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
            if isinstance(e, Reduce):
                name = self.reduce(e)
            elif isinstance(e, Select):
                name = self.select(e)
            elif isinstance(e, Read):
                name = self.read(e)
            else:
                name = self.emit(e, self.expression(e))
        finally:
            self.stack = saved
        self.memo[e] = (name, self.stack[k])
        return name

    def emit(self, e: Expr, code: str) -> str:
        name = self.fresh()
        self.stack[-1].items.append(f"const {CTYPE[e.dtype]} {name} = {code};")
        return name

    def expression(self, e: Expr) -> str:
        if isinstance(e, Unary):
            return c_ops.unary(e.op, self.value(e.a), e.dtype if e.op != "not" else "bool")
        if isinstance(e, Binary):
            operand = dt.promote(e.a.dtype, e.b.dtype)
            return c_ops.binary(e.op, self.value(e.a), self.value(e.b), e.dtype, operand)
        if isinstance(e, Cast):
            return c_ops.cast(self.value(e.a), e.a.dtype, e.dtype)
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
            stride = math.prod(shape[axis + 1:])
            terms.append(f"(long)({ix}) * {stride}L" if stride != 1 else f"(long)({ix})")
        return self.emit(e, f"{self.arg(e.tensor)}[{' + '.join(terms) or '0'}]")

    # selects ------------------------------------------------------------------------------

    def select(self, e: Select) -> str:
        cond = self.value(e.cond)
        if _eager(e.a) and _eager(e.b):
            return self.emit(e, f"({cond} ? {self.value(e.a)} : {self.value(e.b)})")
        name = self.fresh()
        ctype = CTYPE[e.dtype]
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

    # reductions ---------------------------------------------------------------------------

    def reduce(self, e: Reduce) -> str:
        kind = e.combiner.kind
        here = self.stack[-1]
        ctype = CTYPE[e.dtype]
        acc = self.fresh("acc")
        shadowed = {a: self.vars.get(a) for a in e.axes}  # a nested reduction may reuse an axis
        names = {a: self.bind(a, "r") for a in e.axes}
        bounds, rest = self.loop_bounds(e, names)
        if kind in ("argmax", "argmin"):
            src_type = CTYPE[e.source.dtype]
            start = e.axes[0].lo if len(e.axes) == 1 else 0
            here.items.append(f"{ctype} {acc} = {start}; {src_type} {acc}_best = 0; "
                              f"int {acc}_found = 0;")
        else:
            identity = c_ops.literal(e.combiner.identity_value(e.dtype), e.dtype)
            here.items.append(f"{ctype} {acc} = {identity};")
        siblings = self.siblings(e)
        for r in siblings:
            siblings[r] = self.fresh("acc")
            identity = c_ops.literal(r.combiner.identity_value(r.dtype), r.dtype)
            here.items.append(f"{CTYPE[r.dtype]} {siblings[r]} = {identity};")
        deepest = {}  # conjunct -> position of the last own axis it uses (-1: none)
        for c in rest:
            used = [k for k, a in enumerate(e.axes) if a in free_vars(c)]
            deepest[c] = used[-1] if used else -1
        last = len(e.axes) - 1
        predicate = (kind in ("sum", "prod", "max", "min") and _eager(e.source)
                     and all(_eager(c) for c in rest))
        opened = []

        def guard(conds):
            if not conds:
                return
            test = " && ".join(self.value(c) for c in conds)
            block = Block(barrier=True, head=[f"if ({test}) {{"])
            self.stack.append(block)
            opened.append(block)

        guard([c for c in rest if deepest[c] == -1])
        for k, a in enumerate(e.axes):
            lo, hi = bounds[a]
            name = names[a]
            block = Block(frozenset((a,)), head=[
                f"for (long {name} = {lo}; {name} < {hi}; {name}++) {{"], loop=True)
            self.stack.append(block)
            opened.append(block)
            if k < last or not predicate:
                guard([c for c in rest if deepest[c] == k])
        inner = self.stack[-1]
        src = self.value(e.source)
        mask = [self.value(c) for c in rest if deepest[c] == last] if predicate else []
        inner.items.append(self.combine(e, acc, src, " && ".join(mask), names))
        for r, r_acc in siblings.items():
            r_src = self.value(substitute(r.source, dict(zip(r.axes, e.axes, strict=True))))
            inner.items.append(self.combine(r, r_acc, r_src, "", names))
        innermost_loop = opened[-1] if opened and opened[-1].loop else None
        for block in reversed(opened):
            self.stack.pop()
            self.stack[-1].items.append(block)
        for r, r_acc in siblings.items():
            self.memo[r] = (r_acc, here)
        accumulators = [(e, acc), *((r, a) for r, a in siblings.items())]
        if (innermost_loop is not None and not innermost_loop.has_blocks() and not self.has_check
                and all(r.combiner.kind in ("sum", "prod") and dt.is_float(r.dtype)
                        for r, _ in accumulators)):
            clauses = " ".join(f"reduction({'+' if r.combiner.kind == 'sum' else '*'}:{a})"
                               for r, a in accumulators)
            innermost_loop.head.insert(0, f"#pragma omp simd {clauses}")
        for a, old in shadowed.items():
            if old is not None:
                self.vars[a] = old
        return acc

    def siblings(self, e: Reduce) -> dict:
        """Other reductions of the body over the same ranges, with no ``where``, placed in
        the same block, independent of ``e`` and safe to evaluate unguarded: computed in
        ``e``'s loop (one pass over a layer-norm row instead of three). Keys only; the
        caller fills in their accumulators."""
        if e.where is not None or e.combiner.kind not in FUSABLE:
            return {}
        here = len(self.stack) - 1
        bound = frozenset().union(*(b.binds for b in self.stack))
        spans = [(a.lo, a.extent) for a in e.axes]
        inside_e = set(walk(e))
        found: dict = {}
        for r in self.reductions:
            if (r is e or r in found or r.where is not None or r.combiner.kind not in FUSABLE
                    or [(a.lo, a.extent) for a in r.axes] != spans or r in inside_e):
                continue
            hit = self.memo.get(r)
            if hit is not None and any(hit[1] is b for b in self.stack):
                continue
            if not free_vars(r) <= bound or self.place(r) != here or not _reads_in_bounds(r):
                continue
            nodes = walk(r)  # e's axes may name r's own, not one bound inside r
            if e in nodes or any(isinstance(x, Var) and x in e.axes and x not in r.axes
                                 for x in nodes):
                continue
            found[r] = None
        return found

    def loop_bounds(self, e: Reduce, names: dict):
        """Per axis ``(lo, hi)`` C expressions (half-open), and the conjuncts left over."""
        bounds = {a: [str(a.lo), str(a.lo + a.extent)] for a in e.axes}
        rest = []
        conds = split_conjunction(e.where) if e.where is not None else []
        for c in conds:
            found = _affine_bound(c)
            if found is None:
                rest.append(c)
                continue
            sides = []
            for coeffs, k, kind in found:
                own = [a for a in coeffs if a in bounds]
                if not own:
                    sides = None
                    break
                a = max(own, key=e.axes.index)  # the innermost own axis it uses
                others = {v: c for v, c in coeffs.items() if v is not a}
                if any(v in bounds and e.axes.index(v) > e.axes.index(a) for v in others) or \
                        not all(v in bounds or self._bound(v) for v in others):
                    sides = None
                    break
                if kind == "eq" and abs(coeffs[a]) != 1:
                    sides = None
                    break
                sides.append((a, coeffs[a], others, k, kind))
            if sides is None:
                rest.append(c)
                continue
            for a, coef, others, k, kind in sides:
                r = " + ".join([f"{c} * {names.get(v) or self.var(v)}" for v, c in
                                others.items()] + [f"{k}L"])
                lo, hi = bounds[a]
                if kind == "eq":  # coef * a + R == 0, coef = +-1
                    point = f"({-coef}L * ({r}))"
                    bounds[a] = [f"tg_imax({lo}, {point})", f"tg_imin({hi}, {point} + 1)"]
                elif coef > 0:  # a >= ceil(-R / coef)
                    bounds[a] = [f"tg_imax({lo}, tg_cdiv(-({r}), {coef}L))", hi]
                else:  # a <= floor(R / -coef)
                    bounds[a] = [lo, f"tg_imin({hi}, tg_fdiv({r}, {-coef}L) + 1)"]
        return {a: tuple(b) for a, b in bounds.items()}, rest

    def _bound(self, v) -> bool:
        return isinstance(v, Var) and v in self.vars and any(v in b.binds for b in self.stack)

    def combine(self, e: Reduce, acc: str, src: str, mask: str, names: dict) -> str:
        kind = e.combiner.kind
        if kind == "sum":
            return f"{acc} += {f'{mask} ? {src} : 0' if mask else src};"
        if kind == "prod":
            return f"{acc} *= {f'{mask} ? {src} : 1' if mask else src};"
        if kind in ("max", "min"):
            new = c_ops.binary(kind, acc, src, e.dtype, e.dtype)
            return f"{acc} = {f'{mask} ? {new} : {acc}' if mask else new};"
        if kind in ("argmax", "argmin"):
            worse = "<=" if kind == "argmax" else ">="
            if len(e.axes) == 1:
                pos = names[e.axes[0]]
            else:
                pos = "0"
                for a in e.axes:
                    pos = f"({pos}) * {a.extent}L + ({names[a]} - {a.lo}L)"
            return (f"if (!{acc}_found || ({acc}_best == {acc}_best && !({src} {worse} "
                    f"{acc}_best))) {{ {acc}_best = {src}; {acc} = {pos}; {acc}_found = 1; }}")
        if kind == "custom":
            c = e.combiner
            new = _inline(c.combine, {c.lhs: acc, c.rhs: src})
            return f"{acc} = {new};"
        raise NotImplementedError(f"reduction {kind} in the C backend")


def _unshadow(e: Expr, bound: frozenset) -> Expr:
    """``e`` with every reduction that rebinds a variable already bound around it (the
    same axis object reused by a nested reduction, which inlining produces) given fresh
    axes, so that each variable names one loop."""
    memo: dict = {}

    def go(x: Expr, bound: frozenset) -> Expr:
        key = (x, bound)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if isinstance(x, Reduce):
            if bound & frozenset(x.axes):
                fresh = {a: Var.fresh(a.name, a.lo, a.extent, a.dtype) for a in x.axes}
                where = None if x.where is None else substitute(x.where, fresh)
                x = Reduce(x.combiner, substitute(x.source, fresh), tuple(fresh.values()),
                           where, x.dtype)
            inner = bound | frozenset(x.axes)
            out = with_children(x, tuple(go(c, inner) for c in children(x)))
        elif isinstance(x, Var | Const):
            out = x
        else:
            out = with_children(x, tuple(go(c, bound) for c in children(x)))
        memo[key] = out
        return out

    return go(e, bound)


def _column_order(body: Expr, axes, shape) -> bool:
    """True for a sum/prod/max/min over the outer dimension of reads that are contiguous
    along the last output axis: the reduce loops then go outside it (``_column_nest``)."""
    if not (isinstance(body, Reduce) and body.combiner.kind in ("sum", "prod", "max", "min")
            and body.where is None and axes and shape[-1] >= 8 and _eager(body.source)):
        return False
    last, inner = axes[-1], body.axes[-1]
    both = False  # the reads that vary along both decide (per-row statistics do not)
    for x in walk(body.source):
        if not isinstance(x, Read) or not x.indices:
            continue
        strides = {}
        for m, index in enumerate(x.indices):
            coeffs, _ = linearize(index)
            step = math.prod(x.tensor.shape[m + 1:])
            for v, c in coeffs.items():
                strides[v] = strides.get(v, 0) + c * step
        if strides.get(last) and strides.get(inner):
            if strides[last] != 1:
                return False
            both = True
    return both


def _eager(e: Expr) -> bool:
    """True when ``e`` may be evaluated whatever guards it sits under: no reduction, and
    every read in bounds over the full ranges of its variables."""
    return not any(isinstance(x, Reduce) for x in walk(e)) and _reads_in_bounds(e)


def _reads_in_bounds(e: Expr) -> bool:
    for x in walk(e):
        if isinstance(x, Read):
            for index, dim in zip(x.indices, x.tensor.shape, strict=True):
                if not is_pure_index(index):
                    return False
                iv = interval(index)
                if iv is None or iv[0] is None or iv[1] is None or iv[0] < 0 or iv[1] >= dim:
                    return False
    return True


def _affine_bound(c: Expr):
    """``c`` as ``[(coeffs, k, kind)]`` with ``sum coeffs * v + k >= 0`` (kind "ge") or
    ``== 0`` (kind "eq", one coefficient +-1 on some variable); None otherwise."""
    negated = isinstance(c, Unary) and c.op == "not" and isinstance(c.a, Binary)
    if negated and c.a.op in ("lt", "le"):
        a, b = c.a.a, c.a.b  # not (a < b): a - b >= 0; not (a <= b): a - b - 1 >= 0
        form = _difference(a, b, 0 if c.a.op == "lt" else -1)
        return None if form is None else [(*form, "ge")]
    if not isinstance(c, Binary) or c.op not in ("lt", "le", "eq"):
        return None
    if c.op == "eq":
        form = _difference(c.a, c.b, 0)
        if form is None or not any(abs(x) == 1 for x in form[0].values()):
            return None
        return [(*form, "eq")] if len(form[0]) >= 1 else None
    form = _difference(c.b, c.a, -1 if c.op == "lt" else 0)  # a < b: b - a - 1 >= 0
    return None if form is None else [(*form, "ge")]


def _difference(a: Expr, b: Expr, k: int):
    if not (dt.is_int(a.dtype) and dt.is_int(b.dtype)):
        return None
    ca, ka = linearize(a)
    cb, kb = linearize(b)
    coeffs = dict(ca)
    for atom, c in cb.items():
        coeffs[atom] = coeffs.get(atom, 0) - c
    coeffs = {v: c for v, c in coeffs.items() if c}
    if not coeffs or not all(isinstance(v, Var) for v in coeffs):
        return None
    return coeffs, ka - kb + k


def _inline(e: Expr, env: dict) -> str:
    """A combiner's expression of its two parameters, as one C expression."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Const):
        return c_ops.literal(e.value, e.dtype)
    if isinstance(e, Unary):
        return c_ops.unary(e.op, _inline(e.a, env), e.dtype if e.op != "not" else "bool")
    if isinstance(e, Binary):
        operand = dt.promote(e.a.dtype, e.b.dtype)
        return c_ops.binary(e.op, _inline(e.a, env), _inline(e.b, env), e.dtype, operand)
    if isinstance(e, Cast):
        return c_ops.cast(_inline(e.a, env), e.a.dtype, e.dtype)
    if isinstance(e, Select):
        return f"({_inline(e.cond, env)} ? {_inline(e.a, env)} : {_inline(e.b, env)})"
    raise NotImplementedError(f"custom reducer with {type(e).__name__} in the C backend")


def _reduction_width(t: Compute) -> int:
    best = 1
    for x in walk(t.body):
        if isinstance(x, Reduce):
            best = max(best, math.prod(a.extent for a in x.axes))
    return best
