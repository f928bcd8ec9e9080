"""Generated programs kept on disk: a new process reloads them instead of generating again.

``remembered(kind, objects, make)`` returns ``make()`` and stores it. A later call, in
this process or another, whose ``objects`` have the same structure (``serialize.key``)
loads the stored result against its own objects instead of calling ``make``. ``tg.gradient``
stores its gradients keyed by the output, the inputs and the head. ``tg.build`` on the cpu
target stores its kernels' plan and C text keyed by the program and its ``tg.Options``
(``salt``), so a program made under one setting is never loaded under another. A warm
process therefore neither differentiates nor plans again.

Files live under ``$TEGRAD_CACHE_DIR`` (default ``~/.cache/tegrad``; a temporary directory
when that cannot be written, ``location.py``) as ``graphs/<kind>-<hash>.pkl``. The hash
covers the key's bytes, tegrad's own source files (their sizes and times of change) and the
Python version, so a changed tegrad never reads an old entry. Writes are atomic and
durable: the data goes to a temporary file beside the entry, is flushed to the disk and
renamed into place, so a process reading at the same time as another writes (DDP workers
building the same program) sees the whole old entry, the whole new one, or none.

An entry that cannot be loaded (truncated, garbage, pickled by another tegrad) is made
again and overwritten, with one ``CacheWarning`` naming the file; when the remade result is
not stored (below), the damaged file is removed, so the next call does not warn again.

The following are not stored; they are made as before:
- a result whose ``make`` warned (a load would not warn again), but for a ``CacheWarning``
  (about the cache, not the result);
- objects that cannot be pickled (``serialize.Unstorable``: a custom reducer's identity
  given as a lambda).

``TEGRAD_GRAPH_CACHE=0`` turns the cache off. The test suite does so, except in the tests
of this cache, because tests that patch generation must see their patch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

from ..errors import CacheWarning
from ..options import graph_cache_enabled
from . import serialize
from .location import GRAPHS, cache_root, writable_cache_root

# What ``remembered`` did in this process, by kind: "<kind> loaded", "<kind> made" and
# "<kind> stored" (a made result that was written).
STATS: Counter = Counter()


def enabled() -> bool:
    return graph_cache_enabled()


@cache
def _source_hash() -> str:
    """The interpreter's version and each of tegrad's source files (path, size, time of its
    last change): what generation depends on. Stat, not read: cheaper, once per process."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(sys.version.encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)} {stat.st_size} {stat.st_mtime_ns}\n"
                      .encode())
    return digest.hexdigest()


def entry_name(kind: str, key_bytes: bytes) -> str:
    digest = hashlib.sha256(_source_hash().encode() + kind.encode() + key_bytes)
    return f"{kind}-{digest.hexdigest()[:32]}.pkl"


def remembered(kind: str, objects, make: Callable[[], object], salt: bytes = b""):
    """``make()``, or the result a call with equally structured ``objects`` (and the same
    ``salt``: a build's ``Options.cache_key()``) stored."""
    if not enabled():
        return make()
    try:
        key_bytes, anchors = serialize.key(objects)
    except serialize.Unstorable:
        return make()
    name = entry_name(kind, salt + key_bytes)
    path = cache_root() / GRAPHS / name
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    damaged = False
    if data is not None:
        try:
            result = serialize.load(data, anchors)
            STATS[f"{kind} loaded"] += 1
            return result
        except Exception as error:  # noqa: BLE001 - any failure to load: made again below
            damaged = True
            warnings.warn(f"tegrad: the stored {kind} program {path} cannot be loaded "
                          f"({type(error).__name__}: {str(error)[:200]}); it is made again "
                          f"and the file replaced", CacheWarning, stacklevel=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = make()
    STATS[f"{kind} made"] += 1
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    warned = any(not issubclass(w.category, CacheWarning) for w in caught)
    if not warned and _write(name, result, anchors):
        STATS[f"{kind} stored"] += 1
    elif damaged:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    return result


def _write(name: str, result, anchors: list) -> bool:
    try:
        data = serialize.store(result, anchors)
    except serialize.Unstorable:
        return False
    temporary = None
    try:
        folder = writable_cache_root() / GRAPHS
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{name}.", suffix=".part",
                                         delete=False) as f:
            temporary = f.name
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, folder / name)
    except OSError:  # a full disk: the result is still returned
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        return False
    return True
