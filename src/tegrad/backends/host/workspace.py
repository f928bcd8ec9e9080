"""Scratch buffers of the host contraction engine, reused from call to call, per thread."""

from __future__ import annotations

import math
import threading

import numpy as np


class _Workspace(threading.local):
    """Scratch buffers reused from call to call (per thread), one per role, grown to the
    largest request: fresh multi-megabyte arrays cost a page fault per 4 KiB."""

    def __init__(self):
        self.buffers: dict = {}

    def get(self, role, shape, dtype, slack: int = 0) -> np.ndarray:
        """A C-contiguous array; ``slack`` zeroed elements follow it in memory."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        total = nbytes + slack * dtype.itemsize
        buf = self.buffers.get(role)
        if buf is None or buf.nbytes < total:
            buf = np.empty(max(total, 1), dtype=np.uint8)
            self.buffers[role] = buf
        if slack:
            buf[nbytes:total] = 0
        return buf[:nbytes].view(dtype).reshape(shape)


WORKSPACE = _Workspace()


def workspace_buffers() -> list[np.ndarray]:
    """This thread's scratch buffers (the roots the roles' arrays are views of)."""
    return list(WORKSPACE.buffers.values())


def release_workspace(root: np.ndarray) -> None:
    """Hand this thread's scratch buffer ``root`` over to the caller: its role gets a new
    buffer on its next use (a recorded contraction keeps the bytes its calls wrote)."""
    for role, buf in list(WORKSPACE.buffers.items()):
        if buf is root:
            del WORKSPACE.buffers[role]
