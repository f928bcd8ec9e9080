"""Compiling generated C with gcc, and the on-disk cache of shared libraries.

One shared library per program: every general kernel of its plan (scan steps included) is
a function of it. Its kernels are dealt into one translation unit per core, compiled
concurrently and linked (an LSTM's forward and backward: about 2 s of gcc on one core).
The library is stored under ``$TEGRAD_CACHE_DIR`` (default ``~/.cache/tegrad``) as
``cpu/<key>.so``, where ``key`` hashes the source (which spells out the structure, shapes
and dtypes), the flags, the compiler's version and the processor (the code is built for
it: ``-march=native``). A new process that builds the same program loads the library
instead of compiling it. Writes are atomic (a temporary file renamed into place), so
concurrent processes agree.
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

from ...cache.disk import cache_root
from .errors import CompileError, CompilerMissing

# -fno-code-hoisting: gcc 12's code hoisting moves a load that the generated code makes
# unconditionally (at an index clamped into its tensor, ``nest_values.ExprLowering.select``
# in lower/) back under the select's condition, where if-conversion makes it a masked load, and gcc
# 12.2 vectorizes some of those wrongly (a padded row read as zeros: issue 27)
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
         "-fno-code-hoisting", "-fPIC", "-shared", "-std=gnu11", "-w")
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
    return cache_root() / "cpu"


_LOADED: dict[str, ctypes.CDLL] = {}


def load(source: str, units: list[str] | None = None) -> ctypes.CDLL:
    """The shared library of ``source``: from this process, the disk cache, or gcc.
    ``units``, when given, are translation units whose concatenation is ``source`` less
    their shared ``prelude`` (``_compile``)."""
    key = hashlib.sha256((_toolchain_id() + "\n" + source).encode()).hexdigest()[:32]
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    folder = cache_dir()
    path = folder / f"{key}.so"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _compile(units or [source], path, source)
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


def _compile(units: list[str], path: Path, source: str) -> None:
    """Build ``path`` from the translation units, compiled at once (one gcc per unit,
    concurrently: a program's kernels split over the cores) and linked."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = Path(tmp) / "kernels.so"
        if len(units) == 1:
            c_file = Path(tmp) / "kernels.c"
            c_file.write_text(units[0])
            runs = [[compiler(), *FLAGS, str(c_file), "-o", str(out), *LIBS]]
        else:
            objects = [Path(tmp) / f"unit{k}.o" for k in range(len(units))]
            runs = []
            for k, (unit, obj) in enumerate(zip(units, objects, strict=True)):
                c_file = Path(tmp) / f"unit{k}.c"
                c_file.write_text(unit)
                runs.append([compiler(), *FLAGS, "-c", str(c_file), "-o", str(obj)])
        started = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for cmd in runs]
        errors = [err for proc in started for _, err in [proc.communicate()] if proc.returncode]
        if not errors and len(units) > 1:
            done = subprocess.run([compiler(), *FLAGS, *map(str, objects), "-o", str(out),
                                   *LIBS], capture_output=True, text=True, check=False)
            errors = [done.stderr] if done.returncode else []
        if errors:
            kept = path.with_suffix(".failed.c")
            kept.write_text(source)
            raise CompileError(f"gcc failed on the generated kernels (source kept at {kept}):"
                               f"\n{errors[0][-4000:]}")
        os.replace(out, path)


def split_units(prelude: str, functions: list[str], count: int) -> list[str]:
    """``functions`` dealt into at most ``count`` translation units of about equal source
    length, each after ``prelude``."""
    count = max(1, min(count, len(functions)))
    bins: list[list[str]] = [[] for _ in range(count)]
    sizes = [0] * count
    for text in sorted(functions, key=len, reverse=True):
        k = sizes.index(min(sizes))
        bins[k].append(text)
        sizes[k] += len(text)
    return ["\n\n".join([prelude, *b]) for b in bins if b]
