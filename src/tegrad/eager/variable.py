"""``tg.Variable``: an eager array whose every operation is a compiled tensor expression.

A Variable holds a NumPy array (``value``) or, while a function is traced as a whole
(``tg.jit``, ``tg.jvp``), a tensor (``tensor``): the same user code then builds one
graph instead of running op by op. Operators follow NumPy (broadcasting, ``@``,
comparisons giving bool Variables, indexing with ints, slices, ``None``, ``...``);
methods ``sum/mean/max/min`` take NumPy's ``axis``/``keepdims``.

dtypes: Python floats (and lists of them) become float32, as in TensorFlow; a NumPy
array keeps its dtype (float64 stays float64); Python ints become int64. A Python
number mixed with a Variable takes the Variable's dtype, and is passed as a 0-d input,
so ``x * lr`` is one compiled kernel whatever ``lr`` is.

``trainable`` Variables (those a user creates) are watched automatically by a tape
that accesses them; the results of operations are not trainable (TensorFlow's
Variable/Tensor distinction).

Running one operation on Variables (every operator and method here, ``eager_aware``
functions, the tape's backward) is ``apply(fn, *args, **kwargs)``: ``fn`` builds tensors
from tensors (``tg.nn.conv2d``, an elementwise op...). The Variables among the arguments
(also inside lists and tuples) become placeholders of their shapes and dtypes;
everything else is a static argument. ``function.trace`` caches the traced
``GraphFunction`` by (fn, shapes, dtypes, static arguments), so a template is traced,
simplified and planned once and then only run. The outputs are new Variables, and the
operation is recorded on every active tape (``TAPES``, which ``tape.GradientTape``
enters).

While a whole function is traced (``tg.jit``, ``tg.jvp``: a ``Tracer`` is active and an
argument is symbolic), ``fn`` is called on the tensors themselves, building one graph;
concrete Variables met then (constants, captured weights) become placeholders of the
traced graph, fed with their values when it runs.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np

from .. import nn
from ..function import GraphFunction, quick_lookup, quick_store, split_leaves, trace
from ..ir.broadcast import elementwise
from ..ir.tensor import Tensor, placeholder
from .indexing import astype, canonical_key, getitem

_NAMES = itertools.count()


def _as_array(value, dtype=None) -> np.ndarray:
    if isinstance(value, Variable):
        value = value.numpy()
    if dtype is not None:
        return np.asarray(value, dtype=dtype)
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
    else:
        array = np.asarray(value)
        if array.dtype == np.float64:  # Python floats: float32, as TensorFlow does
            array = array.astype(np.float32)
    if array.dtype.kind == "i" and array.dtype != np.int64:
        array = array.astype(np.int64)
    if array.dtype.kind == "f" and array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float32)
    if array.dtype.kind not in "fib":
        raise TypeError(f"tg.Variable holds float, int or bool arrays, got {array.dtype}")
    return array


class Variable:
    """An eager array (see the module docstring)."""

    __array_priority__ = 100  # ``ndarray + Variable`` calls Variable.__radd__

    def __init__(self, value, dtype=None, trainable: bool = True, name: str | None = None):
        self.value = _as_array(value, dtype)
        self._dtype = str(self.value.dtype)  # np.dtype's str() is slow: once per Variable
        self.tensor = None  # set while tracing a whole function
        self.trainable = trainable
        self._name = name
        self._number = next(_NAMES)

    @classmethod
    def _result(cls, value=None, tensor=None, dtype: str | None = None) -> Variable:
        """An operation's output (not trainable): an array (of ``dtype``'s name, where the
        caller knows it), or a tensor while tracing."""
        v = cls.__new__(cls)
        v.value = value
        v._dtype = tensor.dtype if tensor is not None else dtype or str(value.dtype)
        v.tensor = tensor
        v.trainable = False
        v._name = None
        v._number = next(_NAMES)
        return v

    @property
    def name(self) -> str:
        return self._name or f"Variable:{self._number}"

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    # -- NumPy interop --------------------------------------------------------------------
    @property
    def symbolic(self) -> bool:
        return self.tensor is not None

    def _concrete(self, what: str) -> np.ndarray:
        if self.tensor is not None:
            raise TypeError(f"{what} of a traced Variable: inside tg.jit / tg.jvp values are "
                            "not known until the whole function runs")
        return self.value

    def numpy(self) -> np.ndarray:
        return self._concrete("numpy()")

    def __array__(self, dtype=None, copy=None):
        value = self._concrete("np.asarray")
        return value if dtype is None else value.astype(dtype)

    def __float__(self) -> float:
        return float(self._concrete("float()"))

    def __int__(self) -> int:
        return int(self._concrete("int()"))

    def __bool__(self) -> bool:
        return bool(self._concrete("bool()"))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Variable")
        return self.shape[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape) if self.tensor is not None else self.value.shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self) -> str:
        if self.tensor is not None:
            return f"<tg.Variable {self.name} traced {self.shape} {self.dtype}>"
        return f"<tg.Variable {self.name} shape={self.shape} dtype={self.dtype}\n{self.value}>"

    # -- in-place updates (optimizers; outside any tape) ----------------------------------
    def assign(self, value) -> Variable:
        new = _as_array(value, self.value.dtype)
        if new.shape != self.value.shape:
            raise ValueError(f"assign: {self.name} has shape {self.value.shape}, got {new.shape}")
        self.value = new
        return self

    def assign_add(self, delta) -> Variable:
        return self.assign(self.value + _as_array(delta, self.value.dtype))

    def assign_sub(self, delta) -> Variable:
        return self.assign(self.value - _as_array(delta, self.value.dtype))

    # -- operators ------------------------------------------------------------------------
    def _binary(self, op, other, reverse=False):
        other = operand(other, self)
        a, b = (other, self) if reverse else (self, other)
        if op == "div" and not a.dtype.startswith("float") and not b.dtype.startswith("float"):
            a, b = a.astype("float64"), b.astype("float64")  # NumPy: int / int is float64
        fn = ELEMENTWISE[op]
        if (not TRACERS and type(a) is Variable and type(b) is Variable
                and a.value is not None and b.value is not None):  # ``apply``'s quick key
            graph = quick_lookup((fn, a.value.shape, a._dtype, b.value.shape, b._dtype))
            if graph is not None:
                return ran(graph, [a, b])
        return apply(fn, a, b)

    def __add__(self, o):
        return self._binary("add", o)

    def __radd__(self, o):
        return self._binary("add", o, True)

    def __sub__(self, o):
        return self._binary("sub", o)

    def __rsub__(self, o):
        return self._binary("sub", o, True)

    def __mul__(self, o):
        return self._binary("mul", o)

    def __rmul__(self, o):
        return self._binary("mul", o, True)

    def __truediv__(self, o):
        return self._binary("div", o)

    def __rtruediv__(self, o):
        return self._binary("div", o, True)

    def __pow__(self, o):
        return self._binary("pow", o)

    def __rpow__(self, o):
        return self._binary("pow", o, True)

    def __lt__(self, o):
        return self._binary("lt", o)

    def __le__(self, o):
        return self._binary("le", o)

    def __gt__(self, o):
        return self._binary("lt", o, True)

    def __ge__(self, o):
        return self._binary("le", o, True)

    def __eq__(self, o):  # NumPy's elementwise ==, so Variables are not hashable by value
        return self._binary("eq", o)

    def __ne__(self, o):
        return self._binary("ne", o)

    __hash__ = object.__hash__

    def __neg__(self):
        return apply(operator.neg, self)

    def __pos__(self):
        return self

    def __matmul__(self, o):
        return nn.matmul(self, operand(o, self))

    def __rmatmul__(self, o):
        return nn.matmul(operand(o, self), self)

    def __getitem__(self, key):
        key, arrays = canonical_key(key, self.shape, index_variable)
        return apply(getitem, self, *arrays, key=key)

    # -- NumPy-style methods --------------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return nn.sum(self, dim=_dims(axis), keepdim=keepdims)

    def mean(self, axis=None, keepdims=False):
        return nn.mean(self, dim=_dims(axis), keepdim=keepdims)

    def max(self, axis=None, keepdims=False):
        return nn.amax(self, dim=_dims(axis) if axis is not None else (), keepdim=keepdims)

    def min(self, axis=None, keepdims=False):
        return nn.amin(self, dim=_dims(axis) if axis is not None else (), keepdim=keepdims)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        return nn.reshape(self, tuple(shape))

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], tuple | list) else axes
        return nn.permute(self, tuple(axes) if axes else tuple(reversed(range(self.ndim))))

    @property
    def T(self):  # noqa: N802  (NumPy's name)
        return self.transpose()

    def astype(self, dtype):
        return apply(astype, self, dtype=str(np.dtype(dtype)))


def _dims(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def operand(value, like: Variable) -> Variable:
    """A Variable for the other side of an operator: Python numbers and arrays take
    ``like``'s dtype where they are float-compatible (0-d inputs, one kernel for any
    value)."""
    if isinstance(value, Variable):
        return value
    kind = type(value)
    if (kind is float or kind is int) and like._dtype.startswith("float"):  # ``x * 0.5``
        return Variable._result(np.array(value, dtype=like._dtype), dtype=like._dtype)
    array = np.asarray(value)
    if array.dtype.kind in "fiub" and like.dtype.startswith("float") and array.dtype.kind != "b":
        if not isinstance(value, np.ndarray) or array.dtype.kind != "f":
            array = array.astype(like.dtype)
    return Variable(array, trainable=False)


def _elementwise(op):
    def fn(a, b):
        return elementwise(op, a, b)
    fn.__name__ = f"elementwise_{op}"
    return fn


ELEMENTWISE = {op: _elementwise(op) for op in
               ("add", "sub", "mul", "div", "pow", "lt", "le", "eq", "ne")}


def index_variable(key, size: int) -> Variable | None:
    """An integer array in an index key (a list, an array or a Variable) as a Variable;
    None for any other item. A concrete array's negative entries count from the end
    (``size``), as in NumPy."""
    if isinstance(key, Variable):
        return key
    if not isinstance(key, (list, np.ndarray)):
        return None
    raw = np.asarray(key)
    raw = np.where(raw < 0, raw + size, raw) if raw.dtype.kind == "i" else raw
    return Variable(raw, trainable=False)


# -- running one operation (see the module docstring) --------------------------------------


TRACERS: list[Tracer] = []
# the tapes recording, innermost last (``tape.GradientTape`` enters and leaves itself)
TAPES: list = []


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
    key, leaves = quick_key(fn, args, kwargs)
    graph = quick_lookup(key) if key is not None else None
    if graph is not None:  # Variables of the key's shapes and dtypes: no checks again
        return ran(graph, leaves)
    leaves, spec_args, spec_kwargs = split_leaves(args, kwargs, is_variable)
    if TRACERS and any(v.symbolic for v in leaves):
        return _symbolic(fn, args, kwargs)
    graph = trace(fn, spec_args, spec_kwargs)
    if key is not None:
        quick_store(key, graph)
    outs = run(graph, leaves)
    return outs[0] if graph.single else tuple(outs)


PLAIN = frozenset((int, float, bool, str, type(None)))  # static values a quick key holds
_KEYWORDS = object()  # where the keyword arguments start in a quick key


def quick_key(fn, args: tuple, kwargs: dict) -> tuple[tuple | None, list]:
    """``(key, Variables)`` of a call whose arguments are concrete Variables and plain
    static values (numbers, strings, None, tuples of ints): each Variable as its shape and
    dtype, each value as its type and itself (``1``, ``1.0`` and ``True`` are three
    templates, as ``freeze`` keeps them); the Variables in ``split_leaves``' order.
    ``(None, [])`` for any other call, and while a whole function is traced."""
    if TRACERS:
        return None, []
    key: list = [fn]
    leaves: list = []
    items = args
    if kwargs:
        items = [*args]
        for name in kwargs if len(kwargs) == 1 else sorted(kwargs):
            items.append(_KEYWORDS)
            items.append(name)
            items.append(kwargs[name])
    for a in items:
        kind = type(a)
        if kind is Variable:
            if a.value is None:
                return None, []
            leaves.append(a)
            key += (a.value.shape, a._dtype)
        elif kind in PLAIN or (kind is tuple and _exact(a)):
            key += (kind, a)
        elif a is _KEYWORDS:
            key.append(a)
        else:
            return None, []
    return tuple(key), leaves


def ran(graph: GraphFunction, leaves: list[Variable]):
    """The output(s) of ``graph`` found by a quick key for ``leaves`` (so of its inputs'
    shapes and dtype names: ``call_exact``), recorded on the active tapes. An eager op's
    whole cost on small arrays is a few microseconds, so the common case, one output and
    no tape, makes its Variable here."""
    direct = graph._direct  # (call_exact's runner, once the first call has made it)
    values = (direct or graph.call_exact)([v.value for v in leaves])
    if TAPES or not graph.single:
        outs = recorded(graph, leaves, values)
        return outs[0] if graph.single else tuple(outs)
    v = _new(Variable)
    v.value, v._dtype, v._number = values[0], graph.out_dtype, next(_NAMES)
    v.tensor, v.trainable, v._name = None, False, None
    return v


_new = object.__new__


def _exact(items: tuple) -> bool:
    """Whether a tuple is a quick key's static value: ints and strings, nested (an index
    key, ``indexing.canonical_key``). Not floats or bools: ``(1,) == (1.0,) == (True,)``,
    which ``freeze`` keeps apart."""
    for n in items:
        kind = type(n)
        if kind is not int and kind is not str and not (kind is tuple and _exact(n)):
            return False
    return True


def run(graph: GraphFunction, inputs: Sequence[Variable], keep: bool = False
        ) -> list[Variable]:
    """Run a traced graph on Variables and record it on the active tapes. ``keep`` (a
    whole ``tg.jit`` graph): where one tape records it and differentiates some of its
    inputs, run the forward that keeps what their VJP reads (``GraphFunction.split_vjp``),
    so that the tape's backward runs no part of the forward again."""
    if keep and len(TAPES) == 1:
        tape = TAPES[0]
        wrt = tape.differentiated(graph, inputs)
        if wrt:
            split = graph.split_vjp(wrt)
            results, saved = split.forward(graph.feed([v.numpy() for v in inputs]))
            return recorded(graph, inputs, graph.checked(results), kept=(wrt, split, saved))
    return recorded(graph, inputs, graph(*[v.numpy() for v in inputs]))


def recorded(graph: GraphFunction, inputs: Sequence[Variable], values,
             kept: tuple | None = None) -> list[Variable]:
    """The output Variables of ``graph`` run on ``inputs`` (``values``: its arrays), the
    operation recorded on every active tape (``kept``: see ``tape.Record``)."""
    outs = [Variable._result(a, dtype=y.dtype) for a, y in zip(values, graph.outputs,
                                                                strict=True)]
    for tape in TAPES:
        tape._record(graph, list(inputs), outs, kept)
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
