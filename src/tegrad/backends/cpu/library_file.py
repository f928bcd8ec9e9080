"""Whether a file holds a whole ELF shared library, checked before it is loaded.

The loader maps a library's segments from the file by the offsets its headers give. Cut
short anywhere past those headers (a full disk, a killed copy), the file still opens, the
mapping reaches past its end, and the process dies of SIGBUS the first time the loader
touches those pages: no exception to catch. So a cached library is first read as ELF: the
header (``\\x7fELF``, class, byte order), then every table and loaded segment the header
points at must lie inside the file. The linker writes the section header table last, so any
truncation of a linked library loses it and is found. Garbage fails the magic number.
Damage that keeps the size is not found here (the cache's writes are atomic renames, which
leave whole files or none).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_HEADER = {1: "16xHHIIIIIHHHHHH", 2: "16xHHIQQQIHHHHHH"}  # ELF class -> Elf{32,64}_Ehdr
_SEGMENT = {1: "IIIIIIII", 2: "IIQQQQQQ"}  # -> Elf{32,64}_Phdr
_PT_LOAD = 1


def damage(path: Path) -> str | None:
    """What makes ``path`` not a whole ELF shared library (a short reason), or None."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in _HEADER \
                or head[5] not in (1, 2):
            return f"not an ELF shared library ({size} bytes)"
        wide, order = head[4], "<" if head[5] == 1 else ">"
        fields = struct.unpack_from(order + _HEADER[wide], head.ljust(64, b"\0"))
        phoff, shoff = fields[4:6]
        phentsize, phnum, shentsize, shnum = fields[8:12]
        if max(phoff + phentsize * phnum, shoff + shentsize * shnum) > size:
            return f"truncated: its headers reach past its {size} bytes"
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    if phnum and phentsize < struct.calcsize(_SEGMENT[wide]):
        return f"malformed: program headers of {phentsize} bytes"
    for k in range(phnum):
        segment = struct.unpack_from(order + _SEGMENT[wide], table, k * phentsize)
        kind, offset, filesz = (segment[0], segment[2], segment[5]) if wide == 2 else (
            segment[0], segment[1], segment[4])
        if kind == _PT_LOAD and offset + filesz > size:
            return f"truncated: a segment reaches past its {size} bytes"
    return None
