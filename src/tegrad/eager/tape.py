"""``tg.GradientTape``: TensorFlow's tape over compiled tensor-expression templates.

    with tg.GradientTape() as tape:
        y = x ** 3 + x ** 2 + x + 5
    dy = tape.gradient(y, x)

While a tape is active, every operation (``variable.run``) is recorded on it when one
of its inputs is *connected*: watched (``tape.watch``, or a trainable Variable accessed
while ``watch_accessed_variables``), or an output of an operation already recorded.

``gradient(target, sources, output_gradients=None)`` walks the records backwards. The
adjoint of each operation is its generated VJP graph (``GraphFunction.vjp``, derived once
per template), run *as an operation*: a tape around this one records it, so nested tapes
give second and third derivatives, each order a generated graph of the previous one.
A non-scalar target is summed (its head is ones), as TensorFlow does; several targets
add up. ``output_gradients`` gives the heads instead. A source the targets do not reach
gets ``None`` (``unconnected_gradients="zero"``: zeros). A non-persistent tape allows one
``gradient`` call; ``persistent=True`` any number (and ``jacobian``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import NotDifferentiableError
from ..function import GraphFunction
from ..ir.dtype import is_float
from .variable import TAPES, Variable, run


@dataclass
class Record:
    graph: GraphFunction
    inputs: list[Variable]
    outputs: list[Variable]
    values: list  # the inputs' arrays when the operation ran (``assign`` replaces them)
    # (wrt, split, saved) where the forward kept what the VJP of inputs[wrt] reads
    kept: tuple | None = None

    def inputs_as_recorded(self) -> list[Variable]:
        """The inputs for the backward: the Variable itself while it still holds the
        array the operation read (so an outer tape connects it), else that array."""
        return [v if v.value is a else Variable(a, trainable=False)
                for v, a in zip(self.inputs, self.values, strict=True)]


def _flatten(value) -> tuple[list, object]:
    """Variables of a source/target structure (a Variable, or a flat list/tuple/dict of
    them); nested structures are refused rather than answered with None."""
    if isinstance(value, Variable):
        return [value], None
    if isinstance(value, dict):
        keys = list(value)
        items, form = [value[k] for k in keys], ("dict", keys)
    elif isinstance(value, (list, tuple)):
        items, form = list(value), type(value)
    else:
        raise TypeError(f"expected a tg.Variable or a list/tuple/dict of them, got "
                        f"{type(value).__name__}")
    for item in items:
        if isinstance(item, (list, tuple, dict)):
            raise TypeError("nested structures of Variables are not supported: pass a flat "
                            "list, tuple or dict")
    return items, form


def _unflatten(items: list, form):
    if form is None:
        return items[0]
    if isinstance(form, tuple) and form[0] == "dict":
        return dict(zip(form[1], items, strict=True))
    return form(items)


class GradientTape:
    """Records operations for reverse-mode differentiation (TensorFlow's contract)."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._records: list[Record] = []
        self._connected: dict[int, Variable] = {}
        self._watched: dict[int, Variable] = {}
        self._recording = False
        self._used = False

    # -- context ----------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        self._recording = True
        TAPES.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self._recording = False
        if self in TAPES:
            TAPES.remove(self)

    @contextmanager
    def stop_recording(self):
        """Operations inside are not recorded on this tape."""
        if not self._recording:
            raise ValueError("stop_recording: the tape is not recording")
        TAPES.remove(self)
        self._recording = False
        try:
            yield
        finally:
            self._recording = True
            TAPES.append(self)

    def reset(self) -> None:
        """Forget everything recorded (the tape keeps recording if it was)."""
        self._records.clear()
        self._connected.clear()
        self._watched.clear()

    def watch(self, tensor) -> None:
        """Record operations on ``tensor`` (a Variable or a structure of them)."""
        for v in _flatten(tensor)[0]:
            if not isinstance(v, Variable):
                raise TypeError(f"watch: expected tg.Variable, got {type(v).__name__}")
            self._watched[id(v)] = v
            self._connected[id(v)] = v

    def watched_variables(self) -> tuple[Variable, ...]:
        return tuple(self._watched.values())

    def differentiated(self, graph, inputs) -> tuple[int, ...]:
        """The float inputs of an operation about to run that this tape would
        differentiate: connected, or trainable and watched when accessed."""
        return tuple(k for k in graph.float_inputs if id(inputs[k]) in self._connected or (
            self.watch_accessed_variables and inputs[k].trainable))

    def _record(self, graph, inputs, outputs, kept: tuple | None = None) -> None:
        live = False
        for v in inputs:
            if id(v) in self._connected:
                live = True
            elif self.watch_accessed_variables and v.trainable and v.dtype.startswith("float"):
                self.watch(v)
                live = True
        if not live:
            return
        self._records.append(Record(graph, inputs, outputs, [v.value for v in inputs], kept))
        for k in graph.float_outputs:
            self._connected[id(outputs[k])] = outputs[k]

    # -- differentiation --------------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients: str = "none"):
        if unconnected_gradients not in ("none", "zero"):
            raise ValueError(f"unconnected_gradients must be 'none' or 'zero', got "
                             f"{unconnected_gradients!r}")
        if self._used and not self.persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one "
                               "set of gradients (or jacobians); use persistent=True")
        self._used = True
        targets, _ = _flatten(target)
        source_list, form = _flatten(sources)
        for k, s in enumerate(source_list):
            if not is_float(s.dtype):
                raise NotDifferentiableError(
                    f"GradientTape.gradient: source {k} is {s.dtype} (shape {s.shape}); "
                    "gradients are taken with respect to float Variables only")
        heads = self._heads(targets, output_gradients)
        paused = self._recording
        if paused:  # the backward pass itself is not recorded on this tape
            TAPES.remove(self)
        try:
            adjoints = self._backward(targets, heads)
        finally:
            if paused:
                TAPES.append(self)
        out = []
        for s in source_list:
            g = adjoints.get(id(s))
            if g is None and unconnected_gradients == "zero":
                g = Variable(np.zeros(s.shape, s.dtype), trainable=False)
            out.append(g)
        return _unflatten(out, form)

    def _heads(self, targets, output_gradients) -> list[Variable]:
        if output_gradients is None:
            return [Variable(np.ones(t.shape, t.dtype), trainable=False) for t in targets]
        if isinstance(output_gradients, (np.ndarray, np.generic, float, int)):
            output_gradients = [output_gradients]
        given = (list(output_gradients) if isinstance(output_gradients, (list, tuple))
                 else _flatten(output_gradients)[0])
        if len(given) != len(targets):
            raise ValueError(f"{len(given)} output_gradients for {len(targets)} targets")
        out = []
        for t, h in zip(targets, given, strict=True):
            h = h if isinstance(h, Variable) else Variable(np.asarray(h, t.dtype), trainable=False)
            if h.shape != t.shape:
                raise ValueError(f"output_gradients: shape {h.shape} for a target of {t.shape}")
            out.append(h)
        return out

    def _backward(self, targets, heads) -> dict[int, Variable]:
        adjoints: dict[int, Variable] = {}
        for t, h in zip(targets, heads, strict=True):
            if t.dtype.startswith("float"):
                _accumulate(adjoints, t, h)
        for rec in reversed(self._records):
            floats = [rec.outputs[k] for k in rec.graph.float_outputs]
            if not any(id(y) in adjoints for y in floats):
                continue
            wrt = tuple(k for k in rec.graph.float_inputs if id(rec.inputs[k]) in self._connected)
            if not wrt:
                continue
            heads_in = [adjoints[id(y)] if id(y) in adjoints else _zeros_like(y) for y in floats]
            if rec.kept is not None and rec.kept[0] == wrt and not TAPES:
                # the kept forward values, no outer tape to record the backward on
                _, split, saved = rec.kept
                grads = [Variable._result(np.asarray(a, dtype=rec.inputs[k].dtype))
                         for k, a in zip(wrt, split.backward(saved, [h.numpy() for h in heads_in]),
                                         strict=True)]
            else:
                grads = run(rec.graph.vjp(wrt), [*rec.inputs_as_recorded(), *heads_in])
            for k, g in zip(wrt, grads, strict=True):
                _accumulate(adjoints, rec.inputs[k], g)
        return adjoints

    def jacobian(self, target: Variable, sources, unconnected_gradients: str = "none"):
        """``d target / d source`` of shape ``target.shape + source.shape``, one gradient
        per element of the target (rows stacked)."""
        if self._used and not self.persistent:
            raise RuntimeError("jacobian needs a persistent tape (or a fresh one)")
        source_list, form = _flatten(sources)
        rows: list[list[np.ndarray]] = [[] for _ in source_list]
        persistent, self.persistent = self.persistent, True
        try:
            for flat in range(max(1, target.size)):
                head = np.zeros(target.size, target.dtype)
                head[flat] = 1
                head = Variable(head.reshape(target.shape), trainable=False)
                grads = self.gradient(target, list(source_list), head,
                                      unconnected_gradients=unconnected_gradients)
                for k, g in enumerate(grads):
                    rows[k].append(None if g is None else g.numpy())
        finally:
            self.persistent = persistent
        out = []
        for s, r in zip(source_list, rows, strict=True):
            if any(g is None for g in r):
                out.append(None)
            else:
                out.append(Variable(np.stack(r).reshape(target.shape + s.shape), trainable=False))
        return _unflatten(out, form)


def _zeros_like(v: Variable) -> Variable:
    return Variable(np.zeros(v.shape, v.dtype), trainable=False)


def _accumulate(adjoints: dict[int, Variable], v: Variable, g: Variable) -> None:
    previous = adjoints.get(id(v))
    adjoints[id(v)] = g if previous is None else previous + g


__all__ = ["GradientTape"]
