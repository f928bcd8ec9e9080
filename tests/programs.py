"""Hypothesis strategies for random well-formed tegrad programs (used by test_fuzz.py).

A program has 1-3 float64 placeholders with small shapes (every dimension 1-5) and
1-3 chained computes (each reads the one before it); a compute may be a reshape of the
one before (its digits ``(F // R) % n`` of the flat index, alone or plus a value).
Bodies mix:

* reads with affine index maps (stride, offset, flip ``n-1-i``, transposes, broadcast,
  two-variable windows ``i + k``), ``//`` and ``%`` (upsampling, tiling) and clamps
  (``min(max(e, 0), n-1)``), and gathers ``X[ids[i]]`` / ``X[ids[i, j]]`` through a table
  of integer ids (an int64 compute of constants: ids repeated, -1 and past the end among
  them; the gradient is a scatter-add); a read whose index can leave its tensor is guarded,
  padding-style ``if_then_else(all(0 <= e, e < n), X[e], 0.0)``, or wrapped/clamped,
  or (in window reductions) guarded by the reduction's ``where``;
* reductions (sum/max/min/prod, with and without ``where``, nested in elementwise
  expressions and inside one another over distinct axes);
* smooth elementwise math: ``+ - *``, ``a / (1 + b*b)``, ``tanh``, ``sigmoid``, ``sin(3 tanh(x))``,
  ``exp(tanh(x))``, ``maximum``/``minimum`` and selects on index conditions.

Every choice is drawn from Hypothesis, so failing programs shrink. The generator keeps a
small Python model of every index expression and condition (a function of the
variables' values) and enumerates it to decide which reads need a guard and whether a
``max``/``min`` reduction's ``where`` can be empty (then it becomes a ``sum``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import tegrad as tg

MAX_DIM = 5
MAX_TENSOR_SIZE = 40  # elements per tensor; keeps scatter-form gradients cheap
PAD_VALUES = (0.0, 0.5, -1.0)
_ID_TABLES = itertools.count()  # names of the id tables made
CONSTANTS = (0.5, -1.25, 2.0, 1.0, -0.75)


# ---------------------------------------------------------------------------
# index expressions with a Python model


@dataclass(frozen=True)
class Ix:
    """An integer expression ``expr`` of the variables ``vars``; ``fn(env)`` computes
    it in Python (env maps Var -> int)."""

    expr: object
    fn: object
    vars: tuple

    def values(self) -> list[int]:
        return [self.fn(env) for env in _envs(self.vars)]


def _dom(v) -> range:
    lo, hi = v.dom
    return range(lo, hi)


def _envs(variables):
    variables = tuple(dict.fromkeys(variables))
    for point in itertools.product(*(_dom(v) for v in variables)):
        yield dict(zip(variables, point, strict=True))


def _merge(*var_tuples) -> tuple:
    return tuple(dict.fromkeys(v for vs in var_tuples for v in vs))


def ix_const(c: int) -> Ix:
    return Ix(tg.const(c, "int64"), lambda env, c=c: c, ())


def ix_var(v) -> Ix:
    return Ix(v, lambda env, v=v: env[v], (v,))


def ix_affine(x: Ix, a: int, b: int) -> Ix:
    e = x.expr if a == 1 else a * x.expr
    e = e if b == 0 else e + b
    return Ix(e, lambda env, f=x.fn: a * f(env) + b, x.vars)


def ix_add(x: Ix, y: Ix, sign: int, b: int) -> Ix:
    e = x.expr + y.expr if sign > 0 else x.expr - y.expr
    e = e if b == 0 else e + b
    return Ix(e, lambda env, f=x.fn, g=y.fn: f(env) + sign * g(env) + b, _merge(x.vars, y.vars))


def ix_rsub(c: int, x: Ix) -> Ix:
    return Ix(c - x.expr, lambda env, f=x.fn: c - f(env), x.vars)


def ix_floordiv(x: Ix, s: int) -> Ix:
    return Ix(x.expr // s, lambda env, f=x.fn: f(env) // s, x.vars)


def ix_mod(x: Ix, m: int) -> Ix:
    return Ix(x.expr % m, lambda env, f=x.fn: f(env) % m, x.vars)


def id_table(values, name: str) -> tg.Compute:
    """An int64 compute holding the array ``values``, as a chain of selects on the
    row-major position (the generator's id tables; the regression tests' too)."""
    values = np.asarray(values)
    shape, flat_values = values.shape, [int(v) for v in values.reshape(-1)]

    def body(*i):
        flat = 0
        for axis, n in zip(i, shape, strict=True):
            flat = flat * n + axis
        value = tg.const(flat_values[-1], "int64")
        for k in range(len(flat_values) - 2, -1, -1):
            value = tg.if_then_else(tg.equal(flat, k), tg.const(flat_values[k], "int64"),
                                    value)
        return value
    return tg.compute(shape, body, name=name)


def ix_gather(table: dict, vars_: tuple, name: str) -> Ix:
    """``ids[v - lo, ..]`` of an int64 compute holding ``table`` (a point of ``vars_``'
    domains -> an id, in row-major order): a data-dependent index, whose gradient is a
    scatter-add."""
    shape = tuple(len(_dom(v)) for v in vars_)
    ids = id_table(np.array(list(table.values())).reshape(shape), name)
    read = ids[tuple(v - v.dom[0] if v.dom[0] else v for v in vars_)]
    return Ix(read, lambda env: table[tuple(env[v] for v in vars_)], vars_)


def ix_clamp(x: Ix, n: int) -> Ix:
    e = tg.minimum(tg.maximum(x.expr, 0), n - 1)
    return Ix(e, lambda env, f=x.fn: min(max(f(env), 0), n - 1), x.vars)


@dataclass(frozen=True)
class Cond:
    """A boolean index condition with its Python model."""

    expr: object
    fn: object
    vars: tuple


def cond_in_bounds(x: Ix, n: int) -> Cond:
    return Cond(tg.all(0 <= x.expr, x.expr < n), lambda env, f=x.fn: 0 <= f(env) < n, x.vars)


def cond_all(conds: list[Cond]) -> Cond:
    if len(conds) == 1:
        return conds[0]
    return Cond(
        tg.all(*(c.expr for c in conds)),
        lambda env, fs=tuple(c.fn for c in conds): all(f(env) for f in fs),
        _merge(*(c.vars for c in conds)),
    )


# ---------------------------------------------------------------------------
# the program and its generator


class Program:
    """Placeholders and computes; the last compute is the output. Its repr prints the
    whole definition (Hypothesis shows it for a falsifying example)."""

    def __init__(self, inputs: list):
        self.inputs = list(inputs)
        self.computes: list = []

    @property
    def output(self):
        return self.computes[-1]

    def __repr__(self) -> str:
        ins = ", ".join(f"{p.name}{p.shape}" for p in self.inputs)
        return f"Program(inputs [{ins}]:\n{self.output}\n)"


class _Gen:
    def __init__(self, draw, budget: int):
        self.draw = draw
        self.budget = budget
        self.used_vars: set = set()
        self.read_tensors: set = set()
        self.tensors: list = []  # readable tensors, most recent first

    # -- helpers ------------------------------------------------------------
    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    # -- indices --------------------------------------------------------------
    def raw_index(self, scope: list, n: int) -> Ix:
        """An index expression for a dimension of size ``n``; may leave [0, n)."""
        if not scope:
            return ix_const(self.integer(0, n - 1))
        kind = self.pick(["var", "affine", "const", "flip", "window", "upsample", "tile",
                          "strided_div", "gather"])
        v = ix_var(self.pick(scope))
        if kind == "var":
            return v
        if kind == "gather":
            vars_ = tuple(dict.fromkeys([v.expr, self.pick(scope)] if self.flag() else [v.expr]))
            high = self.pick([n, 1])  # often a few ids only: repeated
            table = {point: self.integer(-1, high) for point in
                     itertools.product(*(_dom(w) for w in vars_))}
            return ix_gather(table, vars_, f"ids{next(_ID_TABLES)}")
        if kind == "affine":
            return ix_affine(v, self.integer(1, 3), self.integer(-2, 2))
        if kind == "const":
            return ix_const(self.integer(0, n - 1))
        if kind == "flip":
            return ix_rsub(n - 1, v)
        if kind == "window":
            w = ix_var(self.pick(scope))
            if w.vars == v.vars:
                return ix_affine(v, 1, self.integer(-2, 2))
            stride = self.integer(1, 2)
            return ix_add(ix_affine(v, stride, 0), w, self.pick([1, -1]), self.integer(-2, 2))
        if kind == "upsample":
            return ix_floordiv(ix_affine(v, 1, self.integer(0, 2)), self.integer(2, 3))
        if kind == "tile":
            return ix_mod(ix_affine(v, 1, self.integer(0, 3)), self.integer(1, n))
        strided = ix_affine(v, self.integer(1, 3), self.integer(-2, 2))
        return ix_floordiv(strided, self.integer(2, 3))

    def index(self, scope: list, n: int, guards: list) -> Ix:
        """An index that is valid for size ``n``, possibly adding to ``guards``."""
        x = self.raw_index(scope, n)
        if x.vars and self.integer(0, 7) == 7:  # an occasional clamp even when not needed
            x = ix_clamp(x, n)
        vals = x.values()
        if min(vals) < 0 or max(vals) >= n:
            fix = self.pick(["guard", "clamp", "wrap"])
            if fix == "guard" and any(0 <= val < n for val in vals):
                guards.append(cond_in_bounds(x, n))
            elif fix == "wrap":
                x = ix_mod(x, n)
            else:
                x = ix_clamp(x, n)
        self.used_vars.update(x.vars)
        return x

    # -- values -----------------------------------------------------------------
    def read(self, scope: list, tensor=None, where_guards: list | None = None):
        """A read of a tensor; out-of-range indices are guarded with if_then_else, or
        with the caller's reduction ``where`` when ``where_guards`` is a list."""
        t = tensor if tensor is not None else self.pick(self.tensors)
        self.read_tensors.add(t)
        guards: list[Cond] = []
        idx = tuple(self.index(scope, n, guards).expr for n in t.shape)
        value = t[idx]
        if guards:
            if where_guards is not None:
                where_guards.extend(guards)
            else:
                value = tg.if_then_else(cond_all(guards).expr, value, self.pick(PAD_VALUES))
        return value

    def leaf(self, scope: list):
        if self.integer(0, 9) == 9:
            return tg.const(self.pick(CONSTANTS), "float64")
        return self.read(scope)

    def value(self, scope: list, depth: int):
        self.budget -= 1
        if depth <= 0 or self.budget <= 0:
            return self.leaf(scope)
        kind = self.pick(["read", "unary", "binary", "reduce", "window", "select", "reduce"])
        if kind == "read":
            return self.leaf(scope)
        if kind == "unary":
            op = self.pick(["tanh", "sigmoid", "sin", "exp_tanh", "rational", "neg"])
            a = self.value(scope, depth - 1)
            if op == "exp_tanh":
                return tg.exp(tg.tanh(a))
            if op == "rational":
                return a / (1.0 + a * a)
            if op == "neg":
                return -a
            if op == "sin":  # a bounded argument: sin(1e13) turns rounding into O(1) error
                return tg.sin(3.0 * tg.tanh(a))
            return getattr(tg, op)(a)
        if kind == "binary":
            op = self.pick(["add", "mul", "sub", "div", "maximum", "minimum"])
            a = self.value(scope, depth - 1)
            b = self.value(scope, depth - 1)
            if op == "add":
                return a + b
            if op == "mul":
                return a * b
            if op == "sub":
                return a - b
            if op == "div":
                return a / (1.0 + b * b)
            return getattr(tg, op)(a, b)
        if kind == "reduce":
            return self.reduction(scope, depth)
        if kind == "window":
            return self.window(scope, depth)
        cond = self.index_condition(scope)
        a = self.value(scope, depth - 1)
        b = self.value(scope, depth - 1)
        return a if cond is None else tg.if_then_else(cond.expr, a, b)

    def uses(self, k, src, inner: list):
        """Make ``src`` depend on the reduce axis ``k``, but now and then (1 in 8) leave a
        source that does not use it: a sum of ``x`` over ``k``'s points (``counted_axes``
        of ``lower/nest_reduce.py``)."""
        if k not in self.used_vars and self.integer(0, 7) == 7:
            return src
        if k not in self.used_vars:
            src = src + self.read(inner)
            if k not in self.used_vars:
                src = src * (1.0 + 0.25 * tg.cast(k, "float64"))
        return src

    def reduce_axis(self):
        extent = self.integer(1, MAX_DIM)
        if self.flag():
            return tg.reduce_axis(extent)
        start = self.integer(0, 2)
        return tg.reduce_axis((start, start + extent))

    def combiner(self, k, outer: list, where: Cond | None) -> str:
        op = self.pick(["sum", "max", "min", "prod"])
        if op in ("max", "min") and where is not None:
            # an empty max/min is -inf/+inf: only keep it where every row is non-empty
            others = [v for v in where.vars if v is not k]
            for env in _envs(others):
                if not any(where.fn({**env, k: kv}) for kv in _dom(k)):
                    return "sum"
        return op

    def reduction(self, scope: list, depth: int):
        k = self.reduce_axis()
        where = self.where_condition(k, scope) if self.flag() else None
        inner = [*scope, k]
        src = self.uses(k, self.value(inner, depth - 1), inner)
        op = self.combiner(k, scope, where)
        return getattr(tg, op)(src, axis=k, where=None if where is None else where.expr)

    def window(self, scope: list, depth: int):
        """A reduction whose read is guarded by the reduction's ``where`` (padding)."""
        k = self.reduce_axis()
        inner = [*scope, k]
        guards: list[Cond] = []
        src = self.uses(k, self.read(inner, where_guards=guards), inner)
        shape = self.pick(["plain", "tanh", "times", "minus"])
        if shape == "tanh":
            src = tg.tanh(src)
        elif shape == "times":
            src = src * self.value(inner, depth - 1)
        elif shape == "minus":
            src = src - self.value(inner, depth - 1)
        where = cond_all(guards) if guards else None
        if where is not None and self.flag():
            extra = self.where_condition(k, scope)
            where = cond_all([where, extra])
        op = self.combiner(k, scope, where)
        return getattr(tg, op)(src, axis=k, where=None if where is None else where.expr)

    def where_condition(self, k, scope: list) -> Cond:
        kind = self.pick(["le", "even", "ne", "sum_lt", "range"])
        lo, hi = k.dom
        if scope and kind in ("le", "ne", "sum_lt"):
            v = self.pick(scope)
            if kind == "le":
                return Cond(k <= v + lo, lambda env: env[k] <= env[v] + lo, (k, v))
            if kind == "ne":
                return Cond(tg.not_equal(k, v), lambda env: env[k] != env[v], (k, v))
            c = self.integer(1, 2 * MAX_DIM)
            return Cond(k + v < c, lambda env: env[k] + env[v] < c, (k, v))
        if kind == "even":
            return Cond(tg.equal(k % 2, 0), lambda env: env[k] % 2 == 0, (k,))
        c = self.integer(lo, hi)
        return Cond(tg.any(k < c, k > c + 1), lambda env: env[k] < c or env[k] > c + 1, (k,))

    def index_condition(self, scope: list) -> Cond | None:
        if not scope:
            return None
        v = self.pick(scope)
        kind = self.pick(["lt", "even", "le2"])
        if kind == "lt":
            c = self.integer(*v.dom)
            return Cond(v < c, lambda env: env[v] < c, (v,))
        if kind == "even":
            return Cond(tg.equal(v % 2, 0), lambda env: env[v] % 2 == 0, (v,))
        w = self.pick(scope)
        return Cond(v <= w, lambda env: env[v] <= env[w], (v, w))


