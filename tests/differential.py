"""Differential testing of the compiled target against the NumPy reference.

A seed gives one random program (``random_program(seed)``), built from the steps that
real operators chain and that the compiled target's passes treat specially:

* fused elementwise producers (``tanh``, ``sqrt(x^2 + 1)``, ``x^2 - x``, ...) read once or
  several times, at different index maps (a flip beside the identity);
* guards: padding ``if_then_else(all(i >= p, i < n + p), U[i - p], c)``, concatenation
  ``if_then_else(i < n, A[i], B[i - n])``, selects on index conditions;
* index maps: slices, strided rows ``U[s i + o]``, flips, transposes, upsampling
  ``U[i // 2]``, tiling ``U[i % n]``, clamps, broadcasts, windows ``U[i + k - 1]``;
  ``tg.nn`` reshapes (axes merged and split), expands and fixed indices: re-indexings
  that a plan makes as views (``lower/views.py``) when they are outputs or products'
  operands;
* reductions (sum, max, min, with and without ``where``, a ``where`` that bounds its
  axis or one tested per point; over two axes listed inner first; sums over a channel's
  group, read per residue), softmax and log-sum-exp chains (as one compute or as
  four), products (contractions), gathers through an integer index tensor (also inside
  a select, with ids of -1 left out; ids often repeated; a row's own ids as in
  ``torch.gather``; the flattened tensor's as in ``torch.take``), linear interpolation
  at positions read from a float input (a ``grid_sample``'s two corners, read under a
  condition that bounds them), a class picked by a one-hot ``where`` (``k == t[o]``), a
  0-d sum through ids read under a guard, attention's product over heads, and scans
  (recurrences over the first axis);
* float64 and float32, at small odd shapes (every dimension 1-7).

``compare(seed, settings)`` builds the program's outputs (its last tensor, an
intermediate one and the gradient of the last with respect to every float input) on
both targets and compares them; the reference makes every value (no views). The
compiled program then runs again on other inputs, which must leave the arrays of its
first run as they were (an output, or a view, never shares a buffer a later call
writes). Values may differ by rounding (libmvec against NumPy,
summation order), amplified where the program is ill conditioned: the allowed
difference is the largest of a floor (``RTOL``), ``CONDITION`` times what the reference
itself moves when its inputs move by a few ulps or when its library functions (``exp``,
``tanh``, ...) return results two ulps away (as libmvec's may: ``1 - tanh(x)^2`` at
``x = 10`` keeps 8 of its 16 digits), and for float32 programs ``ROUNDING`` times the
reference's distance from the same program in float64. A wrong kernel is off by O(1).

``SETTINGS`` names every switch of the compiled target's optimisations (those
``benchmarks/bench_ab.py`` turns off, and the code generator's own), each with the
``tg.Options`` values that force it on at these small sizes and that turn it off;
``compare`` runs a program under any choice of them.

Run many programs (each worker a process of its own; the compiled kernels go to a
temporary cache)::

    .venv/bin/python tests/differential.py --count 10000 --jobs 2
    .venv/bin/python tests/differential.py --seed 4711 --show     # one program
    .venv/bin/python tests/differential.py --target cuda --count 300 --jobs 2

``--target cuda`` runs the programs on the cuda target instead (Triton's interpreter
where there is no GPU), its one setting ``cuda_products`` drawn per program.

``tests/test_differential.py`` runs a few hundred in the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import tegrad as tg

MAX_DIM = 7
MAX_SIZE = 120  # elements per tensor
RTOL = {"float64": 1e-9, "float32": 2e-4}
CONDITION = 100.0
ROUNDING = 8.0  # times a float32 program's distance from its float64 twin
LIBRARY_FUNCTIONS = ("exp", "log", "log1p", "expm1", "tanh", "sigmoid", "sin", "cos", "erf",
                     "sqrt")

# name -> (Options fields that force the optimisation on, fields that turn it off). Values
# "on" are chosen so that the small programs here reach the optimised path (a size
# threshold at 0); "off" as bench_ab.py turns them off.
SETTINGS = {
    "stream": (dict(stream_bytes=0, stream_traffic_bytes=0, stage_min_bytes=0, parallel_work=0),
               dict(stream_bytes=1 << 62)),
    "rows": (dict(shared_rows_bytes=1 << 20), dict(shared_rows_bytes=0)),
    "phases": (dict(min_phases=2), dict(min_phases=1 << 30)),
    "widen": (dict(max_widened_step=2, max_widened_waste=1.0),
              dict(max_widened_step=1, max_widened_waste=0.0)),
    "overlap": (dict(overlap_bytes=24 << 20), dict(overlap_bytes=0)),
    "merge": (dict(merge_products=True), dict(merge_products=False)),
    "unread": (dict(free_unread=True), dict(free_unread=False)),
    "keep": (dict(keep_step_kernels=True), dict(keep_step_kernels=False)),
    # the code generator's and the runtime's own
    "parallel": (dict(parallel_work=0), dict(parallel_work=1 << 62)),
    "unroll": (dict(unroll=16), dict(unroll=0)),
    "row_cache": (dict(row_cache_buffers=4), dict(row_cache_buffers=0)),
    "regions": (dict(max_regions=8), dict(max_regions=0)),
    "tiles": (dict(transpose_tile=8), dict(transpose_tile=0)),
    "looped": (dict(looped_residues=2), dict(looped_residues=0)),
    "coalesce": (dict(coalesce_loops=True), dict(coalesce_loops=False)),
    "lanes": (dict(lanes=True), dict(lanes=False)),
    "ragged": (dict(ragged_residues=True), dict(ragged_residues=False)),
    "inline": (dict(max_inline_ratio=2.0, max_cheap_inline_ratio=9.0),
               dict(max_inline_ratio=1.0, max_cheap_inline_ratio=1.0)),
    "copies": (dict(parallel_copy_elements=0, parallel_transpose_elements=0),
               dict(parallel_copy_elements=1 << 62, parallel_transpose_elements=1 << 62)),
    "pool": (dict(pool_min_bytes=0), dict(pool_min_bytes=1 << 62)),
    "views": (dict(views=True), dict(views=False)),
    "value_bounds": (dict(value_bounds=True), dict(value_bounds=False)),
    "count_sums": (dict(count_sums=True), dict(count_sums=False)),
    "hoist": (dict(hoist_unrolled=True), dict(hoist_unrolled=False)),
    "order_reductions": (dict(order_reductions=True), dict(order_reductions=False)),
    "scatter": (dict(compiled_scatters=True), dict(compiled_scatters=False)),
    "thin_batch": (dict(thin_batch=1 << 30), dict(thin_batch=0)),
}


def options_for(choice: dict[str, bool]) -> tg.Options:
    """This machine's options with each setting of ``choice`` (name -> on) applied."""
    fields: dict = {}
    for name, on in choice.items():
        fields.update(SETTINGS[name][0 if on else 1])
    return tg.Options.from_environment().replace(**fields)


