"""The pieces of generated C: nested blocks (loops, guarded branches) and checked reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Block:
    """A C block: ``head`` lines, then ``items`` (lines and closed inner blocks)."""

    binds: frozenset = frozenset()
    barrier: bool = False  # a guarded branch: nothing inside moves above it
    head: list = field(default_factory=list)
    items: list = field(default_factory=list)
    loop: bool = False
    unrolled: bool = False  # a short loop of constant trip count, unrolled by gcc

    def render(self, out: list[str], indent: int) -> None:
        pad = "  " * indent
        for line in self.head:
            out.append(pad + line)
        inner = indent + 1 if self.head else indent
        for item in self.items:
            if isinstance(item, Block):
                item.render(out, inner)
            else:
                out.append("  " * inner + item)
        if self.head:
            out.append(pad + "}")

    def has_blocks(self) -> bool:
        return any(isinstance(i, Block) for i in self.items)

    def straight(self) -> bool:
        """No branches and no loops inside but unrolled ones: the enclosing loop can be
        vectorized (``omp simd``) across its iterations."""
        return all(i.unrolled and i.straight() for i in self.items if isinstance(i, Block))


@dataclass
class Gather:
    """A checked read of an index tensor, for the error message."""

    tensor: str
    axis: int
    index: str
    dim: int