@st.composite
def shapes(draw, min_ndim: int = 1, max_ndim: int = 3):
    ndim = draw(st.integers(min_ndim, max_ndim))
    dims: list[int] = []
    size = 1
    for _ in range(ndim):
        n = draw(st.integers(1, max(1, min(MAX_DIM, MAX_TENSOR_SIZE // size))))
        dims.append(n)
        size *= n
    return tuple(dims)


@st.composite
def regrouped(draw, shape: tuple) -> tuple:
    """A shape of as many elements as ``shape``: all merged, adjacent axes merged, an
    axis split in two, or a new axis of extent 1 (at most three axes)."""
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["all", "merge", "split", "unit"]))
    if kind in ("split", "unit") and len(shape) >= 3:
        kind = "merge"
    if kind == "merge" and len(shape) >= 2:
        a = draw(st.integers(0, len(shape) - 2))
        return (*shape[:a], shape[a] * shape[a + 1], *shape[a + 2:])
    if kind == "split":
        splits = [(a, f) for a, n in enumerate(shape) for f in range(2, n) if n % f == 0]
        if splits:
            a, f = draw(st.sampled_from(splits))
            return (*shape[:a], f, shape[a] // f, *shape[a + 1:])
    if kind == "unit":
        a = draw(st.integers(0, len(shape)))
        return (*shape[:a], 1, *shape[a:])
    return (size,)


def reshape_read(t, axes: tuple, shape: tuple):
    """``t`` read at the row-major digits of the flat index of ``axes`` (over ``shape``),
    as ``tg.nn.reshape`` reads it."""
    flat = 0
    for v, step in zip(axes, [int(np.prod(shape[j + 1:])) for j in range(len(shape))],
                       strict=True):
        flat = flat + v * step
    index = []
    for d, n in enumerate(t.shape):
        digit = flat // int(np.prod(t.shape[d + 1:]))
        index.append(digit % n if d else digit)
    return t[tuple(index)]


@st.composite
def programs(draw, max_inputs: int = 3, max_computes: int = 3, max_depth: int = 4):
    """A random well-formed program; ``.inputs`` are the placeholders, ``.output`` the
    last compute, ``.computes`` all of them in order."""
    n_inputs = draw(st.integers(1, max_inputs))
    inputs = [
        tg.placeholder(draw(shapes()), "float64", name="XYZ"[k]) for k in range(n_inputs)
    ]
    program = Program(inputs)
    n_computes = draw(st.integers(1, max_computes))
    for c in range(n_computes):
        gen = _Gen(draw, budget=draw(st.integers(2, 14)))
        gen.tensors = list(reversed(inputs + program.computes))
        prev = program.computes[-1] if program.computes else None
        depth = draw(st.integers(1, max_depth))
        reshaped = prev is not None and prev.shape and draw(st.integers(0, 3)) == 0
        shape = draw(regrouped(prev.shape)) if reshaped else draw(shapes(min_ndim=0))
        alone = reshaped and draw(st.booleans())

        def body(*axes, gen=gen, depth=depth, prev=prev, reshaped=reshaped, alone=alone,
                 shape=shape):
            scope = list(axes)
            if reshaped:  # a reshape of the compute before (alone: a view of it)
                gen.read_tensors.add(prev)
                read = reshape_read(prev, axes, shape)
                return read if alone else read + gen.value(scope, depth)
            value = gen.value(scope, depth)
            # chain: every compute reads the one before it (the first, some input)
            if prev is not None and prev not in gen.read_tensors:
                value = value + gen.read(scope, prev)
            elif prev is None and not gen.read_tensors:
                value = value * gen.read(scope)
            return value

        program.computes.append(tg.compute(shape, _named(body, len(shape)), name=f"T{c}"))
    return program


def _named(body, ndim: int):
    """Wrap ``body`` in a lambda whose argument names tg.compute uses for the axes."""
    return [
        lambda: body(),
        lambda i: body(i),
        lambda i, j: body(i, j),
        lambda i, j, k: body(i, j, k),
    ][ndim]


def random_inputs(program: Program, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(p.shape) for p in program.inputs]
