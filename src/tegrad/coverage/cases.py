"""The op-spec table's entry: one call of one ``tg.nn`` op, with its PyTorch reference.

A ``Case`` names the op (its ``tg.nn`` attribute), the keyword arguments of the call
(passed unchanged to both tegrad and PyTorch, which is what proves the signatures
match), an input generator and, for timing, a larger one. Everything is a plain
callable or string so the table imports without PyTorch; the reference is resolved
when first used:

    case("conv2d", "stride 2, pad 1", normal((2, 3, 7, 7), (4, 3, 3, 3), (4,)),
         kwargs=dict(stride=2, padding=1),
         bench=normal((8, 64, 56, 56), (64, 64, 3, 3), (64,)))

``ref`` defaults to ``"F.<op>"`` (``torch.nn.functional``); ``"torch.cumsum"`` names any
other torch attribute; a callable is used as is (import torch inside it). ``fn``
replaces ``tg.nn.<op>`` where the tegrad side is not a plain call (``A + B``, a list
argument). Inputs are float64 arrays (differentiable unless ``diff`` says otherwise)
and integer arrays (indices, targets, masks), in call order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Inputs = Callable[[np.random.Generator], list[np.ndarray]]

CATEGORIES = ("arithmetic", "linear algebra", "convolution", "pooling", "normalization",
              "activation", "softmax", "loss", "attention", "shape", "indexing",
              "resampling", "reduction", "recurrent", "dropout")


@dataclass(frozen=True)
class Case:
    op: str
    label: str
    category: str
    inputs: Inputs
    kwargs: dict = field(default_factory=dict)
    bench: Inputs | None = None
    fn: Callable | None = None
    ref: str | Callable | None = None
    diff: tuple[int, ...] | None = None  # None: every float input
    gather_form: bool | None = True  # None: not asserted (data-dependent, clamps)
    rtol: float = 1e-12

    @property
    def name(self) -> str:
        return f"{self.op}[{self.label}]" if self.label else self.op

    def tegrad_fn(self) -> Callable:
        if self.fn is not None:
            return self.fn
        from .. import nn
        return getattr(nn, self.op)

    def torch_fn(self) -> Callable:
        ref = self.ref if self.ref is not None else f"F.{self.op}"
        if callable(ref):
            return ref
        head, _, path = ref.partition(".")
        target = importlib.import_module({"F": "torch.nn.functional",
                                          "torch": "torch"}[head])
        for part in path.split("."):
            target = getattr(target, part)
        return target

    def differentiable(self, arrays: Sequence[np.ndarray]) -> tuple[int, ...]:
        if self.diff is not None:
            return self.diff
        return tuple(k for k, a in enumerate(arrays) if a.dtype.kind == "f")

    def __repr__(self) -> str:
        return f"Case({self.name})"


CASES: list[Case] = []


def case(op: str, label: str, inputs: Inputs, *, category: str, **options) -> Case:
    """Add one row to the table (names are unique) and return it."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; one of {CATEGORIES}")
    entry = Case(op, label, category, inputs, **options)
    if any(c.name == entry.name for c in CASES):
        raise ValueError(f"duplicate case {entry.name}")
    CASES.append(entry)
    return entry


# ---------------------------------------------------------------------------- generators


def normal(*shapes, scale: float = 1.0) -> Inputs:
    return lambda rng: [scale * rng.standard_normal(s) for s in shapes]


def uniform(*shapes, lo: float = 0.5, hi: float = 2.0) -> Inputs:
    return lambda rng: [rng.uniform(lo, hi, size=s) for s in shapes]


def away_from_zero(*shapes, lo: float = 0.2) -> Inputs:
    """|x| in [lo, lo + 1] with random signs (kinks at 0 stay out of reach)."""
    return lambda rng: [rng.uniform(lo, lo + 1.0, size=s) * rng.choice([-1.0, 1.0], size=s)
                        for s in shapes]


def integers(shape, high: int, low: int = 0) -> Inputs:
    return lambda rng: [rng.integers(low, high, size=shape).astype(np.int64)]


def join(*generators: Inputs) -> Inputs:
    """Inputs of several generators, in order (``join(normal(x), integers(t, 5))``)."""
    return lambda rng: [a for g in generators for a in g(rng)]


def distinct(*shapes) -> Inputs:
    """Values a fixed distance apart, shuffled: no two elements tie (max, sort)."""
    def make(rng):
        out = []
        for s in shapes:
            n = int(np.prod(s))
            out.append((rng.permutation(n) * 0.1 - 0.05 * n).reshape(s) + 0.01)
        return out
    return make
