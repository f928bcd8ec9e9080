"""A traced function as a graph, with its VJP and JVP graphs: the framework-neutral core
of eager use (``eager/``: each operation, ``tg.jit``, the tape's backward) and of the
PyTorch and JAX bridges (``interop/``).

    f       (x_1..x_n)           -> (y_1..y_m)             GraphFunction
    f.vjp() (x_1..x_n, H_1..H_p) -> (x_bar_i for float x_i) H_k: one head per float y_k
    f.jvp() (x_1..x_n, T_1..T_q) -> (y_dot_k for float y_k) T_i: one tangent per float x_i
    f.split_vjp(wrt)                                        the y and what the VJP of x_wrt
                                                            reads; then that VJP alone

    x_bar = tg.gradient(y, x, head=H)               (one float output)
    x_bar = tg.gradient(sum_k <H_k, y_k>, x)        (several: ``inner_product``)

Each is again a ``GraphFunction``, so ``f.vjp().vjp()`` is the second order (the heads
are float inputs of ``f.vjp()``, so it differentiates with respect to them too) and so
on. A float input no float output reads gets a zero gradient; integer and bool inputs
get none (they are absent from the VJP's outputs). Kernels are built on first call.

``trace(fn, args, kwargs)`` calls ``fn`` on placeholders: every ``TensorSpec`` in
``args`` and in ``kwargs`` (also inside lists and tuples) becomes one, in order
(positional first, then keywords by name); everything else is passed unchanged. The
result is cached by ``(fn, specs, frozen static arguments)``: a bridge traces, derives
and builds once per shape and dtype. ``cache_info()`` reports hits and misses.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .backends import build
from .backends.feed import checked_feed, input_specs
from .backends.vjp import SplitVJP
from .differentiate import gradient, inner_product, jvp
from .frontend.math import const
from .ir import dtype as dt
from .ir.compute import compute
from .ir.tensor import Tensor, placeholder


class TensorSpec(NamedTuple):
    """The shape and dtype of one tensor argument of a traced call."""

    shape: tuple[int, ...]
    dtype: str


class GraphFunction:
    """``inputs`` (placeholders) -> ``outputs`` (tensors), run on NumPy arrays.

    Calling it returns a tuple of arrays, one per output (``single`` records whether the
    traced function returned one tensor rather than a sequence). The kernel is built on
    the first call; ``vjp()`` and ``jvp()`` are built once and cached.
    """

    def __init__(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor], *,
                 single: bool = False, name: str = "graph"):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.single = single
        self.name = name
        self.float_inputs = tuple(k for k, x in enumerate(self.inputs) if dt.is_float(x.dtype))
        self.float_outputs = tuple(k for k, y in enumerate(self.outputs) if dt.is_float(y.dtype))
        self._out_dtypes = tuple((y, np.dtype(y.dtype)) for y in self.outputs)
        self.out_dtype = self.outputs[0].dtype if single else None  # (the eager layer's)
        self._program: Callable | None = None
        self._direct: Callable | None = None  # call_exact's runner, once built
        self._vjps: dict[tuple[int, ...], GraphFunction] = {}
        self._jvps: dict[tuple[int, ...], GraphFunction] = {}
        self._splits: dict[tuple, SplitVJP] = {}  # (wrt, target) -> its split
        self._on: dict[str | None, Callable] = {}  # target name -> its build (``on``)
        self._lock = threading.Lock()
        self.extras: dict = {}  # per-graph objects of the bridges (a JAX function, ...)

    def __repr__(self) -> str:
        def sig(ts):
            return ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in ts)
        return f"GraphFunction {self.name}({sig(self.inputs)}) -> ({sig(self.outputs)})"

    @property
    def out_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(y.shape, y.dtype) for y in self.outputs)

    def __call__(self, *arrays) -> tuple[np.ndarray, ...]:
        program = self._program
        if program is None:
            program = self._program = self.on(None)
        return self.checked(program(*arrays))

    def on(self, target: str | None) -> Callable:
        """The graph built for ``target`` (once; None: the default target's, which a call
        runs): a callable on that target's arrays, e.g. torch CUDA tensors for ``"cuda"``,
        returning a tuple of its results."""
        found = self._on.get(target)
        if found is None:
            with self._lock:
                found = self._on.get(target)
                if found is None:
                    found = self._on[target] = build(list(self.inputs), list(self.outputs),
                                                     target=target)
                    STATS.builds += 1
        return found

    def call_exact(self, arrays: list) -> Sequence[np.ndarray]:
        """``self(*arrays)`` for NumPy arrays known to be of the inputs' shapes and dtype
        names (the eager layer's quick key says so): a one-kernel program takes them
        straight (``CpuProgram.direct``, which makes its output of the right shape)."""
        direct = self._direct
        if direct is None:
            if self._program is None:
                return self(*arrays)  # (built on the first call)
            direct = self._direct = getattr(getattr(self._program, "program", None), "direct",
                                            None) or self._general
        return direct(arrays)

    def _general(self, arrays: list) -> tuple[np.ndarray, ...]:
        return self(*arrays)

    def feed(self, arrays: Sequence) -> dict:
        """The placeholders' feed for ``arrays``, each checked (and cast) as a call's."""
        return checked_feed(input_specs(list(self.inputs)), tuple(arrays))

    def checked(self, results: Sequence) -> tuple[np.ndarray, ...]:
        """A program's results as the outputs' arrays, each of its output's shape."""
        values = []
        for v, (y, dtype) in zip(results, self._out_dtypes, strict=True):
            if type(v) is not np.ndarray or v.dtype is not dtype:
                v = np.asarray(v, dtype=dtype)
            if v.shape != y.shape:  # a framework would broadcast it silently
                raise RuntimeError(f"{self.name}: output {y.name} should have shape {y.shape}, "
                                   f"the kernel gave {v.shape}")
            values.append(v)
        return tuple(values)

    def vjp(self, wrt: Sequence[int] | None = None) -> GraphFunction:
        """``(inputs..., heads of the float outputs) -> gradients of inputs[wrt]``.

        ``wrt`` lists input positions (float inputs only); ``None`` means every float
        input, in order."""
        key = self.float_inputs if wrt is None else tuple(wrt)
        found = self._vjps.get(key)
        if found is None:
            with self._lock:
                found = self._vjps.get(key)
                if found is None:
                    found = self._vjps[key] = self._make_vjp(key)
        return found

    def jvp(self, wrt: Sequence[int] | None = None) -> GraphFunction:
        """``(inputs..., tangents of inputs[wrt]) -> tangents of the float outputs``;
        ``None`` means every float input (the others are held constant)."""
        key = self.float_inputs if wrt is None else tuple(wrt)
        found = self._jvps.get(key)
        if found is None:
            with self._lock:
                found = self._jvps.get(key)
                if found is None:
                    found = self._jvps[key] = self._make_jvp(key)
        return found

    def split_vjp(self, wrt: Sequence[int], target: str | None = None) -> SplitVJP:
        """The forward that keeps what the VJP of ``inputs[wrt]`` reads, and that VJP
        (``backends/vjp.py``): a backward given the forward's kept values runs no part of
        the forward again. Built once per ``wrt`` and target, and cached."""
        key = (tuple(wrt), target)
        found = self._splits.get(key)
        if found is None:
            with self._lock:
                found = self._splits.get(key)
                if found is None:
                    heads, grads = self._gradients(key[0])
                    found = self._splits[key] = SplitVJP(self.inputs, self.outputs, heads,
                                                         grads, target)
                    STATS.builds += 2
        return found

    def _gradients(self, wrt: tuple[int, ...]) -> tuple[list, list]:
        """``(heads, gradients of inputs[wrt])``: a head per float output."""
        for k in wrt:
            if not 0 <= k < len(self.inputs) or k not in self.float_inputs:
                raise ValueError(f"{self.name}: cannot differentiate with respect to input {k}"
                                 " (not a float input)")
        floats = [self.outputs[k] for k in self.float_outputs]
        heads = [placeholder(y.shape, y.dtype, name=f"{y.name}_bar") for y in floats]
        xs = [self.inputs[k] for k in wrt]
        if not xs:
            grads = []
        elif not floats:
            grads = [zeros(x) for x in xs]
        elif len(floats) == 1:
            grads = gradient(floats[0], xs, head=heads[0])
        else:
            grads = gradient(inner_product(floats, heads), xs)
        STATS.derivations += 1
        return heads, grads

    def _make_vjp(self, wrt: tuple[int, ...]) -> GraphFunction:
        heads, grads = self._gradients(wrt)
        return GraphFunction([*self.inputs, *heads], grads, name=f"{self.name}.vjp")

    def _make_jvp(self, wrt: tuple[int, ...]) -> GraphFunction:
        for k in wrt:
            if not 0 <= k < len(self.inputs) or k not in self.float_inputs:
                raise ValueError(f"{self.name}: no tangent for input {k} (not a float input)")
        xs = [self.inputs[k] for k in wrt]
        tangents = [placeholder(x.shape, x.dtype, name=f"{x.name}_dot") for x in xs]
        outs = []
        for k in self.float_outputs:
            y = self.outputs[k]
            outs.append(jvp(y, xs, tangents) if xs else zeros(y))
        STATS.derivations += 1
        return GraphFunction([*self.inputs, *tangents], outs, name=f"{self.name}.jvp")


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def zeros(like: Tensor) -> Tensor:
    """A zero tensor shaped like ``like`` (the gradient of an unconnected input)."""
    return compute(like.shape, lambda *_: const(0, like.dtype), name=f"{like.name}.zero")


# ---------------------------------------------------------------------------- tracing


@dataclass
class CacheStats:
    """Counters of the trace cache (``cache_info()``)."""

    hits: int = 0
    misses: int = 0
    uncached: int = 0  # static arguments that could not be hashed
    builds: int = 0  # kernels built (forward, VJP and JVP graphs)
    derivations: int = 0  # VJP/JVP graphs derived
    size: int = 0
    maxsize: int = 256


STATS = CacheStats()
_CACHE: OrderedDict[Any, GraphFunction] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def cache_info() -> CacheStats:
    """A snapshot of the trace cache's counters."""
    with _CACHE_LOCK:
        return CacheStats(**{**STATS.__dict__, "size": len(_CACHE)})


def cache_clear() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
        _QUICK.clear()
        for name in ("hits", "misses", "uncached", "builds", "derivations"):
            setattr(STATS, name, 0)


def trace(fn: Callable, args: Sequence = (), kwargs: dict | None = None) -> GraphFunction:
    """``fn(*args, **kwargs)`` on placeholders for the ``TensorSpec``s, cached."""
    kwargs = dict(kwargs or {})
    try:
        key = (fn, freeze(tuple(args)), freeze(kwargs))
        hash(key)
    except TypeError:
        key = None
    if key is not None:
        with _CACHE_LOCK:
            found = _CACHE.get(key)
            if found is not None:
                _CACHE.move_to_end(key)
                STATS.hits += 1
                return found
    graph = _trace(fn, args, kwargs)
    with _CACHE_LOCK:
        if key is None:
            STATS.uncached += 1
        else:
            STATS.misses += 1
            _CACHE[key] = graph
            while len(_CACHE) > STATS.maxsize:
                _CACHE.popitem(last=False)
    return graph


# a second index into the traced graphs, for the eager layer (``eager/variable.apply``):
# keyed by what a caller with only arrays and plain static values can build much faster
# than ``freeze`` (a tiny op's whole cost is a few microseconds); each entry is a graph
# ``trace`` returned, so both indexes give one graph per template
_QUICK: dict[Any, GraphFunction] = {}


def quick_lookup(key) -> GraphFunction | None:
    """The graph ``quick_store`` filed under ``key`` (a hit of the trace cache), or None."""
    found = _QUICK.get(key)
    if found is not None:
        STATS.hits += 1
    return found


def quick_store(key, graph: GraphFunction) -> None:
    with _CACHE_LOCK:
        if len(_QUICK) >= 4 * STATS.maxsize:  # (a template per shape: start again)
            _QUICK.clear()
        _QUICK[key] = graph


def _trace(fn: Callable, args: Sequence, kwargs: dict) -> GraphFunction:
    name = getattr(fn, "__name__", type(fn).__name__)
    inputs: list[Tensor] = []

    def make(spec: TensorSpec) -> Tensor:
        p = placeholder(spec.shape, spec.dtype, name=f"arg{len(inputs)}")
        inputs.append(p)
        return p

    call_args = map_specs(tuple(args), make)
    call_kwargs = {k: map_specs(kwargs[k], make) for k in sorted(kwargs)}
    result = fn(*call_args, **call_kwargs)
    outputs = as_list(result)
    for y in outputs:
        if not isinstance(y, Tensor):
            raise TypeError(f"{name} returned {type(y).__name__}; a function wrapped by a "
                            "tegrad bridge must return a tensor or a list/tuple of tensors")
    return GraphFunction(inputs, outputs, single=not isinstance(result, (list, tuple)),
                         name=name)


def map_specs(value, make: Callable[[TensorSpec], Any]):
    """``value`` with every ``TensorSpec`` (also in lists and tuples) replaced by ``make``'s
    result, in depth-first order."""
    if isinstance(value, TensorSpec):
        return make(value)
    if isinstance(value, (list, tuple)):
        return rebuild(value, [map_specs(v, make) for v in value])
    return value


def rebuild(like: list | tuple, items: list):
    """A list or tuple of ``like``'s type (namedtuples and ``torch.Size`` too)."""
    if isinstance(like, list):
        return items
    if hasattr(like, "_fields"):
        return type(like)(*items)
    return type(like)(items)


def split_leaves(args: Sequence, kwargs: dict, is_leaf: Callable[[Any], bool]):
    """The framework tensors of a call (positional first, then keywords by name, lists and
    tuples searched) and the call with each replaced by its ``TensorSpec``, whose order
    matches ``trace``'s placeholders."""
    leaves: list = []

    def walk(value):
        if is_leaf(value):
            leaves.append(value)
            return TensorSpec(tuple(int(n) for n in value.shape), _dtype_name(value))
        if isinstance(value, (list, tuple)) and not isinstance(value, TensorSpec):
            return rebuild(value, [walk(v) for v in value])
        return value

    spec_args = tuple(walk(a) for a in args)
    spec_kwargs = {k: walk(kwargs[k]) for k in sorted(kwargs)}
    return leaves, spec_args, spec_kwargs


def _dtype_name(value) -> str:
    d = value.dtype
    name = getattr(d, "name", None)
    if name is None:  # torch.dtype: "torch.float32"
        name = str(d).removeprefix("torch.")
    return name


def freeze(value):
    """A hashable stand-in for a static argument: lists become tuples, dicts sorted tuples,
    arrays their bytes. Raises TypeError for anything else unhashable."""
    if isinstance(value, TensorSpec):
        return value
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, freeze(v)) for k, v in value.items())))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    hash(value)
    return (type(value).__name__, value)
