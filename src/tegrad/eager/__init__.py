"""Eager use: ``tg.Variable`` (``variable.py``), operations as compiled templates
(``dispatch.py``), ``tg.GradientTape`` (``tape.py``), and the function transforms
``tg.grad``, ``tg.value_and_grad``, ``tg.jit`` and function-style ``tg.jvp``
(``functional.py``). ``eager_aware`` makes a tensor function (``tg.nn.*``, ``tg.exp``...)
run eagerly when it is given Variables."""

from __future__ import annotations

import functools

import numpy as np

from .variable import Variable


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
    """``fn`` unchanged on tensors; on Variables, one eager operation (``dispatch.apply``)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if any(_holds_variable(a) for a in args) or any(
                _holds_variable(v) for v in kwargs.values()):
            from .dispatch import apply
            args = tuple(_as_operand(a) for a in args)
            kwargs = {k: _as_operand(v) for k, v in kwargs.items()}
            return apply(fn, *args, **kwargs)
        return fn(*args, **kwargs)
    wrapper.tensor_function = fn
    return wrapper


__all__ = ["Variable", "eager_aware"]
