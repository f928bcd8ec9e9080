"""A view kernel on the host: the source's array seen through the kernel's strides
(``lower/reindex.py`` says which; ``lower/views.py`` when).

``ViewOf(strides)(arrays)`` returns a NumPy view of ``arrays[source]``, never the array
object itself (a program's pool counts the references to an array before it reuses it).
The common forms cost what torch's views cost, about half a microsecond: a reshape is
``reshape``; indices that each take at most one output axis (a permutation, slices,
strides, fixed indices, new axes of extent 1) are one basic indexing, one transpose and
a reshape. Anything else (a broadcast to more than one element, a diagonal) is built
from the byte strides. A view that reads an element at two points (a broadcast) is
read-only, as NumPy's ``broadcast_to``; the others are writable where the source is.

A flat-layout view reads the source's elements in row-major order: a source array that
is not C-ordered is copied first (``np.reshape`` does so where it must).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...lower.reindex import Strides


class ViewOf:
    def __init__(self, strides: Strides):
        self.source = strides.source
        self.shape = strides.shape
        self.flat = strides.layout == "flat"
        self.coefficients = strides.coefficients
        self.offset = strides.offset
        self.writeable = not strides.overlapping
        # (all of the source: a view of its first elements, a slice reshaped, is not one)
        self.reshape = self.flat and strides.offset == (0,) and strides.coefficients == tuple(
            (math.prod(strides.shape[j + 1:]) if n > 1 else 0,)
            for j, n in enumerate(strides.shape)) and math.prod(
            strides.shape) == math.prod(strides.source.shape)
        self.basic = None if self.reshape else self._basic()
        # the byte strides and start over a C-ordered source, made once
        dims = (math.prod(self.source.shape),) if self.flat else self.source.shape
        size = np.dtype(self.source.dtype).itemsize
        row_major = [math.prod(dims[d + 1:]) * size for d in range(len(dims))]
        self.c_order = (tuple(sum(c * s for c, s in zip(row, row_major, strict=True))
                              for row in self.coefficients),
                        sum(k * s for k, s in zip(self.offset, row_major, strict=True)))

    def __call__(self, arrays: dict, pool=None) -> np.ndarray:
        a = arrays[self.source]
        if type(a) is not np.ndarray:
            a = np.asarray(a)  # (a scan history a target keeps otherwise)
        if self.reshape:
            return a.reshape(self.shape)
        if self.flat:
            a = np.ascontiguousarray(a).reshape(-1)
        if self.basic is None:
            return self._strided(a)
        index, order, shaped = self.basic
        if index is not None:
            a = a[index]
        if order is not None:
            a = a.transpose(order)
        return a.reshape(self.shape) if shaped or (index is None and order is None) else a

    def _basic(self):
        """``(index, order, shaped)`` when each output axis of extent above 1 reads at
        most one source dim and each dim is read by at most one axis: ``a[index]`` keeps
        one dim per such axis (a slice from ``k_d`` by ``c``; the other dims fixed at
        ``k_d``), ``transpose(order)`` puts them in output order, and a reshape adds the
        axes of extent 1 where ``shaped``. ``index`` None: every dim whole; ``order``
        None: in order already. None where the view is no such one."""
        dims = len(self.offset)
        taken: dict[int, int] = {}  # source dim -> output axis
        for j, row in enumerate(self.coefficients):
            used = [d for d in range(dims) if row[d]]
            if self.shape[j] == 1:
                continue
            if len(used) != 1 or used[0] in taken:
                return None
            taken[used[0]] = j
        index = []
        for d in range(dims):
            k = self.offset[d]
            if d in taken:
                j = taken[d]
                c = self.coefficients[j][d]
                index.append(slice(k, k + c * (self.shape[j] - 1) + 1, c))
            else:
                index.append(k)
        kept = sorted(taken)  # the dims left, in source order
        order = tuple(sorted(range(len(kept)), key=lambda m: taken[kept[m]]))
        extents = (math.prod(self.source.shape),) if self.flat else self.source.shape
        whole = len(kept) == dims and all(
            i == slice(0, n, 1) for i, n in zip(index, extents, strict=True))
        shaped = len(kept) != len(self.shape)  # axes of extent 1 to add
        return (None if whole else (*index, Ellipsis),
                None if order == tuple(range(len(kept))) else order, shaped)

    def _strided(self, a: np.ndarray) -> np.ndarray:
        if a.flags.c_contiguous:  # (a dim of extent 1 may have any stride: it is read at 0)
            strides, start = self.c_order
            out = np.ndarray(self.shape, a.dtype, buffer=a, offset=start, strides=strides)
        else:
            strides = tuple(sum(c * s for c, s in zip(row, a.strides, strict=True))
                            for row in self.coefficients)
            origin = a[tuple(slice(k, k + 1) for k in self.offset)]
            out = as_strided(origin, self.shape, strides, writeable=self.writeable)
        if not self.writeable:
            out.flags.writeable = False
        return out
