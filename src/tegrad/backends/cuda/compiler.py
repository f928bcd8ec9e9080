"""Kernel modules on disk, loaded once; and compiling them for a GPU this machine lacks.

Triton reads a kernel's source with ``inspect``, so each generated module is written to
``$TEGRAD_CACHE_DIR/cuda/<sha256 of its text>.py`` (a temporary name, fsynced, renamed:
concurrent processes never see half a file) and imported from there; equal texts are one
module per process. The text spells everything a kernel depends on (shapes, dtypes, index
width, the helpers of ``tl_math``), so the hash is its key; the compiled binaries are
Triton's own cache (``TRITON_CACHE_DIR``), keyed by that source, the Triton version, the
argument specialization and the GPU architecture.

``compile_for(text, target)`` compiles a kernel for a ``GPUTarget`` (by default sm_90, the
H200) without a GPU: what CI uses to catch what the interpreter accepts and the compiler
refuses (``tl.dot`` shapes, loop-carried dtype changes).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

from ...cache.location import writable_cache_root
from .codegen import KernelText

_MODULES: dict[str, object] = {}
_LOCK = threading.Lock()


def kernel_function(kernel: KernelText):
    """The ``@triton.jit`` function of ``kernel``'s module (written and imported once)."""
    key = hashlib.sha256(kernel.text.encode()).hexdigest()[:32]
    module = _MODULES.get(key)
    if module is None:
        with _LOCK:
            module = _MODULES.get(key)
            if module is None:
                module = _MODULES[key] = _load(key, kernel.text)
    return getattr(module, kernel.name)


def _load(key: str, text: str):
    folder = writable_cache_root() / "cuda"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.py"
    if not path.exists() or path.read_text() != text:
        fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    name = f"tegrad_cuda_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (Triton looks functions' globals up through it)
    spec.loader.exec_module(module)
    return module


def compile_for(kernel: KernelText, arch: int = 90):
    """``kernel`` compiled for ``sm_<arch>`` (Triton's ``CompiledKernel``: ``asm["ptx"]``,
    ``asm["cubin"]``) with the block sizes and warps of its launch on a GPU
    (``launch.launch_blocks``), without a GPU. Needs ``TRITON_INTERPRET`` unset in the
    process (the compiler takes a jit function, not an interpreted one)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .launch import launch_blocks

    blocks = launch_blocks(kernel, interpreted=False)
    source = ASTSource(fn=kernel_function(kernel), signature=kernel.signature(),
                       constexprs={"XBLOCK": blocks.x, "RBLOCK": blocks.r, "CBLOCK": blocks.c})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": blocks.warps})