def random_choice(rng: np.random.Generator) -> dict[str, bool]:
    """Every setting on or off at random (each way about half of the programs)."""
    return {name: bool(rng.integers(2)) for name in SETTINGS}


# ---------------------------------------------------------------------------
# the generator


@dataclass
class Program:
    seed: int
    dtype: str
    inputs: list = field(default_factory=list)  # placeholders, in call order
    values: list = field(default_factory=list)  # an array per input
    tensors: list = field(default_factory=list)  # float tensors made, in order
    steps: list = field(default_factory=list)  # the step names, for the report

    @property
    def output(self):
        return self.tensors[-1]

    def describe(self) -> str:
        ins = ", ".join(f"{p.name}{p.shape} {p.dtype}" for p in self.inputs)
        return (f"seed {self.seed}: {self.dtype}, inputs {ins}; steps {' -> '.join(self.steps)}"
                f"\n{self.output}")


class _Builder:
    """Random steps over the tensors made so far (``program.tensors``)."""

    def __init__(self, seed: int, dtype: str | None = None):
        self.rng = np.random.default_rng(seed)
        drawn = "float32" if self.rng.random() < 0.25 else "float64"
        self.p = Program(seed, dtype or drawn)
        self.names = iter(f"T{k}" for k in range(1000))

    # -- helpers --------------------------------------------------------------
    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def dim(self, lo: int = 1) -> int:
        # odd sizes first: they leave remainders everywhere (vector tails, residues)
        return int(self.pick([1, 2, 3, 3, 5, 5, 7, 4, 6][lo - 1:] or [lo]))

    def shape(self, ndim: int | None = None) -> tuple:
        ndim = int(self.rng.integers(1, 4)) if ndim is None else ndim
        dims: list[int] = []
        for _ in range(ndim):
            limit = max(1, min(MAX_DIM, MAX_SIZE // max(1, math.prod(dims))))
            dims.append(min(self.dim(), limit))
        return tuple(dims)

    def placeholder(self, shape, dtype=None, values=None):
        dtype = dtype or self.p.dtype
        name = "XYZWVUTSRQ"[len(self.p.inputs)] if len(self.p.inputs) < 10 else "P"
        x = tg.placeholder(shape, dtype, name=name)
        if values is None:
            values = self.rng.uniform(-1.5, 1.5, shape).astype(dtype, copy=False)
        self.p.inputs.append(x)
        self.p.values.append(values)
        return x

    def made(self, t, step: str):
        self.p.tensors.append(t)
        self.p.steps.append(step)
        return t

    def source(self):
        """A tensor to read: the newest most often."""
        ts = self.p.tensors
        return ts[-1] if self.rng.random() < 0.6 else self.pick(ts)

    def view_source(self):
        """A tensor to re-index: sometimes a float input itself (a view of the caller's
        array), else as ``source``."""
        floats = [x for x in self.p.inputs if x.dtype == self.p.dtype]
        return self.pick(floats) if self.rng.random() < 0.25 else self.source()

    def compute(self, shape, body, step: str):
        return self.made(tg.compute(shape, body, name=next(self.names)), step)

    # -- elementwise ------------------------------------------------------------
    def unary(self, e):
        kind = self.pick(["tanh", "sigmoid", "sqrt", "square_minus", "exp_tanh", "sin",
                          "rational", "relu", "abs", "neg_scale", "log1p_sq"])
        if kind == "tanh":
            return tg.tanh(e)
        if kind == "sigmoid":
            return tg.sigmoid(e)
        if kind == "sqrt":
            return tg.sqrt(e * e + 1.0)
        if kind == "square_minus":
            return e * e - e
        if kind == "exp_tanh":
            return tg.exp(tg.tanh(e))
        if kind == "sin":
            return tg.sin(3.0 * tg.tanh(e))
        if kind == "rational":
            return e / (1.0 + e * e)
        if kind == "relu":
            return tg.maximum(e, 0.25)
        if kind == "abs":
            return tg.abs(e) + 0.5 * e
        if kind == "log1p_sq":
            return tg.log1p(e * e)
        return -1.5 * e

    def step_unary(self):
        u = self.source()
        return self.compute(u.shape, lambda *i: self.unary(u[i]), "unary")

    def step_reads_twice(self):
        """A producer read at two index maps (a flip along one axis) and squared."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = int(self.rng.integers(len(u.shape)))
        n = u.shape[axis]

        def body(*i):
            flipped = tuple(n - 1 - v if a == axis else v for a, v in enumerate(i))
            return u[i] * u[i] + tg.tanh(u[flipped]) * u[i]
        return self.compute(u.shape, body, "reads_twice")

    def step_binary(self):
        a = self.source()
        b = self.pick(self.p.tensors)
        op = self.pick(["add", "mul", "sub", "max", "min", "div"])

        def body(*i):
            x, y = a[i], self.broadcast_read(b, i, a.shape)
            if op == "add":
                return x + y
            if op == "mul":
                return x * y
            if op == "sub":
                return x - 0.5 * y
            if op == "max":
                return tg.maximum(x, y)
            if op == "min":
                return tg.minimum(x, y)
            return x / (1.0 + y * y)
        return self.compute(a.shape, body, f"binary_{op}")

    def broadcast_read(self, b, axes, shape):
        """``b`` read from the axes of ``shape``: each of its dimensions takes an axis of
        equal extent, else one wrapped (``%``) or clamped into range, else an index 0."""
        idx = []
        for k, n in enumerate(b.shape):
            same = [a for a, m in enumerate(shape) if m == n]
            if same and self.rng.random() < 0.8:
                idx.append(axes[self.pick(same)])
            elif axes and self.rng.random() < 0.7:
                v = axes[int(self.rng.integers(len(axes)))]
                idx.append(v % n if self.rng.random() < 0.5 else tg.minimum(v, n - 1))
            else:
                idx.append(min(k, n - 1))
        return b[tuple(idx)]

    # -- index maps ---------------------------------------------------------------
    def axis_of(self, u) -> int:
        return int(self.rng.integers(len(u.shape)))

    def remap(self, u, axis: int, extent: int, index, step: str):
        """``out[.., i, ..] = u[.., index(i), ..]`` along ``axis``, of extent ``extent``."""
        shape = u.shape[:axis] + (extent,) + u.shape[axis + 1:]
        return self.compute(
            shape, lambda *i: u[i[:axis] + (index(i[axis]),) + i[axis + 1:]], step)

    def step_pad(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis, n = self.axis_of(u), None
        n = u.shape[axis]
        lo, hi = int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3))
        lo = lo or (0 if hi else 1)
        value = float(self.pick([0.0, 0.0, 0.5, -1.0]))
        shape = u.shape[:axis] + (n + lo + hi,) + u.shape[axis + 1:]

        def body(*i):
            v = i[axis]
            read = u[i[:axis] + (v - lo,) + i[axis + 1:]]
            return tg.if_then_else(tg.all(v >= lo, v < n + lo), read, value)
        return self.compute(shape, body, f"pad{lo},{hi}")

    def step_concat(self):
        a = self.source()
        if not a.shape:
            return self.step_unary()
        axis = self.axis_of(a)
        b = self.pick([t for t in self.p.tensors if t.shape[:axis] == a.shape[:axis]
                       and t.shape[axis + 1:] == a.shape[axis + 1:]
                       and len(t.shape) == len(a.shape)])
        n, m = a.shape[axis], b.shape[axis]
        shape = a.shape[:axis] + (n + m,) + a.shape[axis + 1:]

        def body(*i):
            v = i[axis]
            first = a[i[:axis] + (tg.minimum(v, n - 1),) + i[axis + 1:]]
            second = b[i[:axis] + (tg.maximum(v - n, 0),) + i[axis + 1:]]
            return tg.if_then_else(v < n, first, self.unary(second))
        return self.compute(shape, body, "concat")

    def step_slice(self):
        u = self.source()
        if not u.shape or max(u.shape) < 2:
            return self.step_pad()
        axis = self.pick([a for a, n in enumerate(u.shape) if n >= 2])
        n = u.shape[axis]
        start = int(self.rng.integers(0, n))
        stop = int(self.rng.integers(start + 1, n + 1))
        return self.remap(u, axis, stop - start, lambda v: v + start, f"slice{start}:{stop}")

    def step_strided(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        stride = int(self.rng.integers(2, 4))
        offset = int(self.rng.integers(0, min(stride, n)))
        extent = (n - 1 - offset) // stride + 1
        return self.remap(u, axis, extent, lambda v: stride * v + offset,
                          f"rows{stride}i+{offset}")

    def step_flip(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        return self.remap(u, axis, n, lambda v: n - 1 - v, "flip")

    def step_upsample(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        factor = int(self.rng.integers(2, 4))
        if n * factor * math.prod(u.shape) // n > MAX_SIZE:
            return self.step_flip()
        if self.rng.random() < 0.5:
            return self.remap(u, axis, n * factor, lambda v: v // factor, f"upsample{factor}")
        return self.remap(u, axis, n * factor, lambda v: (v + 1) % n, f"tile{factor}")

    def step_clamp(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        shift = int(self.rng.integers(-2, 3))
        return self.remap(u, axis, n,
                          lambda v: tg.minimum(tg.maximum(v + shift, 0), n - 1),
                          f"clamp{shift:+d}")

    def step_transpose(self):
        u = self.view_source()
        if len(u.shape) < 2:
            return self.step_reads_twice()
        perm = list(self.rng.permutation(len(u.shape)))
        if perm == sorted(perm):
            perm = perm[::-1]
        shape = tuple(u.shape[p] for p in perm)

        def body(*i):
            idx = [None] * len(perm)
            for k, p in enumerate(perm):
                idx[p] = i[k]
            return u[tuple(idx)]
        return self.compute(shape, body, f"transpose{tuple(int(p) for p in perm)}")

    def step_reshape(self):
        """``tg.nn.reshape``: adjacent axes merged, or one split in two (``//``, ``%``)."""
        u = self.view_source()
        shape = list(u.shape)
        if len(shape) >= 2 and self.rng.random() < 0.5:
            a = int(self.rng.integers(len(shape) - 1))
            shape[a:a + 2] = [shape[a] * shape[a + 1]]
        else:
            splittable = [a for a, n in enumerate(shape) if n >= 4 and n % 2 == 0]
            if splittable:
                a = self.pick(splittable)
                shape[a:a + 1] = [2, shape[a] // 2]
            else:
                shape.insert(int(self.rng.integers(len(shape) + 1)), 1)
        return self.made(tg.nn.reshape(u, tuple(shape)), f"reshape{tuple(shape)}")

    def step_expand(self):
        """``tg.nn.expand``: a new leading axis, or a size-1 axis, repeated (a broadcast)."""
        u = self.view_source()
        size = math.prod(u.shape)
        n = max(1, min(self.dim(2), MAX_SIZE // max(size, 1)))
        ones = [a for a, m in enumerate(u.shape) if m == 1]
        if ones and self.rng.random() < 0.5:
            sizes = [n if a == ones[0] else m for a, m in enumerate(u.shape)]
        else:
            sizes = [n, *u.shape]
        return self.made(tg.nn.expand(u, *sizes), f"expand{tuple(sizes)}")

    def step_index(self):
        """A fixed index along one axis, which drops it (``x[:, k]``)."""
        u = self.view_source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        k = int(self.rng.integers(u.shape[axis]))
        return self.compute(u.shape[:axis] + u.shape[axis + 1:],
                            lambda *i: u[i[:axis] + (k,) + i[axis:]], f"index{axis}={k}")

    def step_select(self):
        """A select on an index condition between two fused values."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        kind = self.pick(["lt", "even", "diag"])

        def body(*i):
            v = i[axis]
            if kind == "lt":
                cond = v < int(self.rng.integers(0, n + 1))
            elif kind == "even":
                cond = tg.equal(v % 2, 0)
            else:
                cond = v <= i[0]
            return tg.if_then_else(cond, self.unary(u[i]), u[i] * 0.5)
        return self.compute(u.shape, body, f"select_{kind}")

    # -- reductions -----------------------------------------------------------------
    def step_reduce(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        kind = self.pick(["sum", "sum", "max", "min", "sum_where"])
        keep = self.rng.random() < 0.3
        shape = u.shape[:axis] + ((1,) if keep else ()) + u.shape[axis + 1:]

        def body(*i):
            k = tg.reduce_axis(n)
            outer = i[:axis] + i[axis + 1:] if keep else i  # (without the kept axis of 1)
            src = u[outer[:axis] + (k,) + outer[axis:]]
            if kind == "sum_where" and outer:
                return tg.sum(src * src, axis=k, where=k <= outer[0])
            if kind in ("max", "min"):
                return getattr(tg, kind)(src, axis=k)
            return tg.sum(self.unary(src), axis=k)
        return self.compute(shape, body, f"reduce_{kind}{'_keep' if keep else ''}")

    def step_softmax(self):
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        shape = u.shape
        reduced = shape[:axis] + shape[axis + 1:]

        def along(i, k):
            return i[:axis] + (k,) + i[axis:]

        def drop(i):
            return i[:axis] + i[axis + 1:]

        style = self.pick(["one", "chain", "logsumexp"])
        if style == "one":  # max, exp and sum inside one compute
            def body(*i):
                k, k2 = tg.reduce_axis(n), tg.reduce_axis(n)
                m = tg.max(u[along(drop(i), k)], axis=k)
                s = tg.sum(tg.exp(u[along(drop(i), k2)] - m), axis=k2)
                return tg.exp(u[i] - m) / s
            return self.compute(shape, body, "softmax_one")
        k = tg.reduce_axis(n)
        m = self.compute(reduced, lambda *r: tg.max(u[along(r, k)], axis=k), "max")
        if style == "logsumexp":
            k2 = tg.reduce_axis(n)
            return self.compute(
                reduced, lambda *r: tg.log(tg.sum(tg.exp(u[along(r, k2)] - m[r]), axis=k2))
                + m[r], "logsumexp")
        e = self.compute(shape, lambda *i: tg.exp(u[i] - m[drop(i)]), "exp")
        k3 = tg.reduce_axis(n)
        s = self.compute(reduced, lambda *r: tg.sum(e[along(r, k3)], axis=k3), "sum")
        return self.compute(shape, lambda *i: e[i] / s[drop(i)], "divide")

    def step_window(self):
        """``out[i] = sum_k w[k] u[i + k - c]`` over a window, guarded at the edges (a
        convolution along one axis), with a weight input or constants."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        width = int(self.rng.integers(1, 4))
        centre = int(self.rng.integers(0, width))
        w = self.placeholder((width,)) if self.rng.random() < 0.6 else None
        guard = self.pick(["where", "select"])

        def body(*i):
            k = tg.reduce_axis(width)
            at = i[axis] + k - centre
            read = u[i[:axis] + (at,) + i[axis + 1:]]
            weight = w[k] if w is not None else 1.0 + 0.5 * tg.cast(k, self.p.dtype)
            inside = tg.all(at >= 0, at < n)
            if guard == "where":
                return tg.sum(weight * read, axis=k, where=inside)
            return tg.sum(tg.if_then_else(inside, weight * read, 0.0), axis=k)
        return self.compute(u.shape, body, f"window{width}_{guard}")

    def step_matmul(self):
        """A product with a new weight along the last axis (a contraction)."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        n = u.shape[-1]
        m = self.dim()
        if math.prod(u.shape[:-1]) * m > MAX_SIZE:
            m = 1
        w = self.placeholder((n, m) if self.rng.random() < 0.5 else (m, n))
        transposed = w.shape[0] == m and w.shape != (n, m)

        def body(*i):
            k = tg.reduce_axis(n)
            weight = w[i[-1], k] if transposed else w[k, i[-1]]
            return tg.sum(u[i[:-1] + (k,)] * weight, axis=k)
        return self.compute(u.shape[:-1] + (m,), body, "matmul")

    def step_gather(self):
        """Rows of ``u`` picked by an integer index input (an embedding)."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        count = self.dim()
        if math.prod(u.shape) // n * count > MAX_SIZE:
            count = 1
        ids = self.ids(n, count)
        idx = self.placeholder((count,), "int64", ids)
        return self.remap(u, axis, count, lambda v: idx[v], "gather")

    def ids(self, n: int, shape, low: int = 0) -> np.ndarray:
        """int64 ids in ``[low, n)``; often drawn from a few values only, so that their
        gradient's scatter adds several addends to one element."""
        high = n if self.rng.random() < 0.5 else min(n, max(low + 1, 2))
        return self.rng.integers(low, high, shape).astype("int64")

    def step_row_gather(self):
        """``torch.gather`` along an axis: ``out[i] = u[.., idx[i], ..]``, the index
        tensor shaped like the output (each row its own ids: the scatter's target
        depends on the free axes too)."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        count = self.dim()
        shape = u.shape[:axis] + (count,) + u.shape[axis + 1:]
        if math.prod(shape) > MAX_SIZE:
            shape = u.shape[:axis] + (1,) + u.shape[axis + 1:]
        idx = self.placeholder(shape, "int64", self.ids(n, shape))
        return self.made(tg.nn.gather(u, axis, idx), "along_gather")

    def step_take(self):
        """``torch.take``: elements of the flattened ``u`` (every dimension of the
        gradient's scatter pinned: it runs on one thread)."""
        u = self.source()
        shape = self.shape(int(self.rng.integers(1, 3)))
        idx = self.placeholder(shape, "int64", self.ids(max(1, math.prod(u.shape)), shape))
        return self.made(tg.nn.take(u, idx), "take")

    def step_sample(self):
        """Linear interpolation along an axis at positions read from a float input (a
        ``grid_sample``): the two corners ``floor(p) + a`` read where they lie inside,
        under a condition that bounds the gathered index; the gradient of ``u`` is a
        scatter of both corners, that of the positions a gather."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        count = self.dim()
        if math.prod(u.shape) // n * count > MAX_SIZE:
            count = 1
        where = self.rng.uniform(-1.5, n + 0.5, count).astype(self.p.dtype)
        pos = self.placeholder((count,), values=where)
        shape = u.shape[:axis] + (count,) + u.shape[axis + 1:]

        def body(*i):
            p = pos[i[axis]]
            a = tg.reduce_axis(2)
            at = tg.cast(tg.floor(p), "int64") + a
            frac = p - tg.floor(p)
            weight = tg.if_then_else(tg.equal(a, 0), 1.0 - frac, frac)
            read = u[i[:axis] + (at,) + i[axis + 1:]]
            return tg.sum(weight * tg.if_then_else(tg.all(at >= 0, at <= n - 1), read, 0.0),
                          axis=a)
        return self.compute(shape, body, "sample")

    def step_guarded_gather(self):
        """Rows picked by ids of which some are -1, read only where the id is valid (a loss's
        ``ignore_index``): a gather inside a select's branch."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        count = self.dim()
        if math.prod(u.shape) // n * count > MAX_SIZE:
            count = 1
        idx = self.placeholder((count,), "int64", self.ids(n, count, low=-1))
        shape = u.shape[:axis] + (count,) + u.shape[axis + 1:]

        def body(*i):
            read = u[i[:axis] + (idx[i[axis]],) + i[axis + 1:]]
            return tg.if_then_else(idx[i[axis]] >= 0, self.unary(read), 0.0)
        return self.compute(shape, body, "guarded_gather")

    def step_masked_sum(self):
        """A sum whose ``where`` is no bound of its axis (a parity or a diagonal test): the
        reduction tests each point."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        kind = self.pick(["parity", "off_diagonal"])
        shape = u.shape[:axis] + u.shape[axis + 1:]

        def body(*o):
            k = tg.reduce_axis(n)
            other = o[0] if o else 0
            where = (tg.equal((k + other) % 2, 0) if kind == "parity"
                     else tg.not_equal(k, other))
            return tg.sum(self.unary(u[o[:axis] + (k,) + o[axis:]]), axis=k, where=where)
        return self.compute(shape, body, f"masked_sum_{kind}")

    def step_reduce_axes(self):
        """A sum, max, min or product over two axes of ``u`` listed inner first
        (``sum_{b, a} u[.., a, .., b]``), which the loop nest visits outer first
        (``Options.order_reductions``)."""
        u = self.source()
        if len(u.shape) < 2:
            return self.step_reduce()
        first, second = sorted(int(a) for a in self.rng.choice(len(u.shape), 2, replace=False))
        kind = self.pick(["sum", "sum", "max", "min", "prod"])
        shape = tuple(n for a, n in enumerate(u.shape) if a not in (first, second))

        def body(*o):
            ka, kb = tg.reduce_axis(u.shape[first]), tg.reduce_axis(u.shape[second])
            rest = iter(o)
            index = tuple(ka if a == first else kb if a == second else next(rest)
                          for a in range(len(u.shape)))
            src = self.unary(u[index])
            if kind == "prod":  # (bounded: a product of up to 49 factors)
                src = 1.0 + 0.1 * tg.tanh(src)
            return getattr(tg, kind)(src, axis=[kb, ka])
        return self.compute(shape, body, f"reduce_axes_{kind}")

    def step_group_sums(self):
        """``y[.., j, ..] = u[.., j, ..] sum_r u[.., g j', ..] + sum_r u[.., g j', ..]^2`` with
        ``j' = g (j // g) + r`` (a group norm's statistics read per channel): the body runs
        once per residue of ``j``, its two sums over one range share a loop."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        group = self.pick([g for g in (2, 3) if n % g == 0] or [1])

        def body(*i):
            r, r2 = tg.reduce_axis(group), tg.reduce_axis(group)
            at = group * (i[axis] // group)

            def member(k):
                return u[i[:axis] + (at + k,) + i[axis + 1:]]
            return (u[i] * tg.sum(member(r), axis=r)
                    + tg.sum(self.unary(member(r2)) * member(r2), axis=r2))
        return self.compute(u.shape, body, f"group_sums{group}")

    def step_pick(self):
        """``sum_k [k = t[o]] u[.., k, ..]``: a class picked by a one-hot ``where`` (as
        ``nll_loss`` does), the ids -1 or past the end picking nothing, the axis maybe
        starting at 1, the pick maybe kept only where the id is not -1 (an ignore_index)
        and maybe with a second conjunct."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        axis = self.axis_of(u)
        n = u.shape[axis]
        shape = u.shape[:axis] + u.shape[axis + 1:]
        ids = np.asarray(self.rng.integers(-1, n + 1, shape), dtype="int64")
        t = self.placeholder(shape, "int64", ids)
        lo = int(self.rng.integers(0, 2)) if n > 1 else 0
        kept, extra = self.rng.random() < 0.5, self.rng.random() < 0.3

        def body(*o):
            k = tg.reduce_axis((lo, n))
            where = tg.equal(k, t[o])
            if extra:
                where = tg.all(where, k <= (o[0] if o else 1))
            picked = tg.sum(self.unary(u[o[:axis] + (k,) + o[axis:]]), axis=k, where=where)
            return tg.if_then_else(tg.not_equal(t[o], -1), picked, 0.5) if kept else picked
        return self.compute(shape, body, "pick")

    def step_ids_total(self):
        """A 0-d sum through ids, ``sum_r [t[r] >= 0] w[t[r]]`` (a loss's weight total),
        read in the branch ``t[i] >= 0`` of a later compute (as its gradient reads it):
        fusion keeps it apart, since the loop nest would evaluate it per element."""
        u = self.source()
        if not u.shape:
            return self.step_unary()
        m, n = u.shape[0], self.dim()
        w = self.placeholder((n,))
        t = self.placeholder((m,), "int64", self.rng.integers(-1, n, m).astype("int64"))
        r = tg.reduce_axis(m)
        total = self.compute((), lambda: tg.sum(
            tg.if_then_else(t[r] >= 0, w[t[r]], 0.0), axis=r), "ids_total")
        return self.compute(u.shape, lambda *i: tg.if_then_else(
            t[i[0]] >= 0, u[i] * total[()], 0.5 * u[i]), "ids_total_read")

    def step_heads(self):
        """``out[(n,) l, h D + d] = sum_s A[(n,) h, l, s] B[(n,) s, h D + d]``: attention's
        product over heads, a batch variable ``h`` inside the output's columns (the host
        products' batch layout, ``_batch_merges``)."""
        heads, length, source, width = (int(self.pick(v)) for v in
                                        ([2, 3], [1, 2, 3], [1, 3, 5], [1, 2, 3]))
        batch = (2,) if self.rng.random() < 0.6 else ()
        a = self.placeholder((*batch, heads, length, source))
        b = self.placeholder((*batch, source, heads * width))
        u = self.source()

        def body(*i):
            n, l_, j = i[:-2], i[-2], i[-1]
            s = tg.reduce_axis(source)
            product = tg.sum(a[(*n, j // width, l_, s)] * b[(*n, s, j)], axis=s)
            return product + 0.5 * self.broadcast_read(u, i, (*batch, length, heads * width))
        return self.compute((*batch, length, heads * width), body, "heads")

    def step_scan(self):
        """``s[t] = f(s[t - 1], u[t])`` along the first axis (a recurrence)."""
        u = self.source()
        if not u.shape or u.shape[0] < 2:
            return self.step_unary()
        shape = u.shape
        rest = shape[1:]
        s = tg.placeholder(shape, self.p.dtype, name=f"s{len(self.p.tensors)}")
        init = tg.compute((1, *rest), lambda _, *i: tg.tanh(u[(0, *i)]), name=next(self.names))
        kind = self.pick(["linear", "tanh", "gated"])

        def update(t, *i):
            prev, x = s[(t - 1, *i)], u[(t, *i)]
            if kind == "linear":
                return 0.5 * prev + x
            if kind == "tanh":
                return tg.tanh(0.8 * prev + x)
            return tg.sigmoid(x) * prev + (1.0 - tg.sigmoid(x)) * tg.tanh(x)
        step = tg.compute(shape, update, name=next(self.names))
        return self.made(tg.scan(init, step, s, inputs=[u]), f"scan_{kind}")

    STEPS = ("unary", "unary", "reads_twice", "binary", "pad", "pad", "pad", "concat",
             "slice", "strided", "flip", "upsample", "clamp", "transpose", "transpose",
             "select", "reduce", "reduce", "softmax", "window", "matmul", "gather", "scan",
             "guarded_gather", "masked_sum", "reshape", "reshape", "expand", "index",
             "pick", "ids_total", "heads", "reduce_axes", "group_sums", "row_gather", "take",
             "sample")

    def build(self) -> Program:
        self.placeholder(self.shape())
        if self.rng.random() < 0.3:
            self.placeholder(self.shape())
        # the first steps read the inputs (as float tensors)
        first = self.p.inputs[0]
        self.compute(first.shape, lambda *i: self.unary(first[i]), "unary")
        if len(self.p.inputs) > 1:
            self.p.tensors.append(self.p.inputs[1])
            self.p.steps.append("input")
        for _ in range(int(self.rng.integers(1, 6))):
            getattr(self, f"step_{self.pick(self.STEPS)}")()
        return self.p


def random_program(seed: int, dtype: str | None = None) -> Program:
    """Program ``seed``; ``dtype`` given: the same program in that float dtype (its
    inputs drawn in float64 and rounded to it)."""
    return _Builder(seed, dtype).build()


# ---------------------------------------------------------------------------
# comparing the targets


@dataclass
class Outcome:
    seed: int
    ok: bool
    what: str = ""  # the first disagreement, or the error


def _outputs(p: Program):
    floats = [x for x in p.inputs if x.dtype == p.dtype]
    head = tg.placeholder(p.output.shape, p.dtype, name="H")
    grads = tg.gradient(p.output, floats, head=head)
    middle = p.tensors[len(p.tensors) // 2]
    outputs = [p.output, *grads] + ([middle] if middle is not p.output else [])
    names = ["output", *(f"d{x.name}" for x in floats)] + (["middle"] if len(outputs) >
                                                             1 + len(floats) else [])
    return [*p.inputs, head], outputs, names


def _nudged(values, rng):
    return [v * (1 + 4 * np.finfo(v.dtype).eps * rng.uniform(-1, 1, v.shape)).astype(v.dtype)
            if v.dtype.kind == "f" else v for v in values]


@contextlib.contextmanager
def _rounded_differently(rng):
    """The reference's library functions (exp, tanh, ...) with their results moved by one
    or two ulps: what another correct implementation (libmvec's) may return."""
    from tegrad.ir import numpy_ops

    saved = dict(numpy_ops.UNARY)

    def moved(f):
        def g(x):
            y = np.asarray(f(x))
            if y.dtype.kind != "f":
                return y
            towards = np.where(rng.random(y.shape) < 0.5, -np.inf, np.inf).astype(y.dtype)
            once = np.nextafter(y, towards)
            return np.where(rng.random(y.shape) < 0.5, once, np.nextafter(once, towards))
        return g

    try:
        for name in LIBRARY_FUNCTIONS:
            numpy_ops.UNARY[name] = moved(saved[name])
        yield
    finally:
        numpy_ops.UNARY.update(saved)


def _difference(got, want, zero_scale: float = 1e-300) -> float:
    """The largest difference over the finite values of ``want``, as a fraction of its
    largest magnitude, or of ``zero_scale`` where ``want`` is all zeros (infinite where
    the non-finite values differ)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    if not np.array_equal(np.where(finite, 0.0, got), np.where(finite, 0.0, want),
                          equal_nan=True):
        return math.inf
    scale = _magnitude(want) or max(zero_scale, 1e-300)
    return float(np.max(np.abs(got[finite] - want[finite]), initial=0.0)) / scale


def _magnitude(values) -> float:
    values = np.asarray(values, np.float64)
    return float(np.max(np.abs(values[np.isfinite(values)]), initial=0.0))


CUDA_SETTINGS = ("cuda_products",)  # the cuda target's switches (tg.Options fields)


def compare(seed: int, choice: dict[str, bool] | None = None, target: str = "cpu") -> Outcome:
    """Program ``seed`` on the cpu target (under ``choice`` of ``SETTINGS``) or the cuda
    target (of ``CUDA_SETTINGS``) against the NumPy reference: forward, an intermediate
    value and every gradient."""
    p = random_program(seed)
    inputs, outputs, names = _outputs(p)
    rng = np.random.default_rng(seed + 1)
    head = rng.standard_normal(p.output.shape).astype(p.dtype)
    feed = [*p.values, head]
    copies = tg.Options.from_environment().replace(views=False)  # the spec makes every value
    reference = tg.build(inputs, outputs, target="numpy", options=copies)
    want = reference(*feed)
    moved = [reference(*_nudged(feed, rng))]
    with _rounded_differently(rng):  # (built here: a program binds its functions)
        moved.append(tg.build(inputs, outputs, target="numpy", options=copies)(*feed))
    exact = want
    if p.dtype != "float64":  # the program's own rounding: its float64 twin
        wide = random_program(seed, "float64")
        wide_inputs, wide_outputs, _ = _outputs(wide)
        exact = tg.build(wide_inputs, wide_outputs, target="numpy", options=copies)(
            *wide.values, head.astype("float64"))
    try:
        options = (options_for(choice or {}) if target == "cpu" else
                   tg.Options.from_environment().replace(**(choice or {})))
        compiled = tg.build(inputs, outputs, target=target, options=options)
        got = compiled(*feed)
        kept = [np.array(g, copy=True) for g in got]
        compiled(*(0.5 * v + 0.25 if v.dtype.kind == "f" else v for v in feed))
    except Exception as error:  # noqa: BLE001 - reported with the program
        return Outcome(seed, False, f"{target} target raised {type(error).__name__}: {error}")
    for name, g, k in zip(names, got, kept, strict=True):
        if not np.array_equal(g, k, equal_nan=True):
            return Outcome(seed, False, f"{name}: changed by a later call of the program")
    for k, (name, g, w, x) in enumerate(zip(names, got, want, exact, strict=True)):
        if np.shape(g) != np.shape(w) or np.asarray(g).dtype != np.asarray(w).dtype:
            return Outcome(seed, False, f"{name}: shape/dtype {np.shape(g)} "
                           f"{np.asarray(g).dtype}, reference {np.shape(w)} "
                           f"{np.asarray(w).dtype}")
        allowed = max(RTOL[p.dtype], *(CONDITION * _difference(run[k], w) for run in moved),
                      ROUNDING * _difference(w, x))
        # a gradient that is exactly zero by cancellation (``e[k + 1] - e[k]`` of equal
        # rows) is judged at the program's scale: its rounding is of the terms' size
        diff = _difference(g, w, max(_magnitude(v) for v in want))
        if not diff <= allowed:
            return Outcome(seed, False, f"{name}: scaled difference {diff:.3g} "
                           f"(allowed {allowed:.3g})")
    return Outcome(seed, True)


# ---------------------------------------------------------------------------
# many programs, from the command line


def _run_one(job):
    seed, mode, target = job
    names = SETTINGS if target == "cpu" else CUDA_SETTINGS
    if mode == "random":
        choice = (random_choice(np.random.default_rng([seed, 7])) if target == "cpu" else
                  {name: bool(np.random.default_rng([seed, 7]).integers(2)) for name in names})
    else:
        choice = {} if mode == "default" else {name: mode == "on" for name in names}
    try:
        return compare(seed, choice, target), choice
    except Exception:  # noqa: BLE001 - a generator or reference failure, reported
        return Outcome(seed, False, "reference or generator failed:\n"
                       + traceback.format_exc(limit=4)), choice


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one program")
    parser.add_argument("--show", action="store_true", help="print the program")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--settings", choices=["random", "default", "on", "off"],
                        default="random",
                        help="random: every setting drawn per program (default); default: "
                             "as shipped; on/off: every setting forced on / off")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args(argv)
    os.environ.setdefault("TEGRAD_GRAPH_CACHE", "0")
    if args.target == "cuda" and not os.path.exists("/dev/nvidiactl"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # (before triton is imported)
    if args.seed is not None:
        if args.show:
            print(random_program(args.seed).describe())
        outcome, choice = _run_one((args.seed, args.settings, args.target))
        print("ok" if outcome.ok else f"FAIL: {outcome.what}")
        print("settings:", {k: v for k, v in sorted(choice.items())})
        return 0 if outcome.ok else 1
    from multiprocessing import get_context

    jobs = [(seed, args.settings, args.target)
            for seed in range(args.start, args.start + args.count)]
    started = time.perf_counter()
    failures, on_off = [], Counter()
    with tempfile.TemporaryDirectory(prefix="tegrad-differential-") as cache:
        os.environ.setdefault("TEGRAD_CACHE_DIR", cache)
        with get_context("spawn").Pool(args.jobs, maxtasksperchild=200) as pool:
            for k, (outcome, choice) in enumerate(pool.imap_unordered(_run_one, jobs,
                                                                      chunksize=4)):
                on_off.update(f"{name} {'on' if on else 'off'}" for name, on in choice.items())
                if not outcome.ok:
                    failures.append(outcome)
                    print(f"FAIL seed {outcome.seed}: {outcome.what}", flush=True)
                if (k + 1) % 500 == 0:
                    print(f"{k + 1} programs, {len(failures)} disagreements, "
                          f"{time.perf_counter() - started:.0f} s", flush=True)
    print(f"{len(jobs)} programs on {args.target} (seeds {args.start}-"
          f"{args.start + args.count - 1}, settings "
          f"{args.settings}): {len(failures)} disagreements, "
          f"{time.perf_counter() - started:.0f} s on {args.jobs} processes")
    if on_off:
        print("programs per setting:", ", ".join(
            f"{name} {on_off[name + ' on']}/{on_off[name + ' off']}"
            for name in (SETTINGS if args.target == "cpu" else CUDA_SETTINGS)),
            "(on/off)")
    for outcome in sorted(failures, key=lambda o: o.seed):
        print(f"  seed {outcome.seed}: {outcome.what.splitlines()[0]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
