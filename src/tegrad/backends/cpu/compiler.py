"""Compiling generated C with gcc, and the on-disk cache of shared libraries.

``load(source)`` gives the shared library of ``source``: from this process, the disk
cache or gcc. The library is stored under ``$TEGRAD_CACHE_DIR`` (default
``~/.cache/tegrad``; a temporary directory when that cannot be written,
``cache/location.py``) as ``cpu/<key>.so``, where ``key`` (``library_key``) hashes the
source (which spells out the structure, shapes and dtypes), the flags, the compiler's
version and the processor (the code is built for it: ``-march=native``). A new process
that needs the same source loads the library instead of compiling it. A program's
kernels are found by their structure, each distinct kernel compiled once, in libraries
of the kernels new at the same time (``kernel_cache.py``); the helpers (products,
copies, a scan's step loop) are one library each.

gcc builds in a folder of its own beside the cache's files (``cpu/.build-*``); the finished
library is flushed to the disk and renamed into place, so processes building the same
library at once (DDP workers) each load a whole one, theirs or another's.

A cached library that cannot be loaded (cut short, garbage, refused by the loader) is
compiled again and the file replaced, with one ``CacheWarning`` naming it. It is checked
as ELF before it is loaded (``library_file.py``): the loader kills the process with SIGBUS
on a truncated one. The loader remembers the libraries it loaded by path, but a failed
load leaves nothing behind, so loading the replaced file by the same path gets the new one.
A library just compiled that the loader still refuses (a library missing here) is removed
and raises ``CompileError``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections import Counter
from functools import cache
from pathlib import Path

from ...cache.location import KERNELS, cache_root, writable_cache_root
from ...errors import CacheWarning
from .errors import CompileError, CompilerMissing
from .library_file import damage

# -fno-code-hoisting: gcc 12's code hoisting moves a load that the generated code makes
# unconditionally (at an index clamped into its tensor, ``nest_values.ExprLowering.select``
# in lower/) back under the select's condition, where if-conversion makes it a masked load, and gcc
# 12.2 vectorizes some of those wrongly (a padded row read as zeros: issue 27).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
         "-fno-code-hoisting", "-fPIC", "-shared", "-std=gnu11", "-w")
# GENERATED_FLAGS, for the generated kernels only (``kernel_cache``): gcc 12.2 also
# miscompiled a kernel whose inner loops it had unrolled whole on its own (a sum over 2
# values of ``rk`` where ``rk == Z[i, j]``, inside a loop over 6 columns), then vectorized
# the loop around them with masks: the last value of ``rk`` was dropped (differential seed
# 109042). Loops the generated code asks to unroll (``#pragma GCC unroll``) are still
# unrolled whole. The hand-written helpers (term_kernel, tg_copy, the step loop) keep
# gcc's own unrolling: their register tiles are loops gcc must unroll whole, and the
# differential tests do not reach them with random programs.
# ``-fno-thread-jumps``: a body whose selects test the same comparisons again (a
# gradient's ``select(x < 0, ...)`` beside ``select(!(x < 0) && !(0 < x), ...)``) was
# threaded by gcc into a branching loop body that its if-conversion cannot flatten, so
# the loop ran scalar, a mispredicted branch per point (prelu's input gradient, 7x its
# forward). The generated loop bodies are straight-line; threading only ever splits them.
GENERATED_FLAGS = ("--param", "max-completely-peeled-insns=0", "-fno-thread-jumps")
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


_LOADED: dict[str, ctypes.CDLL] = {}  # library key -> the library, loaded
_DAMAGED: set[Path] = set()  # cached libraries found unloadable here (warned once)
STATS: Counter = Counter()  # "gcc runs": compiler processes started by this process


def library_key(source: str) -> str:
    """The key of ``source``'s library: its text, the compiler, the flags, the CPU."""
    return hashlib.sha256((_toolchain_id() + "\n" + source).encode()).hexdigest()[:32]


def load_key(source: str, flags: tuple = ()) -> str:
    """The key of the library ``load(source, flags=flags)`` gives."""
    return library_key(source + "".join(f"\n{flag}" for flag in flags))


