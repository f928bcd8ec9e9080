"""What tegrad keeps under a cache root, by part, and removing it (``tegrad cache``).

A part is a folder tegrad writes (``location.KERNELS``, ``location.GRAPHS``) and the names
it writes there:

  cpu/     ``<key>.so`` compiled kernels, ``<key>.kernel`` the index of kernels by
           structure (``backends/cpu/kernel_cache.py``), ``<key>.failed.c`` the source
           gcc refused, and ``.build-*`` folders of builds in progress (or of a killed
           process) and index entries being written
  graphs/  ``<kind>-<key>.pkl`` stored programs and gradients, and ``.*.part`` files being
           written

Everything else under the root is "other": counted, never removed. ``clear`` removes the
parts' own files, then each part's folder and the root when nothing else is left in them,
so a ``TEGRAD_CACHE_DIR`` pointed at a directory that holds other things keeps them.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .location import GRAPHS, KERNELS

PARTS = {
    KERNELS: ("cpu kernels", re.compile(r"[0-9a-f]{32}\.(so|kernel|failed\.c)|\.build-.*")),
    GRAPHS: ("stored graphs", re.compile(r"[\w.]+-[0-9a-f]{32}\.pkl|\..*\.part")),
}
OTHER = "other"


@dataclass
class Tally:
    """Files and their bytes (a folder counts as the files under it)."""

    files: int = 0
    bytes: int = 0

    @classmethod
    def total(cls, tallies) -> Tally:
        return cls(sum(t.files for t in tallies), sum(t.bytes for t in tallies))

    def add(self, path: Path) -> None:
        for file in [path] if not path.is_dir() or path.is_symlink() else path.rglob("*"):
            if file.is_file() or file.is_symlink():
                self.files += 1
                self.bytes += file.lstat().st_size


def owned(root: Path) -> dict[str, list[Path]]:
    """Part -> the entries of its folder that tegrad wrote (files, build folders)."""
    found: dict[str, list[Path]] = {}
    for part, (_, pattern) in PARTS.items():
        folder = root / part
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        found[part] = [e for e in entries if pattern.fullmatch(e.name)]
    return found


def survey(root: Path) -> dict[str, Tally]:
    """Part (and ``OTHER``) -> what it holds under ``root``."""
    tallies = {part: Tally() for part in [*PARTS, OTHER]}
    mine = owned(root)
    counted = {e for entries in mine.values() for e in entries}
    for part, entries in mine.items():
        for entry in entries:
            tallies[part].add(entry)
    if root.is_dir():
        for path in root.rglob("*"):
            if (path.is_file() or path.is_symlink()) and not _under(path, counted):
                tallies[OTHER].add(path)
    return tallies


def clear(root: Path) -> dict[str, Tally]:
    """Remove what tegrad wrote under ``root`` (then the empty folders); part -> what went."""
    freed = {part: Tally() for part in PARTS}
    for part, entries in owned(root).items():
        for entry in entries:
            freed[part].add(entry)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        _remove_if_empty(root / part)
    _remove_if_empty(root)
    return freed


def _under(path: Path, entries: set[Path]) -> bool:
    return any(p in entries for p in (path, *path.parents))


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not there, or holds something that is not ours
        pass
