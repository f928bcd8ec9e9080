"""``tegrad cache``: where tegrad keeps its compiled kernels and stored programs, how much
they take, and clearing them.

    tegrad cache          # the same as: tegrad cache info
    tegrad cache clear

``info`` prints the cache directory (``$TEGRAD_CACHE_DIR``, default
``~/.cache/tegrad``) and, by part, how many files it holds and their size: cpu kernels
(``cpu/``), stored graphs (``graphs/``) and other files. When the directory cannot be
used, it says so and why: each process then keeps its cache in a temporary directory of
its own (``tegrad-cache-*`` in the system's temporary folder, removed when the process
exits); those present are listed.

``clear`` removes the files tegrad wrote there (``tegrad.cache.contents``), then the
folders left empty, the cache directory included, and prints what it freed. Files that
are not tegrad's stay, whatever the directory.

Exit status 0, or 2 for a usage error.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ..cache import contents, location
from ..options import cache_dir

EXIT_OK = 0


def add_parser(commands) -> None:
    cache = commands.add_parser(
        "cache", help="where the disk cache is and how big; clear it",
        description=__doc__.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cache.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                       help="info (the default): where and how much; clear: remove it")


def main(args) -> int:
    root = cache_dir()
    if args.action == "clear":
        print(_cleared(root, contents.clear(root)))
    else:
        print(_info(root, contents.survey(root)))
    return EXIT_OK


def _info(root: Path, tallies: dict[str, contents.Tally]) -> str:
    lines = [f"tegrad cache: {root} (TEGRAD_CACHE_DIR, default ~/.cache/tegrad)"]
    reason = location.unusable(root, keep=False)
    if reason is None and not root.exists():
        lines.append("  not made yet: the first build makes it")
    elif reason is not None:
        lines.append(f"  cannot be used ({reason}):\n  each process keeps its cache in a "
                     f"temporary directory of its own "
                     f"({Path(tempfile.gettempdir()) / location.FALLBACK_PREFIX}*), removed "
                     f"when it exits")
    names = {part: label for part, (label, _) in contents.PARTS.items()}
    names[contents.OTHER] = "other files"
    for part, tally in tallies.items():
        folder = f"  {part}/" if part in contents.PARTS else ""
        lines.append(f"  {names[part]:<14} {_amount(tally)}{folder}")
    total = contents.Tally.total(tallies.values())
    lines.append(f"  {'total':<14} {_amount(total)}")
    fallbacks = sorted(Path(tempfile.gettempdir()).glob(f"{location.FALLBACK_PREFIX}*"))
    if fallbacks:
        lines.append("temporary caches of processes whose cache directory could not be used:")
        for folder in fallbacks:
            tally = contents.Tally()
            tally.add(folder)
            lines.append(f"  {folder}  {_amount(tally)}")
    return "\n".join(lines)


def _cleared(root: Path, freed: dict[str, contents.Tally]) -> str:
    total = contents.Tally.total(freed.values())
    if not total.files:
        return f"tegrad cache: {root}: nothing to clear"
    lines = [f"tegrad cache: cleared {root}"]
    for part, tally in freed.items():
        lines.append(f"  {contents.PARTS[part][0]:<14} {_amount(tally)}")
    left = " (kept: it holds files that are not tegrad's)" if root.exists() else ""
    lines.append(f"  freed {_size(total.bytes)}{left}")
    return "\n".join(lines)


def _amount(tally: contents.Tally) -> str:
    """``  3 files   54.1 KiB``: aligned in a column."""
    return f"{tally.files:>6} {'file' if tally.files == 1 else 'files':<5} {_size(tally.bytes):>11}"


def _size(count: int) -> str:
    if count < 1 << 10:
        return f"{count} bytes"
    if count < 1 << 20:
        return f"{count / (1 << 10):.1f} KiB"
    if count < 1 << 30:
        return f"{count / (1 << 20):.1f} MiB"
    return f"{count / (1 << 30):.2f} GiB"