def load(source: str, units: list[str] | None = None, flags: tuple = ()) -> ctypes.CDLL:
    """The shared library of ``source``: from this process, the disk cache, or gcc.
    ``units``, when given, are translation units whose concatenation is ``source`` less
    their shared ``prelude`` (``_compile``); ``flags`` are gcc's after ``FLAGS`` (include
    folders: the key hashes them too)."""
    key = load_key(source, flags)
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    name = f"{key}.so"
    lib = stored(key)
    if lib is None:
        folder = writable_cache_root() / KERNELS
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        _compile(units or [source], path, source, flags)
        _DAMAGED.discard(cache_root() / KERNELS / name)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as error:  # built, but the loader refuses it (a library missing here)
            path.unlink(missing_ok=True)
            raise CompileError(f"cannot load the compiled kernels {path}: {error}") from error
    _LOADED[key] = lib
    return lib


def loaded(key: str) -> ctypes.CDLL | None:
    """The library of key ``key`` if this process has loaded it, else None."""
    return _LOADED.get(key)


def stored(key: str) -> ctypes.CDLL | None:
    """The library of key ``key``, loaded here or from the disk cache; None when the cache
    has none, or one that cannot be loaded (warned once: it is to be compiled again)."""
    lib = _LOADED.get(key)
    if lib is None:
        path = cache_root() / KERNELS / f"{key}.so"
        lib = None if path in _DAMAGED else _cached(path)
        if lib is not None:
            _LOADED[key] = lib
    return lib


def _cached(path: Path) -> ctypes.CDLL | None:
    """The library the disk cache holds at ``path``; None when there is none, or when it
    cannot be loaded (warned: it is compiled again and replaced)."""
    try:
        problem = damage(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        problem = str(error)
    if problem is None:
        try:
            return ctypes.CDLL(str(path))
        except OSError as error:
            problem = str(error)
    _DAMAGED.add(path)
    warnings.warn(f"tegrad: the cached kernels {path} cannot be loaded ({problem}); they "
                  f"are compiled again and the file replaced", CacheWarning, stacklevel=3)
    return None


def bind(lib: ctypes.CDLL, name: str, argtypes: list):
    """The function ``name`` of ``lib``, returning nothing, called with ``argtypes``."""
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = None
    return fn


def _compile(units: list[str], path: Path, source: str, flags: tuple = ()) -> None:
    """Build ``path`` from the translation units, compiled at once (one gcc per unit,
    concurrently: a program's kernels split over the cores) and linked."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        out = Path(tmp) / "kernels.so"
        if len(units) == 1:
            c_file = Path(tmp) / "kernels.c"
            c_file.write_text(units[0])
            runs = [[compiler(), *FLAGS, *flags, str(c_file), "-o", str(out), *LIBS]]
        else:
            objects = [Path(tmp) / f"unit{k}.o" for k in range(len(units))]
            runs = []
            for k, (unit, obj) in enumerate(zip(units, objects, strict=True)):
                c_file = Path(tmp) / f"unit{k}.c"
                c_file.write_text(unit)
                runs.append([compiler(), *FLAGS, *flags, "-c", str(c_file), "-o", str(obj)])
        STATS["gcc runs"] += len(runs) + (len(units) > 1)
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
        with open(out, "rb") as built:
            os.fsync(built.fileno())
        os.replace(out, path)


def split_units(prelude: str, functions: list[str], count: int) -> list[str]:
    """``functions`` dealt into at most ``count`` translation units of about equal source
    length, each after ``prelude``."""
    return ["\n\n".join([prelude, *(functions[n] for n in members)])
            for members in deal(functions, count)]


def deal(functions: list[str], count: int) -> list[list[int]]:
    """The positions of ``functions`` dealt into at most ``count`` groups of about equal
    length: longest first, each to the group shortest so far."""
    count = max(1, min(count, len(functions)))
    bins: list[list[int]] = [[] for _ in range(count)]
    sizes = [0] * count
    for n in sorted(range(len(functions)), key=lambda n: len(functions[n]), reverse=True):
        k = sizes.index(min(sizes))
        bins[k].append(n)
        sizes[k] += len(functions[n])
    return [b for b in bins if b]
