"""Where the cuda target runs, and the arrays it runs on.

``torch`` holds the device memory and the stream, ``triton`` compiles the kernels; both come
with the ``[cuda]`` extra and are imported here only, when a cuda program is made. The
device is the current CUDA device; with ``TRITON_INTERPRET=1`` (set before triton is
imported) it is the CPU, and the same kernel source runs in Triton's interpreter: how CI
proves the target without a GPU.

A program takes torch tensors of its device (returned as torch tensors on it, no copies) or
NumPy arrays (copied to the device and back).
"""

from __future__ import annotations

import os
import sys
from functools import cache

import numpy as np

from ..target import TargetUnavailable

TORCH_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def interpreting() -> bool:
    """Whether kernels run in Triton's interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@cache
def _missing() -> str | None:
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as error:
        return (f"target 'cuda' needs torch and triton (pip install 'tegrad[cuda]'): "
                f"{error}")
    return None


# the NVIDIA driver's device node on Linux, and the GPU paravirtualization node of WSL 2
DRIVER_NODES = ("/dev/nvidiactl", "/dev/dxg")


def driver_present() -> bool:
    """Whether an NVIDIA driver's device node is here (``tests/conftest.py`` asks it too,
    to run the cuda tests in Triton's interpreter where there is none)."""
    return any(os.path.exists(node) for node in DRIVER_NODES)


def may_have_gpu() -> bool:
    """Whether this machine may have an NVIDIA GPU, asked without importing torch (2-3 s):
    on Linux, whether a driver's device node is there; elsewhere, or once torch is
    loaded, torch is asked (True here)."""
    if _loaded_torch() is not None or not sys.platform.startswith("linux"):
        return True
    return driver_present()


def unavailable() -> TargetUnavailable | None:
    """None where cuda programs can run here: torch and triton installed, and a GPU or
    the interpreter."""
    missing = _missing()
    if missing is not None:
        return TargetUnavailable(missing)
    if interpreting():
        return None
    import torch

    if not torch.cuda.is_available():
        return TargetUnavailable("target 'cuda' needs an NVIDIA GPU (torch.cuda.is_available() "
                                 "is False; TRITON_INTERPRET=1 runs it on the CPU)")
    return None


def device():
    """The torch device kernels run on: the current CUDA device, or the CPU under the
    interpreter."""
    import torch

    return torch.device("cpu") if interpreting() else torch.device("cuda",
                                                                  torch.cuda.current_device())


@cache
def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def is_tensor(a) -> bool:
    """Whether ``a`` is a torch tensor (without importing torch where it is not loaded)."""
    torch = _loaded_torch()
    return torch is not None and isinstance(a, torch.Tensor)


def _loaded_torch():
    return sys.modules.get("torch")


def to_device(a, where, dtype: str):
    """``a`` (a torch tensor or anything NumPy takes) as a contiguous tensor of ``dtype``
    on ``where``; a tensor already there as it is when contiguous."""
    import torch

    if isinstance(a, torch.Tensor):
        if a.device != where:
            a = a.to(where)
        if a.dtype != torch_dtype(dtype):
            a = a.to(torch_dtype(dtype))
        return a if a.is_contiguous() else a.contiguous()
    array = np.ascontiguousarray(a, dtype=dtype)
    return torch.from_numpy(array).to(where)


def to_numpy(t) -> np.ndarray:
    """A tensor's values as a NumPy array: a copy off the GPU, and a copy on the CPU too
    (a program's output may be one of its input tensors, made from the caller's array)."""
    return t.detach().cpu().numpy().copy() if t.device.type == "cpu" else t.detach().cpu().numpy()
