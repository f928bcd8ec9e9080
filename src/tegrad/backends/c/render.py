"""A loop-nest tree (``lower/nest.py``) printed as C: one method per node, no decisions.

``CDialect`` is the C of the cpu target: OpenMP C for gcc, a function ``void name(void
**args, long *err, int nthreads)`` whose arguments are ``restrict`` arrays. Each node of
the tree has one method here, and each piece of spelling that another C-like target
would change has its own (``signature``, ``argument``, ``flat_loop_head``,
``vector_pragma``, ``unroll_pragma``, ``clamp``, ``check_index``, ``stage``,
``stream_out``, the partial rows of column sums), so a CUDA dialect overrides those and
keeps the rest, as tinygrad's ``renderer/cstyle.py`` subclasses do. The scalar ops are
``c_ops.py``'s table.

**Why these spellings.** Float sums carry ``omp simd reduction`` clauses, so gcc
vectorizes them without ``-ffast-math`` (which would break NaN and infinity semantics);
nested output loops count in ``int``, as gcc vectorizes gathers (``x[i / 2]``) only with
int indices; a clamped read is ``tg_imin(tg_imax(i, 0), n - 1)``, a plain load (gcc 12
turns guarded loads into masked ones and miscompiles some such loops, issue 27; the
compiler flags keep it from moving clamped loads back under the condition); a streamed
output is staged on the thread's stack, 64-byte aligned, and copied out with
non-temporal stores (``c_ops``'s ``tg_stream``); the partial rows of column sums start
2 KiB past the output's address modulo 4 KiB (the inputs' too, when they are aligned
alike, as NumPy's large arrays are), so a row read right after a store to the output at
the same address modulo 4 KiB does not wait for that store ("4K aliasing").
"""

from __future__ import annotations

import math

from ...ir import dtype as dt
from ...ir.expr import Binary, Cast, Const, Expr, Select, Unary, Var
from ...lower import nest as n
from ...lower import nest_forms as forms
from ...lower import nest_lanes
from ...lower.coalesce import INT_MAX
from . import c_ops
from .c_ops import CTYPE, LOCAL_CTYPE


