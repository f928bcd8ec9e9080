"""Output buffers reused from run to run: a caching allocator for one program.

A fresh multi-megabyte NumPy array costs its page faults: the kernel zeroes every page on
first touch, a cost of the order of a kernel's run on arrays that size.
PyTorch keeps freed memory in a caching allocator; a program does the same with the
arrays its general kernels write: an intermediate goes back to the pool after its last
reader, and an output goes back once the caller has dropped every reference to it
(checked with ``sys.getrefcount`` at the next run), never before. An intermediate that
something else still references at its last reader (the array of a view returned to the
caller, ``lower/views.py``) is handed over like an output: free once let go.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

_NAMES: dict = {}


def _name(dtype: np.dtype) -> str:
    """``dtype.name``, cached (NumPy builds the name on every access)."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.name
    return name


class BufferPool:
    def __init__(self, min_bytes: int = 1 << 16):
        self.min_bytes = min_bytes  # smaller arrays are cheap to make (Options.pool_min_bytes)
        self.free: dict = {}  # (shape, dtype) -> [array]
        self.lent: list = []  # outputs returned to the caller
        self.lock = threading.Lock()

    def take(self, shape: tuple, dtype: str) -> np.ndarray:
        with self.lock:
            stack = self.free.get((shape, dtype))
            if stack:
                return stack.pop()
        return np.empty(shape, dtype)

    def give(self, arrays: dict, t) -> None:
        """Drop ``arrays[t]``, keeping its buffer if nothing else holds it."""
        arr = arrays.pop(t, None)  # (a checkpointed scan history is not an array)
        if isinstance(arr, np.ndarray) and arr.nbytes >= self.min_bytes and arr.base is None:
            with self.lock:
                if sys.getrefcount(arr) == 2:  # this frame's name and the argument
                    self.free.setdefault((arr.shape, _name(arr.dtype)), []).append(arr)
                elif all(a is not arr for a in self.lent):
                    self.lent.append(arr)  # held elsewhere: free once let go (reclaim)

    def lend(self, outputs: list) -> None:
        owned = [a for a in outputs if isinstance(a, np.ndarray) and a.base is None
                 and a.nbytes >= self.min_bytes]  # (none where every output is a view)
        if not owned:
            return
        with self.lock:
            known = {id(a) for a in self.lent}
            for a in owned:  # once each: a tensor listed twice is one array
                if id(a) not in known:
                    known.add(id(a))
                    self.lent.append(a)

    def reclaim(self) -> None:
        """Outputs of earlier runs that the caller no longer holds become free."""
        if not self.lent:
            return
        with self.lock:
            kept = []
            for k in range(len(self.lent)):
                if sys.getrefcount(self.lent[k]) == 2:  # the list and this call's argument
                    a = self.lent[k]
                    self.free.setdefault((a.shape, _name(a.dtype)), []).append(a)
                else:
                    kept.append(self.lent[k])
            self.lent = kept

    def held_bytes(self) -> int:
        """Bytes the pool keeps for reuse (free buffers and outputs lent to the caller)."""
        with self.lock:
            return (sum(a.nbytes for stack in self.free.values() for a in stack)
                    + sum(a.nbytes for a in self.lent))
