"""NumPy basic indexing for Variables, as one compute: ints, slices (any step), ``None``,
``...``, and one integer array (a gather along its axis, NumPy's placement).

``canonical_key`` turns a key into a hashable description (so the compiled template
is cached by it) and the index arrays it carries; ``getitem`` builds the compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.compute import compute
from ..ir.expr import cast
from ..ir.tensor import Tensor, unique_name


def canonical_key(key, shape: tuple[int, ...], index_variable: Callable[[object, int], Any]
                  ) -> tuple[tuple, list]:
    """``(entries, arrays)``: entries ``("i", k)``, ``("s", start, step, length)``,
    ``("n",)``, ``("a", position)``, one per output-shaping item, every input axis
    covered; ``arrays`` the integer index Variables (``("a", k)`` is ``arrays[k]``).
    ``index_variable(item, size)`` is the Variable an index-array item (a list, an array,
    a Variable) stands for, None for any other item (``variable.index_variable``)."""
    items = key if isinstance(key, tuple) else (key,)
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > len(shape):
        raise IndexError(f"too many indices for a Variable of {len(shape)} dims: {key!r}")
    entries, arrays, axis = [], [], 0
    for k in items:
        if k is Ellipsis:
            for _ in range(len(shape) - used):
                entries.append(("s", 0, 1, shape[axis]))
                axis += 1
        elif k is None:
            entries.append(("n",))
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[axis])
            entries.append(("s", start, step, len(range(start, stop, step))))
            axis += 1
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            n = shape[axis]
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            entries.append(("i", int(k) % n))
            axis += 1
        elif (index := index_variable(k, shape[axis])) is not None:
            if not index.dtype.startswith("int"):
                raise IndexError(f"index arrays must be integers, got {index.dtype} (boolean "
                                 "masks are not supported: use tg.nn.where)")
            if arrays:
                raise IndexError("only one integer index array is supported")
            entries.append(("a", len(arrays), axis))
            arrays.append(index)
            axis += 1
        else:
            raise IndexError(f"unsupported index {k!r} (ints, slices, None, ..., one int array)")
    while axis < len(shape):
        entries.append(("s", 0, 1, shape[axis]))
        axis += 1
    advanced = [k for k, e in enumerate(entries) if e[0] in ("a", "i")]
    if arrays and advanced != list(range(advanced[0], advanced[-1] + 1)):
        # NumPy: advanced indices (the array and ints) separated by a slice put the
        # array's dimensions first
        entries.insert(0, ("front",))
    return tuple(entries), arrays


def getitem(x: Tensor, *index: Tensor, key: tuple) -> Tensor:
    front = bool(key) and key[0] == ("front",)
    if front:
        key = key[1:]
    out_shape: list[int] = list(index[0].shape) if front else []
    for e in key:
        if e[0] == "s":
            out_shape.append(e[3])
        elif e[0] == "n":
            out_shape.append(1)
        elif e[0] == "a" and not front:
            out_shape.extend(index[e[1]].shape)

    def body(*o):
        at, pos = [], index[0].ndim if front else 0
        for e in key:
            if e[0] == "s":
                at.append(e[1] + e[2] * o[pos])
                pos += 1
            elif e[0] == "n":
                pos += 1
            elif e[0] == "i":
                at.append(e[1])
            elif front:
                at.append(index[e[1]][tuple(o[:index[e[1]].ndim])])
            else:
                ix = index[e[1]]
                at.append(ix[tuple(o[pos:pos + ix.ndim])])
                pos += ix.ndim
        return x[tuple(at)]

    return compute(tuple(out_shape), body, name=unique_name("getitem"))


def astype(x: Tensor, dtype: str) -> Tensor:
    return compute(x.shape, lambda *i: cast(x[i], dtype), name=unique_name("astype"))
