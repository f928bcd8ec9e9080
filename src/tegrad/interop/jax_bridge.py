"""``to_jax(fn)``: a tegrad function as a JAX function whose derivatives are generated.

    mode="vjp" (default)   jax.custom_vjp
        primal   y     = pure_callback(graph)(x)
        bwd      x_bar = F(graph.vjp())(x, y_bar)     F: this construction again, so the
                                                      backward has a custom VJP too and
                                                      jax.grad(jax.grad(f)) works
    mode="jvp"             jax.custom_jvp
        jvp      y_dot = F(graph.jvp())(x, x_dot)     jax.jvp, jax.jacfwd, forward over
                                                      forward; no reverse mode

Every kernel runs through ``jax.pure_callback`` (result shapes and dtypes from the traced
graph; ``vmap_method="sequential"``), so it works under ``jax.jit``, ``jax.grad``,
``jax.value_and_grad`` and ``jax.vmap`` on the host CPU. JAX arrays and NumPy arrays in
the call (positional or keyword, also inside lists and tuples) become placeholders; every
other argument is passed to ``fn`` unchanged. Integer inputs get no cotangent.

JAX computes in float32 unless ``jax.config.update("jax_enable_x64", True)``; the graph
is traced for the dtypes JAX hands over.

JAX is imported when ``to_jax`` is first called, never by ``import tegrad``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..function import GraphFunction, split_leaves, trace

MODES = ("vjp", "jvp")
_SUPPORTED = ("float32", "float64", "int32", "int64", "bool")


def _jax():
    try:
        import jax
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("tg.to_jax needs JAX: pip install jax") from error
    return jax


def to_jax(fn: Callable, mode: str = "vjp") -> Callable:
    """``fn`` (building tensors from placeholders) as a function on JAX arrays.

    ``mode="vjp"``: reverse mode (``jax.grad``, ``jax.vjp``, any order). ``mode="jvp"``:
    forward mode (``jax.jvp``, ``jax.jacfwd``, any order). Returns one array when ``fn``
    returns one tensor, a tuple when it returns a list or tuple."""
    if mode not in MODES:
        raise ValueError(f"to_jax: unknown mode {mode!r}; choose from {', '.join(MODES)}")
    jax = _jax()

    def is_leaf(v) -> bool:
        return isinstance(v, (jax.Array, np.ndarray))

    def canonical(v):  # NumPy arrays take the dtype JAX would give them (float32 sans x64)
        return jax.numpy.asarray(v) if isinstance(v, np.ndarray) else v

    @functools.wraps(fn)
    def call(*args, **kwargs):
        args, kwargs = jax.tree_util.tree_map(canonical, (args, kwargs))
        arrays, spec_args, spec_kwargs = split_leaves(args, kwargs, is_leaf)
        for a in arrays:
            if str(a.dtype) not in _SUPPORTED:
                raise TypeError(f"tg.to_jax({getattr(fn, '__name__', 'fn')}): unsupported "
                                f"dtype {a.dtype} (shape {tuple(a.shape)}); tegrad supports "
                                f"{', '.join(_SUPPORTED)}")
        graph = trace(fn, spec_args, spec_kwargs)
        outs = jax_function(graph, mode)(*arrays)
        return outs[0] if graph.single else tuple(outs)

    call.tegrad_fn = fn
    return call


def jax_function(graph: GraphFunction, mode: str = "vjp") -> Callable:
    """``graph`` as a JAX function of its inputs returning a tuple (cached per graph)."""
    key = ("jax", mode)
    found = graph.extras.get(key)
    if found is None:
        found = graph.extras[key] = (_with_vjp if mode == "vjp" else _with_jvp)(graph)
    return found


def _callback(graph: GraphFunction, args) -> tuple:
    jax = _jax()
    shapes = tuple(jax.ShapeDtypeStruct(s.shape, jax.dtypes.canonicalize_dtype(s.dtype))
                   for s in graph.out_specs)

    def host(*arrays):
        values = graph(*(np.asarray(a) for a in arrays))
        return tuple(np.asarray(v, dtype=s.dtype, order="C")
                     for v, s in zip(values, shapes, strict=True))

    return tuple(jax.pure_callback(host, shapes, *args, vmap_method="sequential"))


def _with_vjp(graph: GraphFunction) -> Callable:
    jax = _jax()

    @jax.custom_vjp
    def f(*args):
        return _callback(graph, args)

    def fwd(*args):
        # f itself, not the callback: a transformation of the fwd rule (the outer grad
        # of grad-of-grad sees the primal outputs) then meets f's custom VJP again
        return f(*args), args

    def bwd(args, cotangents):
        result: list = [None] * len(graph.inputs)
        if graph.float_inputs:
            heads = [cotangents[k] for k in graph.float_outputs]
            grads = jax_function(graph.vjp(), "vjp")(*args, *heads)
            for k, g in zip(graph.float_inputs, grads, strict=True):
                result[k] = g
        return tuple(result)

    f.defvjp(fwd, bwd)
    return f


def _with_jvp(graph: GraphFunction) -> Callable:
    jax = _jax()

    @jax.custom_jvp
    def f(*args):
        return _callback(graph, args)

    @f.defjvp
    def f_jvp(primals, tangents):
        outs = f(*primals)
        dots = [tangents[k] for k in graph.float_inputs]
        found = iter(jax_function(graph.jvp(), "jvp")(*primals, *dots) if dots else ())
        out_dots = []
        for k, y in enumerate(outs):
            if k in graph.float_outputs:
                out_dots.append(next(found) if dots else jax.numpy.zeros_like(y))
            else:
                out_dots.append(np.zeros(y.shape, jax.dtypes.float0))
        return outs, tuple(out_dots)

    return f
