"""Compiling generated C with gcc, and the on-disk cache of shared libraries.

One translation unit per program: every general kernel of its plan (scan steps included)
is a function of one shared library, so a program costs one compiler run. The library is
stored under ``$TEGRAD_CACHE_DIR`` (default ``~/.cache/tegrad``) as ``cpu/<key>.so``, where
``key`` hashes the source (which spells out the structure, shapes and dtypes), the flags,
the compiler's version and the processor (the code is built for it: ``-march=native``).
A new process that builds the same program loads the library instead of compiling it.
Writes are atomic (a temporary file renamed into place), so concurrent processes agree.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from .errors import CompileError, CompilerMissing

FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
         "-fPIC", "-shared", "-std=gnu11", "-w")
LIBS = ("-lmvec", "-lm")


@cache
def compiler() -> str | None:
    """The C compiler's path (``$CC``, default gcc), or None when there is none."""
    return shutil.which(os.environ.get("CC", "gcc"))


@cache
def _toolchain_id() -> str:
    cc = compiler()
    if cc is None:
        raise CompilerMissing("no C compiler found (set CC or install gcc)")
    version = subprocess.run([cc, "-dumpfullversion", "-dumpversion"], capture_output=True,
                             text=True, check=False).stdout.strip()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = "".join(line for line in f if line.startswith(("model name", "flags")))[:4096]
    except OSError:
        pass
    return f"{cc} {version} {' '.join(FLAGS)} {' '.join(LIBS)} {cpu}"


def cache_dir() -> Path:
    root = os.environ.get("TEGRAD_CACHE_DIR") or Path.home() / ".cache" / "tegrad"
    return Path(root) / "cpu"


_LOADED: dict[str, ctypes.CDLL] = {}


def load(source: str) -> ctypes.CDLL:
    """The shared library of ``source``: from this process, the disk cache, or gcc."""
    key = hashlib.sha256((_toolchain_id() + "\n" + source).encode()).hexdigest()[:32]
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    folder = cache_dir()
    path = folder / f"{key}.so"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _compile(source, path)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as error:  # built, but the loader refuses it (a library missing here)
        raise CompileError(f"cannot load the compiled kernels {path}: {error}") from error
    _LOADED[key] = lib
    return lib


def bind(lib: ctypes.CDLL, name: str, argtypes: list):
    """The function ``name`` of ``lib``, returning nothing, called with ``argtypes``."""
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = None
    return fn


def _compile(source: str, path: Path) -> None:
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        c_file = Path(tmp) / "kernels.c"
        c_file.write_text(source)
        out = Path(tmp) / "kernels.so"
        done = subprocess.run([compiler(), *FLAGS, str(c_file), "-o", str(out), *LIBS],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            kept = path.with_suffix(".failed.c")
            kept.write_text(source)
            raise CompileError(f"gcc failed on the generated kernels (source kept at {kept}):"
                               f"\n{done.stderr[-4000:]}")
        os.replace(out, path)