class CDialect:
    """OpenMP C (gcc) for the cpu target."""

    types = CTYPE  # array elements
    local_types = LOCAL_CTYPE  # locals: bools as int (one-byte lanes stop vectorizing)
    index_types = {"output": "int", "reduce": "int", "column_reduce": "long"}
    simd_ops = {"sum": "+", "prod": "*", "max": "max", "min": "min"}
    indent = "  "

    # the function -------------------------------------------------------------------------

    def render(self, kernel: n.LoopNest) -> str:
        lines = [self.signature(kernel)]
        for k, a in enumerate(kernel.args):
            lines.append(self.indent + self.argument(k, a, k < kernel.outputs))
        self.block(kernel.body, lines, 1)
        lines.append("}")
        if _lane_loops(kernel.body):  # (only there: the header costs gcc 0.1-0.2 s a file)
            lines = ["#ifdef __AVX512F__", "#include <immintrin.h>", "#endif", *lines]
        return "\n".join(lines)

    def signature(self, kernel: n.LoopNest) -> str:
        return f"void {kernel.name}(void **args, long *err, int nthreads) {{"

    def argument(self, k: int, a, written: bool) -> str:
        const = "" if written else "const "
        ctype = self.types[a.dtype]
        return f"{const}{ctype} *restrict a{k} = ({const}{ctype} *)args[{k}];"

    # blocks -------------------------------------------------------------------------------

    def block(self, b: n.Block, out: list[str], indent: int) -> None:
        if isinstance(b, n.Loop) and b.lanes:
            lanes = nest_lanes.lane_form(b)
            if lanes is not None:
                self.lane_loop(b, lanes, out, indent)
                return
        pad = self.indent * indent
        head = self.head(b)
        out.extend(pad + line for line in head)
        inner = indent + (3 if isinstance(b, n.Loop) and b.partials else 1) if head else indent
        for item in b.items:
            if isinstance(item, n.Block):
                self.block(item, out, inner)
            else:
                out.extend(self.indent * inner + line for line in self.statement(item))
        if isinstance(b, n.Loop) and b.partials:
            out.extend(pad + line for line in self.threaded_loop_tail(b))
        elif head:
            out.append(pad + "}")

    def head(self, b: n.Block) -> list[str]:
        if isinstance(b, n.FlatLoop):
            return self.flat_loop_head(b)
        if isinstance(b, n.Loop):
            return self.loop_head(b)
        if isinstance(b, n.ChunkLoop):
            return [*([self.vector_pragma(())] if b.vectorize else []),
                    "for (long j = 0; j < cn; j++) {", f"  const long {b.var} = {b.lo}L + cs + j;"]
        if isinstance(b, n.Guard):
            test = " && ".join(self.operand(c) for c in b.conds)
            return [f"if ({'!' if b.negate else ''}{test}) {{"]
        return []

    def lane_loop(self, b: n.Loop, lanes: dict, out: list[str], indent: int) -> None:
        """A short loop as masked AVX-512 vectors of ``b.lanes`` points adding to its sums'
        lanes (``lower/nest_lanes.py``): its index values at each vector's first point, a
        float32 value per lane; the plain loop where the compiler has no AVX-512 (the
        lanes then stay 0)."""
        pad, inner = self.indent * indent, self.indent * (indent + 1)
        hi = self.bound(b.hi)
        out += ["#ifdef __AVX512F__",
                f"{pad}for (int tg_b = {self.bound(b.lo)}; tg_b < {hi}; tg_b += {b.lanes}) {{",
                f"{inner}const int {b.var} = tg_b;",
                f"{inner}const long tg_n = {hi} - tg_b;",
                f"{inner}const __mmask16 tg_m = tg_n >= {b.lanes} ? (__mmask16)0xffff : "
                "(__mmask16)((1u << tg_n) - 1u);"]
        for item in b.items:
            out.append(inner + self.lane_statement(item, lanes))
        out += [pad + "}", "#else"]
        self.block(n.Loop(**{**vars(b), "lanes": 0}), out, indent)
        out.append("#endif")

    def lane_statement(self, s, lanes: dict) -> str:
        if isinstance(s, n.Accumulate):
            acc, src = f"{s.acc.name}_v", self.lane_operand(s.src, lanes)
            op = {"sum": "add", "max": "max", "min": "min"}[s.kind]
            step = f"{acc} = _mm512_mask_{op}_ps({acc}, tg_m, {acc}, {src});"
            if s.flag:  # (a NaN a lane's max would drop: its lane's mask bit raised)
                step += (f" {s.acc.name}_vn |= _mm512_mask_cmp_ps_mask(tg_m, {src}, {src}, "
                         "_CMP_UNORD_Q);")
            return step
        form = lanes[s.name]
        if form[0] == "index":
            return self.visit_Let(s)
        if form[0] == "load":
            load = self.scalar(s.value)
            value = (f"_mm512_maskz_loadu_ps(tg_m, &{load})" if form[1]
                     else f"_mm512_set1_ps({load})")
            return f"const __m512 {s.name} = {value};"
        args = [self.lane_operand(a, lanes) for a in s.value.args]
        if form[0] == "mask":  # (ordered, as C's comparisons but !=, true at NaN)
            predicate = {"eq": "_CMP_EQ_OQ", "ne": "_CMP_NEQ_UQ", "lt": "_CMP_LT_OQ",
                         "le": "_CMP_LE_OQ"}[s.value.op]
            return (f"const __mmask16 {s.name} = _mm512_cmp_ps_mask({args[0]}, {args[1]}, "
                    f"{predicate});")
        if s.value.op == "cast":
            return (f"const __m512 {s.name} = _mm512_maskz_mov_ps({s.value.args[0].name}, "
                    "_mm512_set1_ps(1.0f));")
        if s.value.op == "neg":  # (the sign bit flipped, as -x: -0 for 0)
            return (f"const __m512 {s.name} = _mm512_castsi512_ps(_mm512_xor_si512("
                    f"_mm512_castps_si512({args[0]}), _mm512_set1_epi32(INT32_MIN)));")
        return f"const __m512 {s.name} = _mm512_{s.value.op}_ps({args[0]}, {args[1]});"

    def lane_operand(self, x: forms.Operand, lanes: dict) -> str:
        """A vector of ``x``: a lane value itself, else ``x`` in every lane."""
        if isinstance(x, forms.Ref) and x.name in lanes:
            return x.name
        return f"_mm512_set1_ps({self.operand(x)})"

    def flat_loop_head(self, b: n.FlatLoop) -> list[str]:
        """``f`` over every point of the merged axes, each axis's value taken from it."""
        extents = [e for _, e, _ in b.vars] + ([b.chunks] if b.chunks else [])
        names = [name for name, _, _ in b.vars] + (["cs"] if b.chunks else [])
        head = []
        if b.parallel:
            head.append("#pragma omp parallel for schedule(static) num_threads(nthreads)")
        if len(names) == 1 and not b.chunks and b.vars[0][2] + extents[0] <= INT_MAX:
            # one axis: an ``int``, as an inner loop's is (an index the body computes in
            # 32 bits from a ``long`` is not affine to gcc: the loop would stay scalar)
            (name, extent, lo), = b.vars
            return [*head, f"for (int f = 0; f < {extent}; f++) {{",
                    f"  const int {name} = {f'{lo} + f' if lo else 'f'};",
                    *("  " + line for s in b.stages for line in self.stage(s))]
        head.append(f"for (long f = 0; f < {math.prod(extents)}L; f++) {{")
        for k, name in enumerate(names):
            inner = math.prod(extents[k + 1:])
            div = f"f / {inner}L" if inner > 1 else "f"
            value = f"({div}) % {extents[k]}L" if k else div
            if b.chunks and k == len(names) - 1:
                value = f"({value}) * {b.chunk}L"
            elif b.vars[k][2]:  # a region's variable
                value = f"{b.vars[k][2]}L + {value}"
            head.append(f"  const long {name} = {value};")
        if b.chunks:
            head.append(f"  const long cn = tg_imin({b.chunk}L, {b.columns}L - cs);")
        for s in b.stages:
            head += ["  " + line for line in self.stage(s)]
        return head

    def loop_head(self, b: n.Loop) -> list[str]:
        if b.partials:
            return self.threaded_loop_head(b)
        head = []
        if b.vectorize:
            head.append(self.vector_pragma(b.simd_reductions))
        if b.unroll:
            head.append(self.unroll_pragma(b.unroll))
        lo, hi = self.bound(b.lo), self.bound(b.hi)
        index = self.index_types[b.role]
        head.append(f"for ({index} {b.var} = {lo}; {b.var} < {hi}; {b.var}++) {{")
        return head

    def threaded_loop_head(self, b: n.Loop) -> list[str]:
        """A reduction's loop shared out over threads (``Loop.partials``): a slot per
        thread for each accumulator, then a parallel region in which every thread sums
        its share of ``[lo, hi)`` into accumulators of the same names (shadowing the
        outer ones); ``threaded_loop_tail`` stores and combines them."""
        head = ["{"]
        for name, dtype, identity, _, nan in b.partials:
            ctype = self.local_types[dtype]
            head += [f"  {ctype} {name}_part[nthreads];",
                     f"  for (int p = 0; p < nthreads; p++) {name}_part[p] = "
                     f"{self.operand(identity)};"]
            if nan:
                head += [f"  int {name}_part_nan[nthreads];",
                         f"  for (int p = 0; p < nthreads; p++) {name}_part_nan[p] = 0;"]
        head += ["  #pragma omp parallel num_threads(nthreads)", "  {",
                 "    const long tg_t = omp_get_thread_num(), tg_n = omp_get_num_threads();",
                 f"    const long tg_lo = {self.bound(b.lo)}, "
                 f"tg_span = {self.bound(b.hi)} - tg_lo;"]
        for name, dtype, identity, _, nan in b.partials:
            head.append(f"    {self.local_types[dtype]} {name} = {self.operand(identity)};")
            if nan:
                head.append(f"    int {name}_nan = 0;")
        if b.vectorize:
            head.append("    " + self.vector_pragma(b.simd_reductions))
        index = self.index_types[b.role]
        head.append(f"    for ({index} {b.var} = tg_lo + tg_span * tg_t / tg_n; "
                    f"{b.var} < tg_lo + tg_span * (tg_t + 1) / tg_n; {b.var}++) {{")
        return head

    def threaded_loop_tail(self, b: n.Loop) -> list[str]:
        """Each thread's accumulators into its slots; after the region, the slots folded
        into the outer accumulators in thread order."""
        tail = ["    }"]
        combine = []
        for name, dtype, _, kind, nan in b.partials:
            tail.append(f"    {name}_part[tg_t] = {name};")
            part = f"{name}_part[p]"
            if kind == "sum":
                step = f"{name} += {part};"
            elif kind == "prod":
                step = f"{name} *= {part};"
            elif nan:  # (a float max/min: a plain compare and the NaN flags or-ed)
                cmp = ">" if kind == "max" else "<"
                step = (f"{name} = ({name} {cmp} {part} ? {name} : {part}); "
                        f"{name}_nan |= {name}_part_nan[p];")
            else:
                step = f"{name} = {c_ops.binary(kind, name, part, dtype, dtype)};"
            if nan:
                tail.append(f"    {name}_part_nan[tg_t] = {name}_nan;")
            combine.append(step)
        tail.append("  }")
        tail += [f"  for (int p = 0; p < nthreads; p++) {{ {' '.join(combine)} }}", "}"]
        return tail

    def vector_pragma(self, reductions: tuple) -> str:
        clauses = []
        for kind, acc, nan in reductions:
            clauses.append(f"reduction({self.simd_ops[kind]}:{acc})")
            if nan:
                clauses.append(f"reduction(|:{acc}_nan)")
        return " ".join(["#pragma omp simd", *clauses])

    def unroll_pragma(self, count: int) -> str:
        return f"#pragma GCC unroll {count}"

    def stage(self, s: n.Stage) -> list[str]:
        ctype = self.types[s.dtype]
        return [f"{ctype} stage{s.arg}[{s.span}] __attribute__((aligned(64)));",
                f"{ctype} *restrict a{s.arg} = stage{s.arg} - f * {s.span}L;"]

    # statements ---------------------------------------------------------------------------

    def statement(self, s) -> list[str]:
        method = getattr(self, "visit_" + type(s).__name__)
        out = method(s)
        return [out] if isinstance(out, str) else out

    def visit_Let(self, s: n.Let) -> str:
        return f"const {self.local_types[s.dtype]} {s.name} = {self.scalar(s.value)};"

    def visit_Declare(self, s: n.Declare) -> str:
        init = "" if s.init is None else f" = {self.operand(s.init)}"
        return f"{self.local_types[s.dtype]} {s.name}{init};"

    def visit_Assign(self, s: n.Assign) -> str:
        return f"{s.name} = {self.operand(s.value)};"

    def visit_CheckIndex(self, s: n.CheckIndex) -> str:
        return self.check_index(s.name, self.operand(s.value), s.extent, s.slot)

    def check_index(self, name: str, value: str, extent: int, slot: int) -> str:
        """The first index out of ``[0, extent)`` is reported in the error slot ``err``."""
        return (f"long {name} = (long)({value}); if ({name} < 0 || {name} >= {extent}L) "
                f"{{ if (!err[0]) {{ err[0] = {slot}; err[1] = {name}; }} {name} = 0; }}")

    def visit_Store(self, s: n.Store) -> str:
        return f"a{s.arg}[{self.index(s.index)}] = {self.operand(s.value)};"

    def visit_ZeroFill(self, s: n.ZeroFill) -> list[str]:
        size = f"sizeof({self.types[s.dtype]})"
        if s.slab:
            return [f"memset(a{s.arg} + f * {s.size}L, 0, {s.size}L * {size});"]
        if not s.piece:
            return [f"memset(a{s.arg}, 0, {s.size}L * {size});"]
        pieces = -(-s.size // s.piece)
        return ["#pragma omp parallel for schedule(static) num_threads(nthreads)",
                f"for (long z = 0; z < {pieces}L; z++) memset(a{s.arg} + z * {s.piece}L, 0, "
                f"(size_t)tg_imin({s.piece}L, {s.size}L - z * {s.piece}L) * {size});"]

    def visit_AddAt(self, s: n.AddAt) -> str:
        return f"a{s.arg}[{self.operand(s.index)}] += {self.operand(s.value)};"

    def visit_RowBuffer(self, s: n.RowBuffer) -> str:
        ctype = self.local_types[s.dtype]
        if s.row is not None:
            return f"{ctype} *{s.name} = a0 + {self.index(s.row)};"
        return f"{ctype} {s.name}[{s.length}];"

    def visit_BufferStore(self, s: n.BufferStore) -> str:
        return f"{s.buffer}[{self.operand(s.index)}] = {self.operand(s.value)};"

    def visit_Accumulator(self, s: n.Accumulator) -> list[str]:
        out = [f"{self.local_types[s.dtype]} {s.name} = {self.operand(s.identity)};"]
        if s.nan:
            out.append(f"int {s.name}_nan = 0;")
        return out

    def visit_LaneAccumulator(self, s: n.LaneAccumulator) -> list[str]:
        start = {"sum": "_mm512_setzero_ps()", "max": "_mm512_set1_ps(-INFINITY)",
                 "min": "_mm512_set1_ps(INFINITY)"}[s.kind]
        nan = [f"__mmask16 {s.name}_vn = 0;"] if s.nan else []
        return ["#ifdef __AVX512F__", f"__m512 {s.name}_v = {start};", *nan, "#endif"]

    def visit_FoldLanes(self, s: n.FoldLanes) -> list[str]:
        if s.kind == "sum":
            fold = [f"{s.name} += _mm512_reduce_add_ps({s.name}_v);"]
        else:  # (the accumulator's own compare, as the scalar loop's)
            cmp = ">" if s.kind == "max" else "<"
            fold = [f"{{ const float tg_r = _mm512_reduce_{s.kind}_ps({s.name}_v); "
                    f"{s.name} = {s.name} {cmp} tg_r ? {s.name} : tg_r; }}"]
        if s.nan:
            fold.append(f"if ({s.name}_vn) {s.name}_nan = 1;")
        return ["#ifdef __AVX512F__", *fold, "#endif"]

    def visit_ArgAccumulator(self, s: n.ArgAccumulator) -> str:
        return (f"{self.local_types[s.dtype]} {s.name} = {s.start}; "
                f"{self.local_types[s.source_dtype]} {s.name}_best = 0; int {s.name}_found = 0;")

    def visit_Accumulate(self, s: n.Accumulate) -> str:
        acc = "cacc[j]" if isinstance(s.acc, n.ColumnSlot) else s.acc.name
        src = self.operand(s.src)
        mask = " && ".join(self.operand(m) for m in s.mask)
        kind = s.kind
        if kind == "sum":
            return f"{acc} += {f'{mask} ? {src} : 0' if mask else src};"
        if kind == "prod":
            return f"{acc} *= {f'{mask} ? {src} : 1' if mask else src};"
        if kind in ("max", "min") and s.flag:
            cmp = ">" if kind == "max" else "<"
            new = f"({acc} {cmp} {src} ? {acc} : {src})"
            nan = f"({mask}) && {src} != {src}" if mask else f"{src} != {src}"
            return (f"{acc} = {f'{mask} ? {new} : {acc}' if mask else new}; "
                    f"{acc}_nan |= {nan};")
        if kind in ("max", "min"):
            new = c_ops.binary(kind, acc, src, s.dtype, s.dtype)
            return f"{acc} = {f'{mask} ? {new} : {acc}' if mask else new};"
        if kind in ("argmax", "argmin"):
            worse = "<=" if kind == "argmax" else ">="
            if len(s.position) == 1:
                pos = s.position[0][0]
            else:
                pos = "0"
                for name, extent, lo in s.position:
                    pos = f"({pos}) * {extent}L + ({name} - {lo}L)"
            return (f"if (!{acc}_found || ({acc}_best == {acc}_best && !({src} {worse} "
                    f"{acc}_best))) {{ {acc}_best = {src}; {acc} = {pos}; {acc}_found = 1; }}")
        c = s.combiner
        return f"{acc} = {inline_combiner(c.combine, {c.lhs: acc, c.rhs: src})};"

    def visit_RestoreNaN(self, s: n.RestoreNaN) -> str:
        return f"if ({s.name}_nan) {s.name} = NAN;"

    def visit_ColumnAccumulators(self, s: n.ColumnAccumulators) -> list[str]:
        return [f"{self.local_types[s.dtype]} cacc[{s.size}];",
                f"for (long j = 0; j < {s.size}; j++) cacc[j] = {self.operand(s.identity)};"]

    def visit_StoreColumns(self, s: n.StoreColumns) -> str:
        return (f"for (long j = 0; j < cn; j++) a0[{self.index(s.base)} + {s.lo}L + cs + j]"
                " = cacc[j];")

    def visit_OpenPartials(self, s: n.OpenPartials) -> list[str]:
        total = f"(size_t)nthreads * {s.count * s.stride}"
        return [f"char *raw = (char *)malloc({total} + 4096);",
                "if (!raw) { err[0] = -1; return; }",
                "char *part = raw + ((uintptr_t)a0 + 2048 - (uintptr_t)raw) % 4096;",
                f"memset(part, 0, {total});"]

    def partial_row(self, m: int, dtype: str, count: int, stride: int, thread: str) -> str:
        """The address of column sum ``m``'s partial row of ``thread``."""
        ctype = self.local_types[dtype]
        return f"(({ctype} *)(part + ((long)({thread}) * {count} + {m}) * {stride}L))"

    def visit_PartialRow(self, s: n.PartialRow) -> str:
        row = self.partial_row(s.m, s.dtype, s.count, s.stride, "omp_get_thread_num()")
        return f"{self.local_types[s.dtype]} *restrict mine{s.m} = {row};"

    def visit_AddPartial(self, s: n.AddPartial) -> str:
        return f"mine{s.m}[{self.operand(s.index)}] += {self.operand(s.value)};"

    def visit_CombinePartials(self, s: n.CombinePartials) -> str:
        row = self.partial_row(s.m, s.dtype, s.count, s.stride, "t")
        return (f"for (long j = 0; j < {s.n}L; j++) {{ {self.local_types[s.dtype]} s = 0; "
                f"for (int t = 0; t < nthreads; t++) s += {row}[j]; a{s.arg}[j] = s; }}")

    def visit_ClosePartials(self, s: n.ClosePartials) -> str:
        return "free(raw);"

    def visit_StreamOut(self, s: n.StreamOut) -> str:
        return self.stream_out(s.arg, s.nbytes)

    def stream_out(self, arg: int, nbytes: int) -> str:
        return (f"tg_stream((char *)args[{arg}] + f * {nbytes}L, (const char *)stage{arg}, "
                f"{nbytes}L);")

    # values -------------------------------------------------------------------------------

    def operand(self, x: forms.Operand) -> str:
        return x.name if isinstance(x, forms.Ref) else c_ops.literal(x.value, x.dtype)

    def scalar(self, v) -> str:
        if isinstance(v, forms.Apply):
            args = [self.operand(a) for a in v.args]
            if v.op == "cast":
                return c_ops.cast(args[0], v.dtype)
            if len(args) == 1:
                return c_ops.unary(v.op, args[0], v.dtype)
            if v.truncating:  # C's truncation is the floor for these operands
                return f"({args[0]} {'/' if v.op == 'floordiv' else '%'} {args[1]})"
            if v.op == "pow" and isinstance(v.args[1], forms.Lit):
                return c_ops.power(args[0], args[1], v.args[1].value, v.dtype, v.operand)
            return c_ops.binary(v.op, args[0], args[1], v.dtype, v.operand)
        if isinstance(v, forms.Load):
            return f"a{v.arg}[{' + '.join(map(self.index_term, v.index)) or '0'}]"
        if isinstance(v, forms.Choose):
            return f"({self.operand(v.cond)} ? {self.operand(v.a)} : {self.operand(v.b)})"
        if isinstance(v, forms.BufferLoad):
            return f"{v.buffer}[{self.operand(v.index)}]"
        if isinstance(v, forms.Count):
            return f"tg_imax(0L, ({self.bound(v.hi)}) - ({self.bound(v.lo)}))"
        raise TypeError(f"no C for {type(v).__name__}")

    def index_term(self, t: forms.IndexTerm) -> str:
        ix = self.operand(t.value)
        if t.clamp is not None:
            ix = self.clamp(ix, t.clamp)
        return f"(long)({ix}) * {t.stride}L" if t.stride != 1 else f"(long)({ix})"

    def clamp(self, ix: str, top: int) -> str:
        return f"tg_imin(tg_imax({ix}, 0L), {top}L)"

    def index(self, x) -> str:
        if isinstance(x, forms.RowIndex):
            return " + ".join(f"{name} * {stride}L" for name, stride in x.terms) or "0"
        return " + ".join(
            f"({' + '.join(f'{c}L * {name}' for c, name in terms)} + {k}L) * {stride}L"
            for terms, k, stride in x.dims)

    def bound(self, x) -> str:
        """An integer form of ``lower/nest.py`` (a loop bound)."""
        if isinstance(x, int):
            return str(x)
        if isinstance(x, forms.Affine):
            return " + ".join([f"{c} * {name}" for c, name in x.terms] + [f"{x.k}L"])
        if isinstance(x, forms.Scaled):
            return f"({x.m}L * ({self.bound(x.x)}))"
        if isinstance(x, forms.Negated):
            return f"-({self.bound(x.x)})"
        if isinstance(x, forms.Next):
            return f"{self.bound(x.x)} + 1"
        if isinstance(x, forms.CeilDiv):
            return f"tg_cdiv({self.bound(x.x)}, {x.d}L)"
        if isinstance(x, forms.FloorDiv):
            return f"tg_fdiv({self.bound(x.x)}, {x.d}L)"
        if isinstance(x, forms.IMax):
            return f"tg_imax({self.bound(x.a)}, {self.bound(x.b)})"
        if isinstance(x, forms.IMin):
            return f"tg_imin({self.bound(x.a)}, {self.bound(x.b)})"
        raise TypeError(f"no C for {type(x).__name__}")


def _lane_loops(b: n.Block) -> bool:
    """Whether ``b`` holds a sum's lanes (``n.LaneAccumulator``: its loop may have been
    merged since, ``coalesce.py``, its lanes then staying 0)."""
    return any(isinstance(i, n.LaneAccumulator) or isinstance(i, n.Block) and _lane_loops(i)
               for i in b.items)


def inline_combiner(e: Expr, env: dict) -> str:
    """A custom combiner's expression of its two parameters, as one C expression."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Const):
        return c_ops.literal(e.value, e.dtype)
    if isinstance(e, Unary):
        return c_ops.unary(e.op, inline_combiner(e.a, env), e.dtype if e.op != "not" else "bool")
    if isinstance(e, Binary):
        operand = dt.promote(e.a.dtype, e.b.dtype)
        a, b = inline_combiner(e.a, env), inline_combiner(e.b, env)
        return c_ops.binary(e.op, a, b, e.dtype, operand)
    if isinstance(e, Cast):
        return c_ops.cast(inline_combiner(e.a, env), e.dtype)
    if isinstance(e, Select):
        cond, a, b = (inline_combiner(x, env) for x in (e.cond, e.a, e.b))
        return f"({cond} ? {a} : {b})"
    raise NotImplementedError(f"custom reducer with {type(e).__name__} in the C backend")
