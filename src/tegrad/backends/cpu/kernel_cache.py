"""Compiled kernels found by their structure: each distinct kernel is compiled once, for
every program it is part of.

A general kernel's C is one function, ``void <name>(void **args, long *err, int
nthreads) {...}``, whose body never mentions its name (``backends/c/render.py``). Two
kernels whose texts are equal up to their names compute the same function of their
arguments: the sixteen bottleneck blocks of a ResNet-50 give 371 kernels and 101 distinct
texts. Each distinct text is compiled once, as the function ``tg_<key>``, where

    key = sha256(toolchain, prelude, the text with its name taken out)

(``compiler.load_key``: the compiler's version, its flags with ``GENERATED_FLAGS`` and the
processor, as they do for a library). A program's kernels bind to these functions by key.

On disk (``cpu/`` of the cache root) a function lives in a library compiled with the
others that were new at the same time, ``<library key>.so``, and beside it an index
entry per kernel, ``<key>.kernel``, that names its library. A program looks up each of
its keys: in this process, then in the index; the kernels found nowhere (or whose library
cannot be loaded: warned once and compiled again, ``compiler.py``) are dealt into
translation units of at least ``UNIT_CHARS`` characters each, at most one per core,
compiled at once, one library each, and their index entries written. So a second program
sharing kernels with a first compiles only its new ones; a program seen before compiles
none. An index entry is written under a temporary name and renamed into place after its
library is, so a reader finds a whole entry naming a whole library, or none; an entry
that does not name a library holding its function (a file cut short) is compiled again,
with a ``CacheWarning``.
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...cache.location import KERNELS, cache_root, writable_cache_root
from ...errors import CacheWarning
from ..c.c_ops import PRELUDE
from . import compiler

# A translation unit of fewer characters than this is not split further: a gcc run costs
# about 50 ms before it reads a kernel (the prelude's headers, the link), as much as
# compiling ~2500 characters of kernels, so two small kernels compile faster in one run.
UNIT_CHARS = 8000
_ENTRY = re.compile(r"[0-9a-f]{32}")

# What ``functions`` did in this process: "kernels asked" (distinct keys, per call),
# "kernels compiled", "libraries compiled"
STATS: Counter = Counter()
_WHERE: dict[str, str] = {}  # kernel key -> the key of the library holding its function


def kernel_key(text: str, name: str) -> tuple[str, str]:
    """``(key, source)``: the key of the kernel ``name`` whose C is ``text``, and its C
    as the function ``tg_<key>``; the lines of ``#`` before it (a header only it needs,
    ``render.CDialect.render``) kept before it."""
    head = f"void {name}("
    at = text.find(head)
    before = text[:at]
    if at < 0 or any(line and not line.startswith("#") for line in before.split("\n")):
        raise ValueError(f"kernel {name}: its C does not begin with {head!r}")
    body = text[at + len(head):]
    key = _unit_key(PRELUDE + "\n\n" + before + "void tg_(" + body)
    return key, before + f"void tg_{key}(" + body


def functions(kernels: dict[str, str], jobs: int) -> dict[str, object]:
    """Key -> the loaded library holding ``tg_<key>``, for ``kernels`` (key -> source, as
    ``kernel_key`` gives), compiling those compiled nowhere yet (module header) in at
    most ``jobs`` concurrent compiler runs."""
    STATS["kernels asked"] += len(kernels)
    found, missing = {}, []
    for key in kernels:
        lib = _known(key)
        if lib is None:
            missing.append(key)
        else:
            found[key] = lib
    if missing:
        found.update(_compile(missing, kernels, jobs))
    return found


def _known(key: str):
    """The loaded library holding ``tg_<key>``, from this process or the index; None
    when there is none (or it cannot be loaded: warned, ``compiler.stored``)."""
    held = _WHERE.get(key)
    if held is not None:
        lib = compiler.loaded(held)
        if lib is not None:
            return lib
    path = cache_root() / KERNELS / f"{key}.kernel"
    try:
        entry = path.read_text().strip()
    except OSError:
        return None
    lib = compiler.stored(entry) if _ENTRY.fullmatch(entry) else None
    if lib is not None and hasattr(lib, f"tg_{key}"):
        _WHERE[key] = entry
        return lib
    if lib is not None or not _ENTRY.fullmatch(entry):
        warnings.warn(f"tegrad: the cached kernel index entry {path} names no library "
                      f"holding its kernel; it is compiled again and the entry replaced",
                      CacheWarning, stacklevel=4)
    return None


def _compile(keys: list[str], sources: dict[str, str], jobs: int) -> dict[str, object]:
    """Compile the kernels ``keys`` (in units, module header) and write their index
    entries; key -> library."""
    texts = [sources[k] for k in keys]
    count = max(1, min(jobs, sum(map(len, texts)) // UNIT_CHARS))
    dealt = [[keys[n] for n in members] for members in compiler.deal(texts, count)]
    units = ["\n\n".join([PRELUDE, *(sources[k] for k in members)]) for members in dealt]
    with ThreadPoolExecutor(max_workers=len(units)) as pool:
        libraries = list(pool.map(_load, units))
    STATS["kernels compiled"] += len(keys)
    STATS["libraries compiled"] += len(units)
    out = {}
    folder = writable_cache_root() / KERNELS
    for unit, lib, members in zip(units, libraries, dealt, strict=True):
        entry = _unit_key(unit)
        for key in members:
            out[key] = lib
            _WHERE[key] = entry
            _write_entry(folder, key, entry)
    return out


def _load(unit: str):
    """The library of the translation unit ``unit`` of generated kernels."""
    return compiler.load(unit, flags=compiler.GENERATED_FLAGS)


def _unit_key(unit: str) -> str:
    """The library key ``_load(unit)`` gives."""
    return compiler.load_key(unit, compiler.GENERATED_FLAGS)


def _write_entry(folder: Path, key: str, entry: str) -> None:
    """``<key>.kernel`` naming the library ``entry``, written under a temporary name
    (``.build-*``, which ``tegrad cache clear`` removes) and renamed into place."""
    temporary = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".build-", suffix=".kernel",
                                         delete=False) as f:
            temporary = f.name
            f.write(entry + "\n")
        os.replace(temporary, folder / f"{key}.kernel")
    except OSError:  # a full disk: the next process compiles the kernel again
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
