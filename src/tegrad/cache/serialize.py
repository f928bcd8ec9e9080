"""Tensor programs as bytes: a structural key, and a store that loads into another process.

Nodes are interned and compared by identity, so they cannot be pickled as they are. A
node's identity is its fields, except for the ``uid`` that keeps two variables (or two
placeholders) apart. Here every IR object is written as its fields and rebuilt through
its constructor, so the interning holds. Uids are handled as follows:

- ``dump(objects)`` (a key) writes no uids. Two uses of one variable are one object in the
  stream (pickle's memo), two variables are two. The bytes therefore describe the graph up
  to renaming, and equal graphs give equal bytes.
- ``dump(objects, anchors, store=True)`` writes each uid as its rank among the uids it
  writes. ``load`` gives the new objects fresh uids in the same order, after every uid of
  this process. Passes that order variables by uid (``lower/contraction.py``) then
  decide as they did.

**Anchors** are objects that the loading process already has. ``key(objects)`` returns the
IR objects it wrote, in the order written. For a second graph of equal key, that list
holds its corresponding objects, so a result stored against one graph's anchors loads
against the other's. A gradient stored as "the tangent of forward tensor #12" comes back
reading the caller's tensor #12.

**Side tables.** ``scan.py`` keeps facts about tensors in weak tables (``REGISTRIES``).
The entries of every object written go into the stream after the objects, and ``load``
puts them back.

A scan op is written with its step graph made (``op.step()``), so a stored plan finds the
same step placeholders as its anchors. Anything else (plans, kernels' texts) pickles
as usual. Something that cannot be pickled, such as a custom reducer whose identity is a
lambda, raises ``Unstorable``.
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle

from ..ir.expr import (
    ARGMAX,
    ARGMIN,
    MAX,
    MIN,
    PROD,
    SUM,
    Binary,
    Cast,
    Combiner,
    Const,
    Expr,
    Op,
    Read,
    Reduce,
    Select,
    Unary,
    Var,
    fresh_uid,
)
from ..ir.scan import STATE_OF, STEP_VALUES, ScanOp, StepGraph
from ..ir.tensor import Compute, Placeholder, ScanOutput, Tensor
from ..ir.traverse import topo_tensors
from ..ir.verify import LAG_READS

REGISTRIES = (LAG_READS, STATE_OF, STEP_VALUES)
_BUILTIN = {c.kind: c for c in (SUM, PROD, MAX, MIN, ARGMAX, ARGMIN)}
_BY_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls) if f.name != "memo")
              for cls in (Const, Read, Unary, Binary, Select, Cast, Reduce, Compute)}
_PROTOCOL = pickle.HIGHEST_PROTOCOL
# what pickle raises on something it cannot write, or a graph still too deep for it
_CANNOT_PICKLE = (pickle.PicklingError, TypeError, AttributeError, RecursionError)


class Unstorable(Exception):
    """The objects hold something pickle cannot write (a lambda, an open file...)."""


# Names the stream refers to; a Reader binds each to its own method (find_class).
def _var(*args):  # pragma: no cover - resolved by Reader.find_class
    raise RuntimeError("only a Reader builds stored objects")


def _placeholder(*args):  # pragma: no cover - resolved by Reader.find_class
    raise RuntimeError("only a Reader builds stored objects")


def _scan_output(*args):  # pragma: no cover - resolved by Reader.find_class
    raise RuntimeError("only a Reader builds stored objects")


def _anchor(*args):  # pragma: no cover - resolved by Reader.find_class
    raise RuntimeError("only a Reader builds stored objects")


_BOUND = ("_var", "_placeholder", "_scan_output", "_anchor")


class _Writer(pickle.Pickler):
    def __init__(self, file, anchors: list, ranks: dict | None):
        super().__init__(file, protocol=_PROTOCOL)
        self.anchor_at = {id(x): n for n, x in enumerate(anchors)}
        self.ranks = ranks  # uid -> rank (store), or None (key: no uids)
        self.written: list = []  # the IR objects written, in order
        self.seen: dict = {}  # see ``same``

    def rank(self, uid: int):
        return None if self.ranks is None else self.ranks.setdefault(uid, len(self.ranks))

    def same(self, value):
        """One object for equal strings and flat tuples. Pickle writes an object seen
        before as a reference to it, so without this the bytes would depend on whether
        two equal names are one object or two. Tuples holding floats (``0.0 == -0.0``),
        bools (``True == 1``) or tuples are left as they are. An ``Op`` is written as its
        name (the node built from it holds the ``Op`` again)."""
        if isinstance(value, Op):
            value = value.value
        if type(value) is str or (type(value) is tuple and not any(
                type(x) in (float, bool, tuple) for x in value)):
            try:
                return self.seen.setdefault(value, value)
            except TypeError:  # unhashable inside
                return value
        return value

    def reducer_override(self, obj):
        cls = type(obj)
        if cls not in _IR_TYPES:
            return NotImplemented
        at = self.anchor_at.get(id(obj))
        if at is not None:
            return _anchor, (at,)
        self.written.append(obj)
        if cls is Var:
            args = (obj.name, self.rank(obj.uid), obj.dtype, obj.lo, obj.extent)
            return _var, tuple(map(self.same, args))
        if cls is Placeholder:
            args = (obj.shape, obj.dtype, obj.name, self.rank(obj.uid))
            return _placeholder, tuple(map(self.same, args))
        if cls is ScanOutput:
            args = (obj.op, obj.index, obj.shape, obj.dtype, obj.name, self.rank(obj.uid))
            return _scan_output, tuple(map(self.same, args))
        if cls is Combiner:
            if obj.kind in _BUILTIN:
                return _builtin_combiner, (obj.kind,)
            return Combiner, (obj.kind, obj.name, obj.lhs, obj.rhs, obj.combine, obj.identity)
        if cls is ScanOp or cls is StepGraph:
            if cls is ScanOp:
                obj.step()  # written with its step graph (see the header)
            state = {k: self.same(v) for k, v in vars(obj).items()}
            return copyreg.__newobj__, (cls,), state
        return cls, tuple(self.same(getattr(obj, f)) for f in _BY_FIELDS[cls])

    def dump_all(self, objects) -> None:
        """Every tensor ``objects`` hold, inputs first, so that pickle's recursion never
        follows a chain of tensors (a ResNet's is hundreds deep), only one tensor's body.
        Then ``objects``, then the side-table entries of every IR object written, batch by
        batch (an entry's value may write more objects), ended by None."""
        self.dump(topo_tensors(_tensors_in(objects)))
        self.dump(objects)
        done = 0
        while done < len(self.written):
            batch = []
            for x in self.written[done:]:
                if isinstance(x, Tensor):
                    batch += [(n, x, table[x]) for n, table in enumerate(REGISTRIES)
                              if x in table]
            done = len(self.written)
            if batch:
                self.dump(batch)
        self.dump(None)


def _tensors_in(objects) -> list[Tensor]:
    """The tensors in ``objects``, through lists, tuples, dicts and dataclasses (not sets:
    their order is not the structure's), in a fixed order."""
    found, seen, stack = [], set(), [objects]
    while stack:
        x = stack.pop()
        if isinstance(x, Tensor):
            found.append(x)
        elif isinstance(x, Expr) or id(x) in seen:
            continue
        elif isinstance(x, list | tuple):
            seen.add(id(x))
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            seen.add(id(x))
            for k, v in reversed(x.items()):
                stack += [v, k]
        elif dataclasses.is_dataclass(x) and hasattr(x, "__dict__"):  # (not a combiner)
            seen.add(id(x))
            stack.extend(reversed(vars(x).values()))
    return found


_IR_TYPES = frozenset({Var, Placeholder, ScanOutput, Combiner, ScanOp, StepGraph,
                       *_BY_FIELDS})


def _builtin_combiner(kind: str) -> Combiner:
    return _BUILTIN[kind]


def key(objects) -> tuple[bytes, list]:
    """``(bytes, anchors)``: the structure of ``objects`` (equal for graphs equal up to
    uids) and the IR objects it holds, in the order written."""
    out = io.BytesIO()
    writer = _Writer(out, [], None)
    try:
        writer.dump_all(objects)
    except _CANNOT_PICKLE as error:
        raise Unstorable(str(error)) from error
    return out.getvalue(), writer.written


def store(objects, anchors: list) -> bytes:
    """``objects`` as bytes that ``load`` rebuilds against ``anchors`` (see the header).
    The uids are ranked in a first pass, so the stream starts with their count."""
    try:
        first = _Writer(io.BytesIO(), anchors, {})
        first.dump_all(objects)
        ranks = {uid: n for n, uid in enumerate(sorted(first.ranks))}
        out = io.BytesIO()
        pickle.dump(len(ranks), out, protocol=_PROTOCOL)
        _Writer(out, anchors, ranks).dump_all(objects)
    except _CANNOT_PICKLE as error:
        raise Unstorable(str(error)) from error
    return out.getvalue()


class Reader(pickle.Unpickler):
    def __init__(self, data: bytes, anchors: list):
        self.file = io.BytesIO(data)
        super().__init__(self.file)
        self.anchors = anchors
        self.uids = [fresh_uid() for _ in range(pickle.load(self.file))]

    def find_class(self, module: str, name: str):
        if module == __name__ and name in _BOUND:
            return getattr(self, name)
        return super().find_class(module, name)

    def _var(self, name, rank, dtype, lo, extent) -> Var:
        return Var(name, self.uids[rank], dtype, lo, extent)

    def _placeholder(self, shape, dtype, name, rank) -> Placeholder:
        return Placeholder(shape, dtype, name, self.uids[rank])

    def _scan_output(self, op, index, shape, dtype, name, rank) -> ScanOutput:
        return ScanOutput(op, index, shape, dtype, name, self.uids[rank])

    def _anchor(self, at: int):
        return self.anchors[at]

    def load_all(self):
        self.load()  # the tensors first (see dump_all)
        objects = self.load()
        while (batch := self.load()) is not None:
            for n, x, value in batch:
                REGISTRIES[n][x] = value
        return objects


def load(data: bytes, anchors: list):
    """What ``store(objects, anchors')`` wrote, rebuilt against ``anchors`` (the objects
    of a graph whose ``key`` equals that of the one ``anchors'`` came from)."""
    return Reader(data, anchors).load_all()
