"""JAX-style transforms of Python functions of Variables (or arrays).

- ``grad(fn, argnums=0)``, ``value_and_grad``: reverse mode through a ``GradientTape``
  that watches the arguments; they compose (``grad(grad(f))``) because the inner
  gradient's operations are recorded on the outer tape.
- ``jit(fn)``: ``fn`` traced once per argument shapes and dtypes into one graph
  (Variables holding tensors), simplified and planned as a whole, then run; under a
  tape it is one recorded operation, differentiated as a whole (fusion across ops).
- ``jvp(fn, primals, tangents)``: forward mode on the traced graph (``tg.jvp``).

Arguments may be Variables, NumPy arrays or Python numbers (floats become float32);
those a gradient is taken with respect to must be floats (an integer one raises
``NotDifferentiableError``, as ``tg.gradient`` does). Results are Variables
(``float(v)``, ``np.asarray(v)`` read them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import NotDifferentiableError
from ..function import GraphFunction
from ..ir.dtype import is_float
from ..ir.tensor import placeholder
from .tape import GradientTape
from .variable import Tracer, Variable, run


def _variables(args) -> list[Variable]:
    return [a if isinstance(a, Variable) else Variable(a) for a in args]


def _argnums(argnums, n: int) -> tuple[tuple[int, ...], bool]:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for k in nums:
        if not -n <= k < n:
            raise ValueError(f"argnums {k} is out of range for {n} arguments")
    return tuple(k % n for k in nums), single


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``(fn(*args), d fn / d args[argnums])``; ``fn`` must return a scalar."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        xs = _variables(args)
        nums, single = _argnums(argnums, len(xs))
        for k in nums:
            if not is_float(xs[k].dtype):
                raise NotDifferentiableError(
                    f"grad: argument {k} of {getattr(fn, '__name__', 'fn')} is {xs[k].dtype} "
                    f"(shape {xs[k].shape}); a gradient is taken with respect to float "
                    "arguments only: pass floats (3.0, np.arange(3.0), or .astype('float32'))")
        with GradientTape(watch_accessed_variables=False) as tape:
            for k in nums:
                tape.watch(xs[k])
            value = fn(*xs, **kwargs)
        if not isinstance(value, Variable) or value.shape != ():
            shape = getattr(value, "shape", None)
            raise TypeError(f"grad: {getattr(fn, '__name__', 'fn')} must return a scalar "
                            f"(0-d) Variable, got {type(value).__name__} of shape {shape}")
        grads = tape.gradient(value, [xs[k] for k in nums], unconnected_gradients="zero")
        return value, (grads[0] if single else tuple(grads))
    return wrapper


def grad(fn: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The gradient of a scalar-valued ``fn`` with respect to ``args[argnums]``."""
    value_grad = value_and_grad(fn, argnums)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return value_grad(*args, **kwargs)[1]
    return wrapper


class _Traced:
    """``fn`` traced on placeholders for one signature: the graph, its captures."""

    def __init__(self, fn: Callable, xs: Sequence[Variable], kwargs: dict):
        inputs = [placeholder(x.shape, x.dtype, name=f"arg{k}") for k, x in enumerate(xs)]
        with Tracer() as tracer:
            result = fn(*(Variable._result(tensor=p) for p in inputs), **kwargs)
        self.single = not isinstance(result, (list, tuple))
        outs = [result] if self.single else list(result)
        for r in outs:
            if not isinstance(r, Variable) or r.tensor is None:
                raise TypeError("a traced function must return Variables computed from its "
                                f"arguments, got {type(r).__name__}")
        self.captured = [v for v, _ in tracer.captured.values()]
        captured_inputs = [p for _, p in tracer.captured.values()]
        self.inputs = [*inputs, *captured_inputs]
        self.outputs = [r.tensor for r in outs]
        self.graph = GraphFunction(self.inputs, self.outputs, single=self.single,
                                   name=getattr(fn, "__name__", "jit"))


def jit(fn: Callable) -> Callable:
    """``fn`` compiled as one graph per argument shapes/dtypes (keyword arguments are
    static). Variables the function reads that are not arguments (weights) are captured
    as inputs, so a tape still differentiates with respect to them."""
    cache: dict = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        xs = _variables(args)
        key = (tuple((x.shape, x.dtype) for x in xs), tuple(sorted(kwargs.items())))
        traced = cache.get(key)
        if traced is None:
            traced = cache[key] = _Traced(fn, xs, kwargs)
        outs = run(traced.graph, [*xs, *traced.captured], keep=True)
        return outs[0] if traced.single else tuple(outs)
    wrapper.cache = cache
    return wrapper


def jvp(fn: Callable, primals: Sequence, tangents: Sequence):
    """``(fn(*primals), the derivative of fn at primals along tangents)`` (forward mode,
    on ``fn`` traced as one graph)."""
    xs, ts = _variables(primals), _variables(tangents)
    if len(xs) != len(ts):
        raise ValueError(f"{len(xs)} primals but {len(ts)} tangents")
    for x, t in zip(xs, ts, strict=True):
        if x.shape != t.shape:
            raise ValueError(f"tangent of shape {t.shape} for a primal of shape {x.shape}")
    traced = _Traced(fn, xs, {})
    # tangents for the float primals only: captured constants are held, not perturbed
    # (a zero tangent times an undefined partial, 0 * log(-2) of x ** c, would be nan)
    wrt = tuple(k for k, x in enumerate(xs) if x.dtype.startswith("float"))
    forward = traced.graph.jvp(wrt)
    float_ts = [np.asarray(ts[k].numpy(), xs[k].dtype) for k in wrt]
    values = traced.graph(*(v.numpy() for v in [*xs, *traced.captured]))
    dots = forward(*(v.numpy() for v in [*xs, *traced.captured]), *float_ts)
    out = [Variable._result(np.asarray(v)) for v in values]
    out_dot = [Variable._result(np.asarray(v)) for v in dots]
    if traced.single:
        return out[0], out_dot[0]
    return tuple(out), tuple(out_dot)
