"""``tg.compute``: a compute from a Python function of its axes, verified.

    C = tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")

``fcompute`` is called once, on fresh axis variables named after its parameters (``i``,
``j``; ``i0``, ``i1``... for a function without plain positional ones); its result is the
body. The compute is then verified (``verify.py``: every variable bound, every read in
bounds), so a malformed definition fails here, naming the tensor. Generated tensors,
valid by construction, use ``tensor.make_compute`` instead.
"""

from __future__ import annotations

import inspect

from .expr import Var, as_expr
from .tensor import Compute, make_compute, normalize_shape, unique_name
from .verify import verify_compute


def compute(shape, fcompute, name: str | None = None) -> Compute:
    """``T[i0, i1, ...] = fcompute(i0, i1, ...)`` over ``shape``."""
    shape = normalize_shape(shape)
    name = name or unique_name("compute")
    axis_names = _axis_names(fcompute, len(shape))
    axes = tuple(Var.fresh(n, 0, s) for n, s in zip(axis_names, shape, strict=True))
    try:
        body = as_expr(fcompute(*axes))
    except TypeError:
        _check_arity(fcompute, shape, name)  # (the wrong arity: say so; else re-raise)
        raise
    tensor = make_compute(shape, axes, body, name)
    verify_compute(tensor)
    return tensor


def _check_arity(fcompute, shape: tuple, name: str) -> None:
    """Raise, for a ``fcompute`` that cannot take one index argument per axis of ``shape``,
    an error naming the compute, its shape and the arity expected (not the bare TypeError
    of the call). Called when the call raised TypeError, so it costs nothing otherwise."""
    try:
        signature = inspect.signature(fcompute)
    except (TypeError, ValueError):  # (a builtin or a C callable: let the call decide)
        return
    try:
        signature.bind(*range(len(shape)))
    except TypeError as error:
        raise TypeError(
            f"tg.compute {name}: shape {shape} has {len(shape)} "
            f"{'axis' if len(shape) == 1 else 'axes'}, so fcompute is called with "
            f"{len(shape)} index argument(s), but {getattr(fcompute, '__name__', 'it')}"
            f"{signature} does not take them ({error})") from None


def _axis_names(fcompute, n: int) -> list[str]:
    code = getattr(fcompute, "__code__", None)
    if code is not None and code.co_argcount == n and not code.co_flags & 0x04:
        return list(code.co_varnames[:n])
    return [f"i{k}" for k in range(n)]
