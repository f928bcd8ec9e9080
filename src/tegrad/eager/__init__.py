"""Eager use: ``tg.Variable`` and its operations as compiled templates (``variable.py``),
``tg.GradientTape`` (``tape.py``), and the function transforms ``tg.grad``,
``tg.value_and_grad``, ``tg.jit`` and function-style ``tg.jvp`` (``functional.py``).
``eager_aware`` makes a tensor function run eagerly when it is given Variables;
``wrap_namespace`` does so for a whole library from above it (``tegrad/__init__.py``
wraps ``tg.nn`` and the math intrinsics: ``nn`` itself knows nothing of eager use)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, MutableMapping

import numpy as np

from ..function import quick_lookup
from .variable import PLAIN, TRACERS, Variable, apply, quick_key, ran


def _holds_variable(value) -> bool:
    if isinstance(value, Variable):
        return True
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, Variable) for v in value)
    return False


def _as_operand(value):
    """NumPy arrays beside Variables become (non-trainable) Variables too."""
    if isinstance(value, np.ndarray):
        return Variable(value, trainable=False)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_as_operand(v) for v in value)
    return value


def eager_aware(fn):
    """``fn`` unchanged on tensors; on Variables, one eager operation (``variable.apply``)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # the common calls: one concrete Variable (``apply``'s quick key built here), or
        # concrete Variables and plain values, of a template run before
        if len(args) == 1 and not kwargs and type(args[0]) is Variable and not TRACERS:
            v = args[0]
            graph = None if v.value is None else quick_lookup((fn, v.value.shape, v._dtype))
            if graph is not None:
                return ran(graph, [v])
        key, leaves = quick_key(fn, args, kwargs)
        if leaves:
            graph = quick_lookup(key)
            return ran(graph, leaves) if graph is not None else apply(fn, *args, **kwargs)
        variables = False
        for a in (*args, *kwargs.values()) if kwargs else args:
            kind = type(a)
            if kind is Variable:
                variables = True
            elif kind not in PLAIN:
                break
        else:
            return apply(fn, *args, **kwargs) if variables else fn(*args, **kwargs)
        if any(_holds_variable(a) for a in args) or any(
                _holds_variable(v) for v in kwargs.values()):
            args = tuple(_as_operand(a) for a in args)
            kwargs = {k: _as_operand(v) for k, v in kwargs.items()}
            return apply(fn, *args, **kwargs)
        return fn(*args, **kwargs)
    wrapper.tensor_function = fn
    return wrapper


def wrap_namespace(namespace: MutableMapping[str, object], names: Iterable[str]) -> None:
    """Replace each of ``names`` in ``namespace`` (a module's ``vars()``) by its
    ``eager_aware`` wrapper: the tensor functions there then also run eagerly on Variables,
    one compiled template each, and pass tensors through unchanged. The eager layer wraps
    the pure library from above, as autograd's ``numpy_wrapper.wrap_namespace`` wraps
    NumPy."""
    for name in names:
        namespace[name] = eager_aware(namespace[name])


__all__ = ["Variable", "eager_aware", "wrap_namespace"]
