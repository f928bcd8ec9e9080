"""Running one operation on Variables: a tensor-expression template, compiled once.

    apply(fn, *args, **kwargs)

``fn`` builds tensors from tensors (``tg.nn.conv2d``, ``operator.add``...). The Variables
among the arguments (also inside lists and tuples) become placeholders of their shapes
and dtypes; everything else is a static argument. ``interop.graph.trace`` caches the
traced ``GraphFunction`` by (fn, shapes, dtypes, static arguments), so a template is
traced, simplified and planned once and then only run. The outputs are new Variables,
and the operation is recorded on every active tape (``tape.py``).

While a whole function is traced (``tg.jit``, ``tg.jvp``: a ``Tracer`` is active and an
argument is symbolic), ``fn`` is called on the tensors themselves, building one graph;
concrete Variables met then (constants, captured weights) become placeholders of the
traced graph, fed with their values when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..interop.graph import GraphFunction, split_leaves, trace
from ..ir.tensor import Tensor, placeholder
from .variable import Variable

TRACERS: list[Tracer] = []


class Tracer:
    """The state of one whole-function trace: captured constants."""

    def __init__(self):
        self.captured: dict[int, tuple[Variable, Tensor]] = {}

    def tensor_of(self, v: Variable) -> Tensor:
        if v.tensor is not None:
            return v.tensor
        found = self.captured.get(id(v))
        if found is None:
            p = placeholder(v.shape, v.dtype, name=f"captured{len(self.captured)}")
            found = self.captured[id(v)] = (v, p)
        return found[1]

    def __enter__(self) -> Tracer:
        TRACERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        TRACERS.remove(self)


def is_variable(value) -> bool:
    return isinstance(value, Variable)


def apply(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the Variables' values (see the module docstring)."""
    leaves, spec_args, spec_kwargs = split_leaves(args, kwargs, is_variable)
    if TRACERS and any(v.symbolic for v in leaves):
        return _symbolic(fn, args, kwargs)
    graph = trace(fn, spec_args, spec_kwargs)
    outs = run(graph, leaves)
    return outs[0] if graph.single else tuple(outs)


def run(graph: GraphFunction, inputs: Sequence[Variable]) -> list[Variable]:
    """Run a traced graph on Variables and record it on the active tapes."""
    from .tape import record

    values = graph(*(v.numpy() for v in inputs))
    outs = [Variable._result(np.asarray(a)) for a in values]
    record(graph, list(inputs), outs)
    return outs


def _symbolic(fn, args, kwargs):
    tracer = TRACERS[-1]

    def to_tensor(value):
        if isinstance(value, Variable):
            return tracer.tensor_of(value)
        if isinstance(value, (list, tuple)):
            return type(value)(to_tensor(v) for v in value)
        return value

    result = fn(*to_tensor(args), **{k: to_tensor(v) for k, v in kwargs.items()})
    if isinstance(result, (list, tuple)):
        return tuple(Variable._result(tensor=t) for t in result)
    return Variable._result(tensor=result)
