"""Where the disk caches live: ``$TEGRAD_CACHE_DIR`` (default ``~/.cache/tegrad``), or a
temporary directory of this process when that one cannot be used.

A cache directory is usable when it exists or can be made, and a file can be written in
it. It is tried once per process and configured path (the variable is read at each use),
the first time something is to be written there (``writable_cache_root``). When the try
fails (``TEGRAD_CACHE_DIR`` under a regular file, in ``/proc``, on a read-only disk), the
process keeps its caches in a new directory made by ``tempfile.mkdtemp`` (prefix
``tegrad-cache-``), warns once (``CacheWarning``, naming both directories and why), and
removes that directory when it exits. Reads look where writes go (``cache_root``): the
configured directory until it has proved unusable, the fallback after.

Under the root: ``cpu/`` (the cpu target's compiled kernels, ``backends/cpu/compiler.py``)
and ``graphs/`` (stored programs and gradients, ``disk.py``). ``contents.py`` lists and
clears them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from ..errors import CacheWarning
from ..options import cache_dir

KERNELS = "cpu"  # folder of compiled kernels under the root
GRAPHS = "graphs"  # folder of stored programs and gradients
FALLBACK_PREFIX = "tegrad-cache-"

# configured directory -> the directory used for it (itself, or this process's fallback)
_CHOSEN: dict[Path, Path] = {}
_CHOOSING = threading.Lock()


def cache_root() -> Path:
    """The directory the caches are read from: the configured one, or the fallback this
    process chose for it."""
    configured = cache_dir()
    return _CHOSEN.get(configured, configured)


def writable_cache_root() -> Path:
    """The directory the caches are written to: the configured one when it is usable, else
    this process's fallback for it (made, and warned about, on the first call)."""
    configured = cache_dir()
    chosen = _CHOSEN.get(configured)
    if chosen is not None:
        return chosen
    with _CHOOSING:
        if configured not in _CHOSEN:
            reason = unusable(configured)
            chosen = configured if reason is None else _fall_back(configured, reason)
            _CHOSEN[configured] = chosen
    return _CHOSEN[configured]


def fallback() -> Path | None:
    """The temporary directory this process uses instead of the configured one, if any."""
    configured = cache_dir()
    chosen = _CHOSEN.get(configured, configured)
    return None if chosen == configured else chosen


def unusable(root: Path, keep: bool = True) -> str | None:
    """Why ``root`` cannot hold the cache, or None when it can: making it, or writing a
    file in it, fails. The folders made for the try stay unless ``keep`` is False."""
    made = [p for p in (root, *root.parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(dir=root, prefix=".probe-")
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"
    finally:
        for folder in made if not keep else ():
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None


def _fall_back(configured: Path, reason: str) -> Path:
    chosen = Path(tempfile.mkdtemp(prefix=FALLBACK_PREFIX))
    atexit.register(_remove, chosen, os.getpid())
    warnings.warn(f"tegrad: the cache directory {configured} cannot be used ({reason}); "
                  f"this process keeps its compiled kernels and stored programs in {chosen}, "
                  f"removed when it exits (set TEGRAD_CACHE_DIR to a writable directory to "
                  f"keep them)", CacheWarning, stacklevel=4)
    return chosen


def _remove(directory: Path, owner: int) -> None:
    """At exit, the fallback of the process that made it (not of a forked child)."""
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)
